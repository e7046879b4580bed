"""One evaluator of a traced program, equation by equation; what an evaluation does differently is its policy.

Every reader here that evaluates a jaxpr itself walks the same loop: its constants and arguments bound
to the program's variables, then each equation's inputs read, its outputs computed, and bound in turn.
They differ only in what they do at an equation:

* the NaN producer search (``jaxpr_eval.Walk``) binds every equation, runs a batch of them ahead of its
  listener, and opens an equation after it ran, to look inside it;
* a NaN fix's trial replaces one equation's outputs (the fixed operation) and opens the equations on the
  way to it, a loop traced by ``lax.scan``/``lax.while_loop`` with its body evaluated the same way;
* the float32 trial of a user's line binds that line's equations widened and opens the calls holding it;
* the sharding probe's instrumented copy asks after each equation for its outputs' shardings, and the
  trial of a collective's fix passes one equation's input on in place of its output.

So there is one loop (:meth:`Interpreter.evaluate`), and each of those is a subclass of
:class:`Interpreter` that overrides its hooks: ``enter`` (the level's values before its first
equation), ``before`` and ``after`` an equation, ``outputs`` (bind it as it is, replace its outputs, or
``descend`` into its sub-programs) and ``leave``. The rules by which an equation's inputs reach its
sub-programs are here too: ``descend`` (traced: a loop's body evaluated under ``lax.scan`` /
``lax.while_loop``, a cond's branches under ``lax.switch``), ``call_parts`` and ``branch_parts``
(concrete: the sub-program a call runs, the branch a cond's index picks) and ``solve_parts``
(``custom_linear_solve``'s ``solve`` program).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.types import Equation, Jaxpr, Program, Value, Var


@dataclasses.dataclass(frozen=True)
class Position:
    """Where an opened equation sits: the equation, and the iteration (scan/while) or branch (cond)."""

    eqn: Equation
    kind: str  # "scan", "while", "cond" or "call"
    index: int | None = None  # iteration of a loop, branch of a cond, None for a call


@dataclasses.dataclass
class Level:
    """One program being evaluated: the top one, or a sub-program an equation opened."""

    jaxpr: Jaxpr
    args: list[Value]
    path: tuple[Position, ...]  # the equations opened to reach it, outermost first; () at the top
    env: dict[Var, Value]  # var -> value
    index: int = 0  # the equation evaluated now (a policy's ``enter`` may start further on)
    state: Any = None  # what the policy keeps for this level

    def read(self, var: Any) -> Any:
        return var.val if jaxpr_parts.is_literal(var) else self.env[var]


class Interpreter:
    """Evaluates a program equation by equation; a subclass is a policy, overriding the hooks it needs.
    The base binds every equation as it is (``jaxpr_parts.bind_equation``)."""

    def run(self, program: Program, args: list[Value]) -> list[Value]:
        """The outputs of ``program`` (a ``ClosedJaxpr`` or an open ``Jaxpr``) on ``args``."""
        jaxpr, consts = jaxpr_parts.closed_parts(program)
        return self.evaluate(jaxpr, consts, args)

    def evaluate(
        self, jaxpr: Jaxpr, consts: list[Value], args: list[Value], path: tuple[Position, ...] = (), state: Any = None
    ) -> list[Value]:
        """The outputs of one level: ``jaxpr`` on ``consts`` and ``args``, reached through ``path``;
        ``state``: what the policy keeps for the level, given by the equation that opens it."""
        level = Level(jaxpr, list(args), path, {}, state=state)
        level.env.update(zip(jaxpr.constvars, consts))
        level.env.update(zip(jaxpr.invars, args))
        self.enter(level)
        try:
            while level.index < len(jaxpr.eqns):
                eqn = jaxpr.eqns[level.index]
                self.before(level, eqn)
                inputs = [level.read(v) for v in eqn.invars]
                outputs = self.outputs(level, eqn, inputs)
                level.env.update(zip(eqn.outvars, outputs))
                self.after(level, eqn, inputs, outputs)
                level.index += 1
        except Exception:
            self.leave(level)
            raise
        self.leave(level)
        return [level.read(v) for v in jaxpr.outvars]

    # -- the hooks ------------------------------------------------------------------

    def enter(self, level: Level) -> None:
        """The level's constants and arguments are bound; no equation has run."""

    def before(self, level: Level, eqn: Equation) -> None:
        """``eqn`` is next; its inputs are not read yet."""

    def outputs(self, level: Level, eqn: Equation, inputs: list[Value]) -> list[Value]:
        """``eqn``'s outputs from ``inputs``: bound as it is. A policy may replace them, or ``descend``."""
        return jaxpr_parts.bind_equation(eqn, inputs)

    def after(self, level: Level, eqn: Equation, inputs: list[Value], outputs: list[Value]) -> None:
        """``eqn`` ran: its outputs are bound."""

    def leave(self, level: Level) -> None:
        """The level's last equation ran, or one of them raised (which goes on after this)."""

    # -- descending into an equation's sub-programs ------------------------------------

    def descend(self, eqn: Equation, inputs: list[Value], path: tuple[Position, ...]) -> list[Value]:
        """``eqn``'s outputs computed by evaluating its sub-programs with this interpreter, traced where
        the equation loops or branches (its body evaluated under ``lax.scan``/``lax.while_loop``, its
        branches under ``lax.switch``); a call is evaluated as its sub-program. ``path`` is passed on
        unchanged: the sub-programs are reached through the same equations."""
        name = eqn.primitive.name
        if name == "scan":
            consts, carry, xs = jaxpr_parts.scan_operands(eqn, inputs)
            body, body_consts = jaxpr_parts.closed_parts(eqn.params["jaxpr"])
            n = len(carry)

            def step(c: list[Value], x: list[Value] | None) -> tuple[list[Value], list[Value]]:
                out = self.evaluate(body, body_consts, [*consts, *c, *(x or [])], path)
                return out[:n], out[n:]

            final, ys = jax.lax.scan(
                step, carry, xs or None, length=int(eqn.params["length"]), reverse=bool(eqn.params.get("reverse"))
            )
            return [*final, *ys]
        if name == "while":
            cond_consts, body_consts, carry = jaxpr_parts.while_operands(eqn, inputs)
            cond, cond_closed = jaxpr_parts.closed_parts(eqn.params["cond_jaxpr"])
            body, body_closed = jaxpr_parts.closed_parts(eqn.params["body_jaxpr"])
            return list(
                jax.lax.while_loop(
                    lambda c: self.evaluate(cond, cond_closed, [*cond_consts, *c], path)[0],
                    lambda c: self.evaluate(body, body_closed, [*body_consts, *c], path),
                    list(carry),
                )
            )
        if name == "cond":
            branches = [jaxpr_parts.closed_parts(b) for b in eqn.params["branches"]]
            return list(
                jax.lax.switch(
                    inputs[0],
                    [lambda *a, b=b: self.evaluate(b[0], b[1], list(a), path) for b in branches],
                    *inputs[1:],
                )
            )
        called = call_parts(eqn, inputs)
        if called is not None:
            return self.evaluate(*called, path)
        raise NotImplementedError(f"`{name}` cannot be evaluated with an operation inside it replaced")


