"""An integer computation that wrapped around before the value that went non-finite (``1 / 256 ** k`` in
int32: 256**4 wraps to 0, and 1/0 is inf - jax-ml/jax#8604).

JAX's integer arithmetic wraps silently (jax-ml/jax#10692: "if you cause integer overflow, the behavior is
implementation-defined"), and its NaN/inf checks never look at integers: the producer search meets the
consequence, a float operation downstream. So the operations that computed the producer's inputs are read
back through the data flow, and an integer one whose exact result - computed again on the host from its
recorded inputs, in float64 - lies outside its dtype's range (``jnp.iinfo``) overflowed. The same
computation in a wider dtype on those inputs is the fix, tried: float32 always, int64 when x64 is on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Equation, Params, Value
from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.value_fixes import FixTrial
from jaxmagic.probes._nans.primitives import primitive
from jaxmagic.probes._nans.search.equation_origin import expression_of, public_name, user_line
from jaxmagic.report import SourceLine

MAX_EQUATIONS = 200  # equations read back at most (a training step's inputs reach far back)
MAX_HOPS = 12  # levels of equations read back from the producer's inputs (a square-and-multiply power: ~8)


def _exact(name: str, params: Params) -> Callable[[list[np.ndarray]], np.ndarray] | None:
    """The operation on float64 host values (what it computes without wrapping), or None when unknown."""
    elementwise = {"pow": np.power, "mul": np.multiply, "add": np.add, "sub": np.subtract}
    if name in elementwise:
        return lambda ins: elementwise[name](*ins)
    if name == "integer_pow":
        return lambda ins: np.power(ins[0], float(params["y"]))
    if name in ("square", "neg"):
        return lambda ins: np.square(ins[0]) if name == "square" else np.negative(ins[0])
    if name in ("reduce_sum", "reduce_prod"):
        reduce = np.sum if name == "reduce_sum" else np.prod
        return lambda ins: reduce(ins[0], axis=tuple(params.get("axes", ())))
    return None


def _exact_of_call(eqn: Equation) -> Callable[[list[np.ndarray]], np.ndarray] | None:
    """A jitted JAX function (``jnp.power`` runs as one) by the NumPy function of the same name, which
    ``jax.numpy`` mirrors: ``np.power`` on float64 values."""
    name = public_name(*jaxpr_parts.called_function(eqn))
    if not name.startswith("jnp.") or name.count(".") != 1:
        return None
    numpy_function = getattr(np, name.removeprefix("jnp."), None)
    if not callable(numpy_function) or name not in ("jnp.power", "jnp.multiply", "jnp.add", "jnp.square", "jnp.prod"):
        return None
    return lambda ins: numpy_function(*ins)


# (inputs, outputs, path) of an integer equation the walk evaluated, by id(equation)
IntegerRecord: TypeAlias = tuple[list[Value], list[Value], tuple[Position, ...]]
# (eqn, inputs, path, exact values) of the integer operation that wrapped around
IntegerSite: TypeAlias = tuple[Equation, list[Value], tuple[Position, ...], np.ndarray]


@dataclasses.dataclass
class IntegerOverflow:
    """An integer operation whose result did not fit its dtype, on the way to the producer."""

    operation: str  # "jnp.power", "mul"
    dtype: str  # "int32"
    limit: str  # "2147483647": jnp.iinfo(dtype).max
    exact: str  # "4294967296": what it should have been, at the first element out of range
    wrapped: str  # "0": what the dtype held there
    index: list[int]
    line: SourceLine | None = None
    expression: str = ""  # `256 ** k`


def _integer(value: Value) -> bool:
    return np.issubdtype(np.asarray(value).dtype, np.integer)


def find(
    producer_eqn: Equation, made_by: dict[int, Equation], recorded: dict[int, IntegerRecord]
) -> tuple[IntegerOverflow, IntegerSite] | None:
    """The first integer operation that wrapped around among those that computed ``producer_eqn``'s inputs
    (``made_by``: id(var) -> equation; ``recorded``: id(equation) -> (inputs, outputs, path) of the integer
    equations the walk evaluated), with its site ``(eqn, inputs, path, exact)``; None when none did."""
    frontier, seen = list(producer_eqn.invars), set()
    for _ in range(MAX_HOPS):
        following = []
        for var in frontier:
            eqn = made_by.get(id(var))
            if eqn is None or id(eqn) in seen:
                continue
            seen.add(id(eqn))
            found = _overflowed(eqn, recorded.get(id(eqn)))
            if found is not None:
                return found
            if len(seen) < MAX_EQUATIONS:  # through any operation: `n**3 * 1.0` multiplies the wrapped value on
                following += list(eqn.invars)
        frontier = following
    return None


def _overflowed(eqn: Equation, record: IntegerRecord | None) -> tuple[IntegerOverflow, IntegerSite] | None:
    if record is None:
        return None
    inputs, outputs, path = record
    if not outputs or not _integer(outputs[0]) or not all(_integer(v) for v in inputs):
        return None
    exact_of = _exact_of_call(eqn) if jaxpr_parts.sub_jaxprs(eqn) else _exact(eqn.primitive.name, eqn.params)
    if exact_of is None:
        return None
    try:
        with np.errstate(all="ignore"):
            exact = np.asarray(exact_of([np.asarray(v, np.float64) for v in inputs]), np.float64)
    except Exception:
        return None
    out = np.asarray(outputs[0])
    info = np.iinfo(out.dtype)
    outside = (exact > info.max) | (exact < info.min)
    if exact.shape != out.shape or not outside.any():
        return None
    index = tuple(int(i) for i in np.argwhere(outside)[0]) if outside.ndim else ()
    name = eqn.primitive.name
    if jaxpr_parts.sub_jaxprs(eqn):
        name = public_name(*jaxpr_parts.called_function(eqn)) or name
    line = user_line(eqn, path)
    found = IntegerOverflow(
        operation=name,
        dtype=str(out.dtype),
        limit=str(info.max),
        exact=f"{exact[index]:.0f}",
        wrapped=str(out[index]),
        index=list(index),
        line=line,
        expression=expression_of(eqn, line, path) if line is not None else "",
    )
    return found, (eqn, inputs, path, exact)


def _in_dtype(eqn: Equation, inputs: list[Value], dtype: DTypeLike) -> np.ndarray:
    """``eqn`` computed again on ``inputs`` cast to ``dtype``: the same primitive and parameters (or, for a
    jitted ``jnp`` function, that function), as the user's line would compute it on values of that dtype."""
    cast = [jnp.asarray(v).astype(dtype) for v in inputs]
    if jaxpr_parts.sub_jaxprs(eqn):
        name = public_name(*jaxpr_parts.called_function(eqn)).removeprefix("jnp.")
        return np.asarray(getattr(jnp, name)(*cast))
    return np.asarray(jaxpr_parts.bind_equation(eqn, cast)[0])


