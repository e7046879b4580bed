"""Programs jaxmagic itself runs inside the user's block, so that no report counts them as the user's.

The NaN watch runs small programs of its own while the user's cell runs: a
verdict over a call's results (``finite_flags.nonfinite_codes``) and copies of
what a donating call gives away (``copied``). Each compiles once per shape,
in the cell's thread, while the compilation probe listens there: without a mark
it would count them among the cell's compilations (a program of jaxmagic's
"compiled in your cell"). Code that runs such a program does it inside
``OWN_PROGRAMS`` (a context manager, reused: no generator per use), and the
compilation probe passes over what JAX logs and times meanwhile (``running``).

The copies of a call's donated arguments (or of its results, which the next call
donates) are one program for the whole pytree: an eager ``jnp.copy`` per leaf is
a dispatch per leaf, ~100 us each on a TPU (6 leaves for a 3-layer MLP's params),
paid at every look at a donating call (issue 60 item 3).

The keys area reads the data of the keys of eager draws in batches
(``probes/_keys/key_reads.py``): ``stacked`` puts a batch of same-shaped key
data into one array, so that one program and one copy to the host serve 128
draws instead of a copy to the host each (~150 us of the host's time per draw
on a TPU v5e).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from jaxmagic._jax.types import Value


class _Depth(threading.local):
    depth = 0  # a class default: reading a missing attribute of a threading.local raises and catches (~1 us)


class _OwnPrograms:
    """``with OWN_PROGRAMS:`` around a program of jaxmagic's own (nests; per thread)."""

    def __init__(self) -> None:
        self._state = _Depth()

    def __enter__(self) -> None:
        self._state.depth += 1

    def __exit__(self, *exc: object) -> None:
        self._state.depth -= 1

    def running(self) -> bool:
        return self._state.depth > 0


OWN_PROGRAMS = _OwnPrograms()


def running() -> bool:
    """Whether this thread is running (dispatching, tracing, compiling) a program of jaxmagic's own."""
    return OWN_PROGRAMS.running()


def jaxmagic_copies(*leaves: jax.Array) -> list[jax.Array]:
    """Copies of ``leaves``, made where they live (XLA gives each output a buffer of its own: no input is
    donated). Named so that a compile log or a profile the user reads says whose program it is."""
    return [jnp.copy(leaf) for leaf in leaves]


@functools.cache
def _copy_program() -> Callable[..., list[jax.Array]]:
    """``jaxmagic_copies`` jitted once for the process (compiled per signature of the leaves)."""
    return jax.jit(jaxmagic_copies)


def copied(leaves: Sequence[Value]) -> list[jax.Array]:
    """Device copies of ``leaves`` in one program of jaxmagic's own, dispatched without waiting (made before a
    later call donates the originals); a copy per leaf where one program cannot take them all (leaves
    committed to different devices)."""
    if not leaves:
        return []
    with OWN_PROGRAMS:
        try:
            return list(_copy_program()(*leaves))
        except Exception:
            return [jnp.copy(leaf) for leaf in leaves]


def jaxmagic_stack(*leaves: jax.Array) -> jax.Array:
    """``leaves`` (all of one shape and dtype, on one device) stacked into one array. Named as ``jaxmagic_copies``."""
    return jnp.stack(leaves)


@functools.cache
def _stack_program() -> Callable[..., jax.Array]:
    """``jaxmagic_stack`` jitted once for the process (compiled per count, shape and dtype of the leaves)."""
    return jax.jit(jaxmagic_stack)


def stacked(leaves: Sequence[Value]) -> jax.Array:
    """``leaves`` stacked on their device by one program of jaxmagic's own, dispatched without waiting; raises
    what JAX raises where one program cannot take them (a deleted leaf, leaves on several devices)."""
    with OWN_PROGRAMS:
        return _stack_program()(*leaves)