def call_parts(eqn: Equation, inputs: list[Value]) -> tuple[Jaxpr, list[Value], list[Value]] | None:
    """``(jaxpr, consts, inputs)`` of the one sub-program an equation runs as a call - taking the
    equation's inputs and giving its outputs (``jit``, ``closed_call``, ``remat``, ``custom_jvp_call``,
    ...); None for any other equation."""
    subs = jaxpr_parts.sub_jaxprs(eqn)
    if len(subs) != 1:
        return None
    jaxpr, consts = jaxpr_parts.closed_parts(subs[0])
    if len(jaxpr.invars) != len(inputs) or len(jaxpr.outvars) != len(eqn.outvars):
        return None
    return jaxpr, consts, list(inputs)


def branch_parts(eqn: Equation, inputs: list[Value]) -> tuple[int, Jaxpr, list[Value], list[Value]]:
    """``(branch, jaxpr, consts, inputs)`` of the branch a ``cond`` equation's concrete index picks."""
    branches = eqn.params["branches"]
    index = int(max(0, min(len(branches) - 1, int(inputs[0]))))
    jaxpr, consts = jaxpr_parts.closed_parts(branches[index])
    return index, jaxpr, consts, list(inputs[1:])


def solve_parts(eqn: Equation, inputs: list[Value]) -> tuple[Jaxpr, list[Value], list[Value]]:
    """``(jaxpr, consts, inputs)`` of what a ``custom_linear_solve`` equation computes: its ``solve``
    program on that program's constants and the right-hand side (JAX's own impl); the other three
    programs serve its derivatives."""
    lengths, programs = eqn.params["const_lengths"], eqn.params["jaxprs"]
    start = sum(lengths[:2])  # the inputs are the constants of matvec, vecmat, solve, transpose_solve, then b
    solve_inputs = [*inputs[start : start + lengths[2]], *inputs[sum(lengths) :]]
    jaxpr, consts = jaxpr_parts.closed_parts(programs.solve)
    return jaxpr, consts, solve_inputs
