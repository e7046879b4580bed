"""PRNG keys inside JAX: the core module where legacy keys are checked, a typed key's raw data, and the
key-reuse check with the signatures JAX computes per call cached.

(see ``runtime.py`` for the rule every module here follows when the private name is gone)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import jax

if TYPE_CHECKING:
    from jax._src.core import Primitive
    from jax.experimental.key_reuse._core import KeyReuseSignature

    from jaxmagic._jax.types import Params, Value


def random_core() -> ModuleType | None:
    """JAX's PRNG core module (where legacy uint32 keys are checked), or None."""
    try:
        from jax._src.random import core

        return core
    except ImportError:
        return None


def typed_key_data(key: Any) -> Any:  # a jax.Array of uint32
    """The raw uint32 data of a typed key without copying it (``jax.random.key_data`` when JAX keeps it elsewhere)."""
    base = getattr(key, "_base_array", None)
    if base is None:
        base = jax.random.key_data(key)
    return base


def one_key_for_a_vmapped_batch(key: object) -> bool:
    """Whether a key given to an eager jax.random call is the same for every element of the batch a ``vmap``
    (``jax.vmap``, ``nnx.vmap``) is tracing now: the call runs under vmap's trace and the key is no traced value
    of it (closed over, or passed with ``in_axes=None``), so every element draws the same numbers. False where
    this JAX keeps no current trace to ask."""
    try:
        trace = _trace_context().trace
    except AttributeError:
        return False
    return type(trace).__name__ == "BatchTrace" and not isinstance(key, jax.core.Tracer)


@functools.cache
def _trace_context() -> Any:
    """JAX's current-trace context (``core.trace_ctx``), looked up once: asked at every eager draw."""
    try:
        from jax._src import core

        return core.trace_ctx
    except (ImportError, AttributeError):
        return None


# (primitive, params, argument types) -> its KeyReuseSignature
_key_reuse_signatures: dict[
    tuple[Primitive, tuple[tuple[str, object], ...], tuple[object, ...]], KeyReuseSignature
] = {}


_SIMPLE_PARAMS = (int, float, str, bool, type(None))


def _simple(value: object) -> bool:
    if isinstance(value, tuple):
        return all(_simple(v) for v in value)
    return isinstance(value, _SIMPLE_PARAMS)


def call_with_key_reuse_checks(
    prim: Primitive, raw_impl: Callable[..., Any], args: tuple[Value, ...], params: Params, original: Callable[..., Any]
) -> Any:
    """``original(prim, raw_impl, *args, **params)`` - JAX's per-call key-reuse check - with the
    signature of a primitive whose signature JAX computes per call cached.

    For ``unstack``, ``slice`` and ``concatenate`` (``k1, k2 = jax.random.split(key)`` unstacks)
    JAX traces the operation with ``jax.make_jaxpr`` at every eager call to learn which outputs
    are fresh keys; that signature depends only on the parameters and the argument types, so it is
    traced once per (primitive, parameters, types). Only parameters of plain numbers, strings and
    tuples of them are cached (nothing that could hold an array or a function alive); everything
    else, and any other JAX layout, goes through ``original`` unchanged.
    """
    try:
        from jax.experimental.key_reuse import _core as key_reuse

        dynamic = isinstance(key_reuse.key_reuse_signatures.get(prim), key_reuse.DynamicKeyReuseSignature)
    except (ImportError, AttributeError):
        dynamic = False
    if not dynamic or not all(_simple(v) for v in params.values()):
        return original(prim, raw_impl, *args, **params)
    try:
        key = (prim, tuple(sorted(params.items())), tuple(jax.typeof(a) for a in args))
        signature = _key_reuse_signatures.get(key)
    except TypeError:  # an argument without a hashable type
        return original(prim, raw_impl, *args, **params)
    if signature is None:
        signature = key_reuse.key_reuse_signature_from_primitive(prim, *args, **params)
        if len(_key_reuse_signatures) < 10_000:
            _key_reuse_signatures[key] = signature
    # The rest as JAX's call_impl_with_key_reuse_checks does it for a primitive other than jit.
    signature.check_signature(*args, funcname=str(prim))
    result = raw_impl(*args, **params)
    signature.update_consumption(list(args), result if prim.multiple_results else [result])
    return result
