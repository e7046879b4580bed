"""Count how often each call site of the user's code ran, to say "call 3 of the loop" afterwards.

When a NaN stops a cell inside ``for batch in batches: loss = step(params, batch)``
the traceback says which line failed, not which pass of the loop. Counting the
calls made at each call site of the user's own code (``sys.monitoring`` CALL
events, Python 3.12+) answers that: the failing frame's call instruction has
run N times, so it failed in call N. Call sites in library code are switched
off at their first event, so only the user's own calls cost a callback (well
under a microsecond each; a jitted call costs tens).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import TracebackType

from jaxmagic.report.source import is_user_file

_TOOL_IDS = (5, 4, 3)  # 0-2 are the debugger, coverage and profilers by convention


class CallSiteCounts:
    """Calls made so far at each ``(code, instruction offset)`` of the user's code."""

    def __init__(self):
        self.counts: dict[tuple, int] = {}
        self._user: dict[str, bool] = {}

    def on_call(self, code, offset, callable_, arg0):
        filename = code.co_filename
        user = self._user.get(filename)
        if user is None:
            user = self._user[filename] = is_user_file(filename)
        if not user:
            return sys.monitoring.DISABLE
        key = (code, offset)
        self.counts[key] = self.counts.get(key, 0) + 1
        return None

    def number(self, tb: TracebackType) -> int:
        """How many times the call running in ``tb``'s frame had been made (0 if not counted)."""
        return self.counts.get((tb.tb_frame.f_code, tb.tb_lasti), 0)


@contextlib.contextmanager
def counting_call_sites() -> Iterator[CallSiteCounts | None]:
    """Count the user's calls in the block; yield None when ``sys.monitoring`` is missing or all its tools are taken."""
    monitoring = getattr(sys, "monitoring", None)
    tool = None
    if monitoring is not None:
        tool = next((t for t in _TOOL_IDS if monitoring.get_tool(t) is None), None)
    if tool is None:
        yield None
        return
    counts = CallSiteCounts()
    monitoring.use_tool_id(tool, "jaxmagic call sites")
    try:
        monitoring.register_callback(tool, monitoring.events.CALL, counts.on_call)
        monitoring.set_events(tool, monitoring.events.CALL)
        yield counts
    finally:
        monitoring.set_events(tool, 0)
        monitoring.register_callback(tool, monitoring.events.CALL, None)
        monitoring.free_tool_id(tool)
        # No sys.monitoring.restart_events(): it would switch back on what every other tool (a
        # debugger, coverage) switched off. What we switched off is library code, never counted.
