"""Plain text for a report: the ``text/plain`` part and terminal IPython."""

from __future__ import annotations

import textwrap

from jaxmagic.report.document import Document, Evidence, Facts, Grid, Paragraph, SourceLines, Table


def render_text(report_or_doc) -> str:
    doc = report_or_doc if isinstance(report_or_doc, Document) else report_or_doc.document()
    out = [f"{doc.title} [{doc.status.word}] {doc.headline}"]
    for section in doc.sections:
        if section.title:
            out.append(f"\n{section.title}:")
        for block in section.blocks:
            out.extend("  " + line for line in block_lines(block))
    return "\n".join(out)


def block_lines(block) -> list[str]:
    if isinstance(block, Paragraph):
        return textwrap.wrap(block.text, 96) or [""]
    if isinstance(block, Facts):
        width = max((len(k) for k, _ in block.pairs), default=0)
        return [f"{k.ljust(width)}  {v}" for k, v in block.pairs]
    if isinstance(block, Table):
        cells = [block.columns] + [[str(c).replace("`", "") for c in row] for row in block.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(block.columns))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return lines
    if isinstance(block, SourceLines):
        lines = [block.caption] if block.caption else []
        for line in block.lines:
            lines += [line.where, "    " + line.code]
        return lines
    if isinstance(block, Evidence):
        return [f"{block.title}:"] + ["  | " + line for line in block.text.splitlines()]
    if isinstance(block, Grid):
        return _grid_lines(block)
    raise TypeError(f"unknown block {type(block).__name__}")


_CELL_MARKS = {"muted": "~", "alert": "!"}
MAX_GRID_WIDTH = 110  # wider box drawings are listed cell by cell


def _grid_lines(grid: Grid) -> list[str]:
    """The grid as a box drawing: one box per cell, its label and (if any) detail centred.

    Muted cells are drawn with "~" marks and alert cells with "!" marks around the
    label, since plain text has no colour.
    """
    by_place = {(c.row, c.col): c for c in grid.cells}
    show_detail = any(c.detail for c in grid.cells)

    def label(cell) -> str:
        if cell is None:
            return ""
        mark = _CELL_MARKS.get(cell.style, "")
        return f"{mark}{cell.label}{mark}"

    width = (
        max(
            [len(label(c)) for c in grid.cells]
            + [len(c.detail) for c in grid.cells if show_detail]
            + [len(x) for x in grid.col_labels]
            + [1]
        )
        + 2
    )
    margin = max((len(x) for x in grid.row_labels), default=0)
    pad = " " * (margin + 1) if margin else ""
    rule = pad + "+" + "+".join("-" * width for _ in range(grid.cols)) + "+"
    lines = [grid.caption] if grid.caption else []
    if len(rule) > MAX_GRID_WIDTH:  # too wide for a terminal: one line per cell instead
        for cell in sorted(grid.cells, key=lambda c: (c.row, c.col)):
            where = ", ".join(
                part
                for part in (
                    grid.row_labels[cell.row] if cell.row < len(grid.row_labels) else "",
                    grid.col_labels[cell.col] if cell.col < len(grid.col_labels) else "",
                )
                if part
            )
            detail = f"  {cell.detail}" if cell.detail else ""
            lines.append(f"[{where or f'{cell.row},{cell.col}'}] {label(cell)}{detail}")
        return lines
    if grid.col_labels:
        lines.append((pad + " " + " ".join(x.center(width) for x in grid.col_labels)).rstrip())
    lines.append(rule)
    for r in range(grid.rows):
        cells = [by_place.get((r, c)) for c in range(grid.cols)]
        row_label = grid.row_labels[r] if r < len(grid.row_labels) else ""
        lead = row_label.rjust(margin) + " " if margin else ""
        lines.append(lead + "|" + "|".join(label(c).center(width) for c in cells) + "|")
        if show_detail:
            lines.append(pad + "|" + "|".join((c.detail if c else "").center(width) for c in cells) + "|")
        lines.append(rule)
    return lines
