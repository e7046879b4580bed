"""Showing an object that has a ``document()``: notebook display and ``str()``, drawn by the renderers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmagic.render.html import render_html
from jaxmagic.render.text import render_text

if TYPE_CHECKING:
    from jaxmagic.report.document import Document


def static_bundle(doc: Document) -> dict[str, str]:
    """``text/html`` and ``text/plain`` for a document: everything a notebook shows and keeps."""
    return {"text/html": render_html(doc), "text/plain": render_text(doc)}


class ShowsItself:
    """Mixin for anything with ``document()``: displaying it (e.g. the report stored by -o) shows it."""

    def document(self) -> Document:
        raise NotImplementedError

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        return static_bundle(self.document())

    def __str__(self) -> str:
        return render_text(self.document())
