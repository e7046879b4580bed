"""NaN fix rules decided by a dtype's limit being crossed: a value converted to a float dtype too narrow to
hold it (JAX sums float16 in float32 and converts back: a sum of 78,000 is inf in float16, whose largest is
65,504), and an integer operation that wrapped around before the value went non-finite (``256 ** k`` in
int32, then ``1 / 0``). Each names the dtype, its limit (``jnp.finfo``/``jnp.iinfo``) and the operation that
crossed it, and offers the wider dtype only when computing it there was tried on the failing values.

Each rule is declared once (``FixRule``) beside the function that words it; ``fixes.RULES`` orders them.
"""

from __future__ import annotations

import inspect

import jax.numpy as jnp

from jaxmagic.probes._nans.causes import overflowed
from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.fix_rule import FixRule, code_of
from jaxmagic.probes._nans.fixes.tried_fixes import choose, values_of
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.search.found import NanProducer


def _narrowed_fix(report: NanReport, p: NanProducer) -> str:
    """A value computed in a wider float dtype (a float16 sum, accumulated in float32) that its conversion to
    the narrow one made inf: keep it in the wider dtype, offered when that trial was finite."""
    narrow, wide = p.output_dtype, p.operands[0].dtype
    library = p.library_function
    inside = f"`{library}`{code_of(p)}" if library else f"the value{code_of(p)}"
    said = f"{inside}: {overflowed(p)}."
    choice = choose(report, p, [FixKey.FLOAT32])
    if choice.offered is None:
        return f"{said} {choice.tried_text}".rstrip()
    takes_dtype = "dtype" in _jnp_parameters(library)
    keep = (
        f"`{library}(..., dtype=jnp.{wide})`, or its input `.astype(jnp.{wide})` first"
        if takes_dtype
        else f"its inputs `.astype(jnp.{wide})`"
    )
    tried = choice.tried_text.replace(": ", f" (the value kept in {wide}, not converted to {narrow}): ", 1)
    return f"{said} Keep it in {wide} - {keep} - or scale the values down before. {tried}"


def _jnp_parameters(library: str) -> list[str]:
    """The parameters of a ``jnp`` function (``jnp.sum``: ``a, axis, dtype, ...``); [] for anything else."""
    function = getattr(jnp, library.removeprefix("jnp."), None) if library.startswith("jnp.") else None
    try:
        return list(inspect.signature(function).parameters) if callable(function) else []
    except (TypeError, ValueError):
        return []


NARROWED_OVERFLOW = FixRule(
    key="narrowed_overflow",
    applies=lambda p: (
        p.primitive == "convert_element_type" and not p.derivative and bool(p.operands) and bool(overflowed(p))
    ),
    words=_narrowed_fix,
    says="`jnp.finfo(jnp.",
    tries=(FixKey.FLOAT32,),
)


def _integer_overflow_fix(report: NanReport, p: NanProducer) -> str:
    """An integer operation on the way to the producer's inputs wrapped around: the dtype and its limit, what
    it should have been, and the operation computed in float32 (int64 under x64) on the same values."""
    wrapped = p.integer_overflow
    assert wrapped is not None, "said only of a producer an integer wrap-around fed"
    at = f" at index {wrapped.index}" if wrapped.index else ""
    what = f"`{wrapped.expression}`" if wrapped.expression else f"`{wrapped.operation}`"
    line = f" (line {wrapped.line.lineno})" if wrapped.line is not None else ""
    said = (
        f"{what}{line} overflowed {wrapped.dtype}: its largest value is {wrapped.limit} "
        f"(`jnp.iinfo(jnp.{wrapped.dtype}).max`), and `{wrapped.operation}` gave {wrapped.exact}{at}, which "
        f"wrapped around to {wrapped.wrapped} - then `{p.primitive}` made {p.value} of it ({p.description})."
    )
    by_code = {t.code: t for t in p.fix_trials if t.key == FixKey.WIDER}
    finite = [t for t in by_code.values() if t.finite]
    where = values_of(report)
    if not finite:
        tried = "; ".join(f"in {t.code}: {t.result}" for t in by_code.values())
        return f"{said} Computing it in a wider dtype was tried on {where} and does not hold it ({tried})."
    for trial in p.fix_trials:
        trial.offered = trial in finite[:1]
    first = finite[0]
    how = (
        "cast its integer inputs to float first (`x.astype(jnp.float32)`, or write a literal as a float: `256.0`)"
        if first.code == "float32"
        else 'compute it in int64 (`x.astype(jnp.int64)`, with `jax.config.update("jax_enable_x64", True)`)'
    )
    other = (
        ' Or compute it in int64 under `jax.config.update("jax_enable_x64", True)` (not tried: x64 is off in '
        "this process)."
        if first.code == "float32" and "int64" not in by_code
        else ""
    )
    return (
        f"{said} Compute it in {first.code}: {how}. Tried on {where}: `{wrapped.operation}` in {first.code} gives "
        f"{first.result}.{other}"
    )


INTEGER_OVERFLOW = FixRule(
    key="integer_overflow",
    applies=lambda p: p.integer_overflow is not None,
    words=_integer_overflow_fix,
    says="`jnp.iinfo(jnp.",
    tries=(FixKey.WIDER,),
)
