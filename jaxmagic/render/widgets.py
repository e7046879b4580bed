"""The interactive notebook view of a report: an ipywidgets tree.

The headline stays visible; each section is a pane of an Accordion (the first
one open) so a long report does not push the user's output off screen. The
widgets carry HTML strings only, never a user object.
"""

from __future__ import annotations

from jaxmagic.render.html import STATUS_COLOURS, STYLE, render_head_html, render_section_html
from jaxmagic.report.document import Document


def build_widget(doc: Document):
    import ipywidgets as widgets

    accent, tint = STATUS_COLOURS[doc.status]

    def framed(inner: str) -> str:
        # Each HTML widget is styled on its own: widget HTML lives in separate DOM nodes.
        return (
            f'<div class="jaxmagic" style="--jm-accent:{accent};--jm-tint:{tint};border:none;margin:0;'
            f'padding:2px 4px"><style>{STYLE}</style>{inner}</div>'
        )

    head = widgets.HTML(value=framed(render_head_html(doc)))
    children = [head]
    if doc.sections:
        panes = [widgets.HTML(value=framed(render_section_html(s, with_title=False))) for s in doc.sections]
        accordion = widgets.Accordion(children=panes, selected_index=0)
        for i, section in enumerate(doc.sections):
            accordion.set_title(i, section.title or "Details")
        children.append(accordion)
    box = widgets.VBox(children)
    box.layout.border_left = f"5px solid {accent}"
    box.layout.padding = "2px 6px"
    box.add_class("jaxmagic-widget")
    return box
