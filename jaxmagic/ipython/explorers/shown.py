"""How every explorer is shown: its own output after the static report, with a line for saved notebooks.

A widget view does not survive a notebook saved without widget state (ipywidgets#3773):
JupyterLab shows "Error displaying widget: model not found" where it was, and nbconvert
skips the view (``WidgetsDataTypeFilter``) and shows the next part of the same bundle.
So the explorer's bundle carries, beside the view, a ``text/plain`` and a ``text/html``
one-liner saying to run the cell to explore; the report above it is never touched.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from IPython.display import display

from jaxmagic.report.wording import first_line

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def fallback_line(what: str) -> str:
    """The line a saved or exported notebook shows where the explorer was."""
    return f"Run this cell to explore {what}: an interactive explorer was here (the report above is the record)."


def explorer_bundle(widget, what: str) -> dict[str, Any]:
    """The widget's view with the fallback line as its ``text/plain`` and ``text/html`` parts."""
    view = widget._repr_mimebundle_()[WIDGET_VIEW]  # ipywidgets' display protocol: the view's model id
    line = fallback_line(what)
    return {
        WIDGET_VIEW: view,
        "text/plain": line,
        "text/html": f'<p class="jaxmagic-explorer" style="margin:4px 0;color:#555;font-style:italic">'
        f"{html.escape(line)}</p>",
    }


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
    display(explorer_bundle(widget, what), raw=True)
    return widget
