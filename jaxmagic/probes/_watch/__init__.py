"""``%jax_watch``: watch every later cell, cheaply, for NaN, recompilation, transfers, memory and keys.

Usage without IPython::

    w = jaxmagic.probes._watch.Watch(budget=2)
    w.begin_cell("step 1"); train(...); print(w.end_cell())
    w.close(); w.log.to_dict()
"""

from jaxmagic.probes._watch.report import AREAS, NOT_WATCHED, CellFindings, WatchFinding, WatchLog
from jaxmagic.probes._watch.session import Watch

__all__ = ["AREAS", "NOT_WATCHED", "CellFindings", "Watch", "WatchFinding", "WatchLog"]
