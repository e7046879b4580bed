"""``%jax_debug``: stop at the user's failing line of JAX code, with concrete values.

``probe.debug_after`` re-runs the failing call after an error (``stepping`` makes loops and
vmaps fast); ``breakpoints`` serves ``jax.debug.breakpoint()`` inside a ``%%jax_debug`` cell;
``report`` is the data both give.
"""

from jaxmagic.probes._debug.breakpoint_probe import (
    BreakpointHit,
    BreakpointReport,
    DebuggerQuit,
    breakpoints,
    ended_by_quit,
)
from jaxmagic.probes._debug.probe import DebugSession, debug_after
from jaxmagic.probes._debug.report import DebugReport, FrameView, StepView, ValueSummary

__all__ = [
    "BreakpointHit",
    "BreakpointReport",
    "DebuggerQuit",
    "breakpoints",
    "ended_by_quit",
    "DebugReport",
    "DebugSession",
    "FrameView",
    "StepView",
    "ValueSummary",
    "debug_after",
]
