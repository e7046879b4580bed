"""Find the operation that produced a NaN/inf: the producer search.

JAX's ``debug_nans`` names the outermost primitive whose output held the NaN:
``scan`` for a NaN made inside a scan body, ``jit`` for a nested function.
This search goes to the operation itself. It runs only after a NaN/inf was
seen (nothing here costs anything on a clean cell):

1. trace the failing call with its real argument values (``jax.make_jaxpr``;
   for a gradient call the program holds the backward pass too);
2. evaluate that program equation by equation (``jaxmagic._jax.jaxpr_eval``),
   opening a control-flow or call equation only when its inputs are finite and
   its outputs are not - a loop iteration by iteration, with the body compiled
   and only the failing iteration evaluated op by op;
3. the **producer** is the first equation whose inputs are all finite and
   whose output is not. Its line, its loop iterations, the first bad element
   and the input values there are what the report shows. When it made inf and
   a NaN is sought, the equation that turned the inf into NaN is named too;
   when the program's result is finite after all, the NaN lived only in a
   discarded branch of ``where``/``select``.

What counts as made and what as given is one rule, in ``given`` (shared with
``--inside``): constants written into the program (``Literal``s: a mask's
``-jnp.inf``, the ``nan`` jnp.var returns for too few samples) and, when a NaN
was caught, the infinities the arguments held, are given, value by value; the
producer is the first equation that made a value its inputs did not give it.

The search is two passes at most: first for an operation that made a NaN from
inputs holding none (given infinities aside); when there is none (an inf came
first: the gradient of ``sqrt`` or ``norm`` at 0, ``log(0)``), for the first that
made any non-finite value - replaced by the one that made the inf the NaN maker
got, when that is another line's operation.
The second pass starts where the first met its first non-finite value and
reads the values the first one computed (``jaxpr_eval``'s checkpoints), so a
training step is evaluated once, not twice. Compiling the program, or prefixes
of it to bisect, was measured slower than this walk on CPU
(``benchmarks/bench_nan_producer.py``: one compile of a 1.5k-equation step costs
more than the whole search).

Its modules: ``producer`` (the search), ``found`` (what it found: data only), ``given`` (the rule
of made vs given non-finite values), ``host_values``
(reading and writing the values), ``equation_origin`` (the line, expression
and library function of an equation), ``forward_reach`` (a value under ``jvp``
that is a forward one), ``masked_rows``, ``lost_constant`` and ``added_epsilon``
(what a fix needs: rows all -inf, an epsilon its dtype holds as 0, an epsilon
added to a negative value), ``producer_fixes`` (which fixes are tried) and
``inside`` (``%%jax_nans --inside``: every intermediate of one call, masked
values too).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias, cast

import jax
import jax.numpy as jnp
import numpy as np

from jaxmagic._jax import finite_flags, jaxpr_parts, jit_calls, recorded_sources
from jaxmagic._jax.jaxpr_eval import Listener, Walk
from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Atom, Equation, Value
from jaxmagic.probes._nans.fixes import added_epsilon, lost_constant, primal_fixes, producer_fixes
from jaxmagic.probes._nans.fixes.primal_fixes import PrimalRecord, PrimalSite
from jaxmagic.probes._nans.fixes.producer_fixes import LostSite, ProducerSite
from jaxmagic.probes._nans.search import integer_overflow
from jaxmagic.probes._nans.search.equation_origin import (
    expression_of,
    forget_attributions,
    in_users_derivative_rule,
    name_stack,
    provenance_of,
    public_name,
    remember_attributions,
    user_line,
)
from jaxmagic.probes._nans.search.forward_reach import RESULT, reaches_result_forward, readable_by_reach
from jaxmagic.probes._nans.search.found import LoopPosition, NanProducer, OperandValue, ProducerSearch
from jaxmagic.probes._nans.search.given import (
    GIVEN,
    INF,
    NAN,
    GivenInfinities,
    GivenState,
    Made,
    library_writing,
    opened_kind,
)
from jaxmagic.probes._nans.search.host_values import (
    any_bad,
    bad_mask,
    definiteness,
    only_infinities,
    operand_at,
    readable,
)
from jaxmagic.probes._nans.search.integer_overflow import IntegerRecord, IntegerSite
from jaxmagic.probes._nans.search.masked_rows import note_neg_inf_rows
from jaxmagic.probes._support.rerun.kept_state import kept
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import code_kind, is_user_file

_OPERAND_NAMES = {
    "div": ("numerator", "denominator"),
    "rem": ("dividend", "divisor"),
    "pow": ("base", "exponent"),
    "sub": ("left", "right"),
    "add": ("left", "right"),
    "mul": ("left", "right"),
    "atan2": ("y", "x"),
}

SELECTS = ("select_n", "_where", "where", "select")

# what a walk resuming at a checkpoint takes on (``ProducerListener.state``)
ListenerState: TypeAlias = tuple[
    GivenState,
    dict[int, Equation],
    dict[tuple[str, int], str],
    set[int],
    int,
    list[str],
    tuple[dict[int, IntegerRecord], dict[int, PrimalRecord], dict[int, list[Equation]]],
]


# -- the listener ---------------------------------------------------------------------


class ProducerListener(Listener):
    """The producer search's answers to the walk (``jaxpr_eval.Walk``): which equation to open, and what
    each equation that ran tells - the producer, then the NaN maker, then what discarded the value."""

    def __init__(self, want_nan: bool, strict: bool) -> None:
        self.want_nan = want_nan  # a NaN was caught (not only an inf)
        self.strict = strict  # the producer must make a NaN itself (from inputs holding none it did not get given)
        # Which infinities were given (the arguments', written constants'), not made: the one rule of
        # "which operation made it" (``given.py``), shared with ``--inside``.
        self.given = GivenInfinities(written_given=want_nan)
        self.result = ProducerSearch()
        self.stage = "producer"  # then "nan_maker" (producer made inf), then "absorber"
        self._made_by: dict[int, Equation] = {}
        self.neg_inf_rows: dict[
            tuple[str, int], str
        ] = {}  # (file, line) -> "1 of 3 rows (axis 1)": a max over entries all -inf
        self._opened: set[int] = set()  # equations looked inside: what they made is an inner equation's doing
        self._producer_eqn: Equation | None = None
        # id(eqn) -> (inputs, outputs, path) of the integer arithmetic evaluated: a wrap-around is read from them
        self._integer: dict[int, IntegerRecord] = {}
        # id(eqn) -> (inputs, path) of the operations whose derivative can be infinite (sqrt, log, pow), and
        # id(var) -> those that read it: the primal of a derivative's operation is found through them
        self._primal: dict[int, PrimalRecord] = {}
        self._read_by: dict[int, list[Equation]] = {}

    def sought(self, made: str) -> bool:
        """Whether an equation that did ``made`` (``GivenInfinities.made``) is the producer this pass seeks."""
        return made == NAN or (made == INF and not self.strict)

    def look_inside(self, eqn: Equation, inputs: list[Value], outputs: list[Value], path: tuple[Position, ...]) -> bool:
        self.given.enter(path)
        if self.stage == "producer":
            made = self.given.made(eqn, inputs, outputs)
            wanted = self.sought(made) or (
                made == GIVEN and self.given.opens_for_given(eqn, inputs, outputs, opened_kind(eqn))
            )
        elif self.stage == "nan_maker":
            # also what makes inf: the NaN may be made of an inf a later operation made (the gradient's 1/0
            # after a forward log(0)), which is then the producer
            wanted = (
                (not any_bad(inputs, want_nan=True) and any_bad(outputs, want_nan=True))
                or self.given.made(eqn, inputs, outputs) == INF
                or self.given.may_pass_on_written_nan(eqn, inputs, outputs)
            )
        else:
            wanted = False
        if wanted:
            self._opened.add(id(eqn))
        return wanted

    def cannot_open(self, eqn: Equation, path: tuple[Position, ...]) -> None:
        self.result.stopped_at.append(eqn.primitive.name)
        self._opened.discard(id(eqn))

    step_flags = True

    # the base (jaxpr_eval.Listener) declares a plain attribute; this key follows the search's stage
    @property
    def step_flag_key(self) -> tuple[str, bool, bool]:  # type: ignore[override]
        # with given infinities in play, an iteration whose inputs hold inf may still make the value
        return (self.stage, self.strict, self.given.any)

    @staticmethod
    def step_flag(key: tuple[str, bool, bool], inputs: list[jax.Array], outputs: list[jax.Array]) -> jax.Array:
        """``look_inside`` for a loop iteration, traced: found by one compiled run of the loop."""
        stage, strict, given_inf = key

        def bad(values: list[jax.Array], nan_only: bool) -> jax.Array:
            flags = [
                jnp.any(jnp.isnan(v) if nan_only else ~jnp.isfinite(v))
                for v in values
                if jnp.issubdtype(v.dtype, jnp.inexact)
            ]
            return jnp.any(jnp.stack(flags)) if flags else jnp.array(False)

        if stage == "producer":
            return ~bad(inputs, given_inf) & bad(outputs, strict)
        if stage == "nan_maker":
            return ~bad(inputs, True) & bad(outputs, True)
        return jnp.array(False)

    def checkpoint(self, eqn: Equation, outputs: list[Value]) -> bool:
        """The strict pass (a NaN from finite inputs) keeps its values before the first non-finite one
        on each level it goes down through: when it finds no producer, the second pass starts there.
        Nothing before that point is opened or recorded differently in the two passes."""
        return self.strict and any_bad(outputs)

    def state(self) -> ListenerState:
        return (
            self.given.state(),
            dict(self._made_by),
            dict(self.neg_inf_rows),
            set(self._opened),
            self.result.equations,
            list(self.result.stopped_at),
            (dict(self._integer), dict(self._primal), {k: list(v) for k, v in self._read_by.items()}),
        )

    def restore(self, state: ListenerState) -> None:
        given, made_by, neg_inf_rows, opened, equations, stopped_at, (integer, primal, read_by) = state
        self.given.restore(given)
        self._made_by, self.neg_inf_rows, self._opened = dict(made_by), dict(neg_inf_rows), set(opened)
        self._integer, self._primal, self._read_by = (
            dict(integer),
            dict(primal),
            {k: list(v) for k, v in read_by.items()},
        )
        self.result.equations, self.result.stopped_at = equations, list(stopped_at)

    def visit(self, eqn: Equation, inputs: list[Value], outputs: list[Value], path: tuple[Position, ...]) -> bool:
        """Record the producer, then the NaN maker, then (top level only) what discarded the NaN.

        An equation that was opened and held the producer has moved the stage
        on before it is visited itself, so at each stage the first equation that
        fits is the innermost one.
        """
        self.result.equations += 1
        for var in eqn.outvars:
            self._made_by[id(var)] = eqn
        if self.stage == "producer" and integer_overflow.integer_arithmetic(eqn, outputs):
            self._integer[id(eqn)] = (list(inputs), list(outputs), path)
        if self.stage == "producer" and eqn.primitive.name in primal_fixes.SINGULAR:
            self._primal[id(eqn)] = (list(inputs), path)
            for read in eqn.invars:
                self._read_by.setdefault(id(read), []).append(eqn)
        note_neg_inf_rows(self.neg_inf_rows, eqn, inputs, path)
        self.given.enter(path)
        made = self.given.made(eqn, inputs, outputs)
        opened = id(eqn) in self._opened
        self.given.note(eqn, inputs, outputs, path, made, opened, user_line)
        if opened and self.stage != "absorber":
            return False  # looked inside and found no operation of the kind sought: this pass has none
        if self.stage == "producer":
            if not self.sought(made):
                return False
            if eqn.outvars and all(id(var) in self.given.constant for var in eqn.outvars):
                return False  # made of constants passed into the call alone: the operation using it is the producer
            made_here = self.result.producer = self._producer(eqn, inputs, outputs, path)
            self._producer_eqn = eqn
            if made_here.value == "nan":
                made_here.written_inf = self.given.written_line_of_inputs(eqn)  # the mask's -inf it made NaN of
                made_here.written_inf_by = self.given.written_by_library(made_here.written_inf)
                self._note_written_nan(made_here, eqn, inputs, outputs)
            if self.want_nan and not any_bad(outputs, want_nan=True):
                self.stage = "nan_maker"  # it made inf: go on to the operation that makes NaN of it
                return False
            self.stage = "absorber"
            return True
        if self.stage == "nan_maker":
            if self._passes_on_written_nan(eqn, inputs, outputs):
                # the NaN was never made of the inf: a NaN written into the program took its place (the
                # `jnp.where(x > 0, lgamma(x), nan)` of jax.scipy.special.loggamma at 0)
                written = self.result.producer = self._producer(eqn, inputs, outputs, path)
                self._producer_eqn = eqn
                self._note_written_nan(written, eqn, inputs, outputs)
                self.stage = "absorber"
                return True
            if any_bad(inputs, want_nan=True) or not any_bad(outputs, want_nan=True):
                return False
            producer = self.result.producer
            assert producer is not None, "the stage moves on to the NaN maker once the producer is recorded"
            elsewhere = self._made_elsewhere(eqn, producer)
            if elsewhere is not None:
                # the inf this NaN was made of came from another line's operation than the first that made one
                producer = self.result.producer = self._producer(elsewhere[0], elsewhere[1], elsewhere[2], elsewhere[3])
            self._nan_maker(producer, eqn, inputs, outputs, path)
            self.stage = "absorber"
            return True
        producer = self.result.producer
        if not path and producer is not None and not producer.discarded_by:
            if any_bad(self.given.free(eqn, inputs)) and not any_bad(outputs):
                name = str(eqn.params.get("name", eqn.primitive.name))
                producer.discarded_line = line = user_line(eqn)
                producer.discarded_by = "jnp.where" if name in SELECTS else public_name(name) or name
                if name in SELECTS and line is not None and "lax.cond(" in line.code:
                    producer.discarded_by = "lax.cond"  # vmap turns a cond on a batched predicate into a select
        return False

    def _passes_on_written_nan(self, eqn: Equation, inputs: list[Value], outputs: list[Value]) -> bool:
        constant = bool(eqn.outvars) and all(id(var) in self.given.constant for var in eqn.outvars)
        return not constant and self.given.passes_on_written_nan(eqn, inputs, outputs)

    def _note_written_nan(
        self, producer: NanProducer, eqn: Equation, inputs: list[Value], outputs: list[Value]
    ) -> None:
        if self._passes_on_written_nan(eqn, inputs, outputs):
            producer.written_nan = True
            producer.written_nan_by = library_writing(eqn)

    def _made_elsewhere(self, eqn: Equation, producer: NanProducer) -> Made | None:
        """``(eqn, inputs, outputs, path)`` of the operation that made the inf ``eqn`` made NaN of, when it
        is another part of the code than the producer's (an overflow after a forward -inf of another line; the
        backward pass of `log_softmax(x)` overflowing after the forward `.sum()` of the same line did); None
        otherwise. On the producer's own expression it is the producer's own derivative (log's 1/x at the 0
        where log made -inf), and the user's operation is the one named."""
        made_from = self.given.made_from(eqn)
        if made_from is None or made_from[0] is self._producer_eqn or jaxpr_parts.sub_jaxprs(made_from[0]):
            return None
        line, own = user_line(made_from[0], made_from[3]), producer.line
        if line is not None and own is not None and (line.filename, line.lineno) == (own.filename, own.lineno):
            expression = expression_of(made_from[0], line, made_from[3])
            if not expression or not producer.expression or expression == producer.expression:
                return None
        return made_from

    def _nan_maker(
        self,
        producer: NanProducer,
        eqn: Equation,
        inputs: list[Value],
        outputs: list[Value],
        path: tuple[Position, ...],
    ) -> None:
        bad = [m for m in (bad_mask(o, True) for o in outputs) if m is not None]
        mask = bad[0]
        index = tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()
        values = [operand_at(v, mask.shape, index) for v in inputs if readable(v)]
        symbol = {"mul": " * ", "sub": " - ", "add": " + ", "div": " / "}.get(eqn.primitive.name)
        joined = symbol.join(values) if symbol and len(values) == 2 else ", ".join(values)
        producer.nan_maker, producer.nan_maker_values = eqn.primitive.name, joined
        producer.nan_maker_line = user_line(eqn, path)
        library = next(
            (
                public_name(*jaxpr_parts.called_function(p.eqn))
                for p in path
                if p.kind == "call" and code_kind(jaxpr_parts.called_function(p.eqn)[1]) == "jax"
            ),
            "",
        )
        loops = [
            LoopPosition(p.kind, int(cast(int, p.index)), user_line(p.eqn, path))  # a loop's or cond's: an index
            for p in path
            if p.kind in ("scan", "while", "cond")
        ]
        made = provenance_of(eqn, path, producer.nan_maker_line, ", ".join(loop.text for loop in loops))
        # what the user's line called, from its traceback, first: a call equation on the path may be a
        # library's wrapper around the user's own function (eqx.filter_jit's), not what the line called
        producer.nan_maker_library = made.library_function or library
        made.library_function = producer.nan_maker_library
        producer.nan_maker_provenance = made
        if "transpose" in name_stack(eqn, path):
            producer.phase = "backward"

    def _maker_name(self, var: Atom) -> str:
        maker = self._made_by.get(id(var))
        return maker.primitive.name if maker is not None else ""

    site: ProducerSite | None = None  # (equation, its inputs, path) of the producer: where its fixes are tried
    lost_site: LostSite | None = None  # (the equation adding a constant its dtype holds as 0, the constant's index)
    epsilon_site: Equation | None = None  # the equation adding a positive constant to the producer's input
    integer_site: IntegerSite | None = None  # (eqn, inputs, path, exact values) of an integer operation that wrapped
    primal_site: PrimalSite | None = None  # (eqn, inputs, path) of the user's operation a derivative's operation is of

    def _producer(
        self, eqn: Equation, inputs: list[Value], outputs: list[Value], path: tuple[Position, ...]
    ) -> NanProducer:
        self.site = (eqn, list(inputs), path)
        lost = lost_constant.find(eqn, self._made_by)
        self.lost_site = (lost[1], lost[0].operand) if lost is not None else None
        epsilon = added_epsilon.find(eqn, self._made_by) if lost is None else None
        self.epsilon_site = epsilon[1] if epsilon is not None else None
        wrapped = integer_overflow.find(eqn, self._made_by, self._integer)
        self.integer_site = wrapped[1] if wrapped is not None else None
        # The first element of the kind sought: a NaN when the producer must make one (beside it, an inf
        # passed through from an input - a masked -inf - is no value it made).
        # A NaN is never passed on as given: when the output holds one, that is what the equation made.
        nan = self.strict or any_bad(outputs, want_nan=True)
        bad = [(i, m) for i, m in ((i, bad_mask(o, nan)) for i, o in enumerate(outputs)) if m is not None]
        which, mask = bad[0]
        out = np.asarray(outputs[which])
        index = tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()
        made = "nan" if np.isnan(out[index] if index else out).any() else "inf"
        names = _OPERAND_NAMES.get(eqn.primitive.name, ())
        operands = []
        for k, (var, value) in enumerate(zip(eqn.invars, inputs)):
            if not readable(value):
                continue
            array = np.asarray(value)
            maker = self._made_by.get(id(var))
            operands.append(
                OperandValue(
                    role=names[k] if k < len(names) else ("x" if len(inputs) == 1 else f"operand {k}"),
                    value=operand_at(array, out.shape, index),
                    shape=list(array.shape),
                    dtype=str(array.dtype),
                    made_by=maker.primitive.name if maker is not None else "",
                    constant=jaxpr_parts.is_literal(var),
                    made_from=[self._maker_name(v) for v in maker.invars] if maker is not None else [],
                )
            )
        stack = name_stack(eqn, path)
        loops, calls, library = [], [], ""
        for position in path:
            if position.kind in ("scan", "while", "cond"):
                at = cast(int, position.index)  # an iteration or a branch: never None
                loops.append(LoopPosition(position.kind, int(at), user_line(position.eqn, path)))
                continue
            function, filename = jaxpr_parts.called_function(position.eqn)
            if filename and not is_user_file(filename):
                # JAX's own jitted helper (jit(_std)) by its public name; another library's call may be its
                # wrapper around the user's function (eqx.filter_jit): what the line called is in its traceback
                if code_kind(filename) == "jax":
                    library = library or public_name(function, filename)
            elif "name" in position.eqn.params:
                calls.append(str(position.eqn.params["name"]))
        line = user_line(eqn, path)
        in_rule = in_users_derivative_rule(eqn)
        provenance = provenance_of(eqn, path, line, ", ".join(loop.text for loop in loops))
        library = provenance.library_function or library  # the line's own call first, as for the NaN maker
        provenance.library_function = library
        differentiated = ("jvp" in stack or "transpose" in stack) and not in_rule
        self.primal_site = (
            primal_fixes.primal_of(eqn, line, self._made_by, self._read_by, self._primal) if differentiated else None
        )
        primal, primal_value = "", ""
        if self.primal_site is not None:
            primal = self.primal_site[0].primitive.name
            first = self.primal_site[1][0]
            primal_value = operand_at(np.asarray(first), out.shape, index) if readable(first) else ""
        jitter = ""
        if eqn.primitive.name == "cholesky" and operands and readable(inputs[0]):
            operands[0].value, jitter = definiteness(np.asarray(inputs[0]), index, eqn)
        return NanProducer(
            primal=primal,
            primal_value=primal_value,
            integer_overflow=wrapped[0] if wrapped is not None else None,
            output_dtype=str(out.dtype),
            lost_constant=lost[0] if lost is not None else None,
            added_epsilon=epsilon[0] if epsilon is not None else None,
            jitter=jitter,
            expression=expression_of(eqn, line, path),
            primitive=eqn.primitive.name,
            value=made,
            line=line,
            provenance=provenance,
            library_function=library,
            phase="backward" if "transpose" in stack else "forward",
            derivative=("jvp" in stack or "transpose" in stack) and not in_rule,
            user_rule=in_rule,
            loops=loops,
            calls=calls,
            index=list(index),
            operands=operands,
            output_shape=list(out.shape),
            opaque=eqn.primitive.name in self.result.stopped_at,
            bad_count=int(np.count_nonzero(mask)),
            name_stack=stack,
        )


