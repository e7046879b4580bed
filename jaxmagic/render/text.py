"""Plain text for a report: the ``text/plain`` part and terminal IPython.

Text is laid out for a given width (the terminal's in a terminal, else 100
columns: ``text_width``): paragraphs and table cells wrap at spaces - never
inside an option such as ``--budget``. A table whose columns cannot all sit side
by side at their longest word stacks each row instead (``label  value`` lines),
so a shape, a name or a number in a table is never split; only a word longer
than a whole line breaks, after a bracket, comma or dot. Nothing is cut short:
every character of every cell is in the output.
"""

from __future__ import annotations

import re
import shutil
import sys
import textwrap

from jaxmagic.render.tokens import joined_groups, spaces_again
from jaxmagic.report.document import (
    Block,
    Document,
    Evidence,
    Facts,
    Grid,
    GridCell,
    Paragraph,
    SourceLines,
    Table,
    what_to_do,
)

DEFAULT_WIDTH = 100
INDENT = "  "  # blocks sit under their section title
COLUMN_GAP = "  "
ROW_LABEL_SHARE = 0.4  # a stacked row's labels take at most this share of the line


def text_width() -> int:
    """The width text is laid out for: the terminal's when output goes to one, else ``DEFAULT_WIDTH`` (a kernel's
    output has no width the kernel can know; its front end shows the HTML)."""
    try:
        if sys.stdout is not None and sys.stdout.isatty():
            return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, 20)
    except (AttributeError, ValueError, OSError):  # a replaced or closed stdout
        pass
    return DEFAULT_WIDTH


def render_text(doc: Document, width: int | None = None) -> str:
    """``doc`` as plain text, ``width`` columns wide (None: ``text_width()``)."""
    width = text_width() if width is None else width
    out = wrap(f"{doc.title} [{doc.status.word}] {doc.headline}", width, subsequent_indent=INDENT)
    label, what = what_to_do(doc)
    if what:
        out.extend(wrap(f"{label}: {what}", width, subsequent_indent=INDENT))
    for section in doc.sections:
        if section.title:
            out.append(f"\n{section.title}:")
        for block in section.blocks:
            out.extend(INDENT + line for line in block_lines(block, width - len(INDENT)))
    return "\n".join(out)


_OTHER_WHITESPACE = re.compile(r"[^\S ]")  # whitespace that textwrap would replace or expand


