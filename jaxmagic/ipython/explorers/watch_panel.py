"""``%jax_watch --panel``: one panel for the session listing every finding so far, updated as cells run.

Built from the watch log's findings (``WatchFinding``s, copied when drawn: plain data, no array, no user
function), rebuilt only when the log's findings changed (a new one, or one seen again): a clean cell adds
nothing and costs one comparison. Each finding shows its cell, area, line and count, and the
magic to run next; choosing one shows its details and fix.
"""

from __future__ import annotations

import copy
import html
from typing import TYPE_CHECKING, TypeAlias

import ipywidgets as widgets

from jaxmagic.ipython.explorers.shown import EXPLORER_TEXT, TITLE, frame, full_width, show_explorer
from jaxmagic.render.html import CODE, MUTED, breakable_html, inline_html
from jaxmagic.report import SourceLine

if TYPE_CHECKING:
    from jaxmagic.probes._watch import WatchLog
    from jaxmagic.probes._watch.report import WatchFinding

ALL_AREAS = "all areas"
WHAT = "every finding of this watch session"
# Running this cell alone starts an empty session: the findings come from the cells after it.
AGAIN = (
    "Saved or exported, the findings stay in the summary of %jax_watch off; to explore them, run this cell "
    "and the cells after it again."
)


def finding_line(finding: WatchFinding) -> SourceLine | None:
    """The user's line of the finding: its own, else the line that made its value."""
    return finding.line or (finding.provenance.made_at if finding.provenance is not None else None)


def finding_where(finding: WatchFinding) -> str:
    """``In [4], line 3`` (the user's line of the finding), else the cell alone."""
    line = finding_line(finding)
    if line:
        place = line.label or line.filename
        return f"{place}, line {line.lineno}"
    return finding.cell


def finding_place(finding: WatchFinding) -> str:
    """Where the finding is, each place said once: ``In [4], line 2`` when the line is in the cell that
    ran, ``In [3], line 2 (seen in In [5])`` when a cell called a function another cell defined."""
    cell = finding.cell
    where = finding_where(finding)
    if not cell or where == cell or where.startswith(f"{cell}, "):
        return where
    return f"{where} (seen in {cell})"


def finding_row(finding: WatchFinding) -> str:
    """One line of the list: where, area, count, what to run next."""
    seen = f"seen {finding.count}x"
    magic = finding.next_magic or "-"
    return f"{finding_place(finding)} | {finding.area} | {seen} | {magic}"


# (cell, area, headline, count) of each finding
Signature: TypeAlias = tuple[tuple[str, str, str, int], ...]


def signature(log: WatchLog) -> Signature:
    """What the panel shows of a log, compared cheaply after each cell (no ``to_dict()`` when unchanged)."""
    return tuple((f.cell, f.area, f.headline, f.count) for f in log.findings)


class WatchPanel:
    """The session's panel; ``refresh(log)`` after each watched cell (the watch hook calls it)."""

    def __init__(self, log: WatchLog):
        self.header = widgets.HTML()
        self.areas = widgets.ToggleButtons(
            options=[ALL_AREAS], value=ALL_AREAS, description="", style={"button_width": "auto"},
            layout=widgets.Layout(max_width="100%"),
        )  # fmt: skip
        self.findings = widgets.Select(options=[], rows=8, layout=full_width())
        self.details = widgets.HTML()
        self.widget = widgets.VBox(
            [self.header, self.areas, self.findings, self.details],
            layout=frame(),
        )
        self.widget.add_class("jaxmagic-watch-panel")
        self._shown: Signature | None = None  # the signature of the log when last drawn
        self.shown: list[WatchFinding] = []  # the log's findings the panel shows, as they were when drawn
        self.cells_watched = 0
        self.areas.observe(lambda _change: self._list(), names="value")
        self.findings.observe(lambda _change: self._show_details(), names="value")
        self.refresh(log)

    def refresh(self, log: WatchLog) -> bool:
        """Redraw from the log when its findings changed; True when redrawn."""
        if signature(log) == self._shown:
            return False
        self.show(log)
        self._shown = signature(log)
        return True

    def show(self, log: WatchLog) -> None:
        # copies: a finding seen again counts on in the log, the panel shows what it drew until it redraws
        self.shown = [copy.copy(finding) for finding in log.findings]
        self.cells_watched = log.cells_watched
        found = self.shown
        areas = list(dict.fromkeys(f.area for f in found))
        self.areas.options = [ALL_AREAS, *areas]
        if self.areas.value not in self.areas.options:
            self.areas.value = ALL_AREAS
        cells = self.cells_watched
        if found:
            text = f"{len(found)} finding(s) in {cells} watched cell(s); choose one for its fix and next step."
        else:
            text = f"Nothing found yet in {cells} watched cell(s); findings appear here as cells run."
        self.header.value = (
            f'<div style="{EXPLORER_TEXT}"><b style="{TITLE}">%jax_watch panel</b> '
            f'<span class="jm-panel-summary">{html.escape(text)}</span></div>'
        )
        self._list()

    def _visible(self) -> list[WatchFinding]:
        area = self.areas.value
        return [f for f in self.shown if area == ALL_AREAS or f.area == area]

    def _list(self) -> None:
        visible = self._visible()
        previous = self.findings.index
        self.findings.options = [(finding_row(f), n) for n, f in enumerate(visible)]
        if visible:
            self.findings.index = previous if previous is not None and previous < len(visible) else len(visible) - 1
        self._show_details()

    def _show_details(self) -> None:
        visible = self._visible()
        index = self.findings.value
        if index is None or not isinstance(index, int) or index >= len(visible):
            self.details.value = ""
            return
        self.details.value = details_html(visible[index])


def details_html(finding: WatchFinding) -> str:
    """The chosen finding: headline, its line, the fix and the magic to run next (all escaped; Markdown's
    `code` drawn as code, as the static report draws it, broken between tokens only)."""
    parts = [f"<div><b>{inline_html(finding.headline)}</b></div>"]
    line = finding_line(finding)
    if line:
        parts.append(
            f'<div><span style="{MUTED}">{html.escape(finding_where(finding))}:</span> '
            f'<code style="{CODE}">{breakable_html(line.code)}</code></div>'
        )
    if finding.fix:
        parts.append(f"<div><b>Fix:</b> {inline_html(finding.fix)}</div>")  # `code` as code, escaped
    if finding.next_magic:
        parts.append(f'<div>Next: <code style="{CODE}">{breakable_html(finding.next_magic)}</code> on that cell.</div>')
    return f'<div style="{EXPLORER_TEXT}">{"".join(parts)}</div>'


def show_watch_panel(log: WatchLog, in_kernel: bool = True) -> WatchPanel | None:
    """Display the panel for ``log`` (a ``WatchLog``); the panel to refresh after each cell, or None."""
    panels: list[WatchPanel] = []

    def build() -> widgets.Widget:
        panel = WatchPanel(log)
        panels.append(panel)
        return panel.widget

    show_explorer(build, WHAT, in_kernel=in_kernel, again=AGAIN)
    return panels[0] if panels else None
