"""Fixes of a derivative that is infinite where it is taken, written where the user can write them.

The gradient (or ``jax.jvp``, ``jacfwd``, ``hessian``) of ``jnp.sqrt``, ``jnp.log`` or ``x ** 0.5`` at 0 is
made by JAX's derivative rule: ``0.5 / sqrt(x)`` is inf, and ``0 * inf`` NaN after it. That division is
JAX's code: a guard around it is no fix anyone can write. The fix is at the user's operation - the
primal ``sqrt``/``log``/``pow`` whose derivative it is: its input clamped away from 0, or the double
``where`` (jax-ml/jax#1052), so that the derivative of what the user writes is finite there. Each candidate
is tried on the primal operation's recorded input, with the same primitive and parameters, and its
derivatives - as many as the failing program takes (``jax.hessian``: two) - evaluated there by ``jax.jvp``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import jax
import jax.numpy as jnp

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Equation, Value
from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.value_fixes import FixTrial, bad_text, representable_eps
from jaxmagic.probes._nans.search.equation_origin import user_line
from jaxmagic.report import SourceLine

# the operations whose derivative is infinite at a point their value is finite (0 for all three)
SINGULAR = ("sqrt", "log", "pow")

# an elementwise operation on the primal's first input, fixed (its other inputs bound)
Elementwise: TypeAlias = Callable[[jax.Array], jax.Array]
# (inputs, path) of a singular operation the walk evaluated, by id(equation)
PrimalRecord: TypeAlias = tuple[list[Value], tuple[Position, ...]]
# (eqn, inputs, path) of the user's operation a derivative's operation is of
PrimalSite: TypeAlias = tuple[Equation, list[Value], tuple[Position, ...]]


def _candidates(eqn: Equation, value: jax.Array) -> list[tuple[FixKey, str, Callable[[list[Value]], Elementwise]]]:
    """(key, code, fixed) of each fix of the primal ``eqn`` (``fixed`` maps its first input to its output)."""
    name = eqn.primitive.name
    dtype = str(getattr(value, "dtype", "float32"))
    eps = representable_eps(1e-12 if name != "log" else 1e-30, dtype)

    def bound(v: jax.Array, rest: list[Value] | None = None) -> jax.Array:
        return jaxpr_parts.bind_equation(eqn, [v, *(rest or [])])[0]

    def clamp(rest: list[Value]) -> Elementwise:
        return lambda v: bound(jnp.maximum(v, jnp.asarray(eps, v.dtype)), rest)

    def double_where(rest: list[Value]) -> Elementwise:
        def fixed(v: jax.Array) -> jax.Array:
            ok = v > 0
            return jnp.where(ok, bound(jnp.where(ok, v, jnp.ones_like(v)), rest), jnp.zeros_like(v))

        return fixed

    written = {
        "sqrt": ("jnp.sqrt(jnp.maximum(v, {eps}))", "jnp.where(v > 0, jnp.sqrt(jnp.where(v > 0, v, 1.0)), 0.0)"),
        "log": ("jnp.log(jnp.maximum(v, {eps}))", "jnp.where(v > 0, jnp.log(jnp.where(v > 0, v, 1.0)), 0.0)"),
        "pow": ("jnp.maximum(v, {eps}) ** p", "jnp.where(v > 0, jnp.where(v > 0, v, 1.0) ** p, 0.0)"),
    }[name]
    return [
        (FixKey.PRIMAL_CLAMP, written[0].format(eps=f"{eps:g}"), clamp),
        (FixKey.DOUBLE_WHERE, written[1], double_where),
    ]


def _derivatives(fixed: Elementwise, value: jax.Array, order: int) -> list[jax.Array]:
    """The first ``order`` derivatives of an elementwise ``fixed`` at ``value`` (forward mode, along ones)."""
    found, function = [], fixed
    for _ in range(order):
        function = (lambda g: lambda x: jax.jvp(g, (x,), (jnp.ones_like(x),))[1])(function)
        found.append(function(value))
    return found


def tried(eqn: Equation, inputs: list[Value], order: int) -> list[FixTrial]:
    """Each fix of the primal operation ``eqn`` (``sqrt``, ``log``, ``pow``) tried on its recorded ``inputs``:
    its value and its first ``order`` derivatives finite there? Never raises."""
    if eqn.primitive.name not in SINGULAR or not inputs:
        return []
    value, rest = jnp.asarray(inputs[0]), list(inputs[1:])
    trials = []
    for key, code, make in _candidates(eqn, value):
        trial = FixTrial(key, code)
        try:
            with jax.debug_nans(False), jax.debug_infs(False):
                fixed = make(rest)
                outputs = [fixed(value), *_derivatives(fixed, value, max(order, 1))]
        except Exception as error:
            trial.result = f"not tried: {type(error).__name__}"
            trials.append(trial)
            continue
        trial.tried = True
        bad_value, bad_derivative = bad_text(outputs[:1]), bad_text(outputs[1:])
        trial.finite = not bad_value and not bad_derivative
        derivative = "its derivative" if order <= 1 else f"its first {order} derivatives"
        trial.result = (
            f"finite, and {derivative} finite"
            if trial.finite
            else bad_value or f"finite, but {derivative} {bad_derivative.removeprefix('still ')}"
        )
        trial.call_result = (
            "not tried: the program's derivative was traced from your line as written; the fixed operation's "
            "derivatives were evaluated at its input instead"
        )
        trials.append(trial)
    return trials


def primal_of(
    eqn: Equation,
    line: SourceLine | None,
    made_by: dict[int, Equation],
    read_by: dict[int, list[Equation]],
    recorded: dict[int, PrimalRecord],
) -> PrimalSite | None:
    """``(eqn, inputs, path)`` of the user's ``sqrt``/``log``/``pow`` on the same line whose derivative ``eqn``
    computes: the one that made an input of it (``0.5 / sqrt(x)``) or that reads one of its inputs (``g / x``
    for ``log``, ``x ** (p - 1)`` for ``pow``); None when there is none. ``made_by``: id(var) -> equation;
    ``read_by``: id(var) -> the recorded equations reading it; ``recorded``: id(eqn) -> (inputs, path)."""
    if line is None:
        return None
    variables = [v for v in eqn.invars if not jaxpr_parts.is_literal(v)]
    near = [made_by.get(id(v)) for v in variables] + [r for v in variables for r in read_by.get(id(v), [])]
    for candidate in near:
        if candidate is None or candidate is eqn or id(candidate) not in recorded:
            continue
        inputs, path = recorded[id(candidate)]
        at = user_line(candidate, path)
        if at is not None and (at.filename, at.lineno) == (line.filename, line.lineno):
            return candidate, inputs, path
    return None
