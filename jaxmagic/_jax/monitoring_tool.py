"""One ``sys.monitoring`` tool id for one watcher: claimed in one order, released with all it set.

Every jaxmagic watcher that follows Python calls or lines (call sites, transfers, jit calls on
JAX's fast path or under the key-reuse checker, the programs a profiled cell runs) claims its id
here, so the ids are tried in one order, an exhausted set fails with one error, and releasing
switches off exactly the events and callbacks that watcher set - global and per code object.

Python 3.11 has no ``sys.monitoring``: there a watcher gets ``trace_events``' stand-in (``sys.settrace``
on the claiming thread: PY_START, PY_RETURN, LINE, RAISE), and one that needs CALL events (``calls=True``)
gets ``NoFreeToolId``, whose message says so in plain words for the report. This module and that one are
the only ones that know which Python has what: watchers use ``DISABLE``, ``restart_events()`` and
``MonitoringTool.frames_between`` from here, never ``sys.monitoring`` itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType
from typing import Any

from jaxmagic._jax import trace_events

# Python's conventions: 0 debugger, 1 coverage, 2 profiler (cProfile), 5 optimizer. 3 and 4 are
# left to tools like this one; 5 next (no optimizer uses it here); 2 only when a cell runs several
# of our watchers at once, since a cProfile started later in the cell could not claim it.
TOOL_IDS = (3, 4, 5, 2)

_monitoring: Any = getattr(sys, "monitoring", None)  # Python 3.12+; None on 3.11
HAS_MONITORING = _monitoring is not None
DISABLE: Any = _monitoring.DISABLE if HAS_MONITORING else trace_events.DISABLE

# The plain words a report gives for what Python 3.11 lacks (they stand after "could not ...:").
NO_MONITORING = "Python 3.11 has no sys.monitoring (Python 3.12+ has it)"
_NO_CALLS = NO_MONITORING + ", and 3.11's trace hook does not see a jitted function called"
_SETTRACE_HELD = NO_MONITORING + ", and its stand-in, sys.settrace, is held by a debugger or coverage tool"
_ALL_TAKEN = "every sys.monitoring tool id jaxmagic may use was taken"


def why_no_tool(*, calls: bool = False) -> str:
    """Why a watcher (one needing CALL events: ``calls``) could not be had, in the words a report shows
    after "could not ...:" - this Python lacks what it needs, or others hold it. Never says "taken" on 3.11."""
    if HAS_MONITORING:
        return _ALL_TAKEN
    return _NO_CALLS if calls else _SETTRACE_HELD


class NoFreeToolId(RuntimeError):
    """No watcher can be had here; ``str()`` says why in words a report can show: this Python has no
    ``sys.monitoring`` (Python 3.11), or every tool id jaxmagic may use is taken, or a debugger holds
    the trace hook 3.11's stand-in needs."""


def restart_events() -> None:
    """Switch on again every location a callback switched off (``sys.monitoring.restart_events``)."""
    if HAS_MONITORING:
        _monitoring.restart_events()
    else:
        trace_events.restart_events()


def watchers_held() -> list[str]:
    """The names of the watchers holding a tool now: empty once every block released its own (a contract test)."""
    if HAS_MONITORING:
        return [name for tool in TOOL_IDS if (name := _monitoring.get_tool(tool)) is not None]
    return trace_events.held()


class MonitoringTool:
    """A claimed tool id. ``release()`` (or leaving the ``with`` block) undoes all it set.

    ``calls``: the watcher needs CALL, C_RETURN or C_RAISE events, which Python 3.11's stand-in cannot give.
    ``frames_between``: frames between a callback and the frame its event is about (0 with
    ``sys.monitoring``; 1 with the stand-in, whose trace function sits between): a callback reads its
    event's frame as ``sys._getframe(1 + tool.frames_between)``.
    """

    def __init__(self, name: str, *, calls: bool = False):
        self._claimed = False
        self._callbacks: set[int] = set()
        self._local_codes: list[CodeType] = []
        if not HAS_MONITORING:
            if calls:
                raise NoFreeToolId(_NO_CALLS)
            try:
                self._stand_in: trace_events.StandInTool | None = trace_events.StandInTool(name)
            except trace_events.SettraceTaken:
                raise NoFreeToolId(_SETTRACE_HELD) from None
            self.id = -1
            self.frames_between = trace_events.FRAMES_BETWEEN
            self._events: Any = trace_events.Events
            self._claimed = True
            return
        monitoring = _monitoring
        free = next((tool for tool in TOOL_IDS if monitoring.get_tool(tool) is None), None)
        if free is None:
            taken = ", ".join(f"{tool}: {monitoring.get_tool(tool)}" for tool in TOOL_IDS)
            raise NoFreeToolId(f"{_ALL_TAKEN} ({taken})")
        monitoring.use_tool_id(free, name)
        self._stand_in = None
        self.id = free
        self.frames_between = 0
        self._claimed = True
        self._events = monitoring.events

    @property
    def events(self) -> Any:
        """``sys.monitoring.events`` (or the stand-in's), for building event masks."""
        return self._events

    def on(self, event: int, callback: Callable[..., Any]) -> None:
        if self._stand_in is not None:
            self._stand_in.on(event, callback)
            return
        _monitoring.register_callback(self.id, event, callback)
        self._callbacks.add(event)

    def watch(self, events: int) -> None:
        """Switch these events on for every code object."""
        if self._stand_in is not None:
            self._stand_in.watch(events)
            return
        _monitoring.set_events(self.id, events)

    def watch_code(self, code: CodeType, events: int) -> None:
        """Switch these events on for one code object only."""
        if self._stand_in is not None:
            self._stand_in.watch_code(code, events)
            return
        _monitoring.set_local_events(self.id, code, events)
        self._local_codes.append(code)

    def release(self) -> None:
        if not self._claimed:
            return
        self._claimed = False
        if self._stand_in is not None:
            self._stand_in.release()
            return
        tool, monitoring = self.id, _monitoring
        monitoring.set_events(tool, 0)
        for code in self._local_codes:
            monitoring.set_local_events(tool, code, 0)
        for event in self._callbacks:
            monitoring.register_callback(tool, event, None)
        monitoring.free_tool_id(tool)
        self._local_codes.clear()
        self._callbacks.clear()
        # No _monitoring.restart_events(): it would switch back on what every other tool (a
        # debugger, coverage) switched off. What we switched off is library code, never watched.

    def __enter__(self) -> MonitoringTool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
