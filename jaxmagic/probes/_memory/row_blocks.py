"""A program's results a block of rows at a time, when its traced program says that is the same computation.

A pairwise program (``exp(-(pts[:, None] - pts[None, :]) ** 2) @ w``) reads one input twice: as the rows
of its result (``pts[:, None]``: row i of the result needs ``pts[i]`` alone) and whole (``pts[None, :]``,
``w``: every row needs all of them). Halving every input is a smaller problem, not the same one in pieces.
This module finds, from the traced program alone, which uses of an input carry the rows of every result:

* each value is either **free** of those uses, or has a **row axis** - index i along it depends on row i
  of the input alone. The rows pass through elementwise operations, broadcasts, reshapes that keep the
  axis, transposes, reductions, sorts and cumulative operations along other axes, a matrix product that
  does not contract them, slices that keep all of them, and the calls (``jit``, ``custom_jvp``) around them;
* a free value combined with a row-carrying one must not vary along the row axis (size 1 there, or a
  broadcast along it), else row i would need more than row i: anything else and the split is refused;
* a split is kept when every result has a row axis. Every subset of an input's direct uses is tried
  (an input read at most ``MAX_USES`` times).

``block_program`` then builds the program that computes the results with ``jax.lax.map`` over blocks of
the input's rows, each block's equations bound again with the block's size where a shape names the rows
(``broadcast_in_dim``, ``reshape``, ``slice``) - the program a user gets by writing the function with a
block ``q`` where it reads the input as rows. ``ways_down`` compiles it for the device and measures it.
"""

from __future__ import annotations

import dataclasses
import itertools
import linecache
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.recorded_sources import user_frame
from jaxmagic._jax.types import Atom, Equation, Jaxpr, Params, Program, Value

MAX_USES = 4  # uses of one input split every way (2**4 - 1 subsets)

ELEMENTWISE = frozenset(
    "add sub mul div rem pow max min neg abs exp exp2 log log1p expm1 tanh logistic sin cos tan asin acos atan "
    "sinh cosh asinh acosh atanh sqrt rsqrt cbrt integer_pow square sign floor ceil round is_finite not and or "
    "xor eq ne lt le gt ge select_n convert_element_type nextafter atan2 erf erfc erf_inv lgamma digamma clamp "
    "copy copy_p real imag conj reduce_precision shift_left shift_right_logical shift_right_arithmetic "
    "population_count stop_gradient".split()
)
REDUCTIONS = frozenset(
    "reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor argmax argmin".split()
)
CUMULATIVE = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())
CALL_JAXPR = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
              "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
              "checkpoint": "jaxpr", "remat": "jaxpr"}  # fmt: skip


class _Frame(Protocol):
    """What a frame of JAX's recorded traceback (``source_info_util.Frame``) gives here."""

    file_name: str
    start_line: int


class NotRows(Exception):
    """Why a split does not give the rows of every result (said to the user when no split does)."""


@dataclasses.dataclass
class RowUse:
    """One equation reading the input as rows: where (the user's line, and the text it reads it with)."""

    equation: int
    line: Any = None  # jax's source_info Frame of the user's line, or None
    text: str = ""  # "pts[:, None]" when the line's columns say


@dataclasses.dataclass
class RowSplit:
    input: int  # the flat input whose rows are mapped
    rows: int  # how many
    uses: list[RowUse]  # the uses that read it as rows (the other uses read it whole)
    whole: bool  # every use reads it as rows: blocks of the input alone
    out_axes: tuple[int, ...]  # each result's row axis
    rank: int = 1  # the input's


@dataclasses.dataclass
class _Walk:
    """One pass over a jaxpr: states (row axis, or None for free) and, when evaluating, values."""

    block: int  # the block's rows (evaluating), or the input's (analysing)
    rows: int  # the input's rows
    evaluate: bool
    states: dict[Atom, int | None] = dataclasses.field(default_factory=dict)
    constant: dict[Atom, frozenset[int]] = dataclasses.field(
        default_factory=dict
    )  # free var -> axes it does not vary along
    values: dict[Atom, Value] = dataclasses.field(default_factory=dict)


