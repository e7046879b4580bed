"""Which non-finite values of a program were given, not made: the one rule of "which operation made it".

``%%jax_nans`` (its search after a catch and ``--inside``), ``%%jax_doctor`` and ``%jax_watch`` all ask
the same question of a traced program evaluated op by op: which equation made the non-finite value,
and from what. They ask it here, so they cannot disagree.

A non-finite value is **given** - no operation of the program made it - when it is

- an infinity the searched call's arguments (or the arrays it closes over) already held, when the
  search is told so (a NaN was caught: the NaN was made of them; ``--inside``: what is checked is what
  the call itself made). A NaN in the arguments is never given: it came in;
- an infinity written into the program (a ``Literal``: the ``-jnp.inf`` of ``jnp.where(mask, s,
  -jnp.inf)``, ``jnp.full(n, -jnp.inf)``), and what is made of written constants alone;
- an infinity an equation passed on from given ones: for an elementwise equation, an inf where one of
  its inputs held a given inf at the same position (``exp(-inf)`` is 0, ``x + (-inf)`` is ``-inf``);
  for a call or a ``cond``, what its own equations passed on (it is opened to see); for any other
  equation (a reduction, a reshape, a loop), an inf when the only non-finite values it got were given
  (the max of a masked row).

An equation **made** a value (``made``) when none of its inputs held a non-finite value that was not
given, nor a NaN, and its output holds a NaN (a NaN is never passed on as given: ``-inf - -inf`` in
softmax's shift and ``0 * -inf`` made it), or an inf that is not given (``exp`` overflowing beside a
masked row). So a mask's written ``-inf`` is never the finding; the NaN made of it is, and so is an
overflow to ``+inf`` next to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np

from jaxmagic._jax import finite_flags, jaxpr_parts, recorded_sources
from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Atom, Equation, Value, Var
from jaxmagic.probes._nans.search.host_values import any_bad, host_array
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.calls.library_calls import package_of
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import code_kind

# Primitives that compute each output element from the input elements at the same position (inputs of
# the output's shape, or scalars): an inf they give where no input held a given inf was made by them.
ELEMENTWISE = frozenset(
    {
        "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "clamp",
        "convert_element_type", "copy", "cos", "cosh", "digamma", "div", "erf", "erf_inv", "erfc", "exp",
        "exp2", "expm1", "integer_pow", "lgamma", "log", "log1p", "logistic", "max", "min", "mul", "neg",
        "nextafter", "pow", "reduce_precision", "rem", "rsqrt", "select_n", "sign", "sin", "sinh", "sqrt",
        "square", "sub", "tan", "tanh", "igamma", "igammac", "polygamma", "zeta", "bessel_i0e",
        "bessel_i1e", "real", "imag", "complex", "conj",
    }
)  # fmt: skip

# Equations opened to learn which of their outputs are given: their sub-program runs on their inputs.
_OPENED_FOR_GIVEN = ("call", "cond")

NAN, INF, GIVEN, CAME_IN, NOTHING = "nan", "inf", "given", "came in", ""

# (eqn, inputs, outputs, path) of an equation the walk evaluated: what made an inf, kept by variable
Made: TypeAlias = tuple[Equation, list[Value], list[Value], tuple[Position, ...]]
# the user's line of an equation reached through ``path`` (``equation_origin.user_line``)
LineOf: TypeAlias = Callable[[Equation, tuple[Position, ...]], SourceLine | None]
# what a walk resuming at a checkpoint takes on (``GivenInfinities.state``)
GivenState: TypeAlias = tuple[
    dict[int, SourceLine | None],
    set[int],
    SourceLine | None,
    bool,
    set[tuple[tuple[int, int | None], ...]],
    dict[int, Made],
    dict[tuple[str, int], str],
]


def library_writing(eqn: Equation) -> str:
    """The library (its public callable, else its package) whose own code made ``eqn``: the first frame
    outside JAX, innermost first, is a library's rather than the user's; "" when it is the user's."""
    frames = recorded_sources.traceback_frames(eqn.source_info.traceback)  # innermost first
    for filename, _, _ in frames:
        kind = code_kind(filename)
        if kind in ("jax", "python", "jaxmagic"):
            continue
        if kind != "library":
            return ""
        # named as the user called it (`Gamma.log_prob`, not the decorator that validates its sample)
        return attribution.library_called(eqn.source_info.traceback) or package_of(filename)
    return ""


def _infinite(value: Value) -> np.ndarray | None:
    flags = finite_flags.known(value)
    if flags is not None and not flags[1]:
        return None  # checked once as the walk ran it (finite_flags): no inf
    array = host_array(value)
    if array is None:
        return None
    mask = np.isinf(array)
    return mask if mask.any() else None