# -- the search -------------------------------------------------------------------------


def search(
    function: Callable[..., object],
    args: Sequence[object],
    kwargs: Mapping[str, object] | None = None,
    *,
    source: str = "",
    want_nan: bool = True,
    with_fixes: bool = True,
) -> ProducerSearch:
    """Trace ``function(*args, **kwargs)`` and evaluate it to find the producer. Never raises.

    ``with_fixes=False``: a search whose producer only locates something (the forward check, the debugger's
    forward line) does not try the producer's fixes on its values: nobody reads them.

    Array leaves of the arguments are the program's inputs; everything else
    (functions, Python numbers, strings) is fixed at its value. ``want_nan``:
    a NaN was caught (False: only an inf), so an inf producer is followed to
    the operation that made the NaN. When a NaN was caught, the infinities the
    arguments (or the arrays the function closes over) hold are given, as are
    infinities written into the program: the producer is the first operation that
    made a NaN or inf no input gave it (``given.GivenInfinities``).
    """
    result = ProducerSearch(searched=source)
    kwargs = dict(kwargs or {})
    leaves, tree = jax.tree_util.tree_flatten((list(args), kwargs))
    dynamic = [i for i, leaf in enumerate(leaves) if isinstance(leaf, (jax.Array, np.ndarray, np.generic))]
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        result.failure = "its arguments are tracers (it runs inside a transformation)"
        return result

    def traced(*values: Value) -> object:
        filled = list(leaves)
        for i, value in zip(dynamic, values):
            filled[i] = value
        call_args, call_kwargs = jax.tree_util.tree_unflatten(tree, filled)
        return function(*call_args, **call_kwargs)

    values = [leaves[i] for i in dynamic]
    quiet = quiet_evaluation()
    try:
        # the arguments go in as fresh copies (unflattened above); what the function reaches by itself is
        # the user's, and a stateful library's jit wrapper writes into it (kept_state)
        # finite_flags: each value's NaN/inf check is computed on the device as the walk runs, read in batches
        with quiet, kept(function, leaves) as kept_objects, finite_flags.checking():
            found = _trace_and_walk(traced, values, result, want_nan, with_fixes)
        found.put_back = kept_objects.note
        return found
    finally:
        forget_attributions()