def row_splits(closed: Program) -> tuple[list[RowSplit], list[str]]:
    """Every split of an input's uses that gives the rows of every result; and why the others do not."""
    jaxpr, _ = jaxpr_parts.closed_parts(closed)
    found: list[RowSplit] = []
    refused: list[str] = []
    for index, var in enumerate(jaxpr.invars):
        shape = tuple(getattr(var.aval, "shape", ()))
        uses = [k for k, eqn in enumerate(jaxpr.eqns) if any(v is var for v in eqn.invars)]
        if not shape or shape[0] < 2 or not uses or len(uses) > MAX_USES or any(v is var for v in jaxpr.outvars):
            continue
        for count in range(len(uses), 0, -1):
            for chosen in itertools.combinations(uses, count):
                try:
                    axes = _analyse(closed, index, set(chosen), shape[0])
                except NotRows as why:
                    refused.append(str(why))
                    continue
                row_uses = [_use(jaxpr.eqns[k], k, var) for k in chosen]
                found.append(RowSplit(index, shape[0], row_uses, count == len(uses), axes, len(shape)))
    return found, list(dict.fromkeys(refused))


def block_program(closed: Program, split: RowSplit, block: int) -> Callable[..., list[Value]]:
    """The program computing ``closed``'s results with ``jax.lax.map`` over blocks of ``block`` rows of the
    split's input (``block`` divides its rows): flat inputs in, flat outputs out, traceable."""
    jaxpr, consts = jaxpr_parts.closed_parts(closed)
    chosen = {u.equation for u in split.uses}

    def run(*flat: Any) -> list[Value]:
        x = flat[split.input]
        blocks = x.reshape((split.rows // block, block) + tuple(x.shape[1:]))

        def one(rows: Any) -> list[Value]:
            walk = _Walk(block, split.rows, True)
            return _walk_top(walk, jaxpr, consts, list(flat), split.input, chosen, rows)

        stacked = jax.lax.map(one, blocks)
        outs = []
        for value, axis in zip(stacked, split.out_axes):
            moved = jnp.moveaxis(value, 0, axis)  # (..., blocks, block, ...): the rows in order
            outs.append(moved.reshape(moved.shape[:axis] + (split.rows,) + moved.shape[axis + 2 :]))
        return outs

    return run


def _analyse(closed: Program, index: int, chosen: set[int], rows: int) -> tuple[int, ...]:
    jaxpr, consts = jaxpr_parts.closed_parts(closed)
    walk = _Walk(rows, rows, False)
    _walk_top(walk, jaxpr, consts, [None] * len(jaxpr.invars), index, chosen, None)
    axes = [_state(walk, v) for v in jaxpr.outvars]
    if any(a is None for a in axes):
        raise NotRows("a result does not depend on those rows")
    return tuple(int(a) for a in axes if a is not None)


def _walk_top(
    walk: _Walk, jaxpr: Jaxpr, consts: Sequence[Value], flat: list[Value], index: int, chosen: set[int], rows: Any
) -> list[Value]:
    """The top-level jaxpr: the input read as rows by the chosen equations, whole by the others."""
    for var, value in zip(jaxpr.constvars, consts):
        _bind(walk, var, None, value)
    for var, value in zip(jaxpr.invars, flat):
        _bind(walk, var, None, value)
    target = jaxpr.invars[index]
    for k, eqn in enumerate(jaxpr.eqns):
        if k in chosen:
            states = [0 if v is target else _state(walk, v) for v in eqn.invars]
            values = [rows if v is target else _value(walk, v) for v in eqn.invars] if walk.evaluate else []
        else:
            states = [_state(walk, v) for v in eqn.invars]
            values = [_value(walk, v) for v in eqn.invars] if walk.evaluate else []
        _equation(walk, eqn, states, values)
    return [_value(walk, v) for v in jaxpr.outvars] if walk.evaluate else []


def _walk_inner(
    walk: _Walk, eqn: Equation, states: list[int | None], values: list[Value]
) -> tuple[list[int | None], list[Value]]:
    """A call's program, inlined: its equations walked with the caller's states (and values)."""
    jaxpr, consts = jaxpr_parts.closed_parts(eqn.params[CALL_JAXPR[eqn.primitive.name]])
    inner = _Walk(walk.block, walk.rows, walk.evaluate)
    for var, value in zip(jaxpr.constvars, consts):
        _bind(inner, var, None, value)
    for var, outer, state, value in itertools.zip_longest(jaxpr.invars, eqn.invars, states, values):
        _bind(inner, var, state, value)
        inner.constant[var] = (
            walk.constant.get(outer, frozenset()) if not jaxpr_parts.is_literal(outer) else frozenset()
        )
    for eqn in jaxpr.eqns:
        ins = [_state(inner, v) for v in eqn.invars]
        _equation(inner, eqn, ins, [_value(inner, v) for v in eqn.invars] if inner.evaluate else [])
    out_values = [_value(inner, v) for v in jaxpr.outvars] if inner.evaluate else []
    return [_state(inner, v) for v in jaxpr.outvars], out_values


def _bind(walk: _Walk, var: Atom, state: int | None, value: Value) -> None:
    walk.states[var] = state
    if walk.evaluate:
        walk.values[var] = value


def _state(walk: _Walk, var: Atom) -> int | None:
    return None if jaxpr_parts.is_literal(var) else walk.states.get(var)


def _value(walk: _Walk, var: Atom) -> Value:
    return var.val if jaxpr_parts.is_literal(var) else walk.values[var]


def _shape(var: Atom) -> tuple[int, ...]:
    return tuple(getattr(getattr(var, "aval", None), "shape", ()) or ())


def _equation(walk: _Walk, eqn: Equation, states: list[int | None], values: list[Value]) -> None:
    name = eqn.primitive.name
    if all(s is None for s in states):  # free of the rows: as it is, full size
        outs = jaxpr_parts.bind_equation(eqn, values) if walk.evaluate else [None] * len(eqn.outvars)
        constant = _constant_axes(walk, eqn)
        for var, value in zip(eqn.outvars, outs):
            _bind(walk, var, None, value)
            walk.constant[var] = constant
        return
    if name in CALL_JAXPR and CALL_JAXPR[name] in eqn.params:
        out_states, outs = _walk_inner(walk, eqn, states, values)
        for var, state, value in itertools.zip_longest(eqn.outvars, out_states, outs):
            _bind(walk, var, state, value)
        return
    axis, params, sliced = _rule(walk, eqn, states)
    if walk.evaluate:
        operands = [
            jax.lax.slice_in_dim(v, 0, walk.block, axis=axis) if k in sliced else v for k, v in enumerate(values)
        ]
        outs = jaxpr_parts.bind_equation(jaxpr_parts.with_params(eqn, **params) if params else eqn, operands)
    else:
        outs = [None] * len(eqn.outvars)
    out_axes = axis if isinstance(axis, list) else [axis] * len(eqn.outvars)
    for var, out_axis, value in zip(eqn.outvars, out_axes, outs):
        _bind(walk, var, out_axis, value)


def _rule(walk: _Walk, eqn: Equation, states: list[int | None]) -> tuple[Any, Params, set[int]]:
    """(the results' row axis, the parameters to bind at the block's size, operands to slice to the block)."""
    name, params = eqn.primitive.name, eqn.params
    rows = sorted({s for s in states if s is not None})
    line = f"`{name}`"
    if name == "dot_general":
        return _dot_general(eqn, states), {}, set()
    if len(rows) != 1:
        raise NotRows(f"{line} combines values whose rows lie along different axes")
    (a,) = rows
    if name in ELEMENTWISE or name in ("sort", "concatenate") and params.get("dimension") != a:
        return a, {}, _free_operands(walk, eqn, states, a)
    if name == "broadcast_in_dim":
        out = params["broadcast_dimensions"][a]
        return out, {"shape": _with(params["shape"], out, walk.block)}, set()
    if name == "reshape":
        out = _kept_axis(_shape(eqn.invars[0]), tuple(params["new_sizes"]), a)
        return out, {"new_sizes": _with(params["new_sizes"], out, walk.block)}, set()
    if name == "transpose":
        return list(params["permutation"]).index(a), {}, set()
    if name == "squeeze" and a not in params["dimensions"]:
        return a - sum(1 for d in params["dimensions"] if d < a), {}, set()
    if name in REDUCTIONS and a not in params["axes"]:
        return a - sum(1 for d in params["axes"] if d < a), {}, set()
    if name in CUMULATIVE and params.get("axis") != a:
        return a, {}, set()
    if name == "slice" and _whole_axis(params, a, _shape(eqn.invars[0])[a]):
        return a, {"limit_indices": _with(params["limit_indices"], a, walk.block)}, set()
    raise NotRows(f"{line} reads the rows along the axis it works on, or is not one the split knows")


def _dot_general(eqn: Equation, states: list[int | None]) -> int:
    (contract_l, contract_r), (batch_l, batch_r) = eqn.params["dimension_numbers"]
    lhs, rhs = states
    rank_l, rank_r = len(_shape(eqn.invars[0])), len(_shape(eqn.invars[1]))
    free_l = [d for d in range(rank_l) if d not in contract_l and d not in batch_l]
    free_r = [d for d in range(rank_r) if d not in contract_r and d not in batch_r]
    if lhs is not None and rhs is None and lhs in free_l:
        return len(batch_l) + free_l.index(lhs)
    if rhs is not None and lhs is None and rhs in free_r:
        return len(batch_l) + len(free_l) + free_r.index(rhs)
    if lhs is not None and rhs is not None and lhs in batch_l and batch_r[list(batch_l).index(lhs)] == rhs:
        return list(batch_l).index(lhs)
    raise NotRows("`dot_general` sums over the rows")


def _free_operands(walk: _Walk, eqn: Equation, states: list[int | None], a: int) -> set[int]:
    """Operands free of the rows beside row-carrying ones: fine when they do not vary along the row axis
    (sliced to the block when they have all its rows)."""
    sliced = set()
    for k, (var, state) in enumerate(zip(eqn.invars, states)):
        shape = _shape(var)
        if state is not None or not shape or shape[a] == 1:
            continue
        if a in walk.constant.get(var, frozenset()):
            sliced.add(k)
            continue
        raise NotRows(f"`{eqn.primitive.name}` reads, beside the rows, a value that varies along them")
    return sliced


def _constant_axes(walk: _Walk, eqn: Equation) -> frozenset[int]:
    """Axes along which a free value does not vary (a broadcast along them, an iota across them)."""
    name, params = eqn.primitive.name, eqn.params
    out = _shape(eqn.outvars[0]) if eqn.outvars else ()
    if name == "broadcast_in_dim":
        dims = params["broadcast_dimensions"]
        operand = _shape(eqn.invars[0])
        held = walk.constant.get(eqn.invars[0], frozenset())
        return frozenset(
            [d for d in range(len(out)) if d not in dims]
            + [dims[j] for j in range(len(operand)) if operand[j] == 1 or j in held]
        )
    if name == "iota":
        return frozenset(d for d in range(len(out)) if d != params.get("dimension"))
    if name in ELEMENTWISE:
        sets = [
            walk.constant.get(v, frozenset()) | {d for d, n in enumerate(_shape(v)) if n == 1}
            for v in eqn.invars
            if _shape(v)
        ]
        return frozenset.intersection(*sets) if sets else frozenset(range(len(out)))
    return frozenset()


def _kept_axis(before: tuple[int, ...], after: tuple[int, ...], a: int) -> int:
    for c in range(len(after)):
        if after[c] == before[a] and math.prod(after[:c]) == math.prod(before[:a]):
            return c
    raise NotRows("`reshape` mixes the rows with another axis")


def _whole_axis(params: Params, a: int, size: int) -> bool:
    strides = params.get("strides") or (1,) * len(params["start_indices"])
    return params["start_indices"][a] == 0 and params["limit_indices"][a] == size and strides[a] == 1


def _with(values: Sequence[int], index: int, size: int) -> tuple[int, ...]:
    changed = list(values)
    changed[index] = size
    return tuple(changed)


def _use(eqn: Equation, k: int, var: Atom) -> RowUse:
    frame = user_frame(eqn.source_info.traceback)
    return RowUse(k, frame, _text_at(frame) if frame is not None else "")


def _text_at(frame: _Frame) -> str:
    """The source text a frame's columns span (``pts[:, None]``), when it is one line."""
    start, end = getattr(frame, "start_column", None), getattr(frame, "end_column", None)
    if frame.start_line != getattr(frame, "end_line", frame.start_line) or start is None or end is None:
        return ""
    text = linecache.getline(frame.file_name, frame.start_line)
    return text[start:end].strip() if 0 <= start < end <= len(text) else ""
