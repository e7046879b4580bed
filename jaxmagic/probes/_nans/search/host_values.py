"""A traced program's values read on the host, and written as the report shows them.

The producer search evaluates a program equation by equation: these read an
equation's inputs and outputs with NumPy (a tracer or a non-float array reads
as nothing), tell which hold NaN or inf, and write the value an operand had at
the first bad element of the output (``-1.0``, or ``f32[3] in [-1.0, 2.0]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import jax
import numpy as np

from jaxmagic._jax import finite_flags, jaxpr_parts
from jaxmagic._jax.types import Equation, Value
from jaxmagic.probes._nans.nonfinite import is_inexact
from jaxmagic.report.wording import short_dtype


def host_array(value: Value) -> np.ndarray | None:
    """``value`` as a NumPy array of floats (or complex numbers); None for a tracer or anything else."""
    if isinstance(value, jax.core.Tracer):
        return None
    if isinstance(value, jax.Array) and not is_inexact(value.dtype):
        return None  # an integer or boolean array: not read (reading it waits for the operation making it)
    try:
        array = np.asarray(value)
    except Exception:
        return None
    if not is_inexact(array.dtype):
        return None
    return array


def holds_none(value: Value, want_nan: bool) -> bool:
    """``value`` is known to hold no NaN (``want_nan``) or no non-finite number, from its check made once
    as the walk ran it (``finite_flags``): no need to read it again."""
    flags = finite_flags.known(value)
    return flags is not None and not (flags[0] or (not want_nan and flags[1]))


def bad_mask(value: Value, want_nan: bool) -> np.ndarray | None:
    """Where ``value`` holds NaN (``want_nan``) or any non-finite number; None where it holds none."""
    if holds_none(value, want_nan):
        return None
    array = host_array(value)
    if array is None:
        return None
    mask = np.isnan(array) if want_nan else ~np.isfinite(array)
    return mask if mask.any() else None


def any_bad(values: Iterable[Value], want_nan: bool = False) -> bool:
    """Some of ``values`` hold NaN (``want_nan``) or any non-finite number."""
    return any(bad_mask(v, want_nan) is not None for v in values)


def only_infinities(values: Sequence[Value]) -> bool:
    """Some of ``values`` hold inf, none holds NaN."""
    return any_bad(values) and not any_bad(values, want_nan=True)


def _number(x: object) -> str:
    if isinstance(x, np.floating):
        return str(x)  # the shortest text that reads back as this float32/float64
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, (np.complexfloating, complex)):
        return repr(complex(x))
    if isinstance(x, (np.bool_, bool)):
        return str(bool(x))
    return str(x.item() if hasattr(x, "item") else x)


JITTERS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)  # tried in turn, times the mean of the diagonal


def definiteness(matrices: np.ndarray, index: tuple[int, ...], eqn: Equation) -> tuple[str, str]:
    """What a Cholesky factorization got, at the first bad element's matrix: ``"a 4x4 matrix whose smallest
    eigenvalue is -1.2e-08 (not positive definite)"``, and the smallest jitter (a multiple of the mean
    of its diagonal, added to every matrix's diagonal) with which the program's own equation ``eqn``
    factors the input to finite values ("" if none did)."""
    matrix = matrices[tuple(index[:-2])] if matrices.ndim > 2 and len(index) >= 2 else matrices
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or not np.isfinite(matrix).all():
        return shape_text(matrices), ""
    n = matrix.shape[0]
    symmetric = np.tril(matrix) + np.tril(matrix, -1).T  # what jnp.linalg.cholesky factors: the lower triangle
    smallest = np.linalg.eigvalsh(symmetric.astype(np.float64))[0]
    text = f"a {n}x{n} matrix whose smallest eigenvalue is {smallest:.3g}" + (
        " (not positive definite)" if smallest <= 0 else ""
    )
    scale = float(np.mean(np.abs(np.diag(symmetric)))) or 1.0
    for jitter in JITTERS:
        try:
            jittered = (matrices + jitter * scale * np.eye(n)).astype(matrices.dtype)
            if not any_bad(jaxpr_parts.bind_equation(eqn, [jittered])):
                return text, f"{jitter * scale:.0e}"
        except Exception:
            return text, ""
    return text, ""


def operand_at(value: Value, out_shape: tuple[int, ...], index: tuple[int, ...]) -> str:
    """The operand's value at the output's element ``index`` (broadcast to ``out_shape``); a summary of
    the whole operand when no single element applies (``f32[3] in [-1.0, 2.0], 1 zero(s)``)."""
    array = np.asarray(value)
    try:
        if array.size == 1:
            return _number(array.reshape(())[()])
        return _number(np.broadcast_to(array, out_shape)[index])
    except Exception:
        pass
    if (is_inexact(array.dtype) or np.issubdtype(array.dtype, np.number)) and array.size:
        finite = array[np.isfinite(array)] if is_inexact(array.dtype) else array
        spread = f" in [{_number(finite.min())}, {_number(finite.max())}]" if finite.size else " all non-finite"
        zeros = int(np.count_nonzero(array == 0))
        return f"{shape_text(array)}{spread}" + (f", {zeros} zero(s)" if zeros else "")
    return shape_text(array)


def shape_text(array: np.ndarray) -> str:
    """``f32[3,4]``."""
    return f"{short_dtype(str(array.dtype))}[{','.join(map(str, array.shape))}]"


def readable(value: Value) -> bool:
    try:
        np.asarray(value)
    except Exception:
        return False
    return not isinstance(value, jax.core.Tracer)


def has_inexact(values: Iterable[Value]) -> bool:
    return any(host_array(v) is not None for v in values)
