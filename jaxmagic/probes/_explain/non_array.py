"""A value that is not an array given to a JAX transformation: which leaf, what it is, and fixes tried.

``jax.jit`` (and ``jax.eval_shape``) trace every leaf of the arguments' pytrees as an array;
``jax.grad`` / ``jax.value_and_grad`` every leaf of the arguments they differentiate. A function, a
string or another object among them - an Equinox Module's activation function (``eqx.nn.MLP`` keeps
``jax.nn.relu``), a config string in a dict, a callable handed over as an argument - stops it before
tracing: ``TypeError: Error interpreting argument to <f> as an abstract array ... at path
model.activation`` (jit, eval_shape) or ``TypeError: Argument '<...>' of type <class ...> is not a
valid JAX type`` (grad). Equinox's FAQ and its threads; jax#17052.

The explainer finds the call in JAX's frames (``jit``'s ``cache_miss``, ``eval_shape``, grad's
``value_and_grad_f`` keep the function and its arguments), names every leaf that is not an array with
its path (``model.activation``, ``cfg['name']``), and tries each fix by tracing the function again with
the same arguments (abstract evaluation: nothing compiles; the user's Python runs once more, and the
report says so; objects it writes into are put back - ``kept_state``):

- Equinox's filtered transformation (``eqx.filter_jit``, ``eqx.filter_jit(eqx.filter_grad(f))`` for
  ``jax.jit(jax.grad(f))``, ``eqx.filter_grad``, ``eqx.filter_eval_shape``) when the user imported Equinox;
- ``static_argnames=('name',)`` (jit) when the whole argument is a hashable non-array;
- ``functools.partial(f, value)`` for a first argument: close over it.

JAX's frames are needed (IPython keeps them; a script's traceback, filtered by JAX, has none): without
them jit's message still names the leaf and the fixes are offered as not tried, saying why; grad's
message names no function or path, so it is left unexplained.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
import re
import sys
import types
from typing import Any

import jax
import numpy as np

from jaxmagic.probes._explain.non_array_report import NonArrayArgumentReport
from jaxmagic.probes._support.calls.bound_arguments import by_parameter
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.rerun.kept_state import kept
from jaxmagic.report.wording import error_line, message_of
from jaxmagic.usercode.source import user_lines

_TRACED_ARGUMENT = re.compile(
    r"Error interpreting argument to (?P<function>.*?) as an abstract array\. The problematic value is of type "
    r"<class '(?P<type>[^']+)'> and was passed to the function at path (?P<path>[^\s]+?)\.?$",
    re.MULTILINE,
)
_DIFFERENTIATED_ARGUMENT = re.compile(
    r"^Argument '.*' of type '?<class '(?P<type>[^']+)'>'? is not a valid JAX type", re.MULTILINE
)
# JAX's frames that hold the transformed call: (function, args, kwargs) in their variables
_CALL_FRAMES = {"cache_miss": "jit", "eval_shape": "eval_shape", "value_and_grad_f": "value_and_grad"}


@dataclasses.dataclass
class _Call:
    transformation: str  # "jit", "eval_shape", "grad", "value_and_grad"
    fun: Any
    args: tuple[object, ...]
    kwargs: dict[str, object]
    argnums: tuple[int, ...] | None = None  # the differentiated arguments (grad), None: all (jit)
    static: tuple[int | str, ...] = ()  # jit's static_argnums and static_argnames: not traced


def is_non_array_argument(error: BaseException) -> bool:
    message = message_of(error)
    return isinstance(error, TypeError) and bool(
        _TRACED_ARGUMENT.search(message) or _DIFFERENTIATED_ARGUMENT.search(message)
    )


def explain_non_array_argument(error: BaseException) -> NonArrayArgumentReport | None:
    """The report for a non-array leaf given to jit, eval_shape or grad; None for other errors, and for
    grad's message when JAX's frames are gone (it names neither the function nor the path)."""
    if not isinstance(error, TypeError):
        return None
    message = message_of(error)
    traced = _TRACED_ARGUMENT.search(message)
    differentiated = _DIFFERENTIATED_ARGUMENT.search(message)
    if traced is None and differentiated is None:
        return None
    call = _call_of(error.__traceback__)
    try:
        if call is None:
            return None if traced is None else _without_frames(error, traced)
        report = NonArrayArgumentReport(
            error_type=type(error).__name__,
            function=_function_name(call.fun),
            transformation=call.transformation,
            differentiated=_differentiated(call.fun) if call.transformation == "jit" else "",
            your_lines=user_lines(error.__traceback__),
        )
        report.leaves = _non_array_leaves(call)
        if not report.leaves:
            return None  # the leaf JAX stopped at is not where jaxmagic looked: do not guess
        first = next(iter(report.leaves))
        report.path = first
        report.argument = re.split(r"[.\[]", first, maxsplit=1)[0]
        report.argument_index = _positional_index(call, report.argument)
        whole = _argument_value(call, report.argument) if report.path == report.argument else None
        report.fixes = [_tried(fix, call, report) for fix in _fixes(report, whole)]
        report.notes += [note for note in report.trial_notes if note]
        return report
    finally:
        del call


def _without_frames(error: BaseException, found: re.Match[str]) -> NonArrayArgumentReport:
    """jit's message alone: the first such leaf, its type; the fixes not tried."""
    path = found["path"]
    shown = re.match(r"<function (?P<name>[\w.<>]+) at 0x", found["function"])
    report = NonArrayArgumentReport(
        error_type=type(error).__name__,
        function=(shown["name"] if shown else found["function"]).rsplit(".", 1)[-1],
        transformation="jit",
        argument=re.split(r"[.\[]", path, maxsplit=1)[0],
        path=path,
        leaves={path: _kind_of_type(found["type"])},
        your_lines=user_lines(error.__traceback__),
    )
    report.fixes = [
        dataclasses.replace(fix, checked="suggestion: not tried (JAX removed its frames from the traceback)")
        for fix in _fixes(report, None)
    ]
    return report


