"""Does a value JAX computed while differentiating reach the call's result through forward operations?

Under ``jax.grad``/``value_and_grad`` (or a library's: ``nnx.value_and_grad``) every operation is traced
under ``jvp``, the forward value of a line and the coefficients of its derivative alike; only the
transposed half is named ``transpose``. So a NaN made under ``jvp`` is ambiguous by its name. The data
flow of the program is not: when the producer's output reaches what the call returns through
operations none of which is transposed - a train step that returns the loss it differentiated - the
NaN is (also) a value of the forward computation. So is one that reaches, through such operations, a
value the program computes and nothing reads: the forward result ``jax.grad`` computes and drops (the
loss, ``_`` in its program), or a forward value the user's code left unused. A coefficient of a derivative
is computed to be read by the transposed half. That is an observation on the program; its absence tells
nothing, so it only ever clears the "derivative" reading.
"""

from __future__ import annotations

from typing import Any

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Equation, Jaxpr, Program

RESULT, DROPPED = "result", "dropped"


def readable_by_reach(program: Program, stack: str) -> bool:
    """Whether the data flow can tell a forward value here: in reverse mode only (``jax.grad``: the derivative
    is the transposed half), under one ``jvp``. In forward mode (``jax.jvp``, ``jacfwd``, the outer half of
    ``jax.hessian``) the tangents flow to the result through non-transposed operations too: there a
    coefficient of the derivative (``0.5 / sqrt(x)``) reaches the result like a forward value."""
    return stack.count("jvp(") == 1 and _transposes(jaxpr_parts.closed_parts(program)[0], set())


def _transposes(jaxpr: Jaxpr, seen: set[int]) -> bool:
    """Whether ``jaxpr`` or a sub-program of it (a jitted train step's body) holds a transposed equation."""
    if id(jaxpr) in seen:
        return False
    seen.add(id(jaxpr))
    for eqn in jaxpr.eqns:
        if "transpose" in str(eqn.source_info.name_stack):
            return True
        if any(_transposes(jaxpr_parts.closed_parts(sub)[0], seen) for sub in jaxpr_parts.sub_jaxprs(eqn)):
            return True
    return False


def reaches_result_forward(program: Program, eqn: Equation, path: tuple[Position, ...]) -> str:
    """Whether ``eqn``'s outputs flow to ``program``'s outputs through non-transposed equations only
    (``RESULT``), or to a value computed that way and read by nothing (``DROPPED``: the loss ``jax.grad``
    drops); "" when neither.

    ``path`` is where ``eqn`` sits (the opened equations above it, outermost first), as the walk
    recorded it. A loop or a branch on the way counts all of its outputs as reached (conservative:
    a value in a loop body may reach any of the loop's results)."""
    levels = [jaxpr_parts.closed_parts(program)[0]]
    for position in path:
        inner = _level_of(position)
        if inner is None:
            return ""
        levels.append(inner)
    reached: set[int] = {id(v) for v in eqn.outvars}
    start: Any = eqn
    for depth in range(len(levels) - 1, -1, -1):
        jaxpr = levels[depth]
        reached_outputs = _flow(jaxpr, start, reached)
        if _dropped(jaxpr, reached):
            return DROPPED
        if depth == 0:
            return RESULT if reached_outputs else ""
        opened = path[depth - 1]
        if not reached_outputs:
            return ""
        if opened.kind == "call":
            reached = {id(opened.eqn.outvars[i]) for i in reached_outputs if i < len(opened.eqn.outvars)}
        else:  # scan / while / cond: which result a body output becomes is not tracked here
            reached = {id(v) for v in opened.eqn.outvars}
        start = opened.eqn
    return ""


def _level_of(position: Position) -> Jaxpr | None:
    """The jaxpr the walk opened at ``position``."""
    eqn = position.eqn
    if position.kind == "cond":
        return jaxpr_parts.closed_parts(eqn.params["branches"][int(position.index or 0)])[0]
    subs = jaxpr_parts.sub_jaxprs(eqn)
    if position.kind == "scan":
        return jaxpr_parts.closed_parts(eqn.params["jaxpr"])[0]
    if position.kind == "while":
        return jaxpr_parts.closed_parts(eqn.params["body_jaxpr"])[0]
    return jaxpr_parts.closed_parts(subs[0])[0] if len(subs) == 1 else None


def _flow(jaxpr: Jaxpr, start: Equation, reached: set[int]) -> list[int]:
    """Propagate ``reached`` (ids of variables) forward from ``start`` through ``jaxpr``'s non-transposed
    equations; the indices of ``jaxpr``'s outputs it reaches."""
    begun = False
    for candidate in jaxpr.eqns:
        if not begun:
            begun = candidate is start
            continue
        if "transpose" in str(candidate.source_info.name_stack):
            continue
        if any(id(v) in reached for v in candidate.invars if not jaxpr_parts.is_literal(v)):
            reached |= {id(v) for v in candidate.outvars}
    return [i for i, v in enumerate(jaxpr.outvars) if not jaxpr_parts.is_literal(v) and id(v) in reached]


def _dropped(jaxpr: Jaxpr, reached: set[int]) -> bool:
    """Whether a reached value of ``jaxpr`` made by a non-transposed equation is read by nothing: not by an
    equation, not an output (the forward result ``jax.grad`` drops: ``_`` of its program)."""
    read = {id(v) for e in jaxpr.eqns for v in e.invars if not jaxpr_parts.is_literal(v)}
    read |= {id(v) for v in jaxpr.outvars if not jaxpr_parts.is_literal(v)}
    return any(
        id(v) in reached and id(v) not in read
        for e in jaxpr.eqns
        if "transpose" not in str(e.source_info.name_stack)
        for v in e.outvars
    )
