"""A value that is not an array given to a jitted function: which leaf, what it is, and fixes tried.

``jax.jit`` traces every leaf of its arguments' pytrees as an array. A function, a string or another
object among them - an Equinox Module's activation function (``eqx.nn.MLP`` keeps ``jax.nn.relu``), a
model's config string, a Python callable handed over as an argument - stops it before tracing:
``TypeError: Error interpreting argument to <f> as an abstract array ... at path model.activation``
(equinox's FAQ and its issues; jax#4572, #17052). The explainer names the argument and every leaf of it
that is not an array, and tries the fixes by tracing the function again with the same arguments (an
abstract evaluation: nothing compiles; the user's Python runs once more, and the report says so):

- ``eqx.filter_jit(f)``: traces the array leaves and keeps the others static - tried with
  ``eqx.filter_eval_shape`` when Equinox is installed;
- ``static_argnames=('name',)``: only when the whole argument is not an array (and hashable);
- ``functools.partial(f, value)``: the same as a closure, for a value that is not hashable.

JAX's frames are needed for the trial (``cache_miss`` keeps the call): IPython keeps them; a script's
traceback, filtered by JAX, has none - the fixes are then offered as not tried, saying why.
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

import numpy as np

from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.kept_state import kept
from jaxmagic.probes.explain.non_array_report import NonArrayArgumentReport
from jaxmagic.report.source import user_lines
from jaxmagic.report.wording import error_line, message_of

_MESSAGE = re.compile(
    r"Error interpreting argument to (?P<function>.*?) as an abstract array\. The problematic value is of type "
    r"<class '(?P<type>[^']+)'> and was passed to the function at path (?P<path>[^\s]+?)\.?$",
    re.MULTILINE,
)


def is_non_array_argument(error: BaseException) -> bool:
    return isinstance(error, TypeError) and _MESSAGE.search(message_of(error)) is not None


def explain_non_array_argument(error: BaseException) -> NonArrayArgumentReport | None:
    """The report for jit's "Error interpreting argument ... as an abstract array"; None for other errors."""
    found = _MESSAGE.search(message_of(error)) if isinstance(error, TypeError) else None
    if found is None:
        return None
    path = found["path"]
    report = NonArrayArgumentReport(
        error_type=type(error).__name__,
        function=_function_name(found["function"]),
        argument=re.split(r"[.\[]", path, maxsplit=1)[0],
        path=path,
        leaf_type=found["type"],
        your_lines=user_lines(error.__traceback__),
    )
    call = _jit_call_of(error.__traceback__)
    if call is None:
        report.leaves = {path: _kind_of_type(found["type"])}
        report.fixes = [
            dataclasses.replace(fix, checked="suggestion: not tried (JAX removed its frames from the traceback)")
            for fix in _fixes(report, None)
        ]
        return report
    fun, args, kwargs, names, leaves = call
    try:
        report.leaves = {name: _kind_of(leaf) for name, leaf in zip(names, leaves) if not _is_array_like(leaf)}
        report.leaves = report.leaves or {path: _kind_of_type(found["type"])}
        whole = _whole_argument(fun, args, kwargs, report.argument)
        report.differentiated = _differentiated(fun)
        report.argument_index = _positional_index(fun, args, kwargs, report.argument)
        report.fixes = [_tried(fix, fun, args, kwargs, report) for fix in _fixes(report, whole)]
    finally:
        del call, fun, args, kwargs, leaves
    report.notes += [note for note in report.trial_notes if note]
    return report


def _fixes(report: NonArrayArgumentReport, whole: Any) -> list[Fix]:
    """The fixes for this argument: Equinox's filter first for a leaf inside a structure, a static argument
    only when the whole argument is the value (and hashable)."""
    name, function = report.argument, report.function or "f"
    fixes = []
    if "equinox" in sys.modules:  # the user works with Equinox: its filtered transformations are the fix
        inner = f"eqx.filter_{report.differentiated}({function})" if report.differentiated else function
        fixes.append(
            Fix(
                f"eqx.filter_jit({inner})",
                "trace only the array leaves of every argument and keep the others (functions, strings, "
                "numbers) static - Equinox's jit"
                + (
                    f", and its {report.differentiated} differentiates only the arrays" if report.differentiated else ""
                ),
            )
        )
    elif report.path != name:
        fixes.append(
            Fix(
                f"take `{report.path}` out of `{name}`: pass it as an argument of its own, static "
                f"(static_argnames), or close over it",
                "a setting kept beside the arrays",
                checked="suggestion: not tried (it needs your function changed)",
            )
        )
    if report.path == name:
        if whole is None or _hashable(whole):
            fixes.insert(
                0,
                Fix(
                    f"jax.jit({function}, static_argnames=('{name}',))",
                    f"`{name}` is a setting, not data: one compilation per value",
                ),
            )
    if report.path == name and report.argument_index == 0:
        fixes.append(
            Fix(
                f"jax.jit(functools.partial({function}, {name}))",
                f"close over `{name}` instead of passing it (a new jitted function when it changes)",
            )
        )
    return fixes


