"""Python 3.11's stand-in for the ``sys.monitoring`` events jaxmagic's watchers use (Python 3.12+ has them).

Python 3.11 has no ``sys.monitoring``. Its ``sys.settrace`` gives the thread that sets it four of the events:
PY_START (``call`` at a frame's first ``RESUME``, not at a generator's resumption), PY_RETURN (``return`` at a
``RETURN_VALUE``: not a ``yield``, not an exception leaving the frame), LINE (``line``, in the frames the trace
function follows line by line) and RAISE (``exception``, in each frame an exception passes through, as
RAISE-watching code here expects; no LINE for a one-line function's body, as in Python 3.13, whose answers
the tests and the documentation give). ``StandInTool`` offers them with ``sys.monitoring``'s callback signatures,
``DISABLE`` and ``restart_events``, so a watcher written for ``sys.monitoring`` runs on it unchanged, but:

* one thread: it sees the thread that claimed it (every watcher here follows its block's thread only);
* no CALL, C_RETURN, C_RAISE: a trace hook sees no call of a C-implemented callable, which a jitted function
  is (``sys.setprofile`` sees built-in functions only) - ``monitoring_tool`` refuses a watcher that needs them;
* a callback runs one frame further from its event's frame (the trace function sits between:
  ``FRAMES_BETWEEN``);
* it costs more: every Python call of the thread runs the trace function (a few tenths of a microsecond), and
  the frames it follows line by line pay for every line; a code object every line of which a callback
  switched off (``DISABLE``: library code) is not followed line by line in its later frames;
* it holds the thread's ``sys.settrace``: a debugger or coverage tool holding it makes the claim fail (as a
  taken tool id does), and one that takes it during the block ends the events (its hook is left in place).
"""

from __future__ import annotations

import dis
import inspect
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

FRAMES_BETWEEN = 1  # the trace function's frame, between a callback and its event's frame


class Events:
    """The event bits, named as ``sys.monitoring.events`` names them (CALL and its kin only for masks)."""

    NO_EVENTS = 0
    PY_START = 1
    PY_RETURN = 2
    LINE = 4
    RAISE = 8
    CALL = 16
    C_RETURN = 32
    C_RAISE = 64


OFFERED = Events.PY_START | Events.PY_RETURN | Events.LINE | Events.RAISE
# A callback's answer: this location no longer calls back. sys.monitoring's own where it exists, so the
# stand-in can be tried on Python 3.12+ too (the tests do) with watchers that return that one.
DISABLE: Any = getattr(getattr(sys, "monitoring", None), "DISABLE", object())

_RESUME = dis.opmap.get("RESUME", -1)
_RETURNS = frozenset(dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap)
_FUNCTION = inspect.CO_OPTIMIZED  # a function's code (lambdas, 3.11's comprehensions), not a module or class body
_LOCAL = Events.PY_RETURN | Events.LINE | Events.RAISE  # the events a frame's own trace function gives


class SettraceTaken(RuntimeError):
    """Another tool (a debugger, coverage) holds this thread's ``sys.settrace``."""


class StandInTool:
    """One watcher's events on the claiming thread; ``release()`` undoes what it set."""

    def __init__(self, name: str) -> None:
        hooks = _thread_hooks()
        held = sys.gettrace()
        if held is not None and held is not hooks.trace:
            raise SettraceTaken(f"sys.settrace is held by {held!r}")
        self.name = name
        self.global_events = 0
        self.local_events: dict[CodeType, int] = {}
        self.callbacks: dict[int, Callable[..., Any]] = {}
        self.starts_off: set[CodeType] = set()
        self.lines_off: set[tuple[CodeType, int]] = set()
        self.codes_off: set[CodeType] = set()  # codes with a line a callback switched off
        self.lines_on: set[CodeType] = set()  # codes with a line a callback left on
        self._hooks = hooks
        hooks.tools.append(self)

    def on(self, event: int, callback: Callable[..., Any] | None) -> None:
        if callback is None:
            self.callbacks.pop(event, None)
        else:
            self.callbacks[event] = callback

    def watch(self, events: int) -> None:
        self.global_events = events & OFFERED
        self._hooks.started(sys._getframe(1))

    def watch_code(self, code: CodeType, events: int) -> None:
        if events & OFFERED:
            self.local_events[code] = events & OFFERED
        else:
            self.local_events.pop(code, None)
        self._hooks.started(sys._getframe(1))

    def restart(self) -> None:
        """Switch on again what this tool's callbacks switched off (``sys.monitoring.restart_events``)."""
        self.starts_off.clear()
        self.lines_off.clear()
        self.codes_off.clear()

    def release(self) -> None:
        self.global_events = 0
        self.local_events.clear()
        self.callbacks.clear()
        self.restart()
        self._hooks.released(self)

    def events_for(self, code: CodeType) -> int:
        return self.global_events | self.local_events.get(code, 0) if self.local_events else self.global_events


