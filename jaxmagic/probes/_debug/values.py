"""Describe a frame's values as data: shape, dtype, min/max/mean, NaN/inf counts and a few values."""

from __future__ import annotations

import inspect
import types
import warnings
from typing import Any

import jax
import numpy as np

from jaxmagic._jax.primals import primal_value
from jaxmagic.probes._debug.report import ValueSummary
from jaxmagic.probes._nans.nonfinite import is_inexact
from jaxmagic.report.wording import shown

FEW = 6  # values shown per array


def tree_leaves(value: object) -> list[object]:
    """``jax.tree.leaves``, quiet about iterables it keeps as leaves (a generator among a frame's values)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return jax.tree.leaves(value)


def _as_host_array(value: object) -> np.ndarray | None:
    if isinstance(value, jax.core.Tracer):
        return None
    if isinstance(value, jax.Array):
        if value.is_deleted() or not value.is_fully_addressable:
            return None
        try:
            return np.asarray(value)
        except Exception:  # a typed PRNG key and other extended dtypes do not convert
            return None
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    return None


def _array_summary(name: str, value: object, array: np.ndarray) -> ValueSummary:
    summary = ValueSummary(name, "array", type(value).__name__, shape=list(array.shape), dtype=str(array.dtype))
    flat = array.ravel()
    summary.values = np.array2string(flat[:FEW], precision=4, threshold=FEW) + (" ..." if flat.size > FEW else "")
    if flat.size and (is_inexact(array.dtype) or np.issubdtype(array.dtype, np.integer)):
        as_float = flat.astype(np.float64) if not np.iscomplexobj(flat) else np.abs(flat)
        finite = as_float[np.isfinite(as_float)]
        summary.nan_count = int(np.isnan(as_float).sum())
        summary.inf_count = int(np.isinf(as_float).sum())
        if finite.size:
            summary.minimum, summary.maximum = float(np.min(finite)), float(np.max(finite))
            summary.mean = float(finite.mean())
    return summary


def summarize(name: str, value: Any) -> ValueSummary | None:
    """A value of a frame as data; None for modules, functions and classes (the frame's tools, not its data)."""
    if isinstance(value, (types.ModuleType, type)) or inspect.isroutine(value) or isinstance(value, types.FrameType):
        return None
    array = _as_host_array(value)
    if array is not None:
        return _array_summary(name, value, array)
    if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer) and value.is_deleted():
        return ValueSummary(
            name,
            "deleted",
            type(value).__name__,
            shape=list(value.shape),
            dtype=str(value.dtype),
            values="(its buffer was deleted: donated to a call, or .delete())",
        )
    if isinstance(value, jax.core.Tracer):
        forward = _as_host_array(primal_value(value))
        if forward is not None:  # under grad: the forward value the derivative is taken at
            summary = _array_summary(name, value, forward)
            summary.kind = "primal"
            return summary
        aval = getattr(value, "aval", None)
        return ValueSummary(
            name,
            "tracer",
            type(value).__name__,
            shape=list(getattr(aval, "shape", ()) or ()),
            dtype=str(getattr(aval, "dtype", "")),
            values="(traced: no concrete value)",
        )
    if isinstance(value, (bool, int, float, complex)):
        summary = ValueSummary(name, "number", type(value).__name__, values=repr(value))
        if isinstance(value, float):
            summary.nan_count, summary.inf_count = int(value != value), int(value in (float("inf"), float("-inf")))
            summary.minimum = summary.maximum = summary.mean = value if np.isfinite(value) else None
        return summary
    if isinstance(value, (list, tuple, dict)) or hasattr(type(value), "tree_flatten"):
        leaves = [leaf for leaf in tree_leaves(value) if _as_host_array(leaf) is not None]
        if leaves:
            parts = [_array_summary(name, leaf, _as_host_array(leaf)) for leaf in leaves]  # type: ignore[arg-type]
            finite = [p for p in parts if p.minimum is not None]
            return ValueSummary(
                name,
                "pytree",
                type(value).__name__,
                leaves=len(parts),
                nan_count=sum(p.nan_count for p in parts),
                inf_count=sum(p.inf_count for p in parts),
                minimum=min((p.minimum for p in finite), default=None),  # type: ignore[type-var]
                maximum=max((p.maximum for p in finite), default=None),  # type: ignore[type-var]
                values=shown(jax.tree.map(lambda leaf: getattr(leaf, "shape", leaf), value), limit=120, quoted=False),
            )
    return ValueSummary(name, "other", type(value).__name__, values=shown(_safe_repr(value), limit=120, quoted=False))


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception as error:  # a user's __repr__ may raise: say so rather than fail the report
        return f"<{type(value).__name__}: repr raised {type(error).__name__}>"


def frame_values(frame: types.FrameType) -> tuple[list[ValueSummary], list[str]]:
    """Every local of ``frame`` described, and the names of its arguments."""
    code = frame.f_code
    count = (
        code.co_argcount
        + code.co_kwonlyargcount
        + bool(code.co_flags & inspect.CO_VARARGS)
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    )
    arguments = list(code.co_varnames[:count])
    values = []
    for name, value in dict(frame.f_locals).items():
        if name.startswith("__"):
            continue
        summary = summarize(name, value)
        if summary is not None:
            values.append(summary)
    return values, arguments


def host_copy(value: object) -> object:
    """``value`` with its arrays as NumPy copies (for ``--ns``); None when it holds no concrete value."""
    array = _as_host_array(value)
    if array is not None:
        return np.array(array, copy=True)
    if isinstance(value, jax.core.Tracer):
        forward = _as_host_array(primal_value(value))
        return None if forward is None else np.array(forward, copy=True)
    if isinstance(value, (list, tuple, dict)):
        try:
            return jax.tree.map(lambda leaf: host_copy(leaf) if _as_host_array(leaf) is not None else leaf, value)
        except Exception:
            return value
    return value
