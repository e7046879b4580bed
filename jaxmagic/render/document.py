"""The structure every renderer draws: a report describes itself as a Document.

Reports say *what* to show (a headline, sections of paragraphs, tables, source
lines and raw evidence); the HTML, widget and text renderers decide *how*. A new
magic therefore needs no renderer code of its own.
"""

from __future__ import annotations

import dataclasses
from typing import Union

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


Block = Union[Paragraph, Facts, Table, SourceLines, Evidence]


@dataclasses.dataclass
class Section:
    title: str
    blocks: list[Block]


@dataclasses.dataclass
class Document:
    title: str            # the magic, e.g. "%%jax_nans"
    status: Status
    headline: str         # one sentence, the first thing a person reads
    sections: list[Section] = dataclasses.field(default_factory=list)
