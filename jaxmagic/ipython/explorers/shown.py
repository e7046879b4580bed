"""How every explorer is shown: after the static report, under a line that says how to get it back.

A widget view does not survive a notebook saved without widget state (ipywidgets#3773): reopened,
JupyterLab 4.6 shows "Error displaying widget: model not found" where it was - not the ``text/plain``
or ``text/html`` of the view's own bundle (checked in tests/test_browser_explorers.py) - and nbconvert
skips the view (``WidgetsDataTypeFilter``). So the line a saved or exported notebook keeps is an output
of its own, static, shown just before the view: live it captions the explorer; saved, it says how to
explore again. The view's own ``text/plain`` is empty (ipywidgets' is a repr, ``VBox(children=...)``),
so an export or a front end without widgets shows the line once. The report above is never touched.

The line also carries one CSS rule (docs/DESIGN.md, "Explorers"): the output right after it is hidden
while it holds jupyterlab_widgets' error text instead of a view ("Error displaying widget: model not
found"); a live view is never hidden. The rule lives only where JupyterLab keeps ``<style>``, in a
trusted output. An untrusted notebook drops it and needs none: there JupyterLab never picks the widget
renderer (it is not "safe") and shows the view's empty ``text/plain``.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from jaxmagic.render.html import LINE, MONO, MUTED, SANS
from jaxmagic.report.wording import first_line

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# The explorers' own HTML, in the static reports' terms (render/html.py): their fonts, the theme's text
# colour (inherited from the widget area), its muted colour for captions and labels (readable on light and
# dark), and lines that wrap between words only - a name is never cut (``overflow-wrap`` stays normal).
EXPLORER_TEXT = f"{SANS};font-size:13px;line-height:1.45;white-space:normal;overflow-wrap:normal"
TITLE = f"{MONO};font-weight:600"
LABEL = f"{MUTED};font-size:11px;font-weight:normal"
NOTE_CLASS = "jaxmagic-explorer-note"
RUN_AGAIN = "In a saved or exported notebook, run this cell to explore again."
# JupyterLab's output area: each output a `.jp-OutputArea-child` holding its `.jp-OutputArea-output`.
# jupyterlab_widgets gives that node the class `jupyter-widgets` only when it writes its error into it
# ("model not found", "Error displaying widget"); a live view is a child element carrying the class.
HIDE_DEAD_VIEW = (
    f".jp-OutputArea-child:has(.{NOTE_CLASS})+.jp-OutputArea-child:has(>.jp-OutputArea-output.jupyter-widgets)"
    "{display:none}"
)


def fallback_line(what: str, again: str = RUN_AGAIN) -> str:
    """The line shown just before the explorer: true live (its caption) and in a saved notebook."""
    return f"Explorer of {what}: shown below while the kernel that drew it runs. {again}"


def fallback_bundle(what: str, again: str = RUN_AGAIN) -> dict[str, str]:
    """The line as static output (plain text and escaped HTML, with the rule hiding a dead view after it)."""
    line = fallback_line(what, again)
    return {
        "text/plain": line,
        "text/html": f"<style>{HIDE_DEAD_VIEW}</style>"
        f'<div class="{NOTE_CLASS}" style="margin:4px 0;{SANS};font-size:12px;{MUTED}">{html.escape(line)}</div>',
    }


def frame() -> widgets.Layout:
    """An explorer's box: the reports' border, never wider than the output area."""
    return widgets.Layout(border=LINE, padding="6px", max_width="100%")


def full_width() -> widgets.Layout:
    """A list as wide as the explorer: stretched by the box, inside its margins (``width: 100%`` plus
    ipywidgets' 2 px margins scrolled the box sideways by 4 px)."""
    return widgets.Layout(width="auto", align_self="stretch")


def wrapping_row(children: list[widgets.Widget]) -> widgets.HBox:
    """Controls side by side while they fit, then on the next line (a 900 px window with the sidebar open)."""
    return widgets.HBox(children, layout=widgets.Layout(flex_flow="row wrap", max_width="100%"))


def explorer_bundle(widget: widgets.Widget) -> dict[str, Any]:
    """The widget's view with an empty ``text/plain``: the line shown before it speaks for it."""
    view = widget._repr_mimebundle_()[WIDGET_VIEW]  # ipywidgets' display protocol: the view's model id
    return {WIDGET_VIEW: view, "text/plain": ""}


def show_explorer(
    build: Callable[[], widgets.Widget], what: str, in_kernel: bool = True, again: str = RUN_AGAIN
) -> widgets.Widget | None:
    """Build the explorer and display it as its own output; returns the widget (None when not shown).

    ``again`` says how a saved notebook's reader gets the explorer back. An explorer that cannot be
    built says so in one line and never replaces the user's error or the report above it. Outside a
    kernel (a terminal IPython) there is nothing to draw a widget in.
    """
    if not in_kernel:
        print(f"jaxmagic: the explorer of {what} needs a notebook front end (JupyterLab, VS Code); none here.")
        return None
    try:
        widget = build()
    except Exception as error:  # a bug of ours: the report above stands, the cell's own error follows
        print(f"jaxmagic could not build the explorer of {what} ({type(error).__name__}: {first_line(error)}).")
        return None
    display(fallback_bundle(what, again), raw=True)
    display(explorer_bundle(widget), raw=True)
    return widget
