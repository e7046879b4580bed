"""The structure every renderer draws: a report describes itself as a Document.

Reports say *what* to show (a headline, sections of paragraphs, tables, source
lines and raw evidence); the HTML, text and terminal renderers decide *how*. A new
magic therefore needs no renderer code of its own.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from jaxmagic.report import SourceLine, Status


@dataclasses.dataclass
class Paragraph:
    text: str


@dataclasses.dataclass
class Facts:
    """Name/value pairs, e.g. primitive: log."""

    pairs: list[tuple[str, str]]


@dataclasses.dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]


@dataclasses.dataclass
class SourceLines:
    """User code lines, innermost last, with an optional caption."""

    lines: list[SourceLine]
    caption: str = ""


@dataclasses.dataclass
class Evidence:
    """Raw material (log lines, messages) shown collapsed."""

    title: str
    text: str


@dataclasses.dataclass
class GridCell:
    """One cell of a Grid: a label, an optional second line, a colour and a tooltip.

    ``style`` is "" (plain), "muted" (drawn hatched and grey: present but not
    available here) or "alert" (drawn with a red border: something is wrong).
    """

    row: int
    col: int
    label: str
    detail: str = ""  # a second, smaller line
    colour: str = ""  # background as "#rrggbb"; "" for none
    tooltip: str = ""
    style: str = ""


@dataclasses.dataclass
class Grid:
    """A rows x cols lattice of labelled, coloured cells, e.g. which device holds which block.

    Cells missing from ``cells`` are left empty. ``row_sizes``/``col_sizes``
    are relative heights/widths (equal when empty); ``row_labels``/
    ``col_labels`` are drawn along the left and top edges. Consecutive grids
    are drawn side by side where there is room (facets of one picture).
    """

    rows: int
    cols: int
    cells: list[GridCell]
    caption: str = ""
    row_labels: list[str] = dataclasses.field(default_factory=list)
    col_labels: list[str] = dataclasses.field(default_factory=list)
    row_sizes: list[float] = dataclasses.field(default_factory=list)
    col_sizes: list[float] = dataclasses.field(default_factory=list)
    wrap: bool = False  # a one-row grid whose order is all that matters (devices): tiles wrap to the width


Block = Paragraph | Facts | Table | SourceLines | Evidence | Grid


@dataclasses.dataclass
class Section:
    title: str
    # a Sequence, not a list: renderers only read it, and a builder's list[Paragraph] is then a valid argument
    blocks: Sequence[Block]
    # drawn open whatever the report's length: what the report is for (a stopped frame's values), never a
    # fold the reader has to find (renderers otherwise open the first section, or all of a short report)
    pinned: bool = False


@dataclasses.dataclass
class Document:
    title: str  # the magic, e.g. "%%jax_nans"
    status: Status
    headline: str  # one sentence, the first thing a person reads
    sections: list[Section] = dataclasses.field(default_factory=list)
    # What to do, read right after the headline and never folded away: the fix the report offers first,
    # with how it was tried ("" when it offers none)
    fix: str = ""
    # Why there is nothing to do, for a report that found something and offers no fix (a finding that is
    # by design, a cell that failed on its own error): drawn where the fix is. A FOUND or FAILED report
    # says one of the two (``says_what_to_do``; tests/test_fix_in_sight.py checks every magic).
    nothing_to_do: str = ""


# A headline is read in one glance: one or two lines of a notebook (~125 characters each in a 980 px card),
# the detail below it. Reports that list several things list fewer when the whole would not fit.
HEADLINE_CHARS = 250


def fits_headline(text: str) -> bool:
    """Whether ``text`` (Markdown backticks not counted) reads as a headline of at most two lines."""
    return len(text.replace("`", "")) <= HEADLINE_CHARS


def quoted_headline(prefix: str, headline: str) -> str:
    """``prefix`` + another report's ``headline`` (``%jax_gather``'s "The 2 processes agree: ..."), its
    parenthetical asides dropped, the last first, while the whole is longer than a headline: every sentence
    stays - a clean report's "not looked inside" sentence is what it must say."""
    text = prefix + headline
    while not fits_headline(text):
        shorter = re.sub(r" \([^()]*\)(?!.*\()", "", text, count=1)
        if shorter == text:
            break
        text = shorter
    return text


def split_headline(sentences: list[str], noun: str = "finding") -> tuple[str, list[str]]:
    """(headline, the rest): as many of ``sentences`` (each ending in its full stop) as fit a headline, the
    first always, the ones left out counted ("2 more findings below", ``noun``); the rest, for the report to
    say right below it."""
    shown = sentences[:1]
    for sentence in sentences[1:]:
        if not fits_headline(" ".join([*shown, sentence])):
            break
        shown.append(sentence)
    rest = sentences[len(shown) :]
    more = f" ({len(rest)} more {noun}{'s' if len(rest) != 1 else ''} below.)" if rest else ""
    return " ".join(shown) + more, rest


def headline_of(sentences: list[str], noun: str = "finding") -> str:
    """The headline of ``split_headline``."""
    return split_headline(sentences, noun)[0]


FIX_LABEL = "Fix"
NOTHING_TO_DO_LABEL = "Nothing to fix"


def what_to_do(doc: Document) -> tuple[str, str]:
    """(label, text) of the line drawn under the headline: the fix, else why there is nothing to do;
    ("", "") when the report says neither."""
    if doc.fix:
        return FIX_LABEL, doc.fix
    if doc.nothing_to_do:
        return NOTHING_TO_DO_LABEL, doc.nothing_to_do
    return "", ""


def says_what_to_do(doc: Document) -> bool:
    """The rule of every report: one that found something (FOUND) or failed (FAILED) says what to do, or
    why there is nothing to do, outside every fold. OK and RUNNING reports need not."""
    return doc.status in (Status.OK, Status.RUNNING) or bool(doc.fix or doc.nothing_to_do)


# A measurement: "12.3 ms", "45%", "1,234", "3.1e-07", "x1.25", "-" for none.
_NUMBER = re.compile(r"^(-|[x~<>]?[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?\s*(%|[a-zA-Z]{1,3}|KiB|MiB|GiB|x)?)$")


def numeric_columns(table: Table) -> list[bool]:
    """Which columns hold only numbers (with units): renderers align them right, so digits line up."""
    out = []
    for k in range(len(table.columns)):
        cells = [str(row[k]).strip() for row in table.rows if k < len(row) and str(row[k]).strip()]
        out.append(bool(cells) and any(c != "-" for c in cells) and all(_NUMBER.match(c) for c in cells))
    return out
