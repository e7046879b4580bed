"""Rows whose entries are all -inf (a fully masked attention row): what the fix of their NaN needs.

A max-reduction over such a row gives -inf, and softmax's shift ``x - max`` is then ``-inf - (-inf)``:
NaN. The producer search (and ``--inside``) note, by the user's line, which max-reductions saw such rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Equation, Value
from jaxmagic.probes._nans.search.equation_origin import user_line
from jaxmagic.probes._nans.search.host_values import host_array

_MAX_OF_ROWS = ("logsumexp", "log_softmax", "softmax", "_softmax")


def note_neg_inf_rows(
    found: dict[tuple[str, int], str], eqn: Equation, inputs: Sequence[Value], path: Sequence[Position]
) -> None:
    """A ``reduce_max`` (or a jitted logsumexp/log_softmax/softmax) whose input holds rows that are all
    -inf - a fully masked attention row: recorded by the user's line, for the fix."""
    axes = None
    if eqn.primitive.name == "reduce_max":
        axes = tuple(eqn.params.get("axes", ()))
    elif str(eqn.params.get("name", "")) in _MAX_OF_ROWS:
        inner = getattr(eqn.params.get("jaxpr"), "jaxpr", None)
        first = next((e for e in getattr(inner, "eqns", ()) if e.primitive.name == "reduce_max"), None)
        axes = tuple(first.params.get("axes", ())) if first is not None else None
    if axes is None or not inputs:
        return
    array = host_array(inputs[0])
    if array is None or not array.ndim or not axes or not np.isneginf(array).any():
        return
    try:
        rows = np.all(np.isneginf(array), axis=axes)
    except Exception:
        return
    if rows.any():
        line = user_line(eqn, path)
        if line is not None:
            found.setdefault(
                (line.filename, line.lineno),
                f"{int(rows.sum())} of {rows.size} rows (axis {', '.join(map(str, axes))})",
            )
