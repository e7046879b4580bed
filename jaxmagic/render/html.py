"""Self-contained static HTML for a report.

This is the ``text/html`` part of every report's mimebundle: it survives saving
the notebook, nbviewer, GitHub and frontends without a widget manager. Every
string that came from the user or from JAX is escaped here, in one place.
"""

from __future__ import annotations

import re
from html import escape

from jaxmagic.render.document import Document, Evidence, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report import Status

STATUS_COLOURS = {
    Status.OK: ("#1b7f3b", "#eaf6ee"),
    Status.PROBLEM: ("#b3261e", "#fdecea"),
    Status.ERROR: ("#9a6700", "#fff8e5"),
}
STATUS_WORDS = {Status.OK: "OK", Status.PROBLEM: "FOUND", Status.ERROR: "CELL FAILED"}

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
        f'<span class="jm-badge">{STATUS_WORDS[doc.status]}</span></div>'
        f'<div class="jm-headline">{inline_html(doc.headline)}</div>'
    )


_BACKTICKS = re.compile(r"`([^`\n]+)`")


def inline_html(text: str) -> str:
    """Escaped text in which `backticked` spans (a primitive, a call) are shown as code."""
    return _BACKTICKS.sub(r"<code>\1</code>", escape(text))


def render_section_html(section: Section, with_title: bool = True) -> str:
    title = f"<h4>{escape(section.title)}</h4>" if with_title and section.title else ""
    return title + "".join(_block_html(block) for block in section.blocks)


def _block_html(block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{inline_html(block.text)}</p>"
    if isinstance(block, Facts):
        rows = "".join(f'<tr><th>{escape(k)}</th><td><code>{escape(v)}</code></td></tr>' for k, v in block.pairs)
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
    raise TypeError(f"unknown block {type(block).__name__}")
