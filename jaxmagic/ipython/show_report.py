"""Showing a report in the running IPython frontend: static HTML, or terminal text.

In a kernel the report is one mimebundle of ``text/html`` (self-contained, see
jaxmagic/render/html.py) and ``text/plain``, and nothing else: no widget view.
A widget view does not survive a notebook saved without widget state
(JupyterLab's default shows "Error displaying widget: model not found" and never
falls back to the HTML beside it, ipywidgets#3773), and nbconvert keeps the
widget view, drops the HTML and loads the widget manager from a CDN. The static
HTML collapses its sections with ``<details>``, which is all the widget did.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from IPython.display import display

from jaxmagic.render import static_bundle
from jaxmagic.render.terminal import print_rich
from jaxmagic.report import Report, Status
from jaxmagic.report.document import Document, Paragraph, Section

if TYPE_CHECKING:
    from jaxmagic.ipython.live_view import LiveView


def display_report(report: Report, in_kernel: bool, live_view: LiveView | None = None) -> None:
    """Show a report in the current IPython frontend.

    In a kernel (a notebook, VS Code, Qt console) the static bundle is shown - in
    place of the cell's live view when one was shown; in a terminal, rich draws the
    report when it can, else the plain text is shown.
    """
    doc = _document_of(report)
    if live_view is not None:
        live_view.stop()  # a terminal status line is erased before the report prints
    if not in_kernel and sys.stdout.isatty() and print_rich(doc):
        return
    bundle = static_bundle(doc)
    if live_view is not None and live_view.show_report(bundle):
        return
    display(bundle, raw=True)


def _document_of(report: Report) -> Document:
    """The report's document; when laying it out fails (a bug of jaxmagic's), a short one saying so, so
    that the cell's own exception, raised after the report, is never replaced by jaxmagic's."""
    try:
        return report.document()
    except Exception as error:
        try:
            summary = str(report.summary)
        except Exception:
            summary = ""
        kind = getattr(report, "kind", "") or "jaxmagic"
        return Document(
            f"%{kind}",
            Status.ERROR,
            summary or "jaxmagic found something but could not lay out its report.",
            [
                Section(
                    "Report",
                    [
                        Paragraph(
                            f"jaxmagic could not lay out this report ({type(error).__name__}: {error}); this is a "
                            "bug of jaxmagic's. The report's data is complete: -o NAME keeps it (to_dict())."
                        )
                    ],
                )
            ],
        )
