"""Renderers: a report's Document drawn as static HTML or text (plain, or rich in a terminal)."""

from __future__ import annotations

from jaxmagic.render.html import render_html
from jaxmagic.render.text import render_text


def static_bundle(report) -> dict[str, str]:
    """``text/html`` and ``text/plain`` for a report: everything a notebook shows and keeps."""
    doc = report.document()
    return {"text/html": render_html(doc), "text/plain": render_text(doc)}


__all__ = ["static_bundle", "render_html", "render_text"]
