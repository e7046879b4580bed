""" "Make it static", written for the jit wrapper the user actually called, and tried with that wrapper.

``jax.jit(f, static_argnames=('n',))`` is the form for ``jax.jit`` only. A library's jit wrapper hides the
user's function behind its own (the jit JAX sees is the library's), and has its own form:

* ``eqx.filter_jit`` has no ``static_argnames``: it traces every array leaf and treats every other leaf as
  static already, so the fix is to pass a Python value (``int(n)``) where an array was passed (or, for a
  Module's attribute, ``eqx.field(static=True)``). Tried with ``eqx.filter_eval_shape`` on the user's
  function with that Python value (patrick-kidger/diffrax#379: ``max_steps`` passed as an argument tripped the
  tracer under Equinox's jit).
* ``nnx.jit`` takes ``static_argnames`` / ``static_argnums`` like jax.jit, on its own wrapper:
  ``nnx.jit(f, static_argnames=('n',))``. Tried with ``nnx.jit(f, static_argnames=...).trace``
  (google/flax#4146: ``if cond:`` under ``nnx.jit``, with ``static_argnames``).
* a library's callable the user gives jax.jit (``jax.jit(model.apply)`` of a Linen module,
  ``jax.jit(transformed.apply)`` of Haiku) takes the user's arguments through its ``*args``, where
  ``static_argnames`` does not see them: ``static_argnums`` by their position in the call, tried with
  ``jax.jit(...).trace`` (``callable_static_fix``).

The wrapper is found where the user's line called it: the library frame right after the user's last frame
before JAX's jit, whose ``self`` holds the user's function (``__wrapped__``) and whose ``*args, **kwargs``
are the user's own arguments. Nothing here imports a library: the wrapper's own is taken from sys.modules.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import io
import linecache
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import jax
import numpy as np

from jaxmagic._jax.transform_stack import Frames, library_callable_jit_call
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import code_kind, is_user_file

# The library whose jit wrapper the user called, by the module of the wrapper's class.
_LIBRARIES = {"equinox": "eqx.filter_jit", "flax.nnx": "nnx.jit"}


@dataclasses.dataclass
class LibraryJitCall:
    """The call of a library's jit wrapper the user's line made: which wrapper, the user's function in it,
    and the user's own arguments (read at the wrapper's entry point). Not kept past the report."""

    wrapper: str  # "eqx.filter_jit", "nnx.jit"
    function: Callable[..., object]  # the user's function the wrapper holds
    name: str  # its name, as the user wrote it: "step"
    arguments: dict[str, Any]  # the user's arguments, bound to the function's parameters
    decorated: bool  # the function was decorated with the wrapper (``@eqx.filter_jit``)


def _is_jax_frame(filename: str) -> bool:
    return code_kind(filename) == "jax"


def library_jit_call(frames: Frames) -> LibraryJitCall | None:
    """The library jit wrapper the user's line called among ``frames`` (outermost first, JAX's too), or None
    when the user called jax.jit (or nothing) directly."""
    entry: FrameType | None = None  # the frame right after the user's last one, before jit
    after_user = False
    for frame, _ in frames:
        filename = frame.f_code.co_filename
        if _is_jax_frame(filename) and frame.f_code.co_name == "cache_miss":
            break
        if is_user_file(filename):
            after_user, entry = True, None
        elif after_user:
            after_user = False
            entry = None if _is_jax_frame(filename) else frame
    if entry is None:
        return None
    try:
        local_vars = entry.f_locals
        wrapper_object = local_vars.get("self")
        args, kwargs = local_vars.get("args"), local_vars.get("kwargs")
    except Exception:
        return None
    finally:
        del entry
    module = type(wrapper_object).__module__ or ""
    wrapper = next((w for prefix, w in _LIBRARIES.items() if module == prefix or module.startswith(prefix + ".")), "")
    function = getattr(wrapper_object, "__wrapped__", None)
    code = getattr(function, "__code__", None)
    if not wrapper or function is None or code is None or not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return None
    try:
        arguments = dict(inspect.signature(function).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return None
    above = linecache.getline(code.co_filename, code.co_firstlineno).strip()
    decorated = above.startswith("@") and "jit" in above
    return LibraryJitCall(wrapper, function, code.co_name, arguments, decorated)


def _python_type(value: object) -> str:
    """ "int" for an integer scalar array, "float", "bool"; "" for a value that is no concrete scalar array."""
    if not isinstance(value, jax.Array) or isinstance(value, jax.core.Tracer) or getattr(value, "size", 0) != 1:
        return ""
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(value.dtype.kind, "")


def library_static_fix(
    fix: Fix, call: LibraryJitCall, names: list[str], is_tracer_error: Callable[[BaseException], bool]
) -> Fix:
    """``fix`` (a ``static_argnames`` fix for ``names``) written for the wrapper the user called, and tried
    with it: tracing the user's function once more (nothing compiles, nothing runs). ``is_tracer_error``
    tells a tracer error still there (not enough on its own) from the fix itself failing."""
    shown = ", ".join(f"`{n}`" for n in names)
    missing = [n for n in names if n not in call.arguments]
    if missing:
        return dataclasses.replace(fix, checked=f"suggestion: not tried ({missing[0]} is not among your arguments)")
    if call.wrapper == "eqx.filter_jit":
        return _equinox_fix(fix, call, names, shown, is_tracer_error)
    return _nnx_fix(fix, call, names, shown, is_tracer_error)


def _equinox_fix(
    fix: Fix, call: LibraryJitCall, names: list[str], shown: str, is_tracer_error: Callable[[BaseException], bool]
) -> Fix:
    types = {n: _python_type(call.arguments[n]) for n in names}
    use = _call_text(call, {n: f"{types[n] or 'int'}({n})" for n in names})
    when = (
        f"at your call of `{call.name}`: pass {shown} as a Python "
        f"{'/'.join(sorted({t or 'number' for t in types.values()}))}, not a JAX array - eqx.filter_jit has no "
        "static_argnames: it traces every array and treats every other value as static (one compilation per "
        "value); for a Module's attribute, declare it with eqx.field(static=True)"
    )
    untriable = [n for n in names if not types[n]]
    if untriable:
        reason = f"`{untriable[0]}` is not a concrete scalar array this call passed"
        return Fix(use, when, f"suggestion: not tried ({reason})")
    equinox = sys.modules.get("equinox")  # imported by the user already: their wrapper is Equinox's
    if equinox is None:
        return Fix(use, when, "suggestion: not tried (equinox is not imported)")
    arguments = {n: (v.item() if n in names else v) for n, v in call.arguments.items()}
    given = ", ".join(f"{n} = {arguments[n]!r}" for n in names)
    result = _trace(
        lambda: _call_bound(call.function, arguments, lambda f, a, k: equinox.filter_eval_shape(f, *a, **k)),
        f"`{call.name}` with {given} (Python values)",
        "eqx.filter_eval_shape",
        is_tracer_error,
    )
    return Fix(use, when, result)


def _nnx_fix(
    fix: Fix, call: LibraryJitCall, names: list[str], shown: str, is_tracer_error: Callable[[BaseException], bool]
) -> Fix:
    option = f"static_argnames={tuple(names)!r}"
    use = f"@nnx.jit({option})" if call.decorated else f"nnx.jit({call.name}, {option})"
    when = fix.when + (f"; put it in place of the @nnx.jit on `{call.name}`" if call.decorated else "")
    nnx = sys.modules.get("flax.nnx")  # imported by the user already: their wrapper is nnx.jit
    if nnx is None:
        return Fix(use, when, "suggestion: not tried (flax.nnx is not imported)")
    result = _trace(
        lambda: _call_bound(
            call.function, call.arguments, lambda f, a, k: nnx.jit(f, static_argnames=tuple(names)).trace(*a, **k)
        ),
        f"`{call.name}` with {shown} static",
        f"nnx.jit(..., {option}).trace",
        is_tracer_error,
    )
    return Fix(use, when, result)


def _call_text(call: LibraryJitCall, replaced: dict[str, str]) -> str:
    """``repeat(x, int(n))``: the call of the user's function by its parameters, some written anew."""
    parameters = inspect.signature(call.function).parameters
    parts = []
    for name in call.arguments:
        kind = parameters[name].kind
        shown = replaced.get(name, name)
        if kind == inspect.Parameter.VAR_POSITIONAL:
            parts.append(f"*{shown}")
        elif kind == inspect.Parameter.VAR_KEYWORD:
            parts.append(f"**{shown}")
        elif kind == inspect.Parameter.KEYWORD_ONLY:
            parts.append(f"{name}={shown}")
        else:
            parts.append(shown)
    return f"{call.name}({', '.join(parts)})"


