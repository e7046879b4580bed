"""An epsilon added to a value that went below 0: ``jax.lax.rsqrt(var + 1e-5)`` with ``var`` -0.5.

A variance computed as ``E[x**2] - E[x]**2`` rounds below 0 for a nearly constant row, the more so in
bfloat16 (flax#1491, equinox#314): the epsilon added to keep ``rsqrt`` away from 0 does not lift a value
that is negative, and ``rsqrt``, ``sqrt`` or ``log`` of it is NaN. The fix is on the value the epsilon is
added to - ``jnp.maximum(var, 0.0) + 1e-5``, clamped before the epsilon, which then keeps it from 0 - not
on the operation's input. The producer search has found the operation; this module reads, in the
program's data flow, the ``add`` of a positive constant written into the program that made its input, and
from the columns JAX recorded for it, how the source wrote both operands (``var``, ``1e-5``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.types import Equation
from jaxmagic.probes._nans.fixes.lost_constant import operand_source
from jaxmagic.report import SourceLine

# operations of a value that must not be negative, and which of their operands that is
_DOMAIN_OPERAND = {"sqrt": 0, "rsqrt": 0, "log": 0}
_ADDS = ("add", "add_any")


@dataclasses.dataclass
class AddedEpsilon:
    """The ``add`` of a positive constant that made the producer's input, and how the source wrote it."""

    operand: int  # which operand of the add is the value the constant is added to (the one clamped)
    value: float  # the constant, as the program holds it (1e-05)
    dtype: str  # "bfloat16"
    expression: str = ""  # the add's source expression: "var + 1e-5"; "" when not read
    clamped: str = ""  # the value's text: "var"
    written: str = ""  # the constant's text: "1e-5", "eps"
    line: SourceLine | None = None  # the line it is written on (a library's line when the library wrote it)

    @property
    def code(self) -> str:
        """The add as the fix writes it: ``jnp.maximum(var, 0.0) + 1e-5`` (``v`` when the text was not read)."""
        value = self.clamped or "v"
        constant = self.written or f"{self.value:g}"
        return f"jnp.maximum({value}, 0.0) + {constant}"


def find(producer_eqn: Equation, made_by: dict[int, Equation]) -> tuple[AddedEpsilon, Equation] | None:
    """``(the epsilon, the add equation)`` when the producer's domain operand was made by adding a positive
    constant written into the program (that its dtype holds: one it turns into 0 is ``lost_constant``'s);
    None otherwise. ``made_by``: the producer search's equation of each variable (by ``id``)."""
    index = _DOMAIN_OPERAND.get(producer_eqn.primitive.name)
    if index is None or index >= len(producer_eqn.invars):
        return None
    eqn = made_by.get(id(producer_eqn.invars[index]))
    if eqn is None or eqn.primitive.name not in _ADDS or len(eqn.invars) != 2:
        return None
    for k, operand in enumerate(eqn.invars):
        other = eqn.invars[1 - k]
        if not jaxpr_parts.is_literal(operand) or jaxpr_parts.is_literal(other):
            continue
        value = np.asarray(operand.val)
        if value.size != 1 or not (np.issubdtype(value.dtype, np.floating) or str(value.dtype) == "bfloat16"):
            continue
        number = float(value.astype(np.float32).reshape(()))
        if not 0.0 < number < float("inf"):
            continue
        found = AddedEpsilon(operand=1 - k, value=number, dtype=str(value.dtype))
        source = operand_source(eqn, k)
        if source is not None:
            found.line = source.line
            found.expression, found.written, found.clamped = source.expression, source.written, source.other
        return found, eqn
    return None
