"""Progress of a running cell: what a probe has counted and found so far, read from outside.

A long cell under a magic shows a live view (``jaxmagic.ipython.live_view``) that
a timer thread refreshes. It must cost the cell nothing, so probes do not push
updates: when a probe starts it *publishes a source*, a function that reads the
counters and findings the probe keeps anyway (the length of its list of
compilations, the NaN sighting of its watch) and returns them. Only the timer
thread calls it, at most twice a second, and only while a live view is open;
without one, ``publish`` is a check of one global.

A source runs on another thread while the probe writes: it must only read, copy
what it reads (``len(...)``, ``list(...)``) and may raise - a failing source is
skipped for that refresh, never shown.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator

# A source returns (counters, findings): ("compilations", 5) pairs and one-line headlines.
Source = Callable[[], tuple[list[tuple[str, int]], list[str]]]


@dataclasses.dataclass(frozen=True)
class Snapshot:
    counters: tuple[tuple[str, int], ...] = ()
    findings: tuple[str, ...] = ()
    waiting: str = ""  # the cell waits for the user (a debugger's prompt): where, in words; "" when it runs


class Board:
    """The sources of one running cell."""

    def __init__(self) -> None:
        self._sources: list[Source] = []
        self._lock = threading.Lock()
        self.waiting = ""  # set by ``waiting_for_user`` (one string: read whole by the timer thread)

    def add(self, source: Source) -> None:
        with self._lock:
            self._sources.append(source)

    def snapshot(self) -> Snapshot:
        """Every source read once; counters of the same name added up, findings in order, once each."""
        with self._lock:
            sources = list(self._sources)
        counters: dict[str, int] = {}
        findings: dict[str, None] = {}
        for source in sources:
            try:
                counted, found = source()
            except Exception:  # the probe was writing what we read: next refresh
                continue
            for name, value in counted:
                counters[name] = counters.get(name, 0) + int(value)
            findings.update(dict.fromkeys(found))
        return Snapshot(tuple(counters.items()), tuple(findings), self.waiting)


_board: Board | None = None


def publish(source: Source) -> None:
    """Called by a probe as it starts: where its counters can be read while the cell runs."""
    board = _board
    if board is not None:
        board.add(source)


@contextlib.contextmanager
def collecting() -> Iterator[Board]:
    """The board probes started inside this block publish to (the cell of one magic)."""
    global _board
    outer, _board = _board, Board()
    try:
        yield _board
    finally:
        _board = outer


@contextlib.contextmanager
def waiting_for_user(where: str) -> Iterator[None]:
    """The cell waits for the user inside this block (a debugger's prompt at ``where``): a live view says so,
    instead of a RUNNING card whose time stands still."""
    board = _board
    if board is None:
        yield
        return
    board.waiting = where
    try:
        yield
    finally:
        board.waiting = ""
