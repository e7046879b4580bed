"""Explorers: interactive views shown after a report, only when a magic's --explore / --panel asks.

The static report stays the record (docs/DESIGN.md); an explorer answers what is
answered by interacting. Importing this package imports ipywidgets: the magics import
it only when the flag is given, so without the flag nothing here is loaded.
"""

from jaxmagic.ipython.explorers.shown import explorer_bundle, fallback_bundle, fallback_line, show_explorer

__all__ = ["explorer_bundle", "fallback_bundle", "fallback_line", "show_explorer"]
