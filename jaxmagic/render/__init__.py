"""Renderers: a Document drawn as static HTML or text (plain, or rich in a terminal).

Renderers read only ``jaxmagic.report.document``; ``ShowsItself`` lets an
object with a ``document()`` display itself through them.
"""

from __future__ import annotations

from jaxmagic.render.html import render_html
from jaxmagic.render.shows_itself import ShowsItself, static_bundle
from jaxmagic.render.text import render_text

__all__ = ["ShowsItself", "static_bundle", "render_html", "render_text"]
