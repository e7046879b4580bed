"""Self-contained static HTML for a report: the one view a notebook keeps.

This is the ``text/html`` part of every report's mimebundle, and what a person
sees wherever the notebook is opened: live JupyterLab or Notebook 7, reopened
after saving, exported by nbconvert and read offline, on nbviewer or GitHub, in
VS Code, and untrusted (a notebook someone sent). So it needs nothing but
itself:

* **No ``<style>`` block, no script, no external resource.** JupyterLab's
  sanitizer removes ``<style>`` from untrusted output; every element carries
  its style inline, which the sanitizer keeps (checked in a real browser by
  tests/test_browser.py). Inline styles also outrank JupyterLab's and
  nbconvert's own table and paragraph CSS (right-aligned cells, centred
  tables).
* **Collapsing without JavaScript**: each titled section is a
  ``<details>``/``<summary>``.
* **Theme colours** come from JupyterLab's CSS variables with light fallbacks
  (``var(--jp-layout-color1, #fff)``; the card's own colours fall back to VS
  Code's theme variables first). The sanitizer drops any declaration
  holding ``var()``, so each such colour is preceded by a value it keeps that
  reads on light and dark alike (a translucent grey) or by nothing at all,
  letting the theme's own colours show through.
* **Fits narrow windows**: in prose, long tokens (a call signature, a leaf
  path) carry ``<wbr>`` break points between tokens; a table lines its columns
  up when the output area is wide enough and stacks each row (label: value)
  when it is not, never splitting a word (``html_tables.py``); drawings
  scroll sideways inside the report instead of pushing it past the
  notebook's edge.

Every string that came from the user or from JAX is escaped here, in one place.
"""

from __future__ import annotations

import re
from html import escape

from jaxmagic.render.html_inline import (
    CARD,
    CODE,
    LINE,
    LINE_COLOUR,
    MONO,
    MUTED,
    SANS,
    SCROLLS,
    TINT,
    breakable_html,
    inline_html,
)
from jaxmagic.render.html_tables import facts_html, table_html
from jaxmagic.report import Status
from jaxmagic.report.document import (
    Block,
    Document,
    Evidence,
    Facts,
    Grid,
    GridCell,
    Paragraph,
    Section,
    SourceLines,
    Table,
    what_to_do,
)

# The styles and inline text the explorers share with the reports (ipython/explorers/) are read from here.
__all__ = ["CODE", "LINE", "LINE_COLOUR", "MONO", "MUTED", "SANS", "breakable_html", "inline_html", "render_html"]

# Accent per status: a fixed colour (kept by the sanitizer, readable on light and
# dark) then JupyterLab's themed equivalent.
STATUS_ACCENTS = {
    Status.OK: ("#1a7f37", "--jp-success-color1"),
    Status.PROBLEM: ("#cf222e", "--jp-error-color1"),
    Status.ERROR: ("#9a6700", "--jp-warn-color1"),
    Status.RUNNING: ("#0969da", "--jp-brand-color1"),
}

# A section opens by default when it is the first, or when the whole report is short.
SHORT_REPORT_ROWS = 14


def render_html(doc: Document) -> str:
    accent = _accent(doc.status)
    parts = [
        f'<div class="jaxmagic" style="{CARD};border-left:5px solid {accent[0]};border-left-color:{accent[1]}">',
        render_head_html(doc),
    ]
    open_all = sum(_rows(block) for s in doc.sections for block in s.blocks) <= SHORT_REPORT_ROWS
    parts.extend(
        render_section_html(section, open_=open_all or i == 0 or section.pinned)
        for i, section in enumerate(doc.sections)
    )
    parts.append("</div>")
    return "".join(parts)


def _accent(status: Status) -> tuple[str, str]:
    fixed, variable = STATUS_ACCENTS[status]
    return fixed, f"var({variable},{fixed})"


def render_head_html(doc: Document) -> str:
    fixed = STATUS_ACCENTS[doc.status][0]
    # The space between title and badge keeps them apart even with every style gone.
    return (
        '<div class="jm-head" style="display:flex;flex-wrap:wrap;align-items:baseline;gap:2px 10px">'
        f'<span class="jm-title" style="{MONO};font-size:12.5px;font-weight:600;{MUTED}">{escape(doc.title)}</span> '
        f'<span class="jm-badge" style="{SANS};font-size:11px;font-weight:700;letter-spacing:.04em;padding:0 7px;'
        # The badge keeps its fixed colour in every theme: white text on it is >= 4.5:1, which
        # JupyterLab's dark-theme accents (lighter) are not.
        f'border-radius:10px;color:#fff;background:{fixed}">{doc.status.word}</span></div>'
        f'<div class="jm-headline" style="font-size:14px;font-weight:600;margin:4px 0 2px">'
        f"{inline_html(doc.headline)}</div>" + _fix_html(doc)
    )


