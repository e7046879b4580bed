"""Whether the user's Python ran inside a block: the trace-count rule's witness.

A probe that evaluates a call again after the cell (the watch's and the doctor's NaN search) may or
may not run the user's functions again: a jitted function's program usually comes from JAX's cache,
but not when the cell ran under a tool that bypasses it (leak checking traces afresh). A report
must say plainly when the user's code ran once more (its trace-time prints, counters and appends
happen again), and must not claim it did not. This watcher tells, by seeing whether any function
of a user's file started in the block.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import CodeType

from jaxmagic._jax.monitoring_tool import MonitoringTool, NoFreeToolId
from jaxmagic.usercode.source import is_user_file


class UsersPython:
    """What ``users_python_watched`` saw: the user's functions that started (names, in order, once each)."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.known = True  # False: no watcher could be had (monitoring_tool.why_no_tool), nothing could be told

    @property
    def ran_again(self) -> bool:
        return bool(self.ran)


@contextlib.contextmanager
def users_python_watched(entry: CodeType | None = None) -> Iterator[UsersPython]:
    """Note every function of the user's files that starts on this thread inside the block.

    ``entry``: the user's function a trace starts in, when known - then only it is watched (a local
    event: tracing a training step runs thousands of JAX functions, and a callback at each start doubled
    the trace's time); a trace that misses JAX's cache runs it first, so it answers the same question."""
    seen = UsersPython()
    try:
        tool = MonitoringTool("jaxmagic: did the user's Python run")
    except NoFreeToolId:
        seen.known = False
        yield seen
        return
    thread = threading.get_ident()
    users: dict[CodeType, bool] = {}

    def started(code: CodeType, _offset: int) -> None:
        mine = users.get(code)
        if mine is None:
            mine = users[code] = is_user_file(code.co_filename)
        if mine and threading.get_ident() == thread and code.co_name not in seen.ran:
            seen.ran.append(code.co_name)

    with tool:
        tool.on(tool.events.PY_START, started)
        if entry is not None:
            tool.watch_code(entry, tool.events.PY_START)
        else:
            tool.watch(tool.events.PY_START)
        yield seen
