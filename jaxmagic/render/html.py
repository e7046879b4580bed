"""Self-contained static HTML for a report.

This is the ``text/html`` part of every report's mimebundle: it survives saving
the notebook, nbviewer, GitHub and frontends without a widget manager. Every
string that came from the user or from JAX is escaped here, in one place.
"""

from __future__ import annotations

import re
from html import escape

from jaxmagic.report import Status
from jaxmagic.report.document import Document, Evidence, Facts, Grid, Paragraph, Section, SourceLines, Table

STATUS_COLOURS = {
    Status.OK: ("#1b7f3b", "#eaf6ee"),
    Status.PROBLEM: ("#b3261e", "#fdecea"),
    Status.ERROR: ("#9a6700", "#fff8e5"),
}

# Scoped under .jaxmagic so nothing leaks into the notebook's own styles.
STYLE = """
.jaxmagic{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:13px;line-height:1.45;
 border:1px solid #d0d7de;border-left:5px solid var(--jm-accent);border-radius:6px;padding:8px 12px;margin:4px 0;
 background:#fff;color:#1f2328;max-width:980px}
.jaxmagic .jm-head{display:flex;gap:10px;align-items:baseline;flex-wrap:wrap}
.jaxmagic .jm-title{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-weight:600;color:#57606a}
.jaxmagic .jm-badge{font-size:11px;font-weight:700;letter-spacing:.04em;padding:1px 7px;border-radius:10px;
 color:var(--jm-accent);background:var(--jm-tint);border:1px solid var(--jm-accent)}
.jaxmagic .jm-headline{font-size:14px;font-weight:600;margin:4px 0 2px}
.jaxmagic h4{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:#57606a;margin:10px 0 4px}
.jaxmagic p{margin:3px 0}
.jaxmagic table{border-collapse:collapse;margin:4px 0}
.jaxmagic th,.jaxmagic td{border:1px solid #d8dee4;padding:2px 8px;text-align:left;vertical-align:top}
.jaxmagic th{background:#f6f8fa;font-weight:600}
.jaxmagic code,.jaxmagic pre,.jaxmagic .jm-src{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
.jaxmagic .jm-src{background:#f6f8fa;border-radius:4px;padding:4px 8px;margin:3px 0}
.jaxmagic .jm-src .jm-where{color:#57606a}
.jaxmagic .jm-src .jm-code{white-space:pre-wrap;padding-left:1.5em}
.jaxmagic .jm-src .jm-last .jm-code{color:var(--jm-accent);font-weight:600}
.jaxmagic .jm-headline code{font-size:13px;color:var(--jm-accent);background:var(--jm-tint);padding:0 4px;border-radius:3px}
.jaxmagic p code{background:#f6f8fa;padding:0 3px;border-radius:3px}
.jaxmagic details{margin:4px 0}.jaxmagic summary{cursor:pointer;color:#57606a}
.jaxmagic pre{background:#f6f8fa;padding:6px 8px;border-radius:4px;white-space:pre-wrap;margin:3px 0;max-height:18em;overflow:auto}
.jaxmagic .jm-gridfig{display:inline-block;vertical-align:top;margin:4px 14px 6px 0;max-width:100%;overflow-x:auto}
.jaxmagic .jm-gridfig figcaption{font-size:12px;color:#57606a;margin:0 0 3px}
.jaxmagic .jm-grid{display:grid;gap:2px;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
.jaxmagic .jm-gl{color:#57606a;font-size:11px;display:flex;align-items:flex-end;justify-content:center;padding:0 2px 1px}
.jaxmagic .jm-gl.jm-gr{align-items:center;justify-content:flex-end;padding:0 4px 0 0}
.jaxmagic .jm-cell{display:flex;flex-direction:column;align-items:center;justify-content:center;border-radius:3px;
 background:#eef1f4;color:#1f2328;overflow:hidden;white-space:nowrap;line-height:1.2;border:1px solid rgba(31,35,40,.18)}
.jaxmagic .jm-cell b{font-weight:600}
.jaxmagic .jm-cell span{font-size:10.5px;color:#3d444d}
.jaxmagic .jm-compact{font-size:10.5px;gap:1px}
.jaxmagic .jm-cell.jm-muted{background:repeating-linear-gradient(135deg,#f3f4f6 0 5px,#e3e6ea 5px 10px);color:#6e7781}
.jaxmagic .jm-cell.jm-alert{border:2px solid #b3261e}
.jaxmagic .jm-cell.jm-alert b{color:#b3261e}
"""


def render_html(doc: Document) -> str:
    accent, tint = STATUS_COLOURS[doc.status]
    parts = [
        f'<div class="jaxmagic" style="--jm-accent:{accent};--jm-tint:{tint}"><style>{STYLE}</style>',
        render_head_html(doc),
    ]
    parts.extend(render_section_html(section) for section in doc.sections)
    parts.append("</div>")
    return "".join(parts)


def render_head_html(doc: Document) -> str:
    return (
        '<div class="jm-head">'
        f'<span class="jm-title">{escape(doc.title)}</span>'
        f'<span class="jm-badge">{doc.status.word}</span></div>'
        f'<div class="jm-headline">{inline_html(doc.headline)}</div>'
    )


_BACKTICKS = re.compile(r"`([^`\n]+)`")


def inline_html(text: str) -> str:
    """Escaped text in which `backticked` spans (a primitive, a call) are shown as code."""
    return _BACKTICKS.sub(r"<code>\1</code>", escape(text))