def wrap(text: str, width: int, subsequent_indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken at spaces (not at hyphens)."""
    width = max(width, 1)
    if len(subsequent_indent) >= width:  # an indent as wide as the line would leave no room: drop it
        subsequent_indent = ""
    if text and text == text.strip() and not _OTHER_WHITESPACE.search(text):
        if len(text) <= width:
            return [text]  # fits on one line: what textwrap would return, without its work (a report has hundreds)
        lines = _greedy_lines(text, width, subsequent_indent)
    else:
        lines = textwrap.wrap(
            text,
            width,
            subsequent_indent=subsequent_indent,
            break_on_hyphens=False,
            break_long_words=False,
        )
    out = []
    for line in lines or [""]:
        while len(line) > width:  # one word longer than the line
            cut = _break_point(line, width)
            out.append(line[:cut])
            line = subsequent_indent + line[cut:]
        out.append(line)
    return out


_SPACES = re.compile(r"( +)")


def _greedy_lines(text: str, width: int, subsequent_indent: str) -> list[str]:
    """``textwrap.wrap(text, width, subsequent_indent=..., break_on_hyphens=False, break_long_words=False)``
    for a text with no whitespace but spaces, none at either end: the same lines, without textwrap's
    whitespace translation and regular-expression split of the general case (its ``_wrap_chunks``, on
    the words and runs of spaces)."""
    chunks = [chunk for chunk in _SPACES.split(text) if chunk]
    chunks.reverse()
    lines: list[str] = []
    while chunks:
        indent = subsequent_indent if lines else ""
        room = width - len(indent)
        if lines and chunks[-1][0] == " ":  # a line does not start with the spaces that ended the last one
            chunks.pop()
        line: list[str] = []
        used = 0
        while chunks and used + len(chunks[-1]) <= room:
            used += len(chunks[-1])
            line.append(chunks.pop())
        if chunks and not line and len(chunks[-1]) > room:  # a word longer than the line: alone on it
            line.append(chunks.pop())
        if line and line[-1][0] == " ":
            line.pop()
        if line:
            lines.append(indent + "".join(line))
    return lines


_BREAK_AFTER = re.compile(r"[(\[{,/=:|>]")  # between tokens: after these...
_BREAK_BEFORE = re.compile(r"(?=[(\[{])")  # ... or before an opening bracket
_INSIDE_NAMES = re.compile(r"[._]")  # inside a (dotted) name: only when no token ends in reach


def _break_point(word: str, width: int) -> int:
    """Where to split a too-long word: after the last bracket, comma or slash that fits; else after a dot or
    an underscore (inside a name: only a name longer than the line gets there); else at ``width``."""
    between = [m.end() for pattern in (_BREAK_AFTER, _BREAK_BEFORE) for m in pattern.finditer(word)]
    inside = [m.end() for m in _INSIDE_NAMES.finditer(word)]
    for points, shortest in ((between, width // 3), (between, 0), (inside, width // 3)):
        fitting = [point for point in points if shortest < point <= width]
        if fitting:
            return max(fitting)
    return width


def block_lines(block: Block, width: int = DEFAULT_WIDTH - len(INDENT)) -> list[str]:
    if isinstance(block, Paragraph):
        return wrap(block.text, width)
    if isinstance(block, Facts):
        name_width = min(max((len(k) for k, _ in block.pairs), default=0), max(int(width * ROW_LABEL_SHARE), 1))
        return [line for name, value in block.pairs for line in labelled_lines(name, value, name_width, width)]
    if isinstance(block, Table):  # a short tuple in a cell is one word (render/tokens)
        rows = [[joined_groups(str(c).replace("`", "")) for c in row] for row in block.rows]
        return [spaces_again(line) for line in table_lines(block.columns, rows, width)]
    if isinstance(block, SourceLines):
        lines = wrap(block.caption, width) if block.caption else []
        for line in block.lines:
            lines += wrap(line.where, width, subsequent_indent="  ")
            lines += ["    " + part for part in wrap(line.code, width - 4, subsequent_indent="    ")]
        return lines
    if isinstance(block, Evidence):
        # Quoted log lines (a JAX compile log line can be 500 characters) fold at the width, each
        # continuation marked so the original lines can still be told apart.
        lines = [f"{block.title}:"]
        for quoted in block.text.splitlines():
            folded = wrap(quoted.rstrip(), width - 6) if quoted.strip() else [""]
            lines += ["  | " + folded[0], *("  |   " + more.lstrip() for more in folded[1:])]
        return lines
    if isinstance(block, Grid):
        return _grid_lines(block)
    raise TypeError(f"unknown block {type(block).__name__}")


def longest_words(columns: list[str], rows: list[list[str]]) -> list[int]:
    """Each column's narrowest width: its longest word, header included (no line breaks inside a word)."""
    return [
        max((len(word) for row in [columns] + rows if i < len(row) for word in row[i].split()), default=1)
        for i in range(len(columns))
    ]


def column_widths(columns: list[str], rows: list[list[str]], width: int) -> list[int]:
    """Widths that fit the table in ``width`` columns, taking from the widest column first, never below a
    column's longest word (so no word breaks: ``table_lines`` stacks the rows of a table that cannot fit)."""
    cells = [columns] + rows
    natural = [max(len(row[i]) for row in cells if i < len(row)) for i in range(len(columns))]
    floor = longest_words(columns, rows)
    widths = list(natural)
    room = width - len(COLUMN_GAP) * (len(columns) - 1)
    while sum(widths) > room:
        shrinkable = [i for i in range(len(widths)) if widths[i] > floor[i]]
        if not shrinkable:
            break  # narrower than the floors allow: table_lines stacks the rows instead
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def fits_side_by_side(columns: list[str], rows: list[list[str]], width: int) -> bool:
    """Whether every column fits beside the others at its longest word."""
    return sum(longest_words(columns, rows)) + len(COLUMN_GAP) * (len(columns) - 1) <= width


def table_lines(columns: list[str], rows: list[list[str]], width: int) -> list[str]:
    """A table whose cells wrap within their column, with a rule under the header - or, when its columns cannot
    all sit side by side without breaking a word, each row stacked as ``label  value`` lines."""
    if not fits_side_by_side(columns, rows, width):
        return stacked_lines(columns, rows, width)
    widths = column_widths(columns, rows, width)
    lines = []
    for row_index, row in enumerate([columns] + rows):
        wrapped = [wrap(cell, w) for cell, w in zip(row, widths)]
        for k in range(max(len(cell) for cell in wrapped)):
            parts = [(cell[k] if k < len(cell) else "").ljust(w) for cell, w in zip(wrapped, widths)]
            lines.append(COLUMN_GAP.join(parts).rstrip())
        if row_index == 0:
            lines.append(COLUMN_GAP.join("-" * w for w in widths))
    return lines


def stacked_lines(columns: list[str], rows: list[list[str]], width: int) -> list[str]:
    """Each row as one ``label  value`` line per column, rows apart by a blank line: the table at any width,
    no word broken unless it is longer than the line."""
    label_width = min(max(len(c) for c in columns), max(int(width * ROW_LABEL_SHARE), 1))
    lines: list[str] = []
    for row in rows:
        if lines:
            lines.append("")
        for column, cell in zip(columns, row):
            lines.extend(labelled_lines(column, cell, label_width, width))
    return lines


def labelled_lines(label: str, value: str, label_width: int, width: int) -> list[str]:
    """``label  value``, the value wrapped beside its label - or under it, the whole line wide, when its longest
    word does not fit beside it."""
    labels = wrap(label, label_width)
    value_width = width - label_width - len(COLUMN_GAP)
    if value_width < MIN_VALUE or max(map(len, value.split()), default=0) > value_width:
        return labels + wrap(value, width)
    values = wrap(value, value_width)
    return [
        f"{(labels[k] if k < len(labels) else '').ljust(label_width)}{COLUMN_GAP}"
        f"{values[k] if k < len(values) else ''}".rstrip()
        for k in range(max(len(labels), len(values)))
    ]


MIN_VALUE = 8  # a value column narrower than this goes under its label instead


_CELL_MARKS = {"muted": "~", "alert": "!"}
MAX_GRID_WIDTH = 110  # wider box drawings are listed cell by cell


def _grid_lines(grid: Grid) -> list[str]:
    """The grid as a box drawing: one box per cell, its label and (if any) detail centred.

    Muted cells are drawn with "~" marks and alert cells with "!" marks around the
    label, since plain text has no colour.
    """
    by_place = {(c.row, c.col): c for c in grid.cells}
    show_detail = any(c.detail for c in grid.cells)

    def label(cell: GridCell | None) -> str:
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