def _call_of(tb: types.TracebackType | None) -> _Call | None:
    """The transformed call, from the outermost of JAX's frames that keeps it; None without JAX's frames."""
    differentiating = ""
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
        code = frame.f_code
        if "jax" not in code.co_filename:
            continue
        if code.co_name == "grad_f":
            differentiating = "grad"  # value_and_grad_f below it does the work
        kind = _CALL_FRAMES.get(code.co_name)
        if kind is None:
            continue
        found = [frame.f_locals.get(k) for k in ("fun", "args", "kwargs")]
        if not (callable(found[0]) and isinstance(found[1], tuple) and isinstance(found[2], dict)):
            continue
        if kind == "value_and_grad":
            argnums = frame.f_locals.get("argnums", 0)
            numbers = (argnums,) if isinstance(argnums, int) else tuple(argnums)
            return _Call(differentiating or kind, found[0], found[1], found[2], numbers)
        info = frame.f_locals.get("jit_info")
        static = tuple(getattr(info, "static_argnums", ()) or ()) + tuple(getattr(info, "static_argnames", ()) or ())
        return _Call(kind, found[0], found[1], found[2], static=static)
    return None


def _non_array_leaves(call: _Call) -> dict[str, str]:
    """path -> what it is, for every leaf of the traced arguments that is not an array ("model.activation")."""
    bound = _bound(call)
    out: dict[str, str] = {}
    for index, (name, value) in enumerate(bound.items()):
        if (call.argnums is not None and index not in call.argnums) or index in call.static or name in call.static:
            continue
        leaves, _ = jax.tree_util.tree_flatten_with_path(value)
        for path, leaf in leaves:
            if not _is_array_like(leaf):
                out[name + jax.tree_util.keystr(path)] = _kind_of(leaf)
    return out


def _bound(call: _Call) -> dict[str, Any]:
    """Parameter name -> value given, in the signature's order (``*args`` as ``args[i]``)."""
    try:
        named = by_parameter(inspect.signature(call.fun), call.args, call.kwargs)
    except (TypeError, ValueError):  # no signature
        named = None
    return named if named is not None else {f"args[{i}]": v for i, v in enumerate(call.args)} | dict(call.kwargs)


def _fixes(report: NonArrayArgumentReport, whole: Any) -> list[Fix]:
    """The fixes for this transformation and argument, best first."""
    name, function, how = report.argument, report.function or "f", report.transformation
    fixes = []
    if "equinox" in sys.modules:  # the user works with Equinox: its filtered transformations are the fix
        fixes.append(Fix(_equinox_form(report), _equinox_why(report)))
    elif report.path != name:
        fixes.append(
            Fix(
                f"take `{report.path}` out of `{name}`: pass it as an argument of its own"
                + (" (static_argnames)" if how == "jit" else "")
                + " or close over it",
                "a setting kept beside the arrays",
                checked="suggestion: not tried (it needs your function changed)",
            )
        )
    if how == "jit" and report.path == name and (whole is None or _hashable(whole)):
        fixes.insert(
            0,
            Fix(
                f"jax.jit({function}, static_argnames=('{name}',))",
                f"`{name}` is a setting, not data: one compilation per value",
            ),
        )
    if report.path == name and report.argument_index == 0 and how in ("jit", "eval_shape"):
        wrapped = f"functools.partial({function}, {name})"
        fixes.append(
            Fix(
                f"jax.jit({wrapped})" if how == "jit" else f"jax.eval_shape({wrapped}, ...)",
                f"close over `{name}` instead of passing it"
                + (" (a new jitted function when it changes)" * (how == "jit")),
            )
        )
    return fixes


def _equinox_form(report: NonArrayArgumentReport) -> str:
    function = report.function or "f"
    if report.transformation == "jit":
        inner = f"eqx.filter_{report.differentiated}({function})" if report.differentiated else function
        return f"eqx.filter_jit({inner})"
    return f"eqx.filter_{report.transformation}({function})"


