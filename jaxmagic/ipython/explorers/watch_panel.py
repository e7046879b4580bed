"""``%jax_watch --panel``: one panel for the session listing every finding so far, updated as cells run.

Built from the watch log's ``to_dict()`` (plain data: no array, no user function), rebuilt
only when the log's findings changed (a new one, or one seen again): a clean cell adds
nothing and costs one comparison. Each finding shows its cell, area, line and count, and the
magic to run next; choosing one shows its details and fix.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from jaxmagic.ipython.explorers.shown import EXPLORER_TEXT, TITLE, frame, full_width, show_explorer
from jaxmagic.render.html import CODE, MUTED, breakable_html, inline_html

if TYPE_CHECKING:
    from jaxmagic.probes._watch import WatchLog

ALL_AREAS = "all areas"
WHAT = "every finding of this watch session"
# Running this cell alone starts an empty session: the findings come from the cells after it.
AGAIN = (
    "Saved or exported, the findings stay in the summary of %jax_watch off; to explore them, run this cell "
    "and the cells after it again."
)


def finding_where(finding: dict[str, Any]) -> str:
    """``In [4], line 3`` (the user's line of the finding), else the cell alone."""
    line = finding.get("line") or (finding.get("provenance") or {}).get("made_at")
    if line:
        place = line.get("label") or line.get("filename", "")
        return f"{place}, line {line.get('lineno')}"
    return finding.get("cell", "")


def finding_place(finding: dict[str, Any]) -> str:
    """Where the finding is, each place said once: ``In [4], line 2`` when the line is in the cell that
    ran, ``In [3], line 2 (seen in In [5])`` when a cell called a function another cell defined."""
    cell = finding.get("cell", "")
    where = finding_where(finding)
    if not cell or where == cell or where.startswith(f"{cell}, "):
        return where
    return f"{where} (seen in {cell})"


def finding_row(finding: dict[str, Any]) -> str:
    """One line of the list: where, area, count, what to run next."""
    seen = f"seen {finding.get('count', 1)}x"
    magic = finding.get("next_magic") or "-"
    return f"{finding_place(finding)} | {finding.get('area', '')} | {seen} | {magic}"


def signature(log: WatchLog) -> tuple:
    """What the panel shows of a log, compared cheaply after each cell (no ``to_dict()`` when unchanged)."""
    return tuple((f.cell, f.area, f.headline, f.count) for f in log.findings)


class WatchPanel:
    """The session's panel; ``refresh(log)`` after each watched cell (the watch hook calls it)."""

    def __init__(self, log_data: dict[str, Any], shown: tuple | None = None):
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
        self._shown = shown  # the signature of the log ``log_data`` came from
        self.data: dict[str, Any] = {}  # the log's to_dict() the panel shows
        self.areas.observe(lambda _change: self._list(), names="value")
        self.findings.observe(lambda _change: self._show_details(), names="value")
        self.show(log_data)

    def refresh(self, log: WatchLog) -> bool:
        """Redraw from the log when its findings changed; True when redrawn."""
        if signature(log) == self._shown:
            return False
        self.show(log.to_dict())
        self._shown = signature(log)
        return True

    def show(self, data: dict[str, Any]) -> None:
        self.data = data
        found = data.get("findings", [])
        areas = list(dict.fromkeys(f.get("area", "") for f in found))
        self.areas.options = [ALL_AREAS, *areas]
        if self.areas.value not in self.areas.options:
            self.areas.value = ALL_AREAS
        cells = data.get("cells_watched", 0)
        if found:
            text = f"{len(found)} finding(s) in {cells} watched cell(s); choose one for its fix and next step."
        else:
            text = f"Nothing found yet in {cells} watched cell(s); findings appear here as cells run."
        self.header.value = (
            f'<div style="{EXPLORER_TEXT}"><b style="{TITLE}">%jax_watch panel</b> '
            f'<span class="jm-panel-summary">{html.escape(text)}</span></div>'
        )
        self._list()

    def _visible(self) -> list[dict[str, Any]]:
        area = self.areas.value
        return [f for f in self.data.get("findings", []) if area == ALL_AREAS or f.get("area") == area]

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


def details_html(finding: dict[str, Any]) -> str:
    """The chosen finding: headline, its line, the fix and the magic to run next (all escaped; Markdown's
    `code` drawn as code, as the static report draws it, broken between tokens only)."""
    parts = [f"<div><b>{inline_html(finding.get('headline', ''))}</b></div>"]
    line = finding.get("line") or (finding.get("provenance") or {}).get("made_at")
    if line:
        parts.append(
            f'<div><span style="{MUTED}">{html.escape(finding_where(finding))}:</span> '
            f'<code style="{CODE}">{breakable_html(line.get("code", ""))}</code></div>'
        )
    if finding.get("fix"):
        parts.append(f"<div><b>Fix:</b> {inline_html(finding['fix'])}</div>")  # `code` as code, escaped
    if finding.get("next_magic"):
        parts.append(
            f'<div>Next: <code style="{CODE}">{breakable_html(finding["next_magic"])}</code> on that cell.</div>'
        )
    return f'<div style="{EXPLORER_TEXT}">{"".join(parts)}</div>'


def show_watch_panel(log: WatchLog, in_kernel: bool = True) -> WatchPanel | None:
    """Display the panel for ``log`` (a ``WatchLog``); the panel to refresh after each cell, or None."""
    panels: list[WatchPanel] = []

    def build() -> widgets.Widget:
        panel = WatchPanel(log.to_dict(), shown=signature(log))
        panels.append(panel)
        return panel.widget

    show_explorer(build, WHAT, in_kernel=in_kernel, again=AGAIN)
    return panels[0] if panels else None
