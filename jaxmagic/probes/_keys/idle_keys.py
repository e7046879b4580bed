"""The key inputs a jitted program makes no random numbers from: carried through as they came in, or not used.

An eval step given the whole train state (its dropout key with it) receives the same key at every call and
never draws from it; the same key at every call of such a program is no repeated draw, and saying "got the
same key in 20 of its 20 calls" there names a cause that was not observed. A key counts as idle only when no
live equation reads it but to return it as it came in - directly, or through a nested call (a jit inside the
jit) that does the same, whose output is then followed as the key itself. Any other use - a split, a draw, a
fold_in, ``key_data``, a loop or a branch given it - counts as drawing: a key the program touches is followed
as before (``flows.KeyWatch``).
"""

from __future__ import annotations

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.types import Jaxpr
from jaxmagic.probes._keys.library_state import call_body

_DEPTH = 4  # nested calls followed


def idle_inputs(jaxpr: Jaxpr) -> frozenset[int]:
    """The indices of ``jaxpr``'s inputs it makes no random numbers from (see the module docstring); none where
    the program's layout is another (every key then followed)."""
    try:
        return frozenset(_idle_and_returned(jaxpr)[0])
    except Exception:
        return frozenset()


def _idle_and_returned(jaxpr: Jaxpr, depth: int = 0) -> tuple[set[int], dict[int, list[int]]]:
    """(the inputs no live equation reads but to return them, {input: the outputs it is returned as})."""
    invars = list(jaxpr.invars)
    same = {id(v): i for i, v in enumerate(invars)}  # a variable that is input i as it came in
    read = {id(v) for e in jaxpr.eqns for v in e.invars if not jaxpr_parts.is_literal(v)}
    read |= {id(v) for v in jaxpr.outvars if not jaxpr_parts.is_literal(v)}
    used: set[int] = set()
    for eqn in jaxpr.eqns:
        if eqn.outvars and not any(id(v) in read for v in eqn.outvars) and not eqn.effects:
            continue  # its result is never read (the key-reuse checker's `random_unwrap`s): no use
        given: list[tuple[int, int]] = []  # (position in the equation, the input it is)
        for p, v in enumerate(eqn.invars):
            i = same.get(id(v)) if not jaxpr_parts.is_literal(v) else None
            if i is not None:
                given.append((p, i))
        if not given:
            continue
        inner = call_body(eqn) if depth < _DEPTH else None
        if inner is None:
            used.update(i for _, i in given)
            continue
        idle, returned = _idle_and_returned(inner, depth + 1)
        for p, i in given:
            if p not in idle:
                used.add(i)
            for o in returned.get(p, ()):
                if o < len(eqn.outvars):
                    same[id(eqn.outvars[o])] = i  # the call returns the key as it came in: still the key
    returned_as: dict[int, list[int]] = {}
    for o, v in enumerate(jaxpr.outvars):
        i = same.get(id(v)) if not jaxpr_parts.is_literal(v) else None
        if i is not None:
            returned_as.setdefault(i, []).append(o)
    return set(range(len(invars))) - used, returned_as