def _equinox_why(report: NonArrayArgumentReport) -> str:
    if report.transformation in ("grad", "value_and_grad"):
        return "differentiate only the floating-point arrays of the first argument; the rest is kept as it is"
    why = "trace only the array leaves of every argument and keep the others (functions, strings, numbers) static"
    if report.differentiated:
        why += f"; Equinox's {report.differentiated} differentiates only the arrays"
    return why


def _tried(fix: Fix, call: _Call, report: NonArrayArgumentReport) -> Fix:
    """Trace the function again the fix's way, with the call's own arguments (abstract: nothing compiles)."""
    if fix.checked:
        return fix  # said already why it is not tried
    fun, args, kwargs = call.fun, call.args, call.kwargs
    output = io.StringIO()  # the function's prints while traced again are not the user's output
    try:
        with kept(fun, *args, *kwargs.values()) as state, contextlib.redirect_stdout(output):
            if fix.use.startswith("eqx."):
                eqx = sys.modules["equinox"]  # offered only when the user imported it (see _fixes)
                if report.transformation in ("grad", "value_and_grad"):
                    transformed = getattr(eqx, f"filter_{report.transformation}")(fun)
                elif report.differentiated:
                    transformed = getattr(eqx, f"filter_{report.differentiated}")(inspect.unwrap(fun))
                else:
                    transformed = fun
                eqx.filter_eval_shape(transformed, *args, **kwargs)
            elif "static_argnames" in fix.use:
                jax.jit(fun, static_argnames=(report.argument,)).trace(*args, **kwargs)
            else:  # functools.partial(f, value): the first positional argument closed over
                jax.eval_shape(functools.partial(fun, args[0]), *args[1:], **kwargs)
        report.trial_notes.append(state.note)
    except Exception as failure:
        return dataclasses.replace(fix, checked=f"checked: still fails - tracing it raised {error_line(failure)}")
    return dataclasses.replace(
        fix,
        checked=f"checked: `{report.function}` traces with this call's arguments "
        "(jaxmagic traced your function once more to try it; nothing compiled)",
    )


def _differentiated(fun: object) -> str:
    """ "grad" / "value_and_grad" when the jitted function is ``jax.grad(f)`` / ``jax.value_and_grad(f)`` of
    the user's function with its defaults (by the wrapper JAX's api module makes), else ""."""
    code = getattr(fun, "__code__", None)
    if code is None or "jax" not in code.co_filename or not hasattr(fun, "__wrapped__"):
        return ""
    inner = _closed_over(fun, "fun")  # JAX's API boundary wraps grad's own closure
    name = getattr(getattr(inner, "__code__", None), "co_name", "")
    kind = {"grad_f": "grad", "value_and_grad_f": "value_and_grad"}.get(name, "")
    if kind and _closed_over(inner, "argnums") in (0, None) and not _closed_over(inner, "has_aux"):
        return kind  # eqx.filter_grad's defaults: the first argument, no aux
    return ""


def _closed_over(function: object, name: str) -> Any:
    code, cells = getattr(function, "__code__", None), getattr(function, "__closure__", None) or ()
    if code is None or name not in code.co_freevars:
        return None
    try:
        return cells[code.co_freevars.index(name)].cell_contents
    except (IndexError, ValueError):
        return None


def _positional_index(call: _Call, name: str) -> int | None:
    """Where ``name`` was given among the positional arguments; None when by keyword or unknown."""
    if name in call.kwargs:
        return None
    try:
        index = list(inspect.signature(call.fun).parameters).index(name)
    except (ValueError, TypeError):
        return None
    return index if index < len(call.args) else None


def _argument_value(call: _Call, name: str) -> Any:
    return _bound(call).get(name)


def _is_array_like(leaf: Any) -> bool:
    return isinstance(leaf, (bool, int, float, complex, np.ndarray, np.generic)) or (
        hasattr(leaf, "shape") and hasattr(leaf, "dtype")
    )


def _kind_of(leaf: Any) -> str:
    if isinstance(leaf, str):
        return f"a string ({leaf[:30]!r})"
    if callable(leaf):
        name = getattr(leaf, "__name__", "") or getattr(getattr(leaf, "fun", None), "__name__", "")
        return f"a function (`{name}`)" if name else f"a callable `{type(leaf).__name__}`"
    return f"a `{type(leaf).__name__}` object"


def _kind_of_type(type_name: str) -> str:
    short = type_name.rsplit(".", 1)[-1]
    if short in ("function", "PjitFunction", "custom_jvp", "custom_vjp", "partial", "builtin_function_or_method"):
        return f"a function (`{short}`)"
    return "a string" if short == "str" else f"a `{short}` object"


def _function_name(fun: Any) -> str:
    name = getattr(inspect.unwrap(fun), "__name__", "") or type(fun).__name__
    return name.rsplit(".", 1)[-1]


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except Exception:
        return False
    return True
