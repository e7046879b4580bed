"""The first operation where two traces of one function differ: where a changed input reaches the computation."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.types import Equation, Jaxpr, Value

# id(variable) -> its number among the program's (an input's position, ("value", n), ("constant", digest));
# the count of values numbered so far under -1
_Ids = dict[int, Any]


def _digest(value: Value) -> str:
    try:
        array = np.asarray(value)
    except Exception:
        return repr(type(value))
    if array.nbytes > 1 << 24:
        return f"{array.shape} {array.dtype}"
    return f"{array.shape} {array.dtype} {hashlib.sha1(array.tobytes()).hexdigest()}"


def _eqn_key(eqn: Equation, ids: _Ids) -> tuple[str, tuple[object, ...], tuple[tuple[str, str], ...]]:
    operands: list[object] = []
    for var in eqn.invars:
        if jaxpr_parts.is_literal(var):
            operands.append(("literal", repr(getattr(var, "val", var))))
        else:
            operands.append(ids.get(id(var), "?"))
    for var in eqn.outvars:  # numbered in order of definition, apart from the inputs and constants
        ids[-1] = ids.get(-1, 0) + 1
        ids[id(var)] = ("value", ids[-1])
    params = tuple(
        (name, repr(value))
        for name, value in sorted(eqn.params.items())
        if isinstance(value, (int, float, str, bool, tuple))
        and not any(hasattr(v, "eqns") for v in (value if isinstance(value, tuple) else ()))
    )
    return (eqn.primitive.name, tuple(operands), params)


def first_difference(a: Jaxpr, consts_a: list[Value], b: Jaxpr, consts_b: list[Value]) -> Equation | None:
    """The first equation of ``a`` that differs from ``b``'s (primitive, operands by position, params,
    constants by value)."""
    ids_a: _Ids = {id(v): i for i, v in enumerate(a.invars)}
    ids_b: _Ids = {id(v): i for i, v in enumerate(b.invars)}

    for ids, program, consts in ((ids_a, a, consts_a), (ids_b, b, consts_b)):
        for var, value in zip(getattr(program, "constvars", ()), consts):
            ids[id(var)] = ("constant", _digest(value))
    for i, eqn in enumerate(a.eqns):
        if i >= len(b.eqns):
            return eqn
        if _eqn_key(eqn, ids_a) != _eqn_key(b.eqns[i], ids_b):
            return eqn
    return None
