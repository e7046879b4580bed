"""A NaN/inf fix tried on the values before it is offered.

A rule can name a fix that does not work at the value the operation got: "clamp the input of
``rsqrt`` at 0" for a variance that rounded below 0, when ``rsqrt(0)`` is inf; "clip to [-1, 1]" for
``arctanh``, whose value at 1 is inf. So every candidate fix of an operation that made a non-finite
value is tried where the producer search found it (``_nans/search/producer.py``):

1. on the operation's own recorded inputs - the candidate's transformation applied to them, then the
   program's own equation (``jaxpr_parts.bind_equation``: same primitive, same parameters, same dtype);
2. where it made the operation finite, on the whole failing program: evaluated again with that one
   equation replaced by the fixed one, its outputs checked. Under a gradient the program's derivative
   equations read the value before the fix, so instead the fixed operation's own derivative is evaluated
   on the inputs (``jax.jvp``): a clip to 1 before ``arccos`` has derivative 0 * inf = NaN there.

Only JAX primitives run, on arrays the search recorded: no user Python (a program that calls back into
Python - ``pure_callback``, ``debug.print`` - is not re-run). A candidate is data: its code, written with
``v`` (or ``num``/``den``) the value given to the operation, and what its trial gave.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.jaxpr_interpreter import Interpreter, Level, Position
from jaxmagic._jax.types import Equation, Jaxpr, Literal, Program, Value
from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.primitives import InputFix, primitive

ADDED_EPS = 1e-6  # the epsilon added to a value kept away from 0 (what normalisation layers use, 1e-5/1e-6)
DIVISION_EPS = 1e-8  # the epsilon users add to a denominator (underflows to 0 in float16: see representable_eps)
MAX_CALL_TRIALS = 2  # whole-program trials per NaN: each evaluates the program once more
MAX_CALL_EQUATIONS = 20_000  # a program this long is not evaluated again for a trial


@dataclasses.dataclass
class FixTrial:
    """One candidate fix of the operation that made the value, and what trying it gave."""

    key: str  # what the candidate does, a ``FixKey`` ("clamp", "eps", "float32"): kept as its plain value (data)
    code: str  # with `v` (or `num`, `den`) the value given to the operation: "jnp.maximum(v, 0.0) + 1e-06"
    tried: bool = False
    finite: bool = False  # the fixed operation's output - and the program's outputs where tried - finite
    result: str = ""  # the operation: "finite", "still inf at 3 of 16 elements", "not tried: ..."
    call_result: str = ""  # the whole program: "finite", "still inf at 1 of 4 elements", "not tried: ..."
    offered: bool = False  # the report offers it as the fix (set by the NaN probe's rule)

    def __post_init__(self) -> None:
        self.key = FixKey(self.key).value  # one of the kinds declared, held as plain data (no enum in a report)

    @property
    def kind(self) -> FixKey:
        return FixKey(self.key)

    @property
    def failed(self) -> bool:
        return self.tried and not self.finite


@dataclasses.dataclass(frozen=True)
class _Candidate:
    key: FixKey
    code: str
    fixed: Callable[[list[Value]], list[Value]]  # the fixed operation's outputs from the recorded inputs


def _floats(dtype: DTypeLike) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating) or str(dtype) == "bfloat16"


def _float_value(value: Value) -> bool:
    """An array (or a constant written into the program: a Python float) of floats."""
    dtype = getattr(value, "dtype", None)
    return _floats(dtype if dtype is not None else np.asarray(value).dtype)


def representable_eps(wanted: float, dtype: DTypeLike) -> float:
    """``wanted`` when ``dtype`` holds it as a normal number, else the power of ten just above the dtype's
    smallest normal number: float16 turns 1e-8 into 0.0 and 1e-6 into a subnormal (which the CPU may flush
    to 0), so an epsilon for float16 is 1e-4 (optax#1754); bfloat16 holds 1e-8."""
    try:
        tiny = float(jnp.finfo(np.dtype(dtype)).tiny)
    except (TypeError, ValueError):
        return wanted
    return wanted if wanted >= tiny else float(10.0 ** math.ceil(math.log10(tiny)))


def _operation_dtype(inputs: Sequence[Value]) -> str:
    return next((str(v.dtype) for v in inputs if hasattr(v, "dtype") and _floats(v.dtype)), "float32")


def candidates(eqn: Equation, inputs: list[Value]) -> list[_Candidate]:
    """The fixes that can be written for this operation on its input values, naive ones first (so that the
    report can say why the obvious fix does not do): each applies a transformation to the inputs, then
    the program's own equation. [] for an operation no value fix is known for."""
    name = eqn.primitive.name
    row = primitive(name)
    if not any(_float_value(v) for v in inputs):
        return []
    if any(_has_inf(v) for v in inputs):
        return [_finite_fill(eqn, inputs)]
    half = next((str(v.dtype) for v in inputs if str(getattr(v, "dtype", "")) in ("float16", "bfloat16")), "")
    if row.widened and half:
        return [_widened(eqn)]
    if name == "convert_element_type" and _narrowed_float(eqn, inputs):
        return [_not_narrowed(eqn, inputs)]
    if row.divides and len(inputs) == 2:
        return _division_candidates(eqn, inputs, row.divides)
    return _input_candidates(eqn, inputs, row.input_fixes)


def _finite_fill(eqn: Equation, inputs: list[Value]) -> _Candidate:
    """An inf the operation was given (a mask's -inf fill, a `x * jnp.inf`): a finite fill instead, named by
    the sign of the infs it got."""
    infs = [a[np.isinf(a)] for a in (np.asarray(v).astype(np.float32) for v in inputs if _has_inf(v))]
    signs = {bool(negative) for inf in infs for negative in np.signbit(inf)}
    label = {
        frozenset({True}): "jnp.finfo(dtype).min in place of -jnp.inf",
        frozenset({False}): "jnp.finfo(dtype).max in place of jnp.inf",
    }.get(frozenset(signs), "jnp.finfo(dtype).max and .min in place of jnp.inf and -jnp.inf")

    def filled(ins: list[Value]) -> list[Value]:
        finite = [
            jnp.nan_to_num(v, posinf=jnp.finfo(v.dtype).max, neginf=jnp.finfo(v.dtype).min) if _has_inf(v) else v
            for v in ins
        ]
        return jaxpr_parts.bind_equation(eqn, finite)

    return _Candidate(FixKey.FINITE_FILL, label, filled)


def _widened(eqn: Equation) -> _Candidate:
    """An overflow of half precision: the same operation in float32 (the result's largest value then says
    whether it may go back to the half type after)."""

    def widened(ins: list[Value]) -> list[Value]:
        return jaxpr_parts.bind_equation(eqn, [v.astype(jnp.float32) if _floats(v.dtype) else v for v in ins])

    return _Candidate(FixKey.FLOAT32, "v.astype(jnp.float32)", widened)


def _narrowed_float(eqn: Equation, inputs: list[Value]) -> bool:
    """A conversion from a float dtype to a narrower float one (float32 to float16: a sum JAX accumulated in
    float32, converted back)."""
    new = eqn.params.get("new_dtype")
    old = getattr(inputs[0], "dtype", None) if inputs else None
    if new is None or old is None or not (_floats(new) and _floats(old)):
        return False
    return float(jnp.finfo(new).max) < float(jnp.finfo(old).max)


def _not_narrowed(eqn: Equation, inputs: list[Value]) -> _Candidate:
    """The value kept in the wider dtype it was computed in: the conversion left out."""
    wide = str(inputs[0].dtype)
    return _Candidate(FixKey.FLOAT32, f"v (kept in {wide})", lambda ins: [ins[0]])


def _input_candidates(eqn: Equation, inputs: list[Value], fixes: tuple[InputFix, ...]) -> list[_Candidate]:
    """Fixes of an operation's first input (its row's ``input_fixes``): kept in the domain where the
    operation is finite."""
    eps = representable_eps(ADDED_EPS, _operation_dtype(inputs))

    def on_input(fix: InputFix) -> Callable[[list[Value]], list[Value]]:
        return lambda ins: jaxpr_parts.bind_equation(eqn, [fix.fixed(ins[0], eps), *ins[1:]])

    return [_Candidate(fix.key, fix.code.format(eps=eps), on_input(fix)) for fix in fixes]


def _division_candidates(eqn: Equation, inputs: list[Value], symbol: str) -> list[_Candidate]:
    """A division (or remainder: ``symbol``) by 0: a denominator kept from 0, or the result guarded."""
    den_eps = representable_eps(DIVISION_EPS, _operation_dtype(inputs[1:]))

    def guarded(ins: list[Value]) -> list[Value]:
        num, den = ins
        ok = den != 0
        out = jaxpr_parts.bind_equation(eqn, [num, jnp.where(ok, den, jnp.ones_like(den))])[0]
        return [jnp.where(ok, out, jnp.zeros_like(out))]

    return [
        _Candidate(
            FixKey.EPS,
            f"num {symbol} (den + {den_eps:g})",
            lambda ins: jaxpr_parts.bind_equation(eqn, [ins[0], ins[1] + den_eps]),
        ),
        _Candidate(FixKey.GUARD, f"jnp.where(den != 0, num {symbol} jnp.where(den != 0, den, 1.0), 0.0)", guarded),
    ]


def _has_inf(value: Value) -> bool:
    try:
        array = np.asarray(value)
    except Exception:
        return False
    return _floats(array.dtype) and bool(np.isinf(array.astype(np.float32)).any())


def bad_text(values: list[Value]) -> str:
    """ "" when every float value is finite, else "still inf at 3 of 16 elements"."""
    bad = total = 0
    nan = inf = False
    for value in values:
        try:
            array = np.asarray(value)
        except Exception:
            continue
        if not _floats(array.dtype):
            continue
        array = array.astype(np.float64) if str(array.dtype) == "bfloat16" else array
        mask = ~np.isfinite(array)
        bad += int(mask.sum())
        total += int(array.size)
        nan = nan or bool(np.isnan(array).any())
        inf = inf or bool(np.isinf(array).any())
    if not bad:
        return ""
    what = "NaN and inf" if nan and inf else "NaN" if nan else "inf"
    return f"still {what} at {bad} of {total} element{'s' if total != 1 else ''}"


def _back_in(half: str, outputs: list[Value]) -> str:
    """Whether float32 results fit the half type again: " (largest 1.2e+05, above float16's 65504)"."""
    largest = max((float(np.max(np.abs(np.asarray(v, np.float64)))) for v in outputs if np.size(v)), default=0.0)
    limit = float(jnp.finfo(half).max)
    fits = "within" if largest <= limit else "above"
    return f" (largest {largest:.3g}, {fits} {half}'s {limit:.5g})"


def differentiated(eqn: Equation, path: Sequence[Position]) -> bool:
    """The program computes this operation's derivative too (it sits under ``jvp``: a gradient was taken)."""
    stacks = [jaxpr_parts.name_stack_text(eqn), *(jaxpr_parts.name_stack_text(position.eqn) for position in path)]
    return any("jvp(" in stack or "transpose(" in stack for stack in stacks)


def _derivative_outputs(fixed: Callable[[list[Value]], list[Value]], inputs: list[Value]) -> list[Value]:
    """The fixed operation's partial derivatives at ``inputs`` (``jax.jvp`` along each float input): where
    the fix itself has a derivative of 0 (a clip past its bound) times an infinite one, it is NaN - as the
    gradient of the written fix would be (jax#23649: `arccos(clip(y, -1, 1))`)."""
    varying = [i for i, v in enumerate(inputs) if hasattr(v, "dtype") and _floats(v.dtype)]  # not a written constant

    def of(*values: Value) -> list[Value]:
        filled = list(inputs)
        for i, value in zip(varying, values):
            filled[i] = value
        return fixed(filled)

    primals = [jnp.asarray(inputs[i]) for i in varying]
    derivatives = []
    for k in range(len(primals)):  # one input at a time: a sum of partial derivatives could overflow by itself
        directions = [jnp.ones_like(v) if j == k else jnp.zeros_like(v) for j, v in enumerate(primals)]
        derivatives += list(jax.jvp(of, primals, directions)[1])
    return derivatives


def try_on_operation(eqn: Equation, inputs: list[Value], with_derivative: bool = False) -> list[FixTrial]:
    """Every candidate fix of ``eqn`` tried on its recorded ``inputs``: the fixed operation's outputs finite
    - and, ``with_derivative`` (the program takes a gradient through it), its derivative there too?"""
    trials = []
    for candidate in candidates(eqn, inputs):
        trial = FixTrial(candidate.key, candidate.code)
        # a fill or a dtype changes the value where it is made, not at this operation: its derivative here
        # would be taken through the replacement of an infinity (or a cast), which the written fix has not
        at_source = candidate.key in (FixKey.FINITE_FILL, FixKey.FLOAT32)
        try:
            outputs = candidate.fixed(list(inputs))
            derivative = _derivative_outputs(candidate.fixed, list(inputs)) if with_derivative and not at_source else []
        except Exception as error:  # a dtype the transformation does not take
            trial.result = f"not tried: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            trials.append(trial)
            continue
        trial.tried = True
        bad = bad_text(outputs)
        trial.finite, trial.result = not bad, bad or "finite"
        if trial.key == FixKey.FLOAT32 and not bad:
            narrow = str(eqn.params.get("new_dtype", "")) if eqn.primitive.name == "convert_element_type" else ""
            trial.result += _back_in(narrow or next(str(v.dtype) for v in inputs if hasattr(v, "dtype")), outputs)
        if with_derivative and not bad and at_source:
            trial.result += " (its derivative not tried: the fix is made where the value is made)"
        elif with_derivative and not bad:
            bad_derivative = bad_text(derivative)
            trial.finite = not bad_derivative
            trial.result += (
                ", but its derivative " + bad_derivative if bad_derivative else ", and its derivative finite"
            )
        trials.append(trial)
    return trials


# -- the whole program with one equation replaced ---------------------------------------------------


def calls_python(jaxpr: Jaxpr, seen: set[int] | None = None) -> str:
    """The first equation of ``jaxpr`` (or of its sub-programs) that runs Python when evaluated: a callback."""
    seen = set() if seen is None else seen
    if id(jaxpr) in seen:
        return ""
    seen.add(id(jaxpr))
    for eqn in jaxpr.eqns:
        if "callback" in eqn.primitive.name or eqn.primitive.name in ("debug_print", "io_callback"):
            return eqn.primitive.name
        for sub in jaxpr_parts.sub_jaxprs(eqn):
            found = calls_python(jaxpr_parts.closed_parts(sub)[0], seen)
            if found:
                return found
    return ""


def equation_count(jaxpr: Jaxpr, seen: set[int] | None = None) -> int:
    seen = set() if seen is None else seen
    if id(jaxpr) in seen:
        return 0
    seen.add(id(jaxpr))
    return len(jaxpr.eqns) + sum(
        equation_count(jaxpr_parts.closed_parts(s)[0], seen) for e in jaxpr.eqns for s in jaxpr_parts.sub_jaxprs(e)
    )


class _Replaced(Interpreter):
    """Evaluates a program with one equation (``target``, reached through the equations ``on_path``)
    replaced by ``fixed``: the other equations are bound as they are, the ones on the path are opened
    (a loop is run by ``lax.scan``/``lax.while_loop`` with its body evaluated this way, traced)."""

    def __init__(
        self,
        target: Equation,
        on_path: set[int],
        fixed: Callable[[list[Value]], list[Value]],
        observed: Equation | None = None,
    ) -> None:
        self.target, self.on_path, self.fixed = target, on_path, fixed
        self.observed = observed  # an equation whose outputs are kept (``seen``) as the program runs
        self.seen: list[Value] = []

    def outputs(self, level: Level, eqn: Equation, inputs: list[Value]) -> list[Value]:
        if eqn is self.target:
            return self.fixed(inputs)
        if id(eqn) in self.on_path:
            return self.descend(eqn, inputs, level.path)
        return jaxpr_parts.bind_equation(eqn, inputs)

    def after(self, level: Level, eqn: Equation, inputs: list[Value], outputs: list[Value]) -> None:
        if eqn is self.observed:
            self.seen = list(outputs)


def try_on_program(
    trials: list[FixTrial],
    eqn: Equation,
    inputs: list[Value],
    path: Sequence[Position],
    program: Program,
    values: list[Value],
    before: list[Value] | None,
) -> None:
    """The candidates that made the operation finite, tried on the whole program (``program`` on
    ``values``, the search's): ``call_result`` says whether its outputs are finite with that one equation
    fixed. ``path``: the producer search's positions of the equations the operation sits in; ``before``:
    the program's outputs unfixed (None when its evaluation failed)."""
    passed = [t for t in trials if t.finite]
    if not passed:
        return
    jaxpr, consts = jaxpr_parts.closed_parts(program)
    unfixed = bad_text(before or [])
    why = ""
    if before is None:
        why = "the program could not be evaluated"
    elif not unfixed:
        why = "its outputs were finite without the fix (the value did not reach them)"
    elif calls_python(jaxpr):
        why = f"the program calls back into Python (`{calls_python(jaxpr)}`), which a trial must not run"
    elif differentiated(eqn, path):  # the program's derivative of it reads the unfixed value: not the written fix
        why = "the program also computes its derivative, from the value before the fix (the fixed operation's derivative was tried instead)"
    elif any(position.kind == "while" for position in path):  # the fix may change when it ends, or never end it
        why = "the operation is inside a while loop, and a fixed value may change when (or whether) it ends"
    elif equation_count(jaxpr) > MAX_CALL_EQUATIONS:
        why = f"the program has more than {MAX_CALL_EQUATIONS} operations"
    built = {c.key: c for c in candidates(eqn, inputs)}
    on_path = {id(position.eqn) for position in path}
    for number, trial in enumerate(passed):
        if trial.key == FixKey.FLOAT32:  # the rest of the program computes in the half type
            trial.call_result = "not tried: the rest of the program would go on in float32 from here"
            continue
        if trial.key == FixKey.FINITE_FILL:  # the fill is written where the inf is, which other operations read too
            trial.call_result = (
                "not tried: the infinity is written elsewhere; only this operation's inputs were changed"
            )
            continue
        if why or number >= MAX_CALL_TRIALS:
            trial.call_result = f"not tried: {why or 'enough whole-program trials were made'}"
            continue
        replaced = _Replaced(eqn, on_path, built[trial.kind].fixed)
        try:
            outputs = replaced.evaluate(jaxpr, consts, list(values))
        except Exception as error:
            trial.call_result = f"not tried: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            continue
        bad = bad_text(outputs)
        if bad:  # what the unfixed program left, beside it: another operation may make one too
            bad += f" ({unfixed.removeprefix('still ')} without the fix)"
        trial.call_result = bad or "finite"
        trial.finite = not bad


def _try_replaced(
    trial: FixTrial,
    written: Equation,
    replaced: Callable[[list[Value]], list[Value]],
    producer: Equation,
    path: Sequence[Position],
    program: Program,
    values: list[Value],
    before: list[Value] | None,
) -> FixTrial:
    """``trial`` tried by evaluating ``program`` on ``values`` with equation ``written`` (beside ``producer``,
    same ``path``) replaced by ``replaced``: the producer's outputs and the program's outputs finite? The
    equations after it read the replaced value, a derivative's coefficients too. Never raises."""
    jaxpr, consts = jaxpr_parts.closed_parts(program)
    why = ""
    if before is None:
        why = "the program could not be evaluated"
    elif calls_python(jaxpr):
        why = f"the program calls back into Python (`{calls_python(jaxpr)}`), which a trial must not run"
    elif any(position.kind == "while" for position in path):
        why = "the operation is inside a while loop, and a changed value may change when (or whether) it ends"
    elif equation_count(jaxpr) > MAX_CALL_EQUATIONS:
        why = f"the program has more than {MAX_CALL_EQUATIONS} operations"
    if why:
        trial.result = f"not tried: {why}"
        return trial
    run = _Replaced(written, {id(position.eqn) for position in path}, replaced, observed=producer)
    try:
        outputs = run.evaluate(jaxpr, consts, list(values))
    except Exception as error:
        trial.result = f"not tried: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return trial
    trial.tried = True
    if run.seen and not any(isinstance(v, jax.core.Tracer) for v in run.seen):
        made = bad_text(run.seen)
        trial.result = made or "finite"
    else:  # evaluated traced, inside a loop: its outputs there are not concrete
        trial.result = "not observed (it runs inside a loop)"
    bad = bad_text(outputs)
    if bad:
        bad += f" ({bad_text(before or []).removeprefix('still ')} without the fix)"
    trial.call_result = bad or "finite"
    trial.finite = not bad and trial.result in ("finite", "not observed (it runs inside a loop)")
    return trial


def try_constant(
    written: Equation,
    operand: int,
    value: float,
    code: str,
    producer: Equation,
    path: Sequence[Position],
    program: Program,
    values: list[Value],
    before: list[Value] | None,
) -> FixTrial:
    """The program evaluated again with the constant operand ``operand`` of equation ``written`` (a
    ``Literal``: an ``eps`` its dtype turned into 0) replaced by ``value`` in the same dtype: the producer's
    outputs and the program's outputs finite? ``written`` sits beside ``producer`` (same ``path``). Only
    JAX primitives run, as for every trial; never raises."""
    dtype = np.asarray(cast(Literal, written.invars[operand]).val).dtype  # a Literal: the constant the dtype held as 0

    def replaced(ins: list[Value]) -> list[Value]:
        changed = list(ins)
        changed[operand] = jnp.asarray(value, dtype=dtype)
        return jaxpr_parts.bind_equation(written, changed)

    return _try_replaced(FixTrial(FixKey.CONSTANT, code), written, replaced, producer, path, program, values, before)


def try_clamped_before(
    added: Equation,
    operand: int,
    code: str,
    producer: Equation,
    path: Sequence[Position],
    program: Program,
    values: list[Value],
    before: list[Value] | None,
) -> FixTrial:
    """The program evaluated again with operand ``operand`` of equation ``added`` (the value an epsilon is
    added to: a variance that rounded below 0) clamped at 0 before the add: the producer's outputs and the
    program's outputs finite? Under a gradient the backward pass then computes with the clamped forward
    values (the clamp's own derivative, 0 below 0, is not in the program evaluated). Never raises."""

    def replaced(ins: list[Value]) -> list[Value]:
        changed = list(ins)
        changed[operand] = jnp.maximum(changed[operand], jnp.zeros((), dtype=changed[operand].dtype))
        return jaxpr_parts.bind_equation(added, changed)

    return _try_replaced(FixTrial(FixKey.CLAMP_BEFORE, code), added, replaced, producer, path, program, values, before)


def try_fixes(
    eqn: Equation,
    inputs: list[Value],
    path: Sequence[Position],
    program: Program,
    values: list[Value],
    before: list[Value] | None,
) -> list[FixTrial]:
    """Every candidate fix of ``eqn`` (the producer) tried on its recorded ``inputs``, and those that made
    it finite on the whole ``program`` evaluated on ``values`` (``before``: its outputs unfixed). Never
    raises: a trial that cannot be made says so in its ``result``."""
    try:
        trials = try_on_operation(eqn, inputs, with_derivative=differentiated(eqn, path))
        try_on_program(trials, eqn, inputs, path, program, values, before)
    except Exception as error:  # a structure this module does not know: no fix is claimed tried
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return [FixTrial(FixKey.NONE, "", result=f"not tried: the trial failed ({reason})")]
    return trials