def restart_events() -> None:
    """What every tool of this thread switched off, on again."""
    for tool in _thread_hooks().tools:
        tool.restart()


def held() -> list[str]:
    """The names of this thread's tools, and "sys.settrace" while the trace function is still ours."""
    hooks = _thread_hooks()
    names = [tool.name for tool in hooks.tools]
    if sys.gettrace() is hooks.trace:
        names.append("sys.settrace")
    return names


class _ThreadHooks:
    """This thread's tools and the trace functions that serve them."""

    def __init__(self) -> None:
        self.tools: list[StandInTool] = []
        self.trace = self._global_trace  # one bound method, so `sys.gettrace() is self.trace` holds
        self.local = self._local_trace
        self.installed = False

    def started(self, frame: FrameType | None) -> None:
        """Install the trace function (once), and follow the frames already running that now want events:
        a new trace function reaches only frames made after it (the block's own frame is older)."""
        if not self.installed:
            if sys.gettrace() is not None and sys.gettrace() is not self.trace:
                return  # taken since the claim: no events (the report says what it saw)
            sys.settrace(self.trace)
            self.installed = True
        while frame is not None:
            if frame.f_trace is None:
                follow, lines = self._wants(frame.f_code)
                if follow:
                    frame.f_trace, frame.f_trace_lines = self.local, lines
            frame = frame.f_back

    def released(self, tool: StandInTool) -> None:
        if tool in self.tools:
            self.tools.remove(tool)
        if self.tools or not self.installed:
            return
        self.installed = False
        if sys.gettrace() is self.trace:
            sys.settrace(None)
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:  # the frames still running that we followed
            if frame.f_trace is self.local:
                frame.f_trace = None
            frame = frame.f_back

    def _wants(self, code: CodeType) -> tuple[bool, bool]:
        """(follow this code's frames with the local trace function, line by line too)."""
        follow = lines = False
        for tool in self.tools:
            events = tool.events_for(code)
            if events & _LOCAL:
                follow = True
                # a code a callback switched lines off in and left none on is library code, switched off
                # at its first line: its later frames are not followed line by line
                if events & Events.LINE and (code in tool.lines_on or code not in tool.codes_off):
                    lines = True
        return follow, lines

    # -- the trace functions (inside every call of the thread: small, never raising) -------------

    def _global_trace(self, frame: FrameType, event: str, arg: object) -> Any:
        if not self.tools:
            return None
        code = frame.f_code
        try:
            lasti = frame.f_lasti
            first = code.co_code[lasti] == _RESUME and code.co_code[lasti + 1] == 0  # not a generator resuming
            for tool in self.tools:
                if first and tool.events_for(code) & Events.PY_START and code not in tool.starts_off:
                    callback = tool.callbacks.get(Events.PY_START)
                    if callback is not None and callback(code, lasti) is DISABLE:
                        tool.starts_off.add(code)
            follow, lines = self._wants(code)
        except Exception:
            return None
        if not follow:
            return None
        frame.f_trace_lines = lines
        return self.local

    def _local_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not self.tools:
            return None
        code = frame.f_code
        try:
            if event == "line":
                line = frame.f_lineno
                if line == code.co_firstlineno and code.co_flags & _FUNCTION:
                    return self.local  # a one-line function's body (a lambda): Python 3.13 gives it no LINE event
                for tool in self.tools:
                    if tool.events_for(code) & Events.LINE and (code, line) not in tool.lines_off:
                        callback = tool.callbacks.get(Events.LINE)
                        if callback is None:
                            continue
                        if callback(code, line) is DISABLE:
                            tool.lines_off.add((code, line))
                            tool.codes_off.add(code)
                        else:
                            tool.lines_on.add(code)
            elif event == "return":
                if code.co_code[frame.f_lasti] in _RETURNS:  # not a yield, not an exception leaving
                    for tool in self.tools:
                        if tool.events_for(code) & Events.PY_RETURN:
                            callback = tool.callbacks.get(Events.PY_RETURN)
                            if callback is not None:
                                callback(code, frame.f_lasti, arg)
            elif event == "exception":
                for tool in self.tools:
                    if tool.events_for(code) & Events.RAISE:
                        callback = tool.callbacks.get(Events.RAISE)
                        if callback is not None:
                            callback(code, frame.f_lasti, arg[1])
        except Exception:
            pass
        return self.local


_local = threading.local()


def _thread_hooks() -> _ThreadHooks:
    hooks = getattr(_local, "hooks", None)
    if hooks is None:
        hooks = _local.hooks = _ThreadHooks()
    return hooks