def body_pairs(eqn: Equation, kind: str) -> list[tuple[Atom, Var, bool]]:
    """``(outer var, sub-program var, is a loop carry)`` for the inputs of an opened equation: a call's
    parameters, a cond branch's inputs, a loop body's constants, carry (as it starts) and slices."""
    subs = jaxpr_parts.sub_jaxprs(eqn)
    if kind == "cond":
        branches = eqn.params.get("branches", ())
        return [(o, i, False) for b in branches for o, i in zip(eqn.invars[1:], jaxpr_parts.closed_parts(b)[0].invars)]
    if kind in ("scan", "while"):
        if kind == "scan":
            consts, carry, xs = jaxpr_parts.scan_operands(eqn, list(eqn.invars))
            body = jaxpr_parts.closed_parts(eqn.params["jaxpr"])[0]
        else:
            _, consts, carry = jaxpr_parts.while_operands(eqn, list(eqn.invars))
            xs, body = [], jaxpr_parts.closed_parts(eqn.params["body_jaxpr"])[0]
        flags = [False] * len(consts) + [True] * len(carry) + [False] * len(xs)
        return list(zip([*consts, *carry, *xs], body.invars, flags))
    if len(subs) == 1:
        return [(o, i, False) for o, i in zip(eqn.invars, jaxpr_parts.closed_parts(subs[0])[0].invars)]
    return []


