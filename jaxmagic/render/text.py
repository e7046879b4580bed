"""Plain text for a report: the ``text/plain`` part and terminal IPython."""

from __future__ import annotations

import textwrap

from jaxmagic.render.document import Document, Evidence, Facts, Paragraph, SourceLines, Table
from jaxmagic.render.html import STATUS_WORDS


def render_text(report_or_doc) -> str:
    doc = report_or_doc if isinstance(report_or_doc, Document) else report_or_doc.document()
    out = [f"{doc.title} [{STATUS_WORDS[doc.status]}] {doc.headline}"]
    for section in doc.sections:
        if section.title:
            out.append(f"\n{section.title}:")
        for block in section.blocks:
            out.extend("  " + line for line in _block_lines(block))
    return "\n".join(out)


def _block_lines(block) -> list[str]:
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
    raise TypeError(f"unknown block {type(block).__name__}")
