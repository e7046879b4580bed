"""Why a primitive made NaN or inf: the causes the report's explanation and the fixes both name (what usually
makes each primitive produce them is its row's ``forward_cause``, ``_nans/primitives.py``)."""

from __future__ import annotations

import jax.numpy as jnp

from jaxmagic.probes._nans.fixes.library_parameters import parameter_default
from jaxmagic.probes._nans.primitives import primitive
from jaxmagic.probes._nans.search.found import NanProducer, OperandValue


def overflowed(p: NanProducer) -> str:
    """Why an arithmetic operation made inf from finite values: its result is above its dtype's largest
    value (float16's is 65504) - not 0 * inf, which needs an inf to begin with; "" for anything else."""
    dtype = next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "")
    if p.value == "inf" and p.primitive == "convert_element_type" and p.output_dtype.startswith(("float", "bfloat")):
        narrow = p.output_dtype
        if not p.operands or p.operands[0].dtype == narrow:
            return ""
        got = p.operands[0].value
        return (
            f"its {p.operands[0].dtype} value {got} is above {narrow}'s largest, {_largest(narrow)} "
            f"(`jnp.finfo(jnp.{narrow}).max`): converting it to {narrow} overflowed to inf"
        )
    if p.value != "inf" or not primitive(p.primitive).overflows or not dtype or written_inf(p) is not None:
        return ""
    return (
        f"the result is above the largest {dtype} value ({_largest(dtype)}, `jnp.finfo(jnp.{dtype}).max`): it "
        "overflowed to inf"
    )


def written_inf(p: NanProducer) -> OperandValue | None:
    """The infinity written into the program (a literal: `x * jnp.inf`) that the operation got, if any: then its
    inf was passed on, not made by overflowing."""
    return next((op for op in p.operands if op.constant and op.value.lstrip("-+") == "inf"), None)


def _largest(dtype: str) -> str:
    """ "65504" for float16 (bfloat16's and float32's: 3.40282e+38)."""
    try:
        return f"{float(jnp.finfo(dtype).max):.6g}"
    except (TypeError, ValueError):
        return "its largest value"


def is_a_fix(text: str) -> bool:
    """Whether a NaN probe's fix text says what to do, not only the usual cause (``nans.fixes`` words a
    cause alone as "`exp`: typically ..." or "`mul`: passed on an inf ...", which must not be shown as the report's fix)."""
    head = text.split(":", 1)
    return bool(text) and not (len(head) == 2 and head[1].lstrip().startswith(("typically ", "passed on an inf ")))


_VERB = {"add": "added to it", "add_any": "added to it", "sub": "subtracted from it", "max": "it was floored at"}


def lost_constant_cause(p: NanProducer) -> str:
    """Why the zero operand was 0 when the program adds a constant to it that its low-precision dtype holds as
    0.0 (``lost_constant``): "the constant added to it (`1e-8`) is 0.0 in float16: float16 cannot hold numbers
    below ~6e-08". Only what was seen: the number when the source wrote one, a library parameter's default
    said to be its default; "" when there is no such constant or the source wrote 0."""
    lost = p.lost_constant
    if lost is None or lost.written_value == 0.0:
        return ""
    verb = _VERB.get(lost.operation, "used")
    cannot = f"{lost.dtype} cannot hold numbers below ~{lost.smallest:.0e}"
    if lost.observed_lost:
        return f"the constant {verb} (`{lost.written}`) is 0.0 in {lost.dtype}: {cannot}"
    default = parameter_default(p.library_function, lost.written) if lost.written and p.library_function else None
    if isinstance(default, (int, float)) and not isinstance(default, bool) and 0 < abs(default) < lost.smallest / 2:
        return (
            f"the constant {verb} (`{lost.written}`, {default:g} by default in `{p.library_function}`) is "
            f"0.0 in {lost.dtype}: {cannot}"
        )
    named = f" (`{lost.written}`)" if lost.written else ""
    return f"the constant {verb}{named} is 0.0 in {lost.dtype}, so it does not keep the value from 0 ({cannot})"