def _trace_and_walk(
    traced: Callable[..., object], values: list[Value], result: ProducerSearch, want_nan: bool, with_fixes: bool = True
) -> ProducerSearch:
    source = result.searched
    try:
        with recorded_sources.tracing_where_traced() as attributed:
            program = jax.make_jaxpr(traced)(*values)
            remember_attributions(program, attributed)
    except Exception as error:
        result.failure = f"tracing {source or 'the call'} failed: {error_line(error)}"
        return result
    # Arrays the function closes over are constants of its program: infinities there are given too.
    jaxpr, consts = jaxpr_parts.closed_parts(program)
    given_inf = want_nan and only_infinities([*consts, *values])
    # First the operation that made a NaN from inputs holding none (given infinities aside); if every
    # NaN came from an inf some operation made, the first operation that made a non-finite value (and
    # the one that turned it into NaN). The second pass starts where the first met its first
    # non-finite value (what comes before, it would evaluate and record the same way).
    resume = None
    for strict in (True, False) if want_nan else (False,):
        listener = ProducerListener(want_nan, strict)
        if want_nan:  # a NaN was caught: the infinities its inputs held are given, the NaN was made of them
            listener.given.arguments([*jaxpr.constvars, *jaxpr.invars], [*consts, *values])
        walk = Walk(listener, resume)
        try:
            outputs = walk.run(program, values)
        except Exception as error:
            listener.result.failure = f"evaluating its program failed: {error_line(error)}"
            outputs = None
            break
        if listener.result.producer is not None:
            break
        resume = walk.checkpoints
    found = listener.result
    found.searched, found.given_inf = source, given_inf
    found.written_inf = listener.given.first_written
    found.written_inf_by = listener.given.written_by_library(found.written_inf)
    producer = found.producer
    if producer is not None:
        for line in (producer.line, producer.nan_maker_line):
            if line is not None and (line.filename, line.lineno) in listener.neg_inf_rows:
                producer.neg_inf_rows = listener.neg_inf_rows[(line.filename, line.lineno)]
                break
        if producer.neg_inf_rows and producer.written_inf is None:
            producer.written_inf = found.written_inf  # a row all -inf: the fill that line wrote made it so
            producer.written_inf_by = found.written_inf_by
    found.result_finite = outputs is not None and not any_bad(outputs)
    if producer is not None and producer.derivative and producer.phase == "forward" and listener.site is not None:
        eqn, _, path = listener.site
        # a train step returning the loss it differentiated (reverse mode only: forward mode's tangents flow forward)
        reached = reaches_result_forward(program, eqn, path) if readable_by_reach(program, producer.name_stack) else ""
        if reached:
            producer.derivative = False
            into = (
                f"what {source or 'the call'} returns"
                if reached == RESULT
                else "a value the program computes and nothing reads (the loss jax.grad computes and drops)"
            )
            found.forward_check = (
                f"It was computed under the gradient, but its value flows into {into} through forward operations "
                "only (no transposed one): it is a value of the forward computation, not only of the derivative."
            )
    if producer is not None and listener.site is not None and with_fixes:
        sites = (listener.site, listener.lost_site, listener.epsilon_site, listener.integer_site, listener.primal_site)
        producer.fix_trials = producer_fixes.tried(producer, sites, program, values, outputs)
    listener.site = listener.lost_site = listener.epsilon_site = listener.integer_site = None  # hold the user's program
    listener.primal_site, listener._integer, listener._primal, listener._read_by = None, {}, {}, {}
    if found.producer is not None and not found.result_finite:
        found.producer.discarded_by, found.producer.discarded_line = "", None
    found.stopped_at = list(dict.fromkeys(found.stopped_at))
    return found


def quiet_evaluation() -> contextlib.ExitStack:
    """What evaluating a user's program op by op runs under: NaN/inf checks off (the search looks for
    them itself), its prints discarded, and our own call observation paused."""
    quiet = contextlib.ExitStack()
    quiet.enter_context(jax.debug_nans(False))
    quiet.enter_context(jax.debug_infs(False))
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
    quiet.enter_context(jit_calls.paused())
    return quiet
