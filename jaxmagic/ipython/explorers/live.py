"""``%jax_live --explore`` / ``%%jax_live --explore``: the live-array groups, sorted and filtered at will.

Built from the report's groups (``LiveReport.groups``: shape, dtype, placement, count, bytes, holders, and
the line that made them where tracemalloc recorded it). Sorting by bytes, count, shape or dtype and a
filter on shape, dtype or holder; choosing a group lists every holder and the line that made it.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from jaxmagic.ipython.explorers.shown import EXPLORER_TEXT, TITLE, frame, full_width, show_explorer, wrapping_row
from jaxmagic.render.html import CODE, MUTED, breakable_html, inline_html
from jaxmagic.report.wording import format_bytes

if TYPE_CHECKING:
    from jaxmagic.probes._live.report import LiveGroup, LiveReport

WHAT = "the live-array groups (sort, filter, each group's holders)"
SORTS: dict[str, Callable[[LiveGroup], Any]] = {
    "bytes": lambda g: -g.count * g.bytes_each,
    "count": lambda g: -g.count,
    "shape": lambda g: (len(g.shape), list(g.shape)),
    "dtype": lambda g: g.dtype,
}


def group_type(group: LiveGroup) -> str:
    return f"{group.dtype}[{','.join(str(d) for d in group.shape)}]"


def group_row(group: LiveGroup) -> str:
    """``float32[1024,1024]  x12  48.0 MiB  cpu:0  held by: cache[0..11]``."""
    total = format_bytes(group.count * group.bytes_each)
    holders = group.holders
    held = ", ".join(holders[:3]) + (f" (+{len(holders) - 3})" if len(holders) > 3 else "") if holders else "no name"
    return f"{group_type(group)}  x{group.count}  {total}  {group.placement}  held by: {held}"


def matches(group: LiveGroup, text: str) -> bool:
    """The filter: a substring of the type (``float32[1024``), the placement or a holder."""
    text = text.strip().lower()
    if not text:
        return True
    fields = [group_type(group), group.dtype, group.placement, *group.holders]
    return any(text in field.lower() for field in fields)


def made_at(group: LiveGroup) -> str:
    provenance = group.provenance
    line = provenance.made_at if provenance is not None else None
    if line:
        return f"{line.label or line.filename}, line {line.lineno}: {line.code}"
    return (provenance.unknown if provenance is not None else "") or (
        "not recorded: tracemalloc was not tracing (`import tracemalloc; tracemalloc.start(25)` before the code "
        "that makes them)"
    )


def details_html(group: LiveGroup) -> str:
    holders = group.holders
    listed = (
        "".join(f'<li><code style="{CODE}">{breakable_html(h)}</code></li>' for h in holders)
        or "<li>no name holds them</li>"
    )
    jit = group.jit_functions
    kept = f"<div>Kept by the jit cache of: {breakable_html(', '.join(jit))}</div>" if jit else ""
    return (
        f'<div style="{EXPLORER_TEXT}"><div><b style="{TITLE}">{breakable_html(group_type(group))}</b> '
        f"x{group.count} on {html.escape(group.placement)}</div>"
        f"<div>Holders:</div><ul style='margin:2px 0'>{listed}</ul>{kept}"
        f'<div><span style="{MUTED}">made at:</span> {inline_html(made_at(group))}</div></div>'
    )


class LiveExplorer:
    def __init__(self, report: LiveReport):
        self.groups = report.groups
        self.sort = widgets.ToggleButtons(
            options=list(SORTS), value="bytes", description="sort by", style={"button_width": "auto"}
        )
        self.filter = widgets.Text(placeholder="shape, dtype or holder", description="filter",
                                   continuous_update=True)  # fmt: skip
        self.list = widgets.Select(options=[], rows=10, layout=full_width())
        self.details = widgets.HTML()
        self.header = widgets.HTML(
            f'<div style="{EXPLORER_TEXT}"><b style="{TITLE}">%jax_live</b> {len(self.groups)} group(s), '
            f"{report.total_arrays:,} arrays, {html.escape(format_bytes(report.total_bytes))}</div>"
        )
        self.widget = widgets.VBox(
            [self.header, wrapping_row([self.sort, self.filter]), self.list, self.details], layout=frame()
        )
        self.widget.add_class("jaxmagic-live-explorer")
        self.sort.observe(lambda _c: self.refresh(), names="value")
        self.filter.observe(lambda _c: self.refresh(), names="value")
        self.list.observe(lambda _c: self.show(), names="value")
        self.refresh()

    def visible(self) -> list[int]:
        """Indices of the groups shown, filtered then sorted."""
        key = SORTS[self.sort.value]
        kept = [n for n, g in enumerate(self.groups) if matches(g, self.filter.value)]
        return sorted(kept, key=lambda n: key(self.groups[n]))

    def refresh(self) -> None:
        shown = self.visible()
        self.list.options = [(group_row(self.groups[n]), n) for n in shown]
        self.list.value = shown[0] if shown else None
        self.show()

    def show(self) -> None:
        n = self.list.value
        self.details.value = details_html(self.groups[n]) if n is not None else ""


def show_live_explorer(report: LiveReport, in_kernel: bool = True) -> widgets.Widget | None:
    if not report.groups:
        print("jaxmagic: no live array group to explore.")
        return None
    return show_explorer(lambda: LiveExplorer(report).widget, WHAT, in_kernel=in_kernel)
