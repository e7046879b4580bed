"""A static argument jit cannot hash: which argument of which function, what it is, and its fix.

jit finds a compilation by the hashes of its static arguments; a value without a hash - a dict (google/flax#587),
a list (jax-ml/jax#2813), a NumPy array, a dataclass declared with the default ``eq=True`` and without
``frozen=True`` (jax-ml/jax#3701) - stops the call: ``ValueError: Non-hashable static arguments are not
supported. An error occurred while trying to hash an object of type <class 'Config'>, Config(some_value=2).``
JAX's dispatch raised it in C++, so no JAX frame holds the call: it is read from the user's failing line
(the jitted callee among its calls, and that function's static parameters, from its jit options) and the
value's class is looked up by name in the failing frame. A fix is written for the kind of value; none can
be tried without the value itself, which no frame holds, so each says it was not tried, and why.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import linecache
import re
import sys
import types

from jaxmagic._jax import jit_internals
from jaxmagic.probes._explain.frames import innermost_user_frame
from jaxmagic.probes._explain.unhashable_static_report import UnhashableStaticReport
from jaxmagic.probes._support.calls.line_values import NOTHING, parsed_line, value_of
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.report.wording import message_of
from jaxmagic.usercode.source import user_lines

_MESSAGE = re.compile(
    r"Non-hashable static arguments are not supported\. An error occurred while trying to hash an object of "
    r"type <class '(?P<type>[^']+)'>, (?P<value>.*?)\. The error was:",
    re.DOTALL,
)
_NOT_TRIED = "suggestion: not tried (no frame holds the value: JAX's dispatch raised before calling your function)"


def is_unhashable_static(error: BaseException) -> bool:
    return isinstance(error, ValueError) and _MESSAGE.search(message_of(error)) is not None


def explain_unhashable_static(error: BaseException) -> UnhashableStaticReport | None:
    """The report for jit's "Non-hashable static arguments" error; None for any other error."""
    found = _MESSAGE.search(message_of(error)) if isinstance(error, ValueError) else None
    if found is None:
        return None
    type_path = found["type"]
    frame = innermost_user_frame(error.__traceback__)
    try:
        cls = _class_named(type_path, frame)
        function, parameters, expressions = _static_call(frame, error.__traceback__)
    finally:
        del frame
    value_type = type_path.rsplit(".", 1)[-1]
    report = UnhashableStaticReport(
        error_type=type(error).__name__,
        function=function,
        parameters=parameters,
        value_type=value_type,
        value_text=found["value"].strip(),
        what=_what(cls, value_type),
        your_lines=user_lines(error.__traceback__),
    )
    written = expressions[0] if len(expressions) == 1 else (parameters[0] if len(parameters) == 1 else "value")
    report.fixes = [_tried(fix, cls, report.value_text) for fix in _fixes(cls, value_type, written, parameters)]
    return report


def _class_named(type_path: str, frame: types.FrameType | None) -> type | None:
    """The class JAX named (``__main__.Config``, ``dict``), found without running code; None if not found."""
    module, _, name = type_path.rpartition(".")
    if not module or module == "builtins":
        found = getattr(builtins, name, None)
        return found if isinstance(found, type) else None
    candidates = []
    if frame is not None:
        candidates.append(frame.f_globals.get(name))
    candidates.append(getattr(sys.modules.get(module), name, None))
    return next((c for c in candidates if isinstance(c, type) and c.__qualname__ == name), None)


def _static_call(frame: types.FrameType | None, tb: types.TracebackType | None) -> tuple[str, list[str], list[str]]:
    """(the jitted function the failing line calls, its static parameters, the line's expressions at them);
    ("", [], []) when the line calls no jitted function jaxmagic can read without running code."""
    if frame is None:
        return "", [], []
    lineno = _line_in(frame, tb)
    tree = parsed_line(_code_at(frame.f_code.co_filename, lineno))
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.Call):
            continue
        callee = value_of(node.func, frame)
        if callee is NOTHING or not jit_internals.is_jitted(callee):
            continue
        options = jit_internals.jit_options(callee)
        if options is None:
            continue
        names = list(getattr(options.fun_signature, "parameters", {}) or {})
        numbers = tuple(getattr(options, "static_argnums", ()) or ())
        static = [names[i] if i < len(names) else f"argument {i}" for i in numbers]
        static += [n for n in getattr(options, "static_argnames", ()) or () if n not in static]
        written = [ast.unparse(node.args[i]) for i in numbers if i < len(node.args)]
        written += [ast.unparse(k.value) for k in node.keywords if k.arg in static]
        wrapped = getattr(callee, "__wrapped__", None)
        return getattr(wrapped, "__name__", "") or ast.unparse(node.func), static, written
    return "", [], []


