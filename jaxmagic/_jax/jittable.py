"""Give ``jax.jit`` only functions it can safely wrap more than once.

jaxlib 0.12.0.1 keeps a weak reference to the function it jits. For a callable
that cannot be weakly referenced (a NumPy function or ufunc such as ``np.sum``
or ``np.add``, a C method wrapper such as ``np.sum.__call__``) the first
``jax.jit(fn)`` raises ``TypeError`` at its first call, and the *second*
``jax.jit(fn)`` in the process crashes it ("Fatal Python error: Segmentation
fault"), taking the notebook's state with it. A probe jits the user's function
more than once (jit, then a copy for timing, then a sweep), so every probe
that jits a user's function gets it through :func:`jittable` first.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax

if TYPE_CHECKING:
    from jax.stages import Wrapped


def can_be_weakly_referenced(fn: Any) -> bool:
    try:
        weakref.ref(fn)
    except TypeError:
        return False
    return True


def jittable(fn: Callable[..., object]) -> Callable[..., object]:
    """``fn`` itself when ``jax.jit`` can wrap it safely; else a plain Python function calling it.

    The wrapper carries ``fn``'s name (so reports and JAX's messages name
    ``sum``, not a wrapper of ours) and nothing else of it.
    """
    if can_be_weakly_referenced(fn):
        return fn

    def call(*args: object, **kwargs: object) -> object:
        return fn(*args, **kwargs)

    name = getattr(fn, "__name__", None) or type(fn).__name__
    call.__name__ = call.__qualname__ = str(name)
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


def jit(fn: Callable[..., object], **options: Any) -> Wrapped:
    """``jax.jit(fn, **options)`` that never crashes the process (see the module docstring)."""
    return jax.jit(jittable(fn), **options)
