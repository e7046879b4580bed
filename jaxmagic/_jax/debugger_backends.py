"""A ``jax.debug.breakpoint()`` backend of jaxmagic's, registered in JAX's debugger registry for one block.

JAX picks the registered debugger with the highest priority when a breakpoint is hit
(``jax._src.debugger.core``: ``register_debugger(name, fn, priority)`` into
``_debugger_registry``); its own ``cli`` backend reads ``sys.stdin`` directly, which
is dead in a notebook (jax#11880). ``%%jax_debug`` registers one above every other for
the cell and removes it however the cell ends. The backend gets plain ``BreakFrame``s,
not JAX's private ``DebuggerFrame``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any


@dataclasses.dataclass
class BreakFrame:
    """One frame JAX recorded at a breakpoint: its file, line and locals (concrete values when the breakpoint ran)."""

    filename: str
    lineno: int
    locals: dict[str, Any]


def _frames(debugger_frames) -> list[BreakFrame]:
    return [BreakFrame(frame.filename, frame.lineno, dict(frame.locals)) for frame in debugger_frames]


@contextlib.contextmanager
def breakpoint_backend(name: str, backend: Callable[[list[BreakFrame]], None]) -> Iterator[None]:
    """Within the block, ``jax.debug.breakpoint()`` (without ``backend=``) calls ``backend(frames)``, frames
    innermost first."""
    from jax._src.debugger import core  # deferred: jaxmagic imports JAX only when a probe runs

    def debugger(frames, thread_id, **kwargs) -> None:
        backend(_frames(frames))

    registry = core._debugger_registry
    priority = max((entry[0] for entry in registry.values()), default=0) + 1
    registry.pop(name, None)  # left by an interrupted block of an older jaxmagic: ours to replace
    core.register_debugger(name, debugger, priority)
    try:
        yield
    finally:
        if registry.get(name, (None, None))[1] is debugger:
            del registry[name]