def _line_in(frame: types.FrameType, tb: types.TracebackType | None) -> int:
    """The failing line of ``frame``: its traceback entry's line (the frame's own line has moved on)."""
    while tb is not None:
        if tb.tb_frame is frame:
            return tb.tb_lineno
        tb = tb.tb_next
    return frame.f_lineno


def _code_at(filename: str, lineno: int) -> str:
    return linecache.getline(filename, lineno)


def _what(cls: type | None, name: str) -> str:
    if cls is None:
        return f"an object of type `{name}` with no hash"
    if dataclasses.is_dataclass(cls):
        return f"a dataclass `{name}` that is not frozen (eq=True without frozen=True leaves it without a hash)"
    if issubclass(cls, dict):
        return "a dict (a dict has no hash)"
    if issubclass(cls, list):
        return "a list (a list has no hash)"
    if issubclass(cls, (set, bytearray)):
        return f"a {cls.__name__} (no hash)"
    if cls.__module__ == "numpy" or name == "ndarray" or "Array" in name:
        return f"an array (`{name}`: an array has no hash)"
    return f"an object of class `{name}`, which defines __eq__ without __hash__"


def _fixes(cls: type | None, name: str, value: str, parameters: list[str]) -> list[Fix]:
    if cls is not None and dataclasses.is_dataclass(cls):
        fixes = [
            Fix(
                f"@dataclasses.dataclass(frozen=True) on class {name}",
                "a frozen dataclass hashes by its fields (each must be hashable: tuples, not lists): equal "
                "settings share one compilation (jax-ml/jax#3701)",
            )
        ]
    elif cls is not None and issubclass(cls, dict):
        fixes = [
            Fix(
                f"tuple(sorted({value}.items()))",
                "pass the settings as a tuple of (key, value) pairs, and dict(...) it back inside; its values "
                "must be hashable too (google/flax#587)",
            ),
            Fix(
                "give each entry the function needs as its own static argument",
                "when only a few entries decide the program",
            ),
        ]
    elif cls is not None and issubclass(cls, (list, set)):
        fixes = [Fix(f"{'tuple' if issubclass(cls, list) else 'frozenset'}({value})", "the same values, hashable")]
    elif cls is not None and (cls.__module__ == "numpy" or "Array" in name):
        static = ", ".join(f"`{p}`" for p in parameters) or "it"
        fixes = [
            Fix(
                f"leave {static} out of static_argnums / static_argnames",
                "an array is data: pass it traced (one compilation serves every value of that shape)",
            ),
            Fix(f"tuple({value}.tolist())", "a few numbers that decide the program's structure: make them a tuple"),
        ]
    else:
        fixes = [
            Fix(
                f"define __hash__ on {name} (consistent with its __eq__), or make it a frozen dataclass",
                "equal values must hash equal, so that they share one compilation",
            )
        ]
    return fixes


def _tried(fix: Fix, cls: type | None, value_text: str) -> Fix:
    """The fix tried on the value as JAX wrote it (``Config(some_value=2)``, ``{'a': 1}``), read as literals
    only - no user code runs; a frozen dataclass is a twin of the user's class, which stays as it is."""
    if cls is None or fix.use.startswith(("give each", "leave", "define")):
        return dataclasses.replace(fix, checked=_NOT_TRIED) if not fix.checked else fix
    try:
        if dataclasses.is_dataclass(cls):
            call = ast.parse(value_text, mode="eval").body
            if not (isinstance(call, ast.Call) and not call.args):
                raise LookupError("not written field by field")
            fields = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
            twin = dataclasses.make_dataclass(
                cls.__name__, [(f.name, f.type) for f in dataclasses.fields(cls) if f.init], frozen=True
            )
            candidate: object = twin(**fields)
            done = f"a frozen copy of `{cls.__name__}` hashes `{value_text}`"
        else:
            value = ast.literal_eval(value_text)
            if isinstance(value, dict):
                candidate, done = tuple(sorted(value.items())), f"`{fix.use}` hashes"
            else:
                candidate = frozenset(value) if fix.use.startswith("frozenset") else tuple(value)
                done = f"`{fix.use}` hashes"
    except (ValueError, TypeError, SyntaxError, LookupError, MemoryError, RecursionError):
        return dataclasses.replace(fix, checked="suggestion: not tried (the value as JAX wrote it is not literals)")
    try:
        hash(candidate)
    except TypeError as failure:
        return dataclasses.replace(fix, checked=f"checked: still fails - {failure} (a value inside has no hash either)")
    return dataclasses.replace(
        fix, checked=f"checked: {done} (built from the value as JAX wrote it, literals only; nothing of yours ran)"
    )
