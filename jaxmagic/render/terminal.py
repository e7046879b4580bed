"""Terminal IPython: a report drawn with rich (colour, boxed tables), when rich is present.

Without rich, or when output is not a terminal, the plain text renderer is used.
Table cells wrap at spaces and fold a word too long for its column onto the
next line; nothing is cut short with "…" (rich's default for a squeezed cell).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

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
                table = RichTable(show_edge=False, header_style="bold")
                for column in block.columns:
                    table.add_column(column, overflow="fold")
                for row in block.rows:
                    table.add_row(*(Text(str(cell).replace("`", "")) for cell in row))
                parts.append(table)
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