def _tried(fix: Fix, fun, args: tuple, kwargs: dict, report: NonArrayArgumentReport) -> Fix:
    """Trace ``fun`` again the fix's way, with the call's own arguments (abstract: nothing compiles)."""
    import jax  # deferred: importing jaxmagic.probes imports no JAX

    output = io.StringIO()  # the function's prints while traced again are not the user's output
    try:
        with kept(fun, *args, *kwargs.values()) as state, contextlib.redirect_stdout(output):
            if fix.checked:
                return fix  # said already why it is not tried
            if fix.use.startswith("eqx.filter_jit"):
                eqx = sys.modules["equinox"]  # offered only when the user imported it (see _fixes)

                if report.differentiated:
                    transform = getattr(eqx, f"filter_{report.differentiated}")
                    eqx.filter_eval_shape(transform(inspect.unwrap(fun)), *args, **kwargs)
                else:
                    eqx.filter_eval_shape(fun, *args, **kwargs)
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


def _pop_argument(fun, positional: list, keywords: dict, name: str) -> Any:
    """The value given for parameter ``name``, taken out of the call's arguments."""
    if name in keywords:
        return keywords.pop(name)
    parameters = list(inspect.signature(fun).parameters)
    return positional.pop(parameters.index(name))


def _differentiated(fun) -> str:
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


def _closed_over(function, name: str) -> Any:
    code, cells = getattr(function, "__code__", None), getattr(function, "__closure__", None) or ()
    if code is None or name not in code.co_freevars:
        return None
    try:
        return cells[code.co_freevars.index(name)].cell_contents
    except (IndexError, ValueError):
        return None


def _positional_index(fun, args: tuple, kwargs: dict, name: str) -> int | None:
    """Where ``name`` was given among the positional arguments; None when by keyword or unknown."""
    if name in kwargs:
        return None
    try:
        index = list(inspect.signature(fun).parameters).index(name)
    except (ValueError, TypeError):
        return None
    return index if index < len(args) else None


def _whole_argument(fun, args: tuple, kwargs: dict, name: str) -> Any:
    try:
        return _pop_argument(fun, list(args), dict(kwargs), name)
    except Exception:
        return None


def _jit_call_of(tb: types.TracebackType | None):
    """(fun, args, kwargs, leaf names, leaves) of the jitted call that failed: jit's ``cache_miss`` keeps
    the call, ``_infer_input_type`` the flat leaves and their names; None without JAX's frames."""
    call = names = leaves = None
    while tb is not None:
        frame = tb.tb_frame
        name = frame.f_code.co_name
        if name == "cache_miss" and "jax" in frame.f_code.co_filename:
            found = [frame.f_locals.get(k) for k in ("fun", "args", "kwargs")]
            if callable(found[0]) and isinstance(found[1], tuple) and isinstance(found[2], dict):
                call = found
        elif name == "_infer_input_type" and "jax" in frame.f_code.co_filename:
            debug = frame.f_locals.get("dbg") or frame.f_locals.get("debug_info")
            names = list(getattr(debug, "arg_names", None) or [])
            leaves = list(frame.f_locals.get("explicit_args") or [])
        tb = tb.tb_next
    if call is None:
        return None
    if not names or not leaves or len(names) != len(leaves):
        names, leaves = [], []
    return (*call, names, leaves)


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


def _function_name(shown: str) -> str:
    """ "loss" of "<function loss at 0x7f...>" (jit names the function it wraps that way)."""
    found = re.match(r"<function (?P<name>[\w.<>]+) at 0x", shown)
    name = found["name"] if found else shown
    return name.rsplit(".", 1)[-1]


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except Exception:
        return False
    return True
