"""Evaluate a traced program equation by equation on concrete values, looking inside sub-programs.

``jax.core.eval_jaxpr`` runs a program's top-level equations; a ``scan`` or a
nested ``jit`` is one opaque step there. To say *which* operation inside a
loop body made a value, the NaN producer search needs to open those steps.
This module does that generically, as a policy of the one evaluator (``jaxpr_interpreter``):

* every equation is first run as a whole (``bind``: compiled, fast);
* equations that need no decision of the listener to run (no sub-program it
  may open, no effect, no host callback) are run ahead of it, up to ``AHEAD``
  at a time, each output's NaN/inf check dispatched beside them
  (``finite_flags``, read once for the batch); then the listener sees each in
  turn, exactly as if it had run alone: the same inputs and outputs, the same
  order. Checking each value as it is made waited for each operation to finish
  and read the same value on the host at every question about it;
* a :class:`Listener` looks at its inputs and outputs and may ask to look
  inside (``look_inside``). Only then is the equation opened: the sub-programs
  are found in its parameters (``jaxpr_parts.sub_jaxprs``), and one small rule per
  primitive says how the equation's inputs reach them - ``scan`` slices ``xs``
  and threads the carry iteration by iteration, ``while`` alternates cond and
  body, ``cond``/``switch`` picks the branch its index selects. Every other
  primitive with exactly one sub-program taking the equation's inputs and
  giving its outputs (``jit``, ``closed_call``, ``remat``/``checkpoint``,
  ``custom_jvp_call``, ``custom_vjp_call``, ...) is opened as a call;
  ``custom_linear_solve`` (``jnp.linalg.solve``) as a call of its ``solve`` program;
* a loop is opened by running it once more, compiled, with a flag per
  iteration that the listener supplies (``step_flag``, traced): the first
  flagged iteration and its inputs come back from one compiled call, and only
  that iteration is evaluated equation by equation. A listener without a flag
  gets each iteration's inputs and outputs in Python, one compiled body call
  per iteration. The compiled loops and bodies are kept across walks, by the
  body program (JAX's trace cache gives the same program object for the same
  function each time it traces it) and the flag: compiling a loop costs 10-20x
  running it, and the same call is searched again whenever its cell is re-run.

An equation that cannot be opened (an opaque custom call, ``shard_map`` with
collectives, a primitive with several bodies of unknown meaning) is reported
to the listener with ``cannot_open``, and its bind's outputs stand.

A second walk of the same program on the same arguments need not evaluate
again what the first one did before anything of interest happened. The first
walk keeps a :class:`Checkpoint` on each level of calls (no loop iteration)
it went down through: where the first equation the listener marks sits
(``checkpoint``), the listener's own record then (``state``), and every value
the level computed. A walk given those checkpoints (``resume``) starts each such
level at its checkpoint, with the listener's record restored (``restore``), and
takes the values the first walk computed there instead of running the
equations again (an equation it opens is still evaluated inside): what it sees
from there on is what it would have seen from the start, the same arrays.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp

from jaxmagic._jax import finite_flags, jaxpr_parts
from jaxmagic._jax.jaxpr_interpreter import Interpreter, Level, Position, branch_parts, call_parts, solve_parts
from jaxmagic._jax.types import Equation, Program, Value, Var

MAX_LOOP_ITERATIONS = 1_000_000  # a while loop the search re-runs ended once already; this is a guard
# equations run ahead of the listener, their NaN/inf checks read at once (``finite_flags``)
AHEAD = 64
KEPT_COMPILED = 16  # compiled loops and bodies kept across walks (each holds its program and executable)

_compiled: OrderedDict[tuple[Hashable, ...], tuple[tuple[Program, ...], Callable[..., Any]]] = (
    OrderedDict()
)  # key -> (programs held, jitted function)

# what a loop searched compiled carries: (carry, carry before the flagged iteration, found, its index, iteration)
_LoopState = tuple[list[Value], list[Value], jax.Array, jax.Array, jax.Array]
# what the compiled search of a loop gives: the carry before the flagged iteration, found, its index
_Flagged = tuple[list[jax.Array], jax.Array, jax.Array]


def _kept(
    programs: tuple[Program, ...], kind: tuple[Hashable, ...], make: Callable[[], Callable[..., Any]]
) -> Callable[..., Any]:
    """The jitted function ``make()`` gives for the loop ``programs`` and ``kind``, made once and kept
    for later walks: kept by the programs' ids, and holding them so that no id is reused meanwhile."""
    key = (*map(id, programs), *kind)
    entry = _compiled.get(key)
    if entry is None or any(a is not b for a, b in zip(entry[0], programs)):
        entry = _compiled[key] = (programs, make())
        while len(_compiled) > KEPT_COMPILED:
            _compiled.popitem(last=False)
    _compiled.move_to_end(key)
    return entry[1]