def wider_trials(found: IntegerOverflow, site: IntegerSite) -> list[FixTrial]:
    """The overflowing operation computed again on its recorded inputs in float32 - and in int64 when x64 is
    on - with JAX: do the results hold the exact values (float32: to its precision) where the dtype wrapped?"""
    eqn, inputs, _, exact = site
    at = f" at index {found.index}" if found.index else ""
    where = tuple(found.index)
    trials = []
    wider = [("float32", jnp.float32)] + ([("int64", jnp.int64)] if jax.config.jax_enable_x64 else [])
    for name, dtype in wider:
        trial = FixTrial(
            FixKey.WIDER, name, call_result=f"not tried: the rest of the program would go on in {name} from here"
        )
        try:
            with jax.debug_nans(False), jax.debug_infs(False):
                value = _in_dtype(eqn, inputs, dtype)
        except Exception as error:
            trial.result = f"not tried: {type(error).__name__}"
            trials.append(trial)
            continue
        got = float(value[where] if where else value)
        close = bool(np.isfinite(got)) and abs(got - float(exact[where] if where else exact)) <= 1e-6 * abs(got) + 0.5
        trial.tried, trial.finite = True, close
        trial.result = f"{got:.6g}{at}, no wrap-around" if close else f"{got:.6g}{at}: still not the exact value"
        trials.append(trial)
    return trials


def integer_arithmetic(eqn: Equation, outputs: Sequence[Value]) -> bool:
    """An integer result of arithmetic (or of a call: a jitted ``jnp.power``) that may have wrapped around."""
    if not outputs or not (primitive(eqn.primitive.name).wraps or jaxpr_parts.sub_jaxprs(eqn)):
        return False
    dtype = getattr(outputs[0], "dtype", None)
    return dtype is not None and np.issubdtype(np.dtype(dtype), np.integer)
