"""The producer's fixes, tried on the values the search recorded, before any report offers one.

Which candidates are tried depends on what the search found (``producer.py``): the operation's own
(a clamp, an epsilon, a guard; ``fixes/values.py``) for an operation the user wrote; the constant its
low-precision dtype held as 0 (``lost_constant``) replaced by one it holds; the value an epsilon is added to
clamped before it (``added_epsilon``); and, for a half-precision overflow in the derivative JAX computed for
a line, that line in float32 (``fixes/widened.py``) - no rewrite of a derivative's operation is the user's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Equation, Program, Value
from jaxmagic.probes._nans.fixes import lost_constant, primal_fixes
from jaxmagic.probes._nans.fixes.value_fixes import (
    DIVISION_EPS,
    FixTrial,
    representable_eps,
    try_clamped_before,
    try_constant,
    try_fixes,
)
from jaxmagic.probes._nans.fixes.widened import HALF, in_float32_code, try_line_in_float32
from jaxmagic.probes._nans.search import integer_overflow
from jaxmagic.probes._nans.search.equation_origin import user_line

if TYPE_CHECKING:
    from jaxmagic.probes._nans.search.found import NanProducer

# (eqn, inputs, path) of the producer: where its fixes are tried
ProducerSite: TypeAlias = tuple[Equation, list[Value], tuple[Position, ...]]
# (the equation adding a constant its dtype holds as 0, the constant's operand)
LostSite: TypeAlias = tuple[Equation, int]
# the producer's site, and those of its causes found: a lost constant, an added epsilon (the add), an integer
# operation that wrapped around, the primal of a derivative's operation
Sites: TypeAlias = tuple[
    ProducerSite, LostSite | None, Equation | None, integer_overflow.IntegerSite | None, primal_fixes.PrimalSite | None
]

# arithmetic that overflows a half-precision dtype to inf from finite values (a sum of 65,546 ones in float16)
_OVERFLOWING = ("mul", "add", "add_any", "sub", "neg", "dot_general", "reduce_sum", "integer_pow", "square", "exp")


def tried(
    producer: NanProducer, sites: Sites, program: Program, values: list[Value], outputs: list[Value] | None
) -> list[FixTrial]:
    """Every fix of ``producer`` the search can try, tried. ``sites``: ``(eqn, inputs, path)`` of the producer,
    ``(equation, operand)`` of a lost constant or None, the add of an epsilon or None, the integer operation that
    wrapped around on the way to its inputs or None (computed in a wider dtype: the cause, tried first)."""
    (eqn, inputs, path), lost_site, epsilon_site, integer_site, primal_site = sites
    wrapped: list[FixTrial] = []
    if producer.integer_overflow is not None and integer_site is not None:
        wrapped = integer_overflow.wider_trials(producer.integer_overflow, integer_site)
    if producer.derivative and primal_site is not None:
        # an operation of JAX's derivative rule: the fixes are the user's operation's, never a guard in the rule
        primal_eqn, primal_inputs, _ = primal_site
        order = max(producer.name_stack.count("jvp("), 1)
        return wrapped + primal_fixes.tried(primal_eqn, primal_inputs, order)
    if producer.derivative and producer.phase != "forward":  # JAX's backward pass: no operation there is the user's
        return wrapped + _derivative_overflow(producer, program, values, outputs)
    # an operation the user wrote (one under jvp too: the NaN probe may find it a forward value)
    trials = wrapped + try_fixes(eqn, inputs, path, program, values, outputs)
    if producer.lost_constant is not None and lost_site is not None:
        trials.append(_constant_trial(producer.lost_constant, lost_site, eqn, path, program, values, outputs))
    if producer.added_epsilon is not None and epsilon_site is not None:
        added = producer.added_epsilon
        trials.append(try_clamped_before(epsilon_site, added.operand, added.code, eqn, path, program, values, outputs))
    return trials


def _derivative_overflow(
    producer: NanProducer, program: Program, values: list[Value], outputs: list[Value] | None
) -> list[FixTrial]:
    """A derivative's operation that overflowed half precision: its line in float32, tried on the program."""
    half = next((op.dtype for op in producer.operands if op.dtype in HALF), "")
    if not half or producer.value != "inf" or producer.primitive not in _OVERFLOWING or producer.line is None:
        return []
    expression = producer.expression or producer.line.code.strip()
    code = in_float32_code(expression, half) or "v.astype(jnp.float32)"
    return [try_line_in_float32(producer.line, code, user_line, program, values, outputs)]


def _constant_trial(
    lost: lost_constant.LostConstant,
    site: LostSite,
    producer_eqn: Equation,
    path: tuple[Position, ...],
    program: Program,
    values: list[Value],
    outputs: list[Value] | None,
) -> FixTrial:
    """The constant the dtype held as 0 replaced by the nearest epsilon it holds (float16: 1e-4), the
    program evaluated again: the fix written where the constant is (``+ 1e-4``, a library's ``eps=1e-4``)."""
    # the usual epsilon of a denominator when the dtype holds it (bfloat16 holds 1e-8), else the power of ten
    # just above the dtype's smallest normal number; never one smaller than what was written
    value = max(
        representable_eps(abs(lost.written_value or 0.0), lost.dtype), representable_eps(DIVISION_EPS, lost.dtype)
    )
    lost.replacement = value
    code = f"{value:g}"
    if lost.expression and lost.written and lost.written in lost.expression:
        head, _, tail = (
            lost.expression.rpartition(lost.written) if lost.operand else lost.expression.partition(lost.written)
        )
        code = head + code + tail
    written, operand = site
    return try_constant(written, operand, value, code, producer_eqn, path, program, values, outputs)
