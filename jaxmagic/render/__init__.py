"""Renderers: a report's Document drawn as widgets, static HTML or text."""

from __future__ import annotations

from jaxmagic.render.html import render_html
from jaxmagic.render.text import render_text

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def static_bundle(report) -> dict[str, str]:
    """``text/html`` and ``text/plain`` for a report (no widget)."""
    doc = report.document()
    return {"text/html": render_html(doc), "text/plain": render_text(doc)}


__all__ = ["static_bundle", "render_html", "render_text", "WIDGET_MIME"]