class GivenInfinities:
    """The given infinities of one walk of a program, by variable, and what each equation made.

    ``origin`` keeps, per given variable, the user's line that wrote its infinity into the program
    (None when the arguments held it): what a producer made its NaN of.
    """

    def __init__(self, written_given: bool = True) -> None:
        # False when only an inf was caught (``--infs``): then the inf the user wrote is what was caught, and
        # the operation that first holds it is named
        self.written_given = written_given
        self.origin: dict[int, SourceLine | None] = {}  # id(var) -> the line that wrote it (None: an argument)
        self.constant: set[int] = set()  # id(var) made of written constants alone (finite ones too)
        self.first_written: SourceLine | None = None  # the first line seen writing a given infinity
        # the user's line -> the library whose own code wrote the infinity in the call on that line (numpyro's
        # -inf of a log_prob outside the support): the line called it, it did not write it
        self.library_writes: dict[tuple[str, int], str] = {}
        self.any = False  # some given infinity was met
        # id(var) -> (eqn, inputs, outputs, path) of the equation that made the inf it holds (not given): what
        # a NaN made later of it was made from, followed through the equations that passed it on
        self.source: dict[int, Made] = {}
        self._entered: set[tuple[tuple[int, int | None], ...]] = (
            set()
        )  # (id(eqn), index) of opened equations whose inputs were seeded

    # -- what is given ------------------------------------------------------------------

    def arguments(self, invars: Sequence[Var], values: Sequence[Value]) -> None:
        """The searched call's inputs (and the constants it closes over) that hold inf and no NaN: given."""
        for var, value in zip(invars, values):
            if _infinite(value) is not None and not any_bad([value], want_nan=True):
                self.origin[id(var)] = None
                self.any = True

    def written(self, var: Atom) -> bool:
        """A constant written into the program, or a value made of such constants alone."""
        return jaxpr_parts.is_literal(var) or id(var) in self.constant

    def is_given(self, var: Atom) -> bool:
        return (self.written_given and self.written(var)) or id(var) in self.origin

    def free(self, eqn: Equation, inputs: Sequence[Value]) -> list[Value]:
        """The inputs of ``eqn`` that are neither written constants nor given infinities."""
        if len(inputs) != len(eqn.invars):
            return list(inputs)
        return [value for var, value in zip(eqn.invars, inputs) if not (self.written(var) or self.is_given(var))]

    def enter(self, path: Sequence[Position]) -> None:
        """Inside an opened equation: its sub-program's inputs are given where the equation's were."""
        if not path:
            return
        key = tuple((id(p.eqn), p.index) for p in path)  # each loop iteration, and each call in it, afresh
        if key in self._entered:
            return
        self._entered.add(key)
        position = path[-1]
        for outer, inner, carry in body_pairs(position.eqn, position.kind):
            # a carry changes from one iteration to the next: never a constant; its given infinities (a
            # running max started at -inf) are taken as given in the iteration searched, as they started
            if not carry and (jaxpr_parts.is_literal(outer) or id(outer) in self.constant):
                self.constant.add(id(inner))
            elif carry:
                self.constant.discard(id(inner))
            if id(outer) in self.source:
                self.source[id(inner)] = self.source[id(outer)]
            written = self.written_given and jaxpr_parts.is_literal(outer) and _infinite(outer.val) is not None
            if id(outer) in self.origin or written:
                self.origin[id(inner)] = self.origin.get(id(outer)) if not jaxpr_parts.is_literal(outer) else None
            else:
                self.origin.pop(id(inner), None)

    # -- the rule -------------------------------------------------------------------------

    def made(self, eqn: Equation, inputs: Sequence[Value], outputs: Sequence[Value]) -> str:
        """What ``eqn`` did: ``NAN`` or ``INF`` (it made a value no input explains), ``GIVEN`` (its
        infinities are given ones passed on), ``CAME_IN`` (an input already held a value made before),
        or ``NOTHING``."""
        if any_bad(self.free(eqn, inputs)):
            return CAME_IN
        if any_bad([v for var, v in zip(eqn.invars, inputs) if not self.written(var)], want_nan=True):
            return CAME_IN
        if any_bad(outputs, want_nan=True):
            return NAN
        if not any_bad(outputs):
            return NOTHING
        given = [
            v for var, v in zip(eqn.invars, inputs) if self.is_given(var) and _infinite(v) is not None
        ] if len(inputs) == len(eqn.invars) else []  # fmt: skip
        if not given:
            return INF
        if eqn.primitive.name not in ELEMENTWISE:
            return GIVEN
        covered: np.ndarray | bool = False
        for value in given:
            mask = _infinite(value)
            covered = covered if mask is None else covered | mask
        for output in outputs:
            out = _infinite(output)
            if out is None:
                continue
            try:
                explained = np.broadcast_to(covered, out.shape)
            except ValueError:
                return GIVEN  # shapes this rule does not line up: passed on, as for a non-elementwise one
            if (out & ~explained).any():
                return INF
        return GIVEN

    def may_pass_on_written_nan(self, eqn: Equation, inputs: Sequence[Value], outputs: Sequence[Value]) -> bool:
        """Whether ``eqn`` gives a NaN and got a NaN written into the program (a call to open: inside, the
        select that passed it on is found - ``jnp.where``'s ``_where``)."""
        if len(inputs) != len(eqn.invars) or not any_bad(outputs, want_nan=True):
            return False
        return any(self.written(var) and any_bad([v], want_nan=True) for var, v in zip(eqn.invars, inputs))

    def passes_on_written_nan(self, eqn: Equation, inputs: Sequence[Value], outputs: Sequence[Value]) -> bool:
        """Whether every NaN ``eqn`` gives is a NaN written into the program that it passed on: an
        elementwise equation (a select) whose NaNs sit where a written input (``jnp.nan`` in
        ``jnp.where(mask, x, jnp.nan)``, a library's NaN for an input outside its domain) held one, and
        no other input held a NaN. Such a NaN was written, not made (jax-ml/jax#38240's loggamma(0))."""
        if eqn.primitive.name not in ELEMENTWISE or len(inputs) != len(eqn.invars):
            return False
        written = [v for var, v in zip(eqn.invars, inputs) if self.written(var)]
        others = [v for var, v in zip(eqn.invars, inputs) if not self.written(var)]
        if not written or any_bad(others, want_nan=True):
            return False
        covered: np.ndarray | bool = False
        for value in written:
            array = host_array(value)
            if array is not None and np.issubdtype(array.dtype, np.inexact):
                covered = covered | np.isnan(array)
        if covered is False or not np.any(covered):
            return False
        for output in outputs:
            array = host_array(output)
            if array is None or not np.issubdtype(array.dtype, np.inexact):
                continue
            try:
                explained = np.broadcast_to(covered, array.shape)
            except ValueError:
                return False
            if (np.isnan(array) & ~explained).any():
                return False
        return True

    def note(
        self,
        eqn: Equation,
        inputs: list[Value],
        outputs: list[Value],
        path: tuple[Position, ...],
        kind: str,
        opened: bool,
        line_of: LineOf,
    ) -> None:
        """Record what ``eqn``'s outputs are: given (passed on, written), made of constants, made by it or
        by an earlier equation (``source``), or none of these. ``opened``: its sub-program was walked, so
        its outputs are what that program's were."""
        self.enter(path)
        held = [self.written(var) for var in eqn.invars]
        if held and all(held) and any(not jaxpr_parts.is_literal(var) for var in eqn.invars):
            self.constant.update(id(var) for var in eqn.outvars)
        inner = self._inner_outvars(eqn) if opened else None
        self._note_source(eqn, inputs, outputs, path, kind, inner)
        if kind != GIVEN:
            for var in eqn.outvars:
                self.origin.pop(id(var), None)
            return
        line = self._origin_of(eqn, inputs, line_of, path)
        for k, (var, value) in enumerate(zip(eqn.outvars, outputs)):
            if _infinite(value) is None:
                self.origin.pop(id(var), None)
                continue
            if inner is not None and k < len(inner) and not self._inner_given(inner[k]):
                self.origin.pop(id(var), None)  # made inside, not passed on
                continue
            self.origin[id(var)] = line
        self.any = True

    def _note_source(
        self,
        eqn: Equation,
        inputs: list[Value],
        outputs: list[Value],
        path: tuple[Position, ...],
        kind: str,
        inner: list[Atom] | None,
    ) -> None:
        """Which equation made the inf each output holds: this one (``INF``), the one its sub-program's
        output names, or the one that made the non-finite input it got."""
        record = (eqn, inputs, outputs, path) if kind == INF and inner is None else None
        passed = next((self.source[id(v)] for v in eqn.invars if id(v) in self.source), None)
        for k, (var, value) in enumerate(zip(eqn.outvars, outputs)):
            if not any_bad([value]):
                self.source.pop(id(var), None)
            elif inner is not None and k < len(inner) and id(inner[k]) in self.source:
                self.source[id(var)] = self.source[id(inner[k])]
            elif record is not None:
                self.source[id(var)] = record
            elif kind == CAME_IN and passed is not None:
                self.source[id(var)] = passed
            else:
                self.source.pop(id(var), None)

    def made_from(self, eqn: Equation) -> Made | None:
        """``(eqn, inputs, outputs, path)`` of the equation that made the inf ``eqn`` got, if one did."""
        return next((self.source[id(v)] for v in eqn.invars if id(v) in self.source), None)

    def _inner_outvars(self, eqn: Equation) -> list[Atom] | None:
        subs = jaxpr_parts.sub_jaxprs(eqn)
        if eqn.primitive.name == "cond" or len(subs) != 1:
            return None  # which branch ran is not kept here: passed on as for any other equation
        return list(jaxpr_parts.closed_parts(subs[0])[0].outvars)

    def _inner_given(self, var: Atom) -> bool:
        return (jaxpr_parts.is_literal(var) and _infinite(var.val) is not None) or id(var) in self.origin

    def _origin_of(
        self, eqn: Equation, inputs: Sequence[Value], line_of: LineOf, path: tuple[Position, ...]
    ) -> SourceLine | None:
        """The line that wrote the given infinity ``eqn`` passes on: its input's, or its own when it
        got the infinity from a constant written into the program."""
        for var, value in zip(eqn.invars, inputs):
            if _infinite(value) is None:
                continue
            if id(var) in self.origin and self.origin[id(var)] is not None:
                return self.origin[id(var)]
            if self.written(var):
                line = line_of(eqn, path)
                writer = library_writing(eqn)
                if line is not None and writer:
                    self.library_writes.setdefault((line.filename, line.lineno), writer)
                self.first_written = self.first_written or line
                return line
        return None

    def written_by_library(self, line: SourceLine | None) -> str:
        """The library whose code wrote the infinity attributed to the user's ``line``; "" when the line did."""
        return self.library_writes.get((line.filename, line.lineno), "") if line is not None else ""

    def written_line_of_inputs(self, eqn: Equation) -> SourceLine | None:
        """The line that wrote a given infinity ``eqn`` got (a mask's ``-inf`` fill), if one did."""
        return next((self.origin[id(v)] for v in eqn.invars if self.origin.get(id(v)) is not None), None)

    def opens_for_given(self, eqn: Equation, inputs: Sequence[Value], outputs: Sequence[Value], kind: str) -> bool:
        """A call or cond whose outputs hold inf and that got given infinities: opened to tell the ones it
        passed on from any it made."""
        return (
            kind in _OPENED_FOR_GIVEN
            and any_bad(outputs)
            and any(self.is_given(var) and _infinite(v) is not None for var, v in zip(eqn.invars, inputs))
        )

    # -- a walk resuming at a checkpoint takes these on ------------------------------------------

    def state(self) -> GivenState:
        return (
            dict(self.origin),
            set(self.constant),
            self.first_written,
            self.any,
            set(self._entered),
            dict(self.source),
            dict(self.library_writes),
        )

    def restore(self, state: GivenState) -> None:
        origin, constant, self.first_written, self.any, entered, source, library_writes = state
        self.origin, self.constant, self._entered, self.source = dict(origin), set(constant), set(entered), dict(source)
        self.library_writes = dict(library_writes)


def opened_kind(eqn: Equation) -> str:
    """How the walk opens ``eqn``: "scan", "while", "cond" or "call"."""
    name = eqn.primitive.name
    return name if name in ("scan", "while", "cond") else "call"
