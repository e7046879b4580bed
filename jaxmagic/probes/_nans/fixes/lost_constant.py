"""A constant the program's low-precision dtype turned into 0: the ``eps`` that float16 cannot hold.

``x / (jnp.sqrt(v) + 1e-8)`` in float16: the Python float is converted to the operation's dtype when the
program is traced, and 1e-8 is below float16's smallest positive value (~6e-08), so the program adds
``0.0:f16[]`` and where ``v`` is 0 it divides 0 by 0. Optax's ``adam`` does the same with its default
``eps`` (optax#1754, optax#1755). The producer search has found the division; this module follows its
zero operand back, in the program's data flow, through the ``add``/``sub``/``max`` equations that made it,
to a constant written into the program (a ``Literal``) whose value is 0 in a low-precision floating dtype.

What the constant was in the source is read from the columns JAX records with the equation's innermost
frame: the operand's text (``1e-8``, ``eps``) and, when it is a number, its value. A name's value is not
in the program; the words (``nans.fixes``) may name a library parameter's default, never as observed.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache

import jax.numpy as jnp
import numpy as np

from jaxmagic._jax import jaxpr_parts, recorded_sources
from jaxmagic._jax.types import Equation, Literal
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import code_kind

# The floating dtypes narrow enough that a usual epsilon (1e-8, 1e-6) may not survive the conversion
LOW_PRECISION = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
# the operand of the producer that was 0, by primitive (a division's denominator, a root's or log's input)
_ZERO_OPERAND = {"div": 1, "rem": 1, "log": 0, "sqrt": 0, "rsqrt": 0, "pow": 0}
_FOLLOWED = ("add", "add_any", "sub", "max")  # the equations a constant is added or floored with
_DEPTH = 6  # equations followed back at most: an epsilon sits next to the value it guards


@dataclasses.dataclass
class LostConstant:
    """A constant added to the value that made the NaN, which its low-precision dtype turned into 0."""

    operation: str  # the equation the constant was written into: "add"
    operand: int  # which of its operands the constant is
    dtype: str  # "float16"
    became: str  # what the program holds: "0.0"
    written: str = ""  # its text in the source where the operation ran: "1e-8", "eps"; "" when not recorded
    written_value: float | None = None  # the number written, when the text is one (1e-08); None for a name
    smallest: float = 0.0  # the dtype's smallest positive value (float16: 5.96e-08)
    expression: str = ""  # the source expression of the operation: "jnp.sqrt(v) + 1e-8"
    line: SourceLine | None = None  # the line it is written on (a library's line when the library wrote it)
    replacement: float = 0.0  # the epsilon the dtype holds that was tried in its place (float16: 1e-4)

    @property
    def observed_lost(self) -> bool:
        """The source wrote a nonzero number that the dtype holds as 0 (not a 0 written as such)."""
        return self.written_value is not None and self.written_value != 0.0


def low_precision(dtype: str) -> bool:
    return str(dtype) in LOW_PRECISION


def smallest_positive(dtype: str) -> float:
    """The dtype's smallest positive value (its smallest subnormal): float16's 5.96e-08."""
    return float(jnp.finfo(dtype).smallest_subnormal)


def find(producer_eqn: Equation, made_by: dict[int, Equation]) -> tuple[LostConstant, Equation] | None:
    """``(the constant, its equation)`` when the producer's zero operand was made by ``add``/``sub``/``max``
    equations, one of which adds a ``Literal`` that is 0 in a low-precision dtype; None otherwise.
    ``made_by``: the producer search's equation of each variable (by ``id``) evaluated so far."""
    index = _ZERO_OPERAND.get(producer_eqn.primitive.name)
    if index is None or index >= len(producer_eqn.invars):
        return None
    frontier = [producer_eqn.invars[index]]
    for _ in range(_DEPTH):
        following = []
        for var in frontier:
            eqn = made_by.get(id(var))
            if eqn is None or eqn.primitive.name not in _FOLLOWED:
                continue
            for k, operand in enumerate(eqn.invars):
                if jaxpr_parts.is_literal(operand):
                    lost = _lost(eqn, k, operand)
                    if lost is not None:
                        return lost, eqn
                else:
                    following.append(operand)
        if not following:
            return None
        frontier = following
    return None


def _lost(eqn: Equation, k: int, literal: Literal) -> LostConstant | None:
    value = np.asarray(literal.val)
    dtype = str(value.dtype)
    if not low_precision(dtype) or value.size != 1 or float(value.astype(np.float32).reshape(())) != 0.0:
        return None
    found = LostConstant(eqn.primitive.name, k, dtype, "0.0", smallest=smallest_positive(dtype))
    _read_source(found, eqn, k)
    return None if found.written_value == 0.0 else found  # the source wrote 0: nothing was lost


def _read_source(found: LostConstant, eqn: Equation, k: int) -> None:
    """The operand's text and value from the columns of the equation's innermost frame (its own code: the
    user's or a library's)."""
    source = operand_source(eqn, k)
    if source is None:
        return
    found.line = source.line
    if source.expression:
        found.expression, found.written, found.written_value = source.expression, source.written, source.number


@dataclasses.dataclass
class OperandSource:
    """What the source wrote for an operand of a two-operand equation (``v + 1e-8``, ``jnp.maximum(v, eps)``)."""

    line: SourceLine  # the line the equation was traced on (a library's line when the library wrote it)
    expression: str = ""  # the equation's source expression: "jnp.sqrt(v) + 1e-8"; "" when not read
    written: str = ""  # the operand's text: "1e-8", "eps"
    other: str = ""  # the other operand's text: "jnp.sqrt(v)"
    number: float | None = None  # the operand's value when its text is a number


def operand_source(eqn: Equation, k: int) -> OperandSource | None:
    """The text of operand ``k`` of ``eqn`` (and of the other one) from the columns of the equation's
    innermost frame outside jaxmagic; None when the equation spans lines or no frame was recorded."""
    # the innermost frame outside jaxmagic: a search traces under ``recorded_sources.tracing_where_traced``, whose own
    # frame records each traceback
    frames = recorded_sources.user_frames(eqn.source_info.traceback)
    frame = next((f for f in frames if code_kind(f.file_name) != "jaxmagic"), None)
    if frame is None or frame.start_line != frame.end_line:
        return None
    text = linecache.getline(frame.file_name, frame.start_line)
    found = OperandSource(SourceLine(frame.file_name, frame.start_line, str(frame.function_name), text.strip()))
    part = text.encode()[frame.start_column : frame.end_column].decode(errors="replace").strip()
    try:
        node = ast.parse(part, mode="eval").body
    except SyntaxError:
        return found
    operands: list[ast.expr] = []
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        operands = [node.left, node.right]
    elif isinstance(node, ast.Call) and not node.keywords:  # jnp.maximum(v, eps)
        operands = list(node.args)
    if len(operands) != 2 or k >= 2:
        return found
    written, other = operands[k], operands[1 - k]
    found.expression = part
    found.written = ast.get_source_segment(part, written) or ast.unparse(written)
    found.other = ast.get_source_segment(part, other) or ast.unparse(other)
    try:
        number = ast.literal_eval(written)
    except (ValueError, SyntaxError):
        return found
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        found.number = float(number)
    return found