class Listener:
    """What the walk asks at each equation. Override what you need."""

    step_flags = False  # True: step_flag is implemented, loops are searched compiled
    # What step_flag flags now (hashable): a compiled loop traced with one listener's flag is kept and
    # reused for any later listener of the same class with an equal key.
    step_flag_key: Hashable = None

    def look_inside(self, eqn: Equation, inputs: list[Value], outputs: list[Value], path: tuple[Position, ...]) -> bool:
        """Open this equation (or this loop iteration)? ``eqn`` is the equation being opened."""
        return False

    def visit(self, eqn: Equation, inputs: list[Value], outputs: list[Value], path: tuple[Position, ...]) -> bool:
        """An equation ran (after it was opened, if it was). Return True to end the investigation:
        the walk leaves every opened equation and goes on with the top level."""
        return False

    def cannot_open(self, eqn: Equation, path: tuple[Position, ...]) -> None:
        """``look_inside`` asked for an equation this module has no rule for."""

    @staticmethod
    def step_flag(key: Any, inputs: list[Value], outputs: list[Value]) -> jax.Array:
        """``look_inside`` for one loop iteration, as a traced boolean (inputs and outputs are tracers);
        used when ``step_flags`` is True. A function of ``key`` (the listener's ``step_flag_key``) alone."""
        raise NotImplementedError

    def checkpoint(self, eqn: Equation, outputs: list[Value]) -> bool:
        """Keep the walk's state just before this equation (the first one marked on its level)?"""
        return False

    def state(self) -> object:
        """The listener's record so far, for a later walk resuming at a checkpoint (see ``restore``)."""
        return None

    def restore(self, state: Any) -> None:
        """Take on a record made by ``state`` (a walk resuming at a checkpoint skips what made it)."""


@dataclasses.dataclass
class Checkpoint:
    """One level of a walk just before the first equation the listener marked there."""

    index: int  # the marked equation's position in its level
    eqn: Equation  # the marked equation
    args: list[Value]  # the level's arguments: resumed only on the same arrays
    env: dict[Var, Value]  # the level's values, all of them once the first walk has left the level
    state: object  # the listener's record then


def _runs_alone(eqn: Equation) -> bool:
    """Run only once the listener has seen every equation before it: one it may open, and one with
    effects or a host callback (the user's Python runs no more often than unprobed, nor earlier)."""
    return bool(jaxpr_parts.sub_jaxprs(eqn) or getattr(eqn, "effects", None) or "callback" in eqn.primitive.name)


class _EndInvestigation(Exception):
    """Raised inside an opened equation when the listener has seen enough; caught at the top level."""


@dataclasses.dataclass
class _Ahead:
    """A level's part of the walk: the chain of checkpointed calls that leads to it (None when not only
    such calls do), the checkpoint it resumed from, and the equations run ahead of the listener."""

    chain: tuple[int, ...] | None
    resumed: Checkpoint | None
    pending: list[tuple[int, Equation, list[Value], list[Value]]] = dataclasses.field(default_factory=list)


