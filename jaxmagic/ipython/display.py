"""Showing a report in the running IPython frontend: widget, static HTML or terminal text."""

from __future__ import annotations

import sys

from IPython.display import display

from jaxmagic.render import WIDGET_MIME, static_bundle


def display_report(report, use_widgets: bool) -> None:
    """Show a report in the current IPython frontend.

    In a kernel with a widget manager the bundle carries the widget view and the
    static HTML beside it, so a saved notebook still shows the report; in a
    terminal, rich draws it when it can, else the plain text is shown.
    """
    if not use_widgets and sys.stdout.isatty():
        from jaxmagic.render.terminal import print_rich

        if print_rich(report.document()):
            return
    bundle = static_bundle(report)
    if use_widgets:
        try:
            from jaxmagic.render.widgets import build_widget

            widget_bundle = build_widget(report.document())._repr_mimebundle_()
            if widget_bundle and WIDGET_MIME in widget_bundle:
                bundle[WIDGET_MIME] = widget_bundle[WIDGET_MIME]
        except ImportError:
            pass
    display(bundle, raw=True)