def _fix_html(doc: Document) -> str:
    """The report's fix (or why there is nothing to do), under the headline and outside every fold: seen
    without opening anything."""
    label, text = what_to_do(doc)
    if not text:
        return ""
    return f'<div class="jm-fix" style="font-size:13px;margin:2px 0 4px"><b>{label}:</b> {inline_html(text)}</div>'


def render_section_html(section: Section, open_: bool = True) -> str:
    body = "".join(_block_html(block) for block in section.blocks)
    if not section.title:
        return f'<div class="jm-section" style="margin:6px 0 0">{body}</div>'
    return (
        f'<details class="jm-section"{" open" if open_ else ""} style="margin:6px 0 0">'
        f'<summary style="display:list-item;cursor:pointer;font-size:12.5px;font-weight:600;{MUTED};margin:0 0 2px">{inline_html(section.title)}</summary>{body}</details>'
    )


def _block_html(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f'<p style="margin:3px 0;text-align:left">{inline_html(block.text)}</p>'
    if isinstance(block, Facts):
        return facts_html(block)
    if isinstance(block, Table):
        return table_html(block)
    if isinstance(block, SourceLines):
        caption = f'<p style="margin:3px 0">{inline_html(block.caption)}</p>' if block.caption else ""
        lines = []
        for i, line in enumerate(block.lines):
            last = i == len(block.lines) - 1
            emphasis = ";font-weight:600" if last else ""
            marked = ' class="jm-last"' if last else ""
            lines.append(
                f"<div{marked}>"
                f'<div style="{MUTED}">{breakable_html(line.where)}</div>'
                f'<div style="white-space:pre-wrap;padding-left:1.5em{emphasis}">{breakable_html(line.code)}</div>'
                "</div>"
            )
        return (
            f'{caption}<div class="jm-src" style="{MONO};font-size:12px;{TINT};border-radius:4px;'
            f'padding:4px 8px;margin:3px 0">{"".join(lines)}</div>'
        )
    if isinstance(block, Evidence):
        return (
            f'<details style="margin:4px 0"><summary style="display:list-item;cursor:pointer;{MUTED}">{inline_html(block.title)}</summary>'
            f'<pre style="{MONO};font-size:12px;{TINT};padding:6px 8px;border-radius:4px;white-space:pre-wrap;'
            f'margin:3px 0;max-height:18em;overflow:auto;border:none">{breakable_html(block.text)}</pre></details>'
        )
    if isinstance(block, Grid):
        return _grid_html(block)
    raise TypeError(f"unknown block {type(block).__name__}")


def _rows(block: Block) -> int:
    """Roughly how many lines a block takes on screen: decides which sections start open."""
    if isinstance(block, Facts):
        return len(block.pairs)
    if isinstance(block, Table):
        return len(block.rows) + 1
    if isinstance(block, SourceLines):
        return 2 * len(block.lines) + bool(block.caption)
    if isinstance(block, Grid):
        return block.rows + 2
    return 1  # a paragraph, or collapsed evidence


_COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}")
GRID_LABEL = f"{MUTED};font-size:11px;display:flex;padding:0 2px 1px"
CELL_BOX = (
    "display:flex;flex-direction:column;align-items:center;justify-content:center;border-radius:3px;"
    "background:#eef1f4;color:#1f2328;overflow:hidden;white-space:nowrap;line-height:1.2;"
    "border:1px solid rgba(31,35,40,.18)"
)
# Hatched grey: present but not available here. The plain grey first, for the sanitizer.
MUTED_CELL = (
    ";background:#e8eaed;background:repeating-linear-gradient(135deg,#f3f4f6 0 5px,#e3e6ea 5px 10px);color:#57606a"
)
ALERT_CELL = ";border:2px solid #b3261e"


