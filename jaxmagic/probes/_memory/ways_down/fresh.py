"""A jit of the user's call that JAX has not traced: a trial that changes what the user's Python does while
it is traced (a scan's body checkpointed, a layer's method rematerialized) must run that Python again."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import jax

from jaxmagic._jax import jit_internals
from jaxmagic.probes._memory.library_transforms import library_jit
from jaxmagic.probes._memory.program import CompiledCall


def fresh_jit(call: CompiledCall) -> Any:
    """``jax.jit`` of a new function calling the jitted one's own, with its static arguments: JAX's trace
    cache is keyed by the function, so this one traces (the user's ``jax.jit`` stays as it was). A library's
    function is traced in what its wrapper sets up around it (``LibraryJit.tracing``)."""
    info = jit_internals.jit_options(call.jitted)
    inner = getattr(call.jitted, "_fun", None) or getattr(call.jitted, "__wrapped__", None) or call.jitted
    wrapper = library_jit(call.jitted, call.args)

    @functools.wraps(inner)
    def traced_afresh(*args: Any, **kwargs: Any) -> Any:
        with wrapper.tracing() if wrapper is not None else contextlib.nullcontext():
            return inner(*args, **kwargs)

    return jax.jit(
        traced_afresh,
        static_argnums=tuple(getattr(info, "static_argnums", ()) or ()),
        static_argnames=tuple(getattr(info, "static_argnames", ()) or ()),
    )