def render_section_html(section: Section, with_title: bool = True) -> str:
    title = f"<h4>{escape(section.title)}</h4>" if with_title and section.title else ""
    return title + "".join(_block_html(block) for block in section.blocks)


def _fact_value_html(value: str) -> str:
    # A bare value (a primitive, a call) is code; prose marks its code with backticks.
    return inline_html(value) if "`" in value else f"<code>{escape(value)}</code>"


def _block_html(block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{inline_html(block.text)}</p>"
    if isinstance(block, Facts):
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{_fact_value_html(v)}</td></tr>" for k, v in block.pairs)
        return f'<table class="jm-facts">{rows}</table>'
    if isinstance(block, Table):
        head = "".join(f"<th>{escape(c)}</th>" for c in block.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{inline_html(str(cell))}</td>" for cell in row) + "</tr>" for row in block.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if isinstance(block, SourceLines):
        caption = f"<p>{escape(block.caption)}</p>" if block.caption else ""
        rows = []
        for i, line in enumerate(block.lines):
            last = ' class="jm-last"' if i == len(block.lines) - 1 else ""
            rows.append(
                f'<div{last}><div class="jm-where">{escape(line.where)}</div>'
                f'<div class="jm-code">{escape(line.code)}</div></div>'
            )
        return f'{caption}<div class="jm-src">{"".join(rows)}</div>'
    if isinstance(block, Evidence):
        return f"<details><summary>{escape(block.title)}</summary><pre>{escape(block.text)}</pre></details>"
    if isinstance(block, Grid):
        return _grid_html(block)
    raise TypeError(f"unknown block {type(block).__name__}")


_COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}")
_CELL_STYLES = {"muted": " jm-muted", "alert": " jm-alert"}


def _grid_html(grid: Grid) -> str:
    """A CSS grid: labels along the top and left edges, one coloured box per cell.

    Sizes are in CSS px so the picture keeps its proportions in saved notebooks;
    wide grids scroll sideways instead of squeezing their labels. Large grids
    drop the second line of each cell (it stays in the tooltip).
    """
    compact = grid.cols > 12 or grid.rows * grid.cols > 144
    show_detail = not compact and any(cell.detail for cell in grid.cells)
    char_px = 6.6 if compact else 7.3
    longest = max(
        [len(c.label) * char_px for c in grid.cells]
        + [len(c.detail) * 6.4 for c in grid.cells if show_detail]  # the smaller second line
        + [len(label) * 6.6 for label in grid.col_labels]
        + [char_px]
    )
    cell_w = max(30 if compact else 56, min(260, round(longest + 14)))
    cell_h = 38 if show_detail else (22 if compact else 30)
    col_sizes = _relative_sizes(grid.col_sizes, grid.cols)
    row_sizes = _relative_sizes(grid.row_sizes, grid.rows)
    # Each track is at least big enough for its label, and shares the rest by size.
    columns = [f"minmax({cell_w}px,{s:.3g}fr)" for s in col_sizes]
    rows = [f"minmax({cell_h}px,{s:.3g}fr)" for s in row_sizes]
    gap = 1 if compact else 2
    # Cells have a 1px border (2px for alerts): leave room for it and the gaps.
    width = sum(max(cell_w, cell_w * s) for s in col_sizes) + gap * grid.cols + 4
    height = sum(max(cell_h, cell_h * s) for s in row_sizes) + gap * grid.rows + 4
    first_row = first_col = 1
    if grid.row_labels:
        label_w = max(len(label) for label in grid.row_labels) * 6.6 + 8
        columns.insert(0, f"{label_w:.0f}px")
        width += label_w
        first_col = 2
    if grid.col_labels:
        rows.insert(0, "16px")
        height += 16
        first_row = 2
    parts = ['<figure class="jm-gridfig">']
    if grid.caption:
        parts.append(f"<figcaption>{inline_html(grid.caption)}</figcaption>")
    parts.append(
        f'<div class="jm-grid{" jm-compact" if compact else ""}" style="grid-template-columns:'
        f'{" ".join(columns)};grid-template-rows:{" ".join(rows)};width:{width:.0f}px;height:{height:.0f}px">'
    )
    for i, label in enumerate(grid.col_labels[: grid.cols]):
        parts.append(f'<div class="jm-gl" style="grid-row:1;grid-column:{first_col + i}">{escape(label)}</div>')
    for i, label in enumerate(grid.row_labels[: grid.rows]):
        parts.append(f'<div class="jm-gl jm-gr" style="grid-row:{first_row + i};grid-column:1">{escape(label)}</div>')
    for cell in grid.cells:
        style = f"grid-row:{first_row + cell.row};grid-column:{first_col + cell.col}"
        if cell.colour and _COLOUR.fullmatch(cell.colour) and cell.style != "muted":
            style += f";background:{cell.colour}"
        title = f' title="{escape(cell.tooltip)}"' if cell.tooltip else ""
        detail = f"<span>{escape(cell.detail)}</span>" if show_detail and cell.detail else ""
        parts.append(
            f'<div class="jm-cell{_CELL_STYLES.get(cell.style, "")}" style="{style}"{title}>'
            f"<b>{escape(cell.label)}</b>{detail}</div>"
        )
    parts.append("</div></figure>")
    return "".join(parts)


def _relative_sizes(sizes: list[float], count: int) -> list[float]:
    """``sizes`` scaled to a mean of 1 (all 1 when missing or unusable)."""
    if len(sizes) != count or count == 0 or min(sizes) <= 0:
        return [1.0] * count
    mean = sum(sizes) / count
    return [s / mean for s in sizes]
