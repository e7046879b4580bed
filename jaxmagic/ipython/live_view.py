"""The live view of a long cell: what the probe has counted and found so far, replaced by the report.

When a magic's cell has run for ``DELAY`` seconds, a card appears under it
(``display(..., display_id=True)``) with the elapsed time, the probe's counters
and each finding's headline as soon as the probe knows it. A timer thread
refreshes it at most every ``INTERVAL`` seconds, and only when something the probe
counted changed; it reads the probe's counters (``probes._support.progress``) and
never touches the cell's thread. At the end the card is *updated* with the final
report, so a saved notebook holds exactly the static report, as without a live
view. A cell that ends before DELAY shows its report as usual, with no card.

On an ipyparallel engine there is no live view: ``%%px`` forwards displays to the
client but not their updates. In terminal IPython the view is one status line that rewrites itself (only when
stdout is a terminal) and is erased before the report prints. Setting the
environment variable ``JAXMAGIC_LIVE_VIEW=0`` switches the view off.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from IPython.display import DisplayHandle, display

from jaxmagic.render import static_bundle
from jaxmagic.report import Status
from jaxmagic.report.document import Document, Paragraph, Section
from jaxmagic.report.wording import counted
from jaxmagic.usercode.source import running_shell

if TYPE_CHECKING:
    from jaxmagic.probes._support.progress import Board, Snapshot

DELAY = 1.0  # seconds before a cell counts as long
INTERVAL = 0.5  # at most two refreshes a second


def _count_text(counters: Iterable[tuple[str, int]]) -> str:
    # "implicit transfers: 1": the counter's name as the probe gives it, never "1 implicit transfers"
    return ", ".join(f"{name}: {value:,}" for name, value in counters if value)


COUNTS_ARE_NOT_FINDINGS = "counts so far, not findings: the report says which of them matter."


def progress_document(title: str, elapsed: float, snapshot: Snapshot) -> Document:
    """The live card: a RUNNING badge, what was found so far - the findings the final report will tell - and,
    apart and said to be such, what was counted."""
    counts = _count_text(snapshot.counters)
    found = len(snapshot.findings)
    if snapshot.waiting:
        headline = (
            f"Waiting for you at {snapshot.waiting} (after {elapsed:.1f} s): type a command in the input box "
            "below - c continues, q quits the cell."
        )
    elif found:
        headline = (
            f"Running for {elapsed:.1f} s; {counted(found, 'finding')} so far - the full report replaces this view "
            "when the cell ends."
        )
    else:
        headline = (
            f"Running for {elapsed:.1f} s; nothing found so far. The report replaces this view when the cell ends."
        )
    sections = [Section("Found so far", [Paragraph(text) for text in snapshot.findings])] if found else []
    if counts:  # after the findings, said to be counts: never read as findings
        sections.append(Section("", [Paragraph(f"Counted: {counts} - {COUNTS_ARE_NOT_FINDINGS}")]))
    return Document(title=title, status=Status.RUNNING, headline=headline, sections=sections)


class LiveView:
    """A live view of one cell, for ``with``: shown after DELAY, stopped on exit; ``show_report`` ends it."""

    def __init__(
        self,
        title: str,
        board: Board,
        *,
        in_kernel: bool,
        only_with_findings: bool = False,
        delay: float = DELAY,
        interval: float = INTERVAL,
    ) -> None:
        self.title = title
        self.board = board
        self.delay, self.interval = delay, interval
        self.in_kernel = in_kernel
        self.only_with_findings = only_with_findings  # %jax_watch: a clean cell shows nothing at all
        self.terminal = not in_kernel and _stdout_is_terminal()
        self.enabled = (
            os.environ.get("JAXMAGIC_LIVE_VIEW", "1") != "0"
            and (in_kernel or self.terminal)
            and not _on_ipyparallel_engine()
        )
        self.handle: DisplayHandle | None = None  # once the card was shown
        self.replaced = False  # the card was replaced by the report (or by a note that there is none)
        self.updates = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._status_width = 0

    def __enter__(self) -> LiveView:
        if self.enabled:
            self._started = time.perf_counter()
            # ipykernel routes output by the parent message held in context variables: the thread
            # runs in a copy of the cell's context so its card lands under this cell.
            context = contextvars.copy_context()
            self._thread = threading.Thread(target=context.run, args=(self._refresh_loop,), daemon=True)
            self._thread.name = "jaxmagic-live-view"
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self.handle is not None and not self.replaced:
            # The magic itself failed before it had a report: the card must not stay RUNNING.
            what = f" ({type(exc).__name__})" if exc is not None else ""
            stopped = Document(self.title, Status.ERROR, f"The cell stopped before the report could be made{what}.")
            self.handle.update(static_bundle(stopped), raw=True)
            self.replaced = True

    def stop(self) -> None:
        """Stop refreshing; erase a terminal status line. The card stays until ``show_report``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.terminal and self._status_width:
            sys.stdout.write("\r" + " " * self._status_width + "\r")
            sys.stdout.flush()
            self._status_width = 0

    def show_report(self, bundle: dict[str, str]) -> bool:
        """Replace the card with the final report; False when no card was shown (show it as usual)."""
        self.stop()
        if self.handle is None:
            return False
        self.handle.update(bundle, raw=True)
        self.replaced = True
        return True

    # -- the timer thread ------------------------------------------------------------

    def _refresh_loop(self) -> None:
        if self._stop.wait(self.delay):
            return
        last: Snapshot | None = None
        while True:
            try:
                snapshot = self.board.snapshot()
                if snapshot != last and (snapshot.findings or not self.only_with_findings):
                    self._show(snapshot)
                    last = snapshot
            except Exception:  # a live view never disturbs the cell: the final report still comes
                return
            if self._stop.wait(self.interval):
                return

    def _show(self, snapshot: Snapshot) -> None:
        elapsed = time.perf_counter() - self._started
        if self.terminal:
            text = progress_document(self.title, elapsed, snapshot).headline
            line = f"{self.title} [RUNNING] {text}"[: _terminal_width() - 1]
            sys.stdout.write("\r" + line.ljust(self._status_width))
            sys.stdout.flush()
            self._status_width = len(line)
            return
        bundle = static_bundle(progress_document(self.title, elapsed, snapshot))
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)
        self.updates += 1


def _on_ipyparallel_engine() -> bool:
    """An ipyparallel engine forwards ``display_data`` to the client but not display updates, so a
    live card there would stay as it was first shown, above the final report."""
    kernel = getattr(running_shell(), "kernel", None)
    return type(kernel).__module__.startswith("ipyparallel")


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except Exception:
        return False


def _terminal_width() -> int:
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except Exception:
        return 100