def _grid_html(grid: Grid) -> str:
    """A CSS grid: labels along the top and left edges, one coloured box per cell.

    Sizes are in CSS px so the picture keeps its proportions in saved notebooks;
    wide grids scroll sideways instead of squeezing their labels. Large grids
    drop the second line of each cell (it stays in the tooltip). Cells keep
    their own light colours and dark text in every theme: the colours tell
    devices apart, and dark on pastel reads on a dark page too.
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
    if grid.wrap and grid.rows == 1 and not grid.row_labels:
        font = f"{MONO};font-size:{'10.5px' if compact else '12px'}"
        return _tile_strip_html(grid, cell_w, cell_h, show_detail, font)
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
    parts = [
        f'<figure class="jm-gridfig" style="display:inline-block;vertical-align:top;margin:4px 14px 6px 0;{SCROLLS}">'
    ]
    if grid.caption:
        parts.append(
            f'<figcaption style="font-size:12px;{MUTED};margin:0 0 3px">{inline_html(grid.caption)}</figcaption>'
        )
    font = f"{MONO};font-size:{'10.5px' if compact else '12px'}"
    parts.append(
        f'<div class="jm-grid{" jm-compact" if compact else ""}" style="display:grid;gap:{gap}px;{font};'
        f"grid-template-columns:{' '.join(columns)};grid-template-rows:{' '.join(rows)};"
        f'width:{width:.0f}px;height:{height:.0f}px">'
    )
    for i, label in enumerate(grid.col_labels[: grid.cols]):
        parts.append(
            f'<div class="jm-gl" style="{GRID_LABEL};align-items:flex-end;justify-content:center;'
            f'grid-row:1;grid-column:{first_col + i}">{escape(label)}</div>'
        )
    for i, label in enumerate(grid.row_labels[: grid.rows]):
        parts.append(
            f'<div class="jm-gl jm-gr" style="{GRID_LABEL};align-items:center;justify-content:flex-end;'
            f'padding:0 4px 0 0;grid-row:{first_row + i};grid-column:1">{escape(label)}</div>'
        )
    for cell in grid.cells:
        parts.append(
            _cell_html(cell, show_detail, f"grid-row:{first_row + cell.row};grid-column:{first_col + cell.col}")
        )
    parts.append("</div></figure>")
    return "".join(parts)


def _cell_html(cell: GridCell, show_detail: bool, place: str) -> str:
    """One coloured box of a grid; ``place`` positions it (grid tracks, or a tile's size)."""
    style = f"{CELL_BOX};{place}"
    klass = "jm-cell"
    if cell.style == "muted":
        style += MUTED_CELL
        klass += " jm-muted"
    elif cell.colour and _COLOUR.fullmatch(cell.colour):
        style += f";background:{cell.colour}"
    if cell.style == "alert":
        style += ALERT_CELL
        klass += " jm-alert"
    title = f' title="{escape(cell.tooltip)}"' if cell.tooltip else ""
    label_style = ' style="font-weight:600;color:#6e1414"' if cell.style == "alert" else ' style="font-weight:600"'
    detail = (
        f'<span style="font-size:10.5px;color:#24292f">{escape(cell.detail)}</span>'
        if show_detail and cell.detail
        else ""
    )
    return f'<div class="{klass}" style="{style}"{title}><b{label_style}>{escape(cell.label)}</b>{detail}</div>'


def _tile_strip_html(grid: Grid, cell_w: int, cell_h: int, show_detail: bool, font: str) -> str:
    """A one-row grid (one tile per device) as tiles that wrap to the report's width: a row of
    a dozen labelled devices is wider than any notebook, and its order is all that matters."""
    parts = ['<figure class="jm-gridfig" style="display:block;margin:4px 0 6px;max-width:100%">']
    if grid.caption:
        parts.append(
            f'<figcaption style="font-size:12px;{MUTED};margin:0 0 3px">{inline_html(grid.caption)}</figcaption>'
        )
    parts.append(f'<div class="jm-grid jm-tiles" style="display:flex;flex-wrap:wrap;gap:2px;{font}">')
    for cell in sorted(grid.cells, key=lambda c: c.col):
        label = grid.col_labels[cell.col] if cell.col < len(grid.col_labels) else ""
        box = _cell_html(cell, show_detail, f"width:{cell_w}px;height:{cell_h}px;box-sizing:border-box")
        if label:
            box = (
                f'<div style="display:flex;flex-direction:column"><div class="jm-gl" style="{GRID_LABEL};'
                f'justify-content:center">{escape(label)}</div>{box}</div>'
            )
        parts.append(box)
    parts.append("</div></figure>")
    return "".join(parts)


def _relative_sizes(sizes: list[float], count: int) -> list[float]:
    """``sizes`` scaled to a mean of 1 (all 1 when missing or unusable)."""
    if len(sizes) != count or count == 0 or min(sizes) <= 0:
        return [1.0] * count
    mean = sum(sizes) / count
    return [s / mean for s in sizes]
