"""One ``sys.monitoring`` tool id for one watcher: claimed in one order, released with all it set.

Every jaxmagic watcher that follows Python calls or lines (call sites, transfers, jit calls on
JAX's fast path or under the key-reuse checker, the programs a profiled cell runs) claims its id
here, so the ids are tried in one order, an exhausted set fails with one error, and releasing
switches off exactly the events and callbacks that watcher set - global and per code object.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType
from typing import Any

# Python's conventions: 0 debugger, 1 coverage, 2 profiler (cProfile), 5 optimizer. 3 and 4 are
# left to tools like this one; 5 next (no optimizer uses it here); 2 only when a cell runs several
# of our watchers at once, since a cProfile started later in the cell could not claim it.
TOOL_IDS = (3, 4, 5, 2)


class NoFreeToolId(RuntimeError):
    """This Python has no ``sys.monitoring``, or every tool id jaxmagic may use is taken."""


class MonitoringTool:
    """A claimed tool id. ``release()`` (or leaving the ``with`` block) undoes all it set."""

    def __init__(self, name: str):
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            raise NoFreeToolId("this Python has no sys.monitoring (Python 3.12 or newer has it)")
        free = next((tool for tool in TOOL_IDS if monitoring.get_tool(tool) is None), None)
        if free is None:
            taken = ", ".join(f"{tool}: {monitoring.get_tool(tool)}" for tool in TOOL_IDS)
            raise NoFreeToolId(f"every sys.monitoring tool id jaxmagic may use is taken ({taken})")
        monitoring.use_tool_id(free, name)
        self.id: int = free
        self._claimed = True
        self._events = monitoring.events
        self._callbacks: set[int] = set()
        self._local_codes: list[CodeType] = []

    @property
    def events(self) -> Any:
        """``sys.monitoring.events``, for building event masks."""
        return self._events

    def on(self, event: int, callback: Callable[..., Any]) -> None:
        sys.monitoring.register_callback(self.id, event, callback)
        self._callbacks.add(event)

    def watch(self, events: int) -> None:
        """Switch these events on for every code object."""
        sys.monitoring.set_events(self.id, events)

    def watch_code(self, code: CodeType, events: int) -> None:
        """Switch these events on for one code object only."""
        sys.monitoring.set_local_events(self.id, code, events)
        self._local_codes.append(code)

    def release(self) -> None:
        if not self._claimed:
            return
        self._claimed, tool = False, self.id
        monitoring = sys.monitoring
        monitoring.set_events(tool, 0)
        for code in self._local_codes:
            monitoring.set_local_events(tool, code, 0)
        for event in self._callbacks:
            monitoring.register_callback(tool, event, None)
        monitoring.free_tool_id(tool)
        self._local_codes.clear()
        self._callbacks.clear()
        # No sys.monitoring.restart_events(): it would switch back on what every other tool (a
        # debugger, coverage) switched off. What we switched off is library code, never watched.

    def __enter__(self) -> MonitoringTool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
