"""A ``jax.debug.breakpoint()`` backend of jaxmagic's, registered in JAX's debugger registry for one block.

JAX picks the registered debugger with the highest priority when a breakpoint is hit
(``jax._src.debugger.core``: ``register_debugger(name, fn, priority)`` into
``_debugger_registry``); its own ``cli`` backend reads ``sys.stdin`` directly, which
is dead in a notebook (jax#11880). ``%%jax_debug`` registers one above every other for
the cell and removes it however the cell ends. The backend gets plain ``BreakFrame``s,
not JAX's private ``DebuggerFrame``.

Under ``vmap`` JAX unrolls a breakpoint (a ``debug_callback``) into one callback per batch
element (``debugging.debug_batching_rule``), none knowing its element. ``batch_elements_told``
replaces that rule for the block with one that wraps each element's callback so that, while it
runs, ``batch_position()`` gives the element's index (outermost vmap first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax._src import debugging
from jax._src.debugger import core
from jax._src.interpreters import batching


@dataclasses.dataclass
class BreakFrame:
    """One frame JAX recorded at a breakpoint: its file, line and locals (concrete values when the breakpoint ran)."""

    filename: str
    lineno: int
    locals: dict[str, Any]


def _frames(debugger_frames: Iterable[core.DebuggerFrame]) -> list[BreakFrame]:
    return [BreakFrame(frame.filename, frame.lineno, dict(frame.locals)) for frame in debugger_frames]


class _Unlogged(logging.Filter):
    """Drops JAX's "jax.debug.callback failed" log record of an exception the backend raises on purpose."""

    def __init__(self, quiet: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.quiet = quiet

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, self.quiet)


@contextlib.contextmanager
def breakpoint_backend(
    name: str, backend: Callable[[list[BreakFrame]], None], quiet: tuple[type[BaseException], ...] = ()
) -> Iterator[None]:
    """Within the block, ``jax.debug.breakpoint()`` (without ``backend=``) calls ``backend(frames)``, frames
    innermost first. An exception of a ``quiet`` type the backend raises is not logged by JAX (it logs every
    callback's exception with its traceback before raising it)."""

    def debugger(frames: list[core.DebuggerFrame], thread_id: int | None, **kwargs: object) -> None:
        backend(_frames(frames))

    registry = core._debugger_registry
    priority = max((entry[0] for entry in registry.values()), default=0) + 1
    registry.pop(name, None)  # left by an interrupted block of an older jaxmagic: ours to replace
    core.register_debugger(name, debugger, priority)
    callback_log = logging.getLogger("jax._src.debugging")
    unlogged = _Unlogged(quiet)
    callback_log.addFilter(unlogged)
    try:
        yield
    finally:
        # An accelerator runs a jitted call after it returned: its breakpoint's callback can come after the
        # block's last line (seen on a TPU). Wait for the callbacks in flight, so they stop under this backend.
        with contextlib.suppress(Exception):  # the user's own error, if any, was raised by the block already
            jax.effects_barrier()
        callback_log.removeFilter(unlogged)
        if registry.get(name, (None, None))[1] is debugger:
            del registry[name]


class _Position(threading.local):
    indices: tuple[int, ...] = ()


_POSITION = _Position()


def batch_position() -> tuple[int, ...]:
    """The batch element (one index per vmap, outermost first) whose debug callback is running; () outside one
    or when the program was traced before ``batch_elements_told``."""
    return _POSITION.indices


class _AtElement:
    """A debug callback for one batch element: says its index while the callback runs."""

    def __init__(self, index: int, callback: Callable[..., Any]) -> None:
        self.index, self.callback = index, callback

    def __call__(self, *args: object) -> object:
        before = _POSITION.indices
        _POSITION.indices = (*before, self.index)  # an outer vmap's wrapper runs first: its index is already there
        try:
            return self.callback(*args)
        finally:
            _POSITION.indices = before

    def __eq__(self, other: object) -> bool:  # JAX compares equation parameters when it caches traced programs
        return isinstance(other, _AtElement) and (self.index, self.callback) == (other.index, other.callback)

    def __hash__(self) -> int:
        return hash((self.index, self.callback))


@contextlib.contextmanager
def batch_elements_told() -> Iterator[None]:
    """Within the block, ``vmap`` of a ``debug_callback`` (a breakpoint) tells each element's callback its index."""
    primitive = debugging.debug_callback_p
    table = batching.fancy_primitive_batchers  # what `primitive_batchers[p] = rule` fills, wrapped
    original = table[primitive]

    def rule(
        axis_data: object,
        args: Sequence[jax.Array],
        dims: Sequence[int | None],
        *,
        callback: Callable[..., Any],
        **params: object,
    ) -> tuple[list[jax.Array], Sequence[int | None]]:
        # JAX's debug_batching_rule, with each element's callback told its index
        if all(d is None for d in dims):
            out = primitive.bind(*args, callback=callback, **params)
            return out, [None] * len(out)
        size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
        outs = []
        for index in range(size):
            element = [
                a if d is None else lax.index_in_dim(a, index, axis=d, keepdims=False) for a, d in zip(args, dims)
            ]
            outs.append(primitive.bind(*element, callback=_AtElement(index, callback), **params))
        stacked = [jnp.stack(xs) for xs in zip(*outs)]
        return stacked, (0,) * len(stacked)

    table[primitive] = rule
    try:
        yield
    finally:
        table[primitive] = original
