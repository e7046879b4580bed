"""How every explorer is shown: after the static report, under a line that says how to get it back.

A widget view does not survive a notebook saved without widget state (ipywidgets#3773):
JupyterLab 4.6 shows only "Error displaying widget: model not found" where it was - not the
``text/plain`` or ``text/html`` of the view's own bundle (checked in
tests/test_browser_explorers.py) - and nbconvert skips the view (``WidgetsDataTypeFilter``).
So the line a saved or exported notebook must show is an output of its own, static, shown
just before the view: live it captions the explorer; saved, it says to run the cell. The
view's own ``text/plain`` is empty (ipywidgets' is a repr, ``VBox(children=...)``), so an export
or a front end without widgets shows the line once. The report above is never touched.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from IPython.display import display

from jaxmagic.report.wording import first_line

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def fallback_line(what: str) -> str:
    """The line shown just before the explorer: its caption live, what a saved notebook keeps of it."""
    return (
        f"Explorer of {what} below: it lives while the kernel runs; in a saved or exported notebook, "
        "run this cell to explore again."
    )


def fallback_bundle(what: str) -> dict[str, str]:
    """The line as static output (plain text and escaped HTML)."""
    line = fallback_line(what)
    return {
        "text/plain": line,
        "text/html": f'<div class="jaxmagic-explorer-note" style="margin:4px 0;color:#555;font-size:12px">'
        f"{html.escape(line)}</div>",
    }


def explorer_bundle(widget) -> dict[str, Any]:
    """The widget's view with an empty ``text/plain``: the line shown before it speaks for it."""
    view = widget._repr_mimebundle_()[WIDGET_VIEW]  # ipywidgets' display protocol: the view's model id
    return {WIDGET_VIEW: view, "text/plain": ""}


def show_explorer(build: Callable[[], Any], what: str, in_kernel: bool = True):
    """Build the explorer and display it as its own output; returns the widget (None when not shown).

    An explorer that cannot be built says so in one line and never replaces the user's error or the
    report above it. Outside a kernel (a terminal IPython) there is nothing to draw a widget in.
    """
    if not in_kernel:
        print(f"jaxmagic: the explorer of {what} needs a notebook front end (JupyterLab, VS Code); none here.")
        return None
    try:
        widget = build()
    except Exception as error:  # a bug of ours: the report above stands, the cell's own error follows
        print(f"jaxmagic could not build the explorer of {what} ({type(error).__name__}: {first_line(error)}).")
        return None
    display(fallback_bundle(what), raw=True)
    display(explorer_bundle(widget), raw=True)
    return widget