class Walk(Interpreter):
    """Evaluate ``program`` on ``args`` for ``listener``; ``run`` returns the program's outputs. The
    interpreter's policy of the producer search: every equation bound (run ahead of the listener, its
    NaN/inf checks read once a batch), then shown to the listener, which may open it."""

    def __init__(self, listener: Listener, resume: dict[tuple[int, ...], Checkpoint] | None = None) -> None:
        self.listener = listener
        # by the calls that lead to the level: see ``resume``
        self.checkpoints: dict[tuple[int, ...], Checkpoint] = {}
        self._resume = resume or {}

    def run(self, program: Program, args: list[Value]) -> list[Value]:
        """The program's outputs. With ``resume`` (a former walk's ``checkpoints`` on the same program and
        arguments), the deepest checkpoint's listener record is taken on first."""
        if self._resume:
            self.listener.restore(self._resume[max(self._resume, key=len)].state)
        return super().run(program, args)

    def _chain(self, path: tuple[Position, ...]) -> tuple[int, ...] | None:
        """The key of a level reached only through calls, each the checkpointed equation of its level
        (one line of levels per walk: what a resumed walk goes down through first); None elsewhere."""
        key: tuple[int, ...] = ()
        for position in path:
            kept = self.checkpoints.get(key) or self._resume.get(key)
            if position.kind != "call" or kept is None or kept.eqn is not position.eqn:
                return None
            key = (*key, id(position.eqn))
        return key

    # -- one level: the interpreter's hooks ------------------------------------------

    def enter(self, level: Level) -> None:
        """A level a former walk kept a checkpoint on, on the same arrays, starts at it with its values."""
        chain = self._chain(level.path)
        resumed = self._resume.get(chain) if chain is not None else None
        args = level.args
        if resumed is not None and len(resumed.args) == len(args) and all(a is b for a, b in zip(resumed.args, args)):
            level.env, level.index = dict(resumed.env), resumed.index
        else:
            resumed = None
        level.state = _Ahead(chain, resumed)

    def before(self, level: Level, eqn: Equation) -> None:
        if level.state.pending and _runs_alone(eqn):  # it runs once the listener has seen the ones before
            self._show_pending(level)

    def outputs(self, level: Level, eqn: Equation, inputs: list[Value]) -> list[Value]:
        """Bound, or what the first walk computed from these; each output's NaN/inf check dispatched."""
        resumed = level.state.resumed
        if resumed is not None and all(v in resumed.env for v in eqn.outvars):
            outputs = [resumed.env[v] for v in eqn.outvars]
        else:
            outputs = jaxpr_parts.bind_equation(eqn, inputs)
        finite_flags.note(outputs)
        return outputs

    def after(self, level: Level, eqn: Equation, inputs: list[Value], outputs: list[Value]) -> None:
        pending = level.state.pending
        pending.append((level.index, eqn, inputs, outputs))
        if _runs_alone(eqn) or len(pending) >= AHEAD:
            self._show_pending(level)

    def leave(self, level: Level) -> None:
        """At the level's end - or when an equation failed: the listener still sees the ones before it."""
        self._show_pending(level)

    def _show_pending(self, level: Level) -> None:
        """Read the checks of the equations run ahead at once; then show each to the listener."""
        pending, level.state.pending = level.state.pending, []
        finite_flags.settle()
        for index, eqn, inputs, outputs in pending:
            self._show(level, index, eqn, inputs, outputs)

    def _show(self, level: Level, index: int, eqn: Equation, inputs: list[Value], outputs: list[Value]) -> None:
        """The listener's turn at one equation that ran: checkpoint, open it if asked, visit."""
        chain, path, top = level.state.chain, level.path, not level.path
        if chain is not None and chain not in self.checkpoints and self.listener.checkpoint(eqn, outputs):
            self.checkpoints[chain] = Checkpoint(index, eqn, list(level.args), level.env, self.listener.state())
        if jaxpr_parts.sub_jaxprs(eqn) and self.listener.look_inside(eqn, inputs, outputs, path):
            try:
                self._open(eqn, inputs, path)
            except _EndInvestigation:
                if not top:
                    raise
            except Exception:  # its body does not run outside it (collectives, effects): stay outside
                self.listener.cannot_open(eqn, path)
        if self.listener.visit(eqn, inputs, outputs, path) and not top:
            raise _EndInvestigation

    # -- opening an equation -------------------------------------------------------

    def _open(self, eqn: Equation, inputs: list[Value], path: tuple[Position, ...]) -> None:
        name = eqn.primitive.name
        if name == "scan":
            self._open_scan(eqn, inputs, path)
        elif name == "while":
            self._open_while(eqn, inputs, path)
        elif name == "cond":
            index, jaxpr, consts, branch_inputs = branch_parts(eqn, inputs)
            self.evaluate(jaxpr, consts, branch_inputs, (*path, Position(eqn, "cond", index)))
        elif name == "custom_linear_solve":
            self.evaluate(*solve_parts(eqn, inputs), (*path, Position(eqn, "call")))
        else:
            called = call_parts(eqn, inputs)
            if called is None:
                self.listener.cannot_open(eqn, path)
            else:
                self.evaluate(*called, (*path, Position(eqn, "call")))

    def _body(self, program: Program) -> Callable[..., list[jax.Array]]:
        """The compiled function of a loop body (kept across walks)."""
        return _kept((program,), ("body",), lambda: jax.jit(jaxpr_parts.jaxpr_function(program)))

    def _flag(self) -> tuple[Callable[[list[Value], list[Value]], jax.Array], Hashable]:
        """The listener's flag as a function of the iteration's inputs and outputs alone, and its key
        (what a compiled loop is kept by)."""
        listener = self.listener
        flag, key = type(listener).step_flag, listener.step_flag_key
        return (lambda ins, outs: flag(key, ins, outs)), (type(listener), key)

    def _open_scan(self, eqn: Equation, inputs: list[Value], path: tuple[Position, ...]) -> None:
        consts, carry, xs = jaxpr_parts.scan_operands(eqn, inputs)
        length, reverse = int(eqn.params["length"]), bool(eqn.params.get("reverse"))
        run_body = None if self.listener.step_flags else self._body(eqn.params["jaxpr"])
        jaxpr, body_consts = jaxpr_parts.closed_parts(eqn.params["jaxpr"])
        step = 0  # in the order the scan runs its iterations
        while step < length:
            if self.listener.step_flags:
                first = self._first_flagged_scan(eqn, consts, carry, xs, step)
                if first is None:
                    return
                step, carry = first
            i = length - 1 - step if reverse else step  # the position in xs: "iteration 900"
            step_inputs = [*consts, *carry, *(x[i] for x in xs)]
            position = (*path, Position(eqn, "scan", i))
            if self.listener.step_flags:  # flagged: evaluate it op by op (its outputs come from that too)
                step_outputs = self.evaluate(jaxpr, body_consts, step_inputs, position)
            else:
                assert run_body is not None  # made whenever the listener does not flag steps
                step_outputs = list(run_body(*step_inputs))
                if self.listener.look_inside(eqn, step_inputs, step_outputs, position):
                    self.evaluate(jaxpr, body_consts, step_inputs, position)
            carry = step_outputs[: len(carry)]
            step += 1

    def _first_flagged_scan(
        self, eqn: Equation, consts: list[Value], carry: list[Value], xs: list[Value], start: int
    ) -> tuple[int, list[Value]] | None:
        """``(step, carry before it)`` of the first iteration from ``start`` on that the listener's flag
        marks, from one compiled run of the rest of the scan; None when none is marked."""
        program = eqn.params["jaxpr"]
        n_carry, length = len(carry), int(eqn.params["length"])
        reverse = bool(eqn.params.get("reverse"))
        rest = [x[: length - start] if reverse else x[start:] for x in xs]
        flag, flag_key = self._flag()

        def make() -> Callable[..., _Flagged]:
            body = jaxpr_parts.jaxpr_function(program)

            def flagged(consts: list[Value], carry: list[Value], xs: list[Value], length: int) -> _Flagged:
                def step(state: _LoopState, x: list[Value] | None) -> tuple[_LoopState, None]:
                    carry, saved, found, index, i = state
                    ins = [*consts, *carry, *(x or ())]
                    outs = body(*ins)
                    hit = jnp.logical_and(flag(ins, outs), jnp.logical_not(found))
                    saved = [jnp.where(hit, c, s) for c, s in zip(carry, saved)]
                    return (list(outs[:n_carry]), saved, found | hit, jnp.where(hit, i, index), i + 1), None

                init: _LoopState = (list(carry), list(carry), jnp.array(False), jnp.array(-1), jnp.array(0))
                final, _ = jax.lax.scan(step, init, list(xs) if xs else None, length=length, reverse=reverse)
                return final[1], final[2], final[3]

            return jax.jit(flagged, static_argnums=3)

        flagged = _kept((program,), ("scan", flag_key, n_carry, reverse), make)
        saved, found, index = flagged(consts, carry, rest, length - start)
        if not bool(found):
            return None
        return start + int(index), list(saved)

    def _open_while(self, eqn: Equation, inputs: list[Value], path: tuple[Position, ...]) -> None:
        cond_consts, body_consts, carry = jaxpr_parts.while_operands(eqn, inputs)
        flags = self.listener.step_flags
        run_cond = None if flags else self._body(eqn.params["cond_jaxpr"])
        run_body = None if flags else self._body(eqn.params["body_jaxpr"])
        jaxpr, consts = jaxpr_parts.closed_parts(eqn.params["body_jaxpr"])
        i = 0
        while i < MAX_LOOP_ITERATIONS:
            if self.listener.step_flags:
                first = self._first_flagged_while(eqn, cond_consts, body_consts, carry)
                if first is None:
                    return
                skipped, carry = first
                i += skipped
            else:
                assert run_cond is not None  # made whenever the listener does not flag steps
                if not bool(run_cond(*cond_consts, *carry)[0]):
                    return
            step_inputs = [*body_consts, *carry]
            position = (*path, Position(eqn, "while", i))
            if self.listener.step_flags:
                step_outputs = self.evaluate(jaxpr, consts, step_inputs, position)
            else:
                assert run_body is not None  # made whenever the listener does not flag steps
                step_outputs = list(run_body(*step_inputs))
                if self.listener.look_inside(eqn, step_inputs, step_outputs, position):
                    self.evaluate(jaxpr, consts, step_inputs, position)
            carry = step_outputs
            i += 1

    def _first_flagged_while(
        self, eqn: Equation, cond_consts: list[Value], body_consts: list[Value], carry: list[Value]
    ) -> tuple[int, list[Value]] | None:
        """``(iterations before it, carry before it)`` of the first iteration the listener's flag marks,
        from one compiled run of the rest of the loop; None when none is marked."""
        cond_program, body_program = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]
        flag, flag_key = self._flag()

        def make() -> Callable[..., _Flagged]:
            cond = jaxpr_parts.jaxpr_function(cond_program)
            body = jaxpr_parts.jaxpr_function(body_program)

            def flagged(cond_consts: list[Value], body_consts: list[Value], carry: list[Value]) -> _Flagged:
                def keep_going(state: _LoopState) -> jax.Array:
                    return cond(*cond_consts, *state[0])[0]

                def step(state: _LoopState) -> _LoopState:
                    carry, saved, found, index, i = state
                    ins = [*body_consts, *carry]
                    outs = body(*ins)
                    hit = jnp.logical_and(flag(ins, outs), jnp.logical_not(found))
                    saved = [jnp.where(hit, c, s) for c, s in zip(carry, saved)]
                    return list(outs), saved, found | hit, jnp.where(hit, i, index), i + 1

                init: _LoopState = (list(carry), list(carry), jnp.array(False), jnp.array(-1), jnp.array(0))
                final = jax.lax.while_loop(keep_going, step, init)
                return final[1], final[2], final[3]

            return jax.jit(flagged)

        flagged = _kept((cond_program, body_program), ("while", flag_key), make)
        saved, found, index = flagged(cond_consts, body_consts, carry)
        if not bool(found):
            return None
        return int(index), list(saved)