def _call_bound(
    function: Callable[..., object],
    arguments: dict[str, Any],
    run: Callable[[Callable[..., object], tuple[Any, ...], dict[str, Any]], Any],
) -> Any:
    """``run(function, args, kwargs)`` with ``arguments`` bound back to the function's parameters."""
    signature = inspect.signature(function)
    bound = inspect.BoundArguments(signature, arguments)
    return run(function, bound.args, bound.kwargs)


def _trace(attempt: Callable[[], Any], what: str, how: str, is_tracer_error: Callable[[BaseException], bool]) -> str:
    """The ``checked`` text of one trial: the error gone, or the error it still raises."""
    output = io.StringIO()  # the function's own prints while it is traced again are not the user's output
    ran = f" (jaxmagic traced your function once more with {how} to try it; nothing compiled or ran)"
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            attempt()
    except Exception as failure:
        if is_tracer_error(failure):
            return f"checked: not enough on its own - tracing {what} still raises {error_line(failure)}{ran}"
        return f"checked: still fails - tracing {what} raised {error_line(failure)}{ran}"
    return f"checked: tracing {what} succeeds with this call's arguments{ran}"


def callable_static_fix(
    fix: Fix, names: list[str], frames: Frames, is_tracer_error: Callable[[BaseException], bool]
) -> Fix | None:
    """``fix`` for a library's callable the user gave jax.jit (``jax.jit(model.apply)``, ``jax.jit(t.apply)``):
    the user's parameters reach it through its ``*args``, where ``static_argnames`` does not see them, so
    the fix names their positions (``static_argnums``) among the call's arguments, and is tried with
    ``jax.jit(...).trace`` on them. None when the call is not such a call or the positions cannot be told."""
    found = library_callable_jit_call(frames)
    if found is None:
        return None
    fun, args, kwargs, static, (caller, lineno) = found
    parameters = _traced_parameters(frames, names)
    given = _jitted_expression(caller, lineno) or getattr(fun, "__name__", "")
    del found, caller
    if not parameters or not given:
        return None
    offset = len(args) - len(parameters)
    positions = {n: offset + list(parameters).index(n) for n in names}
    if offset < 0 or any(not _same_shape(parameters[p], args[offset + i]) for i, p in enumerate(parameters)):
        return None  # the user's parameters are not the call's last arguments, one for one
    numbers = tuple(sorted(set(static["static_argnums"]) | set(positions.values())))
    option = f"static_argnums={numbers!r}"
    where = ", ".join(f"`{n}` is argument {positions[n]} of the call" for n in names)
    when = (
        f"{fix.when}; {where} - `{given}` takes your arguments through its *args, where static_argnames does "
        "not see them"
    )
    use = f"jax.jit({given}, {option})"
    shown = ", ".join(f"`{n}`" for n in names)
    result = _trace(
        lambda: jax.jit(fun, static_argnums=numbers).trace(*args, **kwargs),
        f"`{given}` with {shown} static",
        f"jax.jit(..., {option}).trace",
        is_tracer_error,
    )
    return Fix(use, when, result)


