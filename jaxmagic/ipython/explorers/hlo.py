"""``%jax_hlo EXPR --explore``: the ``named_scope`` tree; a scope chosen shows its operations per stage.

Built from the report (``HloReport``): its scope tree (counts per stage) and ``scope_ops`` (every
operation of every stage with its scope path, line and text, recorded by the probe only under
``--explore``). Choosing a scope shows its jaxpr, StableHLO and optimized-HLO lines side by side
(descendant scopes included), each with the user's line that made it and, in HLO, the kernel it
runs in. XLA gives flops and bytes for the whole program only (``cost_analysis()``): the header
shows those, no per-operation figure is made up.
"""

from __future__ import annotations

import html
from collections import defaultdict
from typing import TYPE_CHECKING

import ipywidgets as widgets

from jaxmagic.ipython.explorers.shown import EXPLORER_TEXT, LABEL, TITLE, frame, full_width, show_explorer, wrapping_row
from jaxmagic.render.html import LINE, MONO, MUTED, breakable_html
from jaxmagic.report.wording import format_bytes

if TYPE_CHECKING:
    from jaxmagic.probes._hlo.report import HloReport, ScopeOp

WHAT = "the program's named scopes (each scope's operations in every stage)"
STAGE_TITLES = {"jaxpr": "jaxpr", "stablehlo": "StableHLO", "hlo": "optimized HLO"}
OUTSIDE = ""  # the scope key of operations outside any scope
SHOWN_PER_STAGE = 200  # lines drawn per stage for one scope; the rest are counted
# A stage's column: three side by side where each gets this much, else one under another (900 px, sidebar open)
COLUMN_MIN_PX = 260


def ops_by_scope(ops: list[ScopeOp]) -> dict[str, dict[str, list[int]]]:
    """scope path -> stage -> indices of its operations, each scope with its descendants' operations."""
    grouped: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for n, op in enumerate(ops):
        path = op.inner
        stage = op.stage
        if not path:
            grouped[OUTSIDE][stage].append(n)
            continue
        parts = path.split("/")
        for end in range(1, len(parts) + 1):
            grouped["/".join(parts[:end])][stage].append(n)
    return grouped


def scope_label(path: str, counts: dict[str, int], stages: list[str]) -> str:
    """``·· attn  (jaxpr 12, StableHLO 14, optimized HLO 9)``: indented by depth."""
    if path == OUTSIDE:
        name = "(outside any scope)"
    else:
        depth = path.count("/")
        name = "\u00b7\u00b7 " * depth + path.rsplit("/", 1)[-1]
    shown = ", ".join(f"{STAGE_TITLES.get(s, s)} {counts.get(s, 0)}" for s in stages)
    return f"{name}  ({shown})"


def where(op: ScopeOp) -> str:
    line = op.line
    if not line:
        return ""
    return f"{line.label or line.filename}:{line.lineno}"


def stage_html(ops: list[ScopeOp], indices: list[int], stage: str) -> str:
    """One stage's column: each operation's text, the user's line, the kernel (HLO)."""
    title = STAGE_TITLES.get(stage, stage)
    rows = []
    for n in indices[:SHOWN_PER_STAGE]:
        op = ops[n]
        made = where(op)
        kernel = f" in {op.kernel}" if op.kernel else ""
        rows.append(
            f'<div style="border-bottom:{LINE};padding:1px 0">'
            # break between tokens only (render.breakable_html), never inside a name: `jit(mode|l)` read as two
            f'<code style="{MONO};white-space:pre-wrap;overflow-wrap:normal;font-size:11px;line-height:1.3">'
            f"{breakable_html(op.text or op.name)}"
            "</code>"
            + (
                f'<div style="{LABEL}">{html.escape(made)}{html.escape(kernel)}'
                f"{' (backward)' if op.backward else ''}</div>"
                if made or kernel
                else ""
            )
            + "</div>"
        )
    more = len(indices) - SHOWN_PER_STAGE
    if more > 0:
        rows.append(f'<div style="{MUTED}">... and {more} more (-o NAME keeps them all: scope_ops)</div>')
    if not indices:
        rows.append(f'<div style="{MUTED}">no operation in this stage</div>')
    return (
        f'<div class="jm-stage jm-stage-{stage}" style="{EXPLORER_TEXT}"><b>{html.escape(title)}</b> ({len(indices)})'
        f'<div style="max-height:420px;overflow-y:auto">{"".join(rows)}</div></div>'
    )


class HloExplorer:
    def __init__(self, report: HloReport):
        self.ops = report.scope_ops
        self.stages = [s for s in report.stages if s in STAGE_TITLES]
        self.grouped = ops_by_scope(self.ops)
        paths = [node.path for node in report.tree]
        if OUTSIDE in self.grouped:
            paths.append(OUTSIDE)
        options = [
            (scope_label(p, {s: len(v) for s, v in self.grouped.get(p, {}).items()}, self.stages), p) for p in paths
        ]
        self.header = widgets.HTML(header_html(report))
        self.scopes = widgets.Select(options=options, rows=min(12, max(3, len(options))),
                                     layout=full_width())  # fmt: skip
        self.columns = [
            widgets.HTML(layout=widgets.Layout(flex=f"1 1 {COLUMN_MIN_PX}px", min_width="0", margin="0 6px 6px 0"))
            for _ in self.stages
        ]
        self.widget = widgets.VBox([self.header, self.scopes, wrapping_row(self.columns)], layout=frame())
        self.widget.add_class("jaxmagic-hlo-explorer")
        self.scopes.observe(lambda _c: self.show(), names="value")
        if options:
            self.scopes.value = options[0][1]
        self.show()

    def show(self) -> None:
        path = self.scopes.value
        per_stage = self.grouped.get(path, {}) if path is not None else {}
        for column, stage in zip(self.columns, self.stages):
            column.value = stage_html(self.ops, per_stage.get(stage, []), stage) if path is not None else ""


def header_html(report: HloReport) -> str:
    cost = report.cost
    figures = []
    if cost.get("flops"):
        figures.append(f"{cost['flops']:,.0f} flops")
    if cost.get("bytes accessed"):
        figures.append(f"{format_bytes(int(cost['bytes accessed']))} accessed")
    whole = f" Whole program (XLA's cost_analysis): {', '.join(figures)}." if figures else ""
    return (
        f'<div style="{EXPLORER_TEXT}"><b style="{TITLE}">{breakable_html(report.function)}</b> '
        f"{len(report.scope_ops):,} operations over {len(report.stages)} stage(s); "
        f"choose a scope.{html.escape(whole)} XLA gives no figure per operation.</div>"
    )


def show_hlo_explorer(report: HloReport, in_kernel: bool = True) -> widgets.Widget | None:
    if not report.scope_ops:
        if report.failure:
            print("jaxmagic: the program could not be built, so there is nothing to explore (see the report above).")
        else:  # built, with no operation in any stage (a function returning None or only its inputs)
            print(
                f"jaxmagic: {report.function or 'the program'} has no operation in any stage (it computes "
                "nothing from its inputs), so there is nothing to explore."
            )
        return None
    return show_explorer(lambda: HloExplorer(report).widget, WHAT, in_kernel=in_kernel)
