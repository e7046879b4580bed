"""Every intermediate of one jitted call (``%%jax_nans --inside``), masked values too.

``jax.debug_nans`` checks only what reaches a compiled program's outputs: an
inf that ``rsqrt``, ``jnp.where``, ``jnp.nan_to_num`` or ``jnp.clip`` turned
back into a finite value is never seen. This evaluates the call's traced
program op by op, with the producer search's listener told to open every
sub-program whose inputs hold nothing made before, and names the first operation
that made a non-finite value - by the rule the plain search uses (``given.py``:
the arguments' infinities and written ones are given) - and the first one that
masked it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.jaxpr_eval import Walk
from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Equation, Program, Value
from jaxmagic.probes._nans.search.equation_origin import provenance_of, public_name, user_line
from jaxmagic.probes._nans.search.found import NanProducer
from jaxmagic.probes._nans.search.given import CAME_IN, GivenInfinities
from jaxmagic.probes._nans.search.host_values import any_bad, has_inexact
from jaxmagic.probes._nans.search.masked_rows import note_neg_inf_rows
from jaxmagic.probes._nans.search.producer import SELECTS, ProducerListener, quiet_evaluation
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import is_user_file

MAX_INSIDE_EQUATIONS = 20_000  # equations evaluated op by op per call; past it, no sub-program is opened


@dataclasses.dataclass
class InsideSearch:
    """The first operation of one jitted call's program that made a non-finite value, even when a later
    operation masked it (``rsqrt(inf) = 0``, ``jnp.where``, ``jnp.nan_to_num``, ``jnp.clip``)."""

    function: str = ""  # the jitted function: "layer_norm"
    call: int = 1  # which of its calls in the cell was evaluated
    producer: NanProducer | None = None
    masked_by: str = ""  # "jax.lax.rsqrt", "jnp.where", "jnp.nan_to_num", ...: the first operation that got it and gave finite values
    masked_primitive: str = ""  # the equation's primitive (or its jitted function's name): "rsqrt", "select_n", "jit"
    masked_line: SourceLine | None = None
    masked_provenance: Provenance | None = None
    reached_output: bool = False  # the program's result held non-finite values
    equations: int = 0  # equations evaluated one by one
    stopped_at: list[str] = dataclasses.field(default_factory=list)  # primitives it could not look inside
    budget_reached: bool = False  # more than MAX_INSIDE_EQUATIONS: later sub-programs were run whole
    failure: str = ""  # why the evaluation failed
    fix: str = ""  # the NaN probe's fix for the producer (nans.fixes), as %%jax_nans words it
    # an eager operation JAX ran with its own checks off (the branches of a `cond` under `vmap`), looked at after
    unchecked: bool = False


class _InsideListener(ProducerListener):
    """Open every sub-program whose inputs hold nothing made before; the producer is the first equation
    that made a non-finite value by the rule every search shares (``given.GivenInfinities``): infinities
    the call's arguments held or the program has written in (``jnp.where(m, s, -jnp.inf)``) are given,
    not made, and arithmetic that makes NaN of them (``0 * -inf``) made it. Then the first equation that
    got a non-finite value (not a given one) and gave only finite float values: the mask."""

    step_flags = False  # masked values never show in a loop step's inputs or outputs: each step is opened

    def __init__(self, budget: int = MAX_INSIDE_EQUATIONS) -> None:
        super().__init__(want_nan=False, strict=False)
        self.given = GivenInfinities(written_given=True)  # a written -inf is no finding of --inside
        self.budget = budget
        self.budget_reached = False
        self.masked: tuple[Equation, tuple[Position, ...]] | None = None  # (eqn, path) of the masking equation

    def look_inside(self, eqn: Equation, inputs: list[Value], outputs: list[Value], path: tuple[Position, ...]) -> bool:
        if self.stage != "producer":
            return False
        if self.result.equations >= self.budget:
            self.budget_reached = True
            return False
        self.given.enter(path)
        if self.given.made(eqn, inputs, outputs) == CAME_IN:
            return False  # a non-finite value came in: it was made before
        self._opened.add(id(eqn))
        return True

    def visit(self, eqn: Equation, inputs: list[Value], outputs: list[Value], path: tuple[Position, ...]) -> bool:
        """Returning True inside an opened equation leaves it (and every loop iteration after): done
        when the mask is found, and when the budget is spent (the rest then runs compiled, whole)."""
        self.result.equations += 1
        for var in eqn.outvars:
            self._made_by[id(var)] = eqn
        note_neg_inf_rows(self.neg_inf_rows, eqn, inputs, path)
        self.given.enter(path)
        made = self.given.made(eqn, inputs, outputs)
        opened = id(eqn) in self._opened
        self.given.note(eqn, inputs, outputs, path, made, opened, user_line)
        if path and self.stage == "producer" and self.result.equations >= self.budget:
            self.budget_reached = True
            return True
        if self.stage == "producer":
            if opened or not self.sought(made):
                return False
            producer = self.result.producer = self._producer(eqn, inputs, outputs, path)
            if producer.value == "nan":
                producer.written_inf = self.given.written_line_of_inputs(eqn)
            self.stage = "absorber"
            return False
        if self.stage == "absorber" and self.masked is None and not opened:
            if any_bad(self.given.free(eqn, inputs)) and has_inexact(outputs) and not any_bad(outputs):
                self.masked = (eqn, path)
                return bool(path)  # found inside a loop body or call: the later iterations need not be walked
        return False


def search_inside(
    program: Program, args: Sequence[Value], *, function: str = "", call: int = 1, budget: int = MAX_INSIDE_EQUATIONS
) -> InsideSearch:
    """Evaluate a jitted call's traced program (``program``, a Jaxpr or ClosedJaxpr) on its flat
    arguments op by op; an ``InsideSearch``. Never raises; runs with NaN/inf checks off."""

    found = InsideSearch(function=function, call=call)
    listener = _InsideListener(budget)
    jaxpr, consts = jaxpr_parts.closed_parts(program)
    # The call's arguments are given: what --inside checks is what the call itself made of them.
    listener.given.arguments([*jaxpr.constvars, *jaxpr.invars], [*consts, *args])
    quiet = quiet_evaluation()
    try:
        with quiet:
            outputs = Walk(listener).run(program, list(args))
    except Exception as error:
        found.failure = f"evaluating the program of `{function}` op by op failed: {error_line(error)}"
        outputs = None
    found.equations = listener.result.equations
    found.stopped_at = list(dict.fromkeys(listener.result.stopped_at))
    found.budget_reached = listener.budget_reached
    found.producer = listener.result.producer
    if found.producer is not None:
        found.reached_output = outputs is not None and any_bad(outputs)
        if listener.masked is not None:
            eqn, path = listener.masked
            name = eqn.params.get("name") if jaxpr_parts.sub_jaxprs(eqn) else None
            if name is None:  # a primitive: by its own name ("rsqrt", "select_n", "clamp", "min")
                found.masked_primitive = found.masked_by = eqn.primitive.name
            else:  # a jitted library function by the name the user wrote ("jnp.where"); a function of the user's by its own
                found.masked_primitive = str(name)
                filename = jaxpr_parts.called_function(eqn)[1]
                if filename and is_user_file(filename):
                    found.masked_by = str(name)
                else:
                    found.masked_by = "jnp.where" if name in SELECTS else public_name(str(name)) or str(name)
            found.masked_line = user_line(eqn, path)
            found.masked_provenance = provenance_of(eqn, path, found.masked_line, "")
    return found
