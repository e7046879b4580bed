"""A jitted function's insides: its class and options, its dispatch path and cache, the arguments and
program of one call, and the function a transformation (``jax.grad``) or a trace holds.

JAX's public API says none of this; ``jax._src`` and jaxlib's objects do (see ``runtime.py`` for the rule
every module here follows when the private name is gone).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, TypeGuard

import jax

if TYPE_CHECKING:
    from jax.stages import Wrapped


from typing import TYPE_CHECKING

from jaxmagic.usercode.source import code_kind

if TYPE_CHECKING:
    from jax.stages import Wrapped

    from jaxmagic._jax.types import Params, Value


def is_jitted(fn: object) -> TypeGuard[Wrapped]:
    """True for a ``jax.jit`` wrapper: it can be traced and lowered without being called."""
    return callable(getattr(fn, "trace", None)) and callable(getattr(fn, "lower", None))


def _identity(x: object) -> object:
    return x


@functools.cache
def jit_type() -> type:
    """The class of the objects ``jax.jit`` returns (jaxlib's PjitFunction)."""
    return type(jax.jit(_identity))


def jit_options(jitted: object) -> Any:  # pjit's PjitInfo, or None
    """The jit options (``PjitInfo``) a jitted function was made with, or None; ``compiled_call`` takes them."""
    return getattr(jitted, "_jit_info", None)


def compiled_call(fun: Callable[..., Any], info: Any) -> Any | None:
    """A new jitted callable of ``fun`` with the jit options ``info`` recorded, or None."""
    try:
        from jax._src import pjit

        return pjit._cpp_pjit(fun, info)
    except Exception:
        return None


@functools.cache  # making a jitted function to read it costs ~0.1 ms; it is the same code object every time
def jit_cache_miss_code() -> CodeType | None:
    """The code object of jit's Python dispatch path (``cache_miss`` in pjit.py), or None.

    A jitted call whose compiled program is not in the C++ dispatch cache runs
    this function; its frame's locals are the call's ``args`` and ``kwargs``.
    """
    try:
        import jax

        jitted: Any = jax.jit(_identity)  # the private ``_cache_miss`` is not on jax.stages.Wrapped
        miss = jitted._cache_miss
        code = getattr(miss, "__wrapped__", miss).__code__
        return code if code.co_name == "cache_miss" else None
    except Exception:
        return None


def jitted_again(fun: Any, jit_info: Any) -> Any | None:
    """The jitted function of a ``cache_miss`` frame (its ``fun`` and ``jit_info`` locals), made again: pjit's
    own ``_cpp_pjit`` on the same function and options, so JAX's caches serve it (nothing traces again). None
    when the frame held neither or this JAX builds jitted functions otherwise."""
    if fun is None or jit_info is None:
        return None
    try:
        from jax._src import pjit  # guard: a private builder, absent from another JAX

        return pjit._cpp_pjit(fun, jit_info)
    except Exception:
        return None


def clear_dispatch_cache(jitted: object) -> bool:
    """Empty the C++ dispatch cache of one jitted function, so its next call takes the Python path.

    Nothing is compiled again: the Python path finds the program in JAX's own
    caches and puts it back. False when this JAX's jit objects cannot do it.
    """
    clear = getattr(jitted, "_clear_cache", None)
    if not callable(clear):
        return False
    try:
        clear()
        return True
    except Exception:
        return False


def post_hook_state() -> Any:  # jaxlib's thread-local config state, or None
    """JAX's setting for the function its C++ jit calls after each fast-path call, or None.

    ``jax.debug_nans`` puts its NaN check there: ``hook(jitted, args, kwargs,
    output)`` runs after every call the C++ dispatch serves from its cache,
    with the call's own arguments and its result, while the call stays on the
    fast path. Calls that take jit's Python path (``cache_miss``: the first of
    a signature, programs with effects) do not call it. ``swap_local`` /
    ``set_local`` set it for one thread; ``value`` is the hook in effect.
    """
    try:
        from jax._src import api

        state = api._post_hook_state
        needed = ("swap_local", "set_local", "get_local", "value")
        return state if all(hasattr(state, name) for name in needed) else None
    except (ImportError, AttributeError):
        return None


def jit_arguments(
    jit_info: Any, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[object, list[Value]] | None:
    """``(signature, dynamic arguments)`` of a call of a jitted function (its ``_jit_info``) as its dispatch sees it, or None.

    The signature (hashable: the static arguments, the pytree structure) with
    the dynamic leaves' types identifies the traced program; the dynamic
    leaves are the program's inputs after its hoisted constants.
    """
    try:
        from jax._src import tree_util
        from jax._src.lib import jax_jit

        return jax_jit.parse_arguments(
            args,
            tuple(kwargs.values()),
            tuple(kwargs.keys()),
            jit_info.static_argnums,
            jit_info.static_argnames,
            tree_util.tracing_registry,
        )
    except Exception:
        return None


def jit_program(
    fun: Callable[..., Any], jit_info: Any, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[list[Value], Params] | None:
    """``(hoisted constants, jit parameters)`` of a call of a jitted ``fun``, from JAX's trace cache, or None.

    Traces only if this signature was never traced in the current context; the
    parameters hold the program (``params["jaxpr"]``) as the key-reuse path's
    observers see it.
    """
    try:
        from jax._src import pjit

        p, _ = pjit._infer_params(fun, jit_info, args, kwargs)
        return list(p.consts), p.params
    except Exception:
        return None


def is_eager_operation(fun: object) -> bool:
    """True for the function jit wraps around one primitive applied eagerly (``jnp.sin(x)`` outside jit)."""
    return bool(getattr(fun, "_apply_primitive", False))


def abstract_value(info: Any) -> Any:
    """The abstract value (shape, dtype, weak type) of a traced argument's or output's info, else ``info`` itself."""
    return getattr(info, "_aval", None) or info


def has_abstract_value(info: object) -> bool:
    return hasattr(info, "_aval")


def function_being_traced() -> Callable[..., Any] | None:
    """The Python callable JAX is tracing right now (from a trace event's stack), or None.

    JAX's tracing entry points hold the function as a ``linear_util.WrappedFun``
    (a local named ``fun`` with the callable as ``.f``); jit's dispatch holds it
    as ``fun`` itself. The innermost such frame is the trace that just ended.
    """

    frame: FrameType | None = sys._getframe(1)
    try:
        for _ in range(200):
            if frame is None:
                return None
            if "jax" in frame.f_code.co_filename and "fun" in frame.f_code.co_varnames:
                fun = frame.f_locals.get("fun")
                inner = getattr(fun, "f", None)
                if inner is not None and hasattr(fun, "transforms"):  # a WrappedFun
                    return inner
                if callable(fun):
                    return fun
            frame = frame.f_back
        return None
    finally:
        del frame


def transformed_function(function: Callable[..., Any]) -> Any:
    """The function a JAX transformation was applied to: ``loss`` for ``jax.grad(loss)`` or
    ``jax.value_and_grad(loss)``, read through JAX's wrappers (``__wrapped__``, or the closure cell
    ``fun`` / the one callable cell of each wrapper in JAX's own files); None when ``function`` is no
    such wrapper or the chain is not found."""
    current = function
    for _ in range(8):
        code = getattr(current, "__code__", None)
        if code is None or code_kind(code.co_filename) != "jax":
            return None if current is function else current
        inner = getattr(current, "__wrapped__", None)
        if inner is None:
            cells = dict(zip(code.co_freevars, (c.cell_contents for c in current.__closure__ or ())))
            callables = [v for v in cells.values() if callable(v)]
            inner = cells.get("fun") if callable(cells.get("fun")) else callables[0] if len(callables) == 1 else None
        if inner is None:
            return None
        current = inner
    return None