def _traced_parameters(frames: Frames, names: list[str]) -> dict[str, Any]:
    """The positional parameters (without ``self``) of the user's traced function that has ``names`` among
    them, with their values there (tracers), in order; {} when none has them."""
    for frame, _ in frames:
        code = frame.f_code
        if not is_user_file(code.co_filename):
            continue
        ordered = [p for p in code.co_varnames[: code.co_argcount] if p != "self"]
        if set(names) <= set(ordered):
            return {p: frame.f_locals.get(p) for p in ordered}
    return {}


def _same_shape(traced: Any, given: Any) -> bool:
    """The tracer a parameter holds came from this argument of the call, by its shape."""
    try:
        return tuple(np.shape(given)) == tuple(getattr(traced, "shape", np.shape(traced)))
    except Exception:
        return False


def _jitted_expression(frame: FrameType, lineno: int) -> str:
    """``model.apply`` of a line ``jax.jit(model.apply)(variables, x, 2)``; "" when the line has none."""
    line = linecache.getline(frame.f_code.co_filename, lineno).strip()
    for candidate in (line, line.split(":", 1)[-1].strip()):  # `try: step(x)` holds the call after its colon
        try:
            tree = ast.parse(candidate.rstrip(":") or "0")
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            inner = node.func if isinstance(node, ast.Call) else None
            if isinstance(inner, ast.Call) and getattr(inner.func, "attr", getattr(inner.func, "id", "")) == "jit":
                return ast.unparse(inner.args[0]) if inner.args else ""
        return ""
    return ""
