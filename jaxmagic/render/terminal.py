"""Terminal IPython: a report drawn with rich (colour, boxed tables), when rich is present.

Without rich, or when output is not a terminal, the plain text renderer is used.
Table cells wrap at spaces; a table whose columns cannot all sit side by side at
their longest word (the console's width decides) stacks each row as
``label  value`` lines, as the text renderer does, so no word is split; nothing
is cut short with "…" (rich's default for a squeezed cell).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from jaxmagic.render.text import COLUMN_GAP, column_widths, fits_side_by_side
from jaxmagic.report import Status
from jaxmagic.report.document import Document, Evidence, Facts, Grid, Paragraph, SourceLines, Table, what_to_do

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

_STYLE = {Status.OK: "green", Status.PROBLEM: "bold red", Status.ERROR: "yellow", Status.RUNNING: "cyan"}


def print_rich(doc: Document, console: Console | None = None) -> bool:
    """Print ``doc`` with rich (to ``console``, else stdout); False if rich is not importable."""
    try:
        # deferred: rich is imported only to draw in a terminal (%load_ext does not need it)
        from rich.console import Console, Group
        from rich.panel import Panel
        from rich.table import Table as RichTable
        from rich.text import Text
    except ImportError:
        return False

    parts: list[RenderableType] = [Text(doc.headline, style="bold")]
    label, what = what_to_do(doc)
    if what:
        parts.append(Text.assemble((f"{label}: ", "bold"), what))
    for section in doc.sections:
        if section.title:
            parts.append(Text(f"\n{section.title.upper()}", style="dim bold"))
        for block in section.blocks:
            if isinstance(block, Paragraph):
                parts.append(Text(block.text))
            elif isinstance(block, Facts):
                grid = RichTable.grid(padding=(0, 2))
                grid.add_column(no_wrap=True)
                grid.add_column(overflow="fold")
                for name, value in block.pairs:
                    grid.add_row(Text(name, style="bold"), Text(value, style="cyan"))
                parts.append(grid)
            elif isinstance(block, Table):
                parts.append(_rich_table(block, (console or Console()).width - PANEL_EDGES))
            elif isinstance(block, SourceLines):
                if block.caption:
                    parts.append(Text(block.caption))
                for i, line in enumerate(block.lines):
                    last = i == len(block.lines) - 1
                    parts.append(Text(line.where, style="dim"))
                    parts.append(Text("    " + line.code, style="bold red" if last else ""))
            elif isinstance(block, Evidence):
                parts.append(Text(f"{block.title}: " + " | ".join(block.text.splitlines()[:3]), style="dim"))
            elif isinstance(block, Grid):
                parts.append(_rich_grid(block))
    title = Text.assemble((doc.title, "bold"), " ", (doc.status.word, _STYLE[doc.status]))
    (console or Console()).print(Panel(Group(*parts), title=title, title_align="left", border_style=_STYLE[doc.status]))
    return True


_COLOUR = re.compile(r"#[0-9a-fA-F]{6}")
PANEL_EDGES = 4  # the panel's border and padding, left and right


def _rich_table(block: Table, width: int) -> RenderableType:
    """A table with its columns side by side when each fits at its longest word (rich's table puts three
    characters between columns), else each row stacked as ``label  value`` lines."""
    # deferred: rich is imported only to draw (print_rich has checked that it imports)
    from rich.console import Group
    from rich.table import Table as RichTable
    from rich.text import Text

    rows = [[str(cell).replace("`", "") for cell in row] for row in block.rows]
    # rich's table: " │ " between columns, a space at either edge (the text renderer: two spaces between)
    room = width - 2 - (len(block.columns) - 1) * (3 - len(COLUMN_GAP))
    if fits_side_by_side(block.columns, rows, room):
        table = RichTable(show_edge=False, header_style="bold")
        for column, fixed in zip(block.columns, column_widths(block.columns, rows, room)):
            table.add_column(column, overflow="fold", width=fixed)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        return table
    stacked: list[RenderableType] = []
    for row in rows:
        grid = RichTable.grid(padding=(0, 2))
        grid.add_column(style="bold", max_width=max(int(width * 0.4), 1))
        grid.add_column(overflow="fold")
        for column, cell in zip(block.columns, row):
            grid.add_row(column, Text(cell))
        stacked.append(grid)
        stacked.append(Text(""))
    return Group(*stacked[:-1])


def _rich_grid(grid: Grid) -> RenderableType:
    """A Grid as a rich table: one coloured box per cell, edge labels as header and first column."""
    # deferred: rich is imported only to draw (print_rich has checked that it imports)
    from rich.console import Group
    from rich.table import Table as RichTable
    from rich.text import Text

    table = RichTable(show_header=bool(grid.col_labels), show_lines=True, header_style="dim", pad_edge=False)
    if grid.row_labels:
        table.add_column("", style="dim", justify="right")
    for c in range(grid.cols):
        table.add_column(grid.col_labels[c] if c < len(grid.col_labels) else "", justify="center")
    by_place = {(cell.row, cell.col): cell for cell in grid.cells}
    for r in range(grid.rows):
        row = [Text(grid.row_labels[r])] if grid.row_labels and r < len(grid.row_labels) else []
        for c in range(grid.cols):
            cell = by_place.get((r, c))
            if cell is None:
                row.append(Text(""))
                continue
            style = "dim" if cell.style == "muted" else "bold red" if cell.style == "alert" else ""
            if cell.style != "muted" and _COLOUR.fullmatch(cell.colour):
                style = f"{style} #1f2328 on {cell.colour}".strip()
            text = cell.label + (f"\n{cell.detail}" if cell.detail else "")
            row.append(Text(text, style=style, justify="center"))
        table.add_row(*row)
    return Group(Text(grid.caption, style="italic"), table) if grid.caption else table
