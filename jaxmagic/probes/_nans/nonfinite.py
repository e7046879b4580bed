"""Find the NaN/inf leaves of a pytree, by key path (``[0]['b']``).

This is how one locates a NaN by hand (chapter section 3.1 and 9.1): look at
each leaf of the gradients or parameters and see which is not finite. Values
are read on the host with NumPy, so the scan itself compiles nothing.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.typing import DTypeLike

from jaxmagic.probes._support.rerun.failing_call import looks_like_array_tree

MAX_LEAVES = 10_000  # a scan is a diagnosis aid, not worth minutes on giant trees


@dataclasses.dataclass
class NonFiniteLeaf:
    """One array leaf holding NaN or inf."""

    holder: str  # what the leaf belongs to: "argument p_reg", "result of f(x)", "variable grads"
    path: str  # key path inside the holder, "" for the holder itself
    shape: list[int]
    dtype: str
    nan_count: int
    inf_count: int

    @property
    def name(self) -> str:
        return f"{self.holder}{self.path}"


def _host_values(leaf: object) -> np.ndarray | None:
    """The leaf as a NumPy array, or None if it is not an inexact array we can read."""
    if isinstance(leaf, jax.core.Tracer):
        return None
    if isinstance(leaf, jax.Array):
        if not leaf.is_fully_addressable or leaf.is_deleted():
            return None
    elif not isinstance(leaf, (np.ndarray, np.generic, float)):
        return None
    try:
        values = np.asarray(leaf)
    except Exception:
        return None
    if not is_inexact(values.dtype):
        return None
    return values


def is_inexact(dtype: DTypeLike) -> bool:
    """A floating or complex dtype, bfloat16 and the other ml_dtypes floats included (NumPy does not
    count them inexact: a bfloat16 NaN went unsearched)."""
    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.numpy.inexact))
    except TypeError:  # PRNG key dtypes and other extended dtypes
        return False


def nonfinite_leaves(tree: object, holder: str) -> list[NonFiniteLeaf]:
    """The leaves of ``tree`` that contain NaN or inf, in tree order."""
    try:
        leaves = jax.tree_util.tree_leaves_with_path(tree)
    except Exception:
        return []
    found = []
    for path, leaf in leaves[:MAX_LEAVES]:
        values = _host_values(leaf)
        if values is None:
            continue
        nans = int(np.count_nonzero(np.isnan(values)))
        infs = int(np.count_nonzero(np.isinf(values)))
        if nans or infs:
            found.append(
                NonFiniteLeaf(holder, jax.tree_util.keystr(path), list(values.shape), str(values.dtype), nans, infs)
            )
    return found


def bindings(namespace: dict[str, object] | None) -> dict[str, int]:
    """What each of the user's names is bound to (by ``id``), to tell later which a cell bound or rebound."""
    if namespace is None:
        return {}
    return {name: id(value) for name, value in namespace.items() if not name.startswith("_")}


def nonfinite_rebound(namespace: dict[str, object] | None, before: dict[str, int]) -> list[NonFiniteLeaf]:
    """Non-finite leaves of the variables the cell bound or rebound (``before``: ``bindings`` before it)."""
    if namespace is None:
        return []
    found = []
    for name, value in list(namespace.items()):
        if name.startswith("_") or before.get(name) == id(value) or not looks_like_array_tree(value):
            continue
        found += nonfinite_leaves(value, f"variable {name}")
    return found
