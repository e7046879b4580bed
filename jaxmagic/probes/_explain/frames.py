"""Reading the user's frames of an error's traceback: the innermost one (the line that raised), the
names on it bound to tracers, a one-line lambda's body, what a dotted name there stands for."""

from __future__ import annotations

import builtins
import inspect
import linecache
import sys
import types
from typing import Any

from jaxmagic.probes._explain.report import TracedName
from jaxmagic.probes._leaks.tracers import text
from jaxmagic.probes._support.fixes.line_code import Resolve
from jaxmagic.usercode.source import is_user_file


def parameter_names(code: types.CodeType) -> tuple[str, ...]:
    """The names a function's parameters bind, ``*args`` and ``**kwargs`` included."""
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return code.co_varnames[:count]


def innermost_user_entry(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback entry of your innermost frame (the one whose line raised), or None."""
    entry = None
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            entry = tb
        tb = tb.tb_next
    return entry


def innermost_user_frame(tb: types.TracebackType | None) -> types.FrameType | None:
    entry = innermost_user_entry(tb)
    return entry.tb_frame if entry is not None else None


def lambda_body(tb: types.TracebackType | None) -> str:
    """The source of the innermost user frame's lambda body (``jnp.arange(n)`` of ``"case":
    lambda: jax.jit(lambda n: jnp.arange(n))(3),``), from the columns CPython keeps for its
    instructions; "" when that frame is no one-line lambda."""
    entry = innermost_user_entry(tb)
    if entry is None or entry.tb_frame.f_code.co_name != "<lambda>":
        return ""
    code, lineno = entry.tb_frame.f_code, entry.tb_lineno
    # RETURN_VALUE carries the body expression's span (RESUME's is column 0: the whole line)
    spans = [
        (start, end)
        for line, end_line, start, end in code.co_positions()
        if line == lineno == end_line and start and end
    ]
    if not spans:
        return ""
    text = linecache.getline(code.co_filename, lineno).encode()
    return text[min(s for s, _ in spans) : max(e for _, e in spans)].decode(errors="replace")


def tracers_on_failing_line(tb: types.TracebackType | None) -> list[TracedName]:
    """Names on your innermost line that were bound to tracers, read from that frame's variables."""

    entry = innermost_user_entry(tb)
    if entry is None:
        return []
    frame, lineno = entry.tb_frame, entry.tb_lineno

    core = getattr(sys.modules.get("jax"), "core", None)
    tracer_class = getattr(core, "Tracer", None)
    if tracer_class is None:
        return []
    code = linecache.getline(frame.f_code.co_filename, lineno)
    names: list[TracedName] = []
    for name in text.names_in(code):
        value = frame.f_locals.get(name)
        if isinstance(value, tracer_class) and name not in [t.name for t in names]:
            aval: Any = getattr(value, "aval", None)
            names.append(
                TracedName(
                    name,
                    aval.str_short() if hasattr(aval, "str_short") else str(aval),
                    type(value).__name__,
                    bool(getattr(aval, "weak_type", False)),
                )
            )
    del frame
    return names


def resolver(tb: types.TracebackType | None) -> Resolve:
    """``resolve(dotted name) -> (object, module name)`` in the failing frame's scope, or None.

    Only module attributes are followed, read from the module's ``__dict__`` (no ``__getattr__``,
    no property): ``np.linalg.norm`` -> (the function, "numpy.linalg").
    """
    frame = innermost_user_frame(tb)
    scopes = (dict(frame.f_locals), frame.f_globals) if frame is not None else ()
    del frame

    def resolve(name: str) -> tuple[Any, str] | None:
        first, *rest = name.split(".")
        scope = next((s for s in (*scopes, vars(builtins)) if first in s), None)
        if scope is None:
            return None
        value = scope[first]
        module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "") or ""
        for part in rest:
            if not isinstance(value, types.ModuleType):
                return None
            value = vars(value).get(part)
            if value is None:
                return None
            if isinstance(value, types.ModuleType):
                module = value.__name__
        return value, module if isinstance(module, str) else ""

    return resolve
