"""A key a library keeps in its own state, with a counter it advances in place: Flax NNX's random streams.

``nnx.Dropout`` draws with ``jax.random.fold_in(stream.key, stream.count)`` and advances ``stream.count`` in
place. Under ``nnx.jit`` the library carries that change out of the call, so the base key stays the same and
the count goes up: a new mask at each call, and no reuse. Under plain ``jax.jit`` the program computes the
next count and returns none of it: every call folds the same count into the same key - the same mask every
step - and ``jax.random.split`` is no fix, since the user never holds that key. Two reads of the called
program tell it, neither by a library's name:

- ``folded_inputs``: the key arguments every use of which is ``random_fold_in``'s key, with the arguments
  folded into them. A key is the same draw only when what it is folded with is the same too (JAX's own
  key-reuse rules: ``fold_in`` only makes a key), so ``flows.KeyWatch`` counts the pair.
- ``dropped_update``: the program computes a new value of such a folded argument (the count plus one) and
  returns none: the state the library updates in place is lost through the jit.

The fix is the library's own jit, which carries its state out - for Flax NNX ``nnx.jit`` (the holder's class
decides, by its module: the key's holder is an object of the user's call) - tried by tracing the user's
function under it on the call's own arguments: the count must come back out of the call.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable
from typing import Any

import jax

from jaxmagic._jax import jaxpr_parts, jit_calls
from jaxmagic._jax.types import Equation, Jaxpr
from jaxmagic.probes._support.rerun.kept_state import kept
from jaxmagic.usercode.source import code_kind

# The library whose state-carrying jit a key's holder calls for, by the module of the holder's class.
_STATE_JITS = {"flax.nnx": ("nnx.jit", "flax.nnx")}
_DEPTH = 4  # calls followed into


def folded_inputs(jaxpr: Jaxpr, depth: int = 0) -> dict[int, set[int]]:
    """``{key input: inputs folded into it}`` for the inputs of ``jaxpr`` every use of which (through calls) is
    the key of a ``random_fold_in`` whose data is another input; a key used any other way is left out."""
    invars = list(jaxpr.invars)
    index = {id(v): i for i, v in enumerate(invars)}
    read = {id(v) for e in jaxpr.eqns for v in e.invars if not jaxpr_parts.is_literal(v)}
    read |= {id(v) for v in jaxpr.outvars if not jaxpr_parts.is_literal(v)}
    folded: dict[int, set[int]] = {}
    other: set[int] = set()
    for eqn in jaxpr.eqns:
        if eqn.outvars and not any(id(v) in read for v in eqn.outvars) and not eqn.effects:
            continue  # its result is never read (the key-reuse checker's `random_unwrap`s): no use of the key
        for position, var in enumerate(eqn.invars):
            i = index.get(id(var)) if not jaxpr_parts.is_literal(var) else None
            if i is None:
                continue
            if eqn.primitive.name == "random_fold_in" and position == 0:
                data = eqn.invars[1]
                j = index.get(id(data)) if not jaxpr_parts.is_literal(data) else None
                if j is None:
                    other.add(i)  # folded with a constant or a computed value: not a counter carried in
                else:
                    folded.setdefault(i, set()).add(j)
            elif eqn.primitive.name == "random_fold_in":
                continue  # the data of a fold (a counter): not a key use
            else:
                inner = call_body(eqn) if depth < _DEPTH else None
                if inner is None:
                    other.add(i)
                    continue
                inside = folded_inputs(inner, depth + 1)
                if position not in inside:
                    if _reads(inner, position):
                        other.add(i)
                    continue
                outer = [index.get(id(v)) if not jaxpr_parts.is_literal(v) else None for v in eqn.invars]
                mapped = {outer[j] for j in inside[position]}
                if None in mapped:
                    other.add(i)
                else:
                    folded.setdefault(i, set()).update(j for j in mapped if j is not None)
    return {i: data for i, data in folded.items() if i not in other}


def call_body(eqn: Equation) -> Any:
    """The body of a call equation that passes its inputs through (a nested jit); None for anything else."""
    subs = jaxpr_parts.sub_jaxprs(eqn)
    if len(subs) != 1 or eqn.primitive.name in ("scan", "while", "cond"):
        return None
    inner = jaxpr_parts.closed_parts(subs[0])[0]
    return inner if len(inner.invars) == len(eqn.invars) else None


def _reads(jaxpr: Jaxpr, position: int) -> bool:
    var = jaxpr.invars[position]
    return any(v is var for e in jaxpr.eqns for v in e.invars) or any(v is var for v in jaxpr.outvars)


def dropped_update(jaxpr: Jaxpr, position: int) -> bool:
    """Whether ``jaxpr`` computes a new value of its input ``position`` (``add``/``sub`` of it) that it neither
    returns nor reads: the counter a library advances in place, lost through the jit."""
    var = jaxpr.invars[position]
    read = {id(v) for e in jaxpr.eqns for v in e.invars if not jaxpr_parts.is_literal(v)}
    read |= {id(v) for v in jaxpr.outvars if not jaxpr_parts.is_literal(v)}
    return any(
        e.primitive.name in ("add", "sub") and any(v is var for v in e.invars) and id(e.outvars[0]) not in read
        for e in jaxpr.eqns
    )


def carried_out(jaxpr: Jaxpr, position: int) -> bool:
    """Whether an output of ``jaxpr`` is a new value of its input ``position`` (``add``/``sub`` of it)."""
    var = jaxpr.invars[position]
    outputs = {id(v) for v in jaxpr.outvars if not jaxpr_parts.is_literal(v)}
    return any(
        e.primitive.name in ("add", "sub") and any(v is var for v in e.invars) and id(e.outvars[0]) in outputs
        for e in jaxpr.eqns
    )


def holder_of(
    arguments: tuple[Any, ...], kwargs: dict[str, Any], key: object, counter: object, names: list[str]
) -> tuple[str, str, str] | None:
    """``(its path, its class, the library's state-carrying jit)`` of the innermost object among the user's call
    arguments that holds both ``key`` and the ``counter`` folded into it, when it is a library's whose jit
    carries state (``model.drop.rngs``, ``flax.nnx.RngStream``, ``nnx.jit``); else None. ``names``: the
    function's parameter names, for the positional arguments."""
    roots = [(names[i] if i < len(names) else f"args[{i}]", a) for i, a in enumerate(arguments)]
    for name, value in [*roots, *kwargs.items()]:
        try:
            paths = jax.tree_util.tree_flatten_with_path(value)[0]
        except Exception:
            continue
        path = next((p for p, held in paths if held is key), None)
        if path is None:
            continue
        found, current, walked = None, value, name
        for step in path:
            try:
                current, text = _step(current, step)
                holds = any(leaf is counter for leaf in jax.tree_util.tree_leaves(current))
            except Exception:
                return found
            walked += text
            if not holds:
                break
            module = getattr(type(current), "__module__", "") or ""
            source = getattr(sys.modules.get(module), "__file__", "") or ""
            for prefix, (jit, package) in _STATE_JITS.items():
                if module.startswith(prefix) and code_kind(source) == "library":
                    found = (walked, f"{package}.{type(current).__qualname__}", jit)
        return found
    return None


def _step(current: Any, step: object) -> tuple[object, str]:
    name = getattr(step, "name", None)
    if name is not None:  # GetAttrKey
        return getattr(current, name), f".{name}"
    key = getattr(step, "key", None)
    if key is not None:  # DictKey
        return current[key], f"[{key!r}]"
    position = getattr(step, "idx", None)
    if position is not None:  # SequenceKey
        return current[position], f"[{position}]"
    raise TypeError(f"a path step {step!r} this walk does not follow")


def tried_under_state_jit(
    jit: str, fun: Callable[..., Any], arguments: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[bool, str]:
    """``fun`` traced under the library's jit on the call's own arguments (``nnx.jit(fun).trace``): does every
    counter folded into a key come back out of the call? ``(True, "")``, or ``(False, why)``. Traces the
    user's Python once more, its prints discarded; never raises."""
    module = sys.modules.get(_module_of(jit))
    if module is None or not hasattr(module, "jit"):
        return False, f"not tried: {_module_of(jit)} is not imported"
    try:
        # a library's jit writes its state back into the user's objects: they are put back as they were
        with jit_calls.paused(), contextlib.redirect_stdout(io.StringIO()), kept(fun, [*arguments, *kwargs.values()]):
            traced = module.jit(fun).trace(*arguments, **kwargs)
        program = getattr(getattr(traced, "traced", traced), "jaxpr", None)
    except Exception as error:
        return False, f"not tried: tracing under {jit} failed ({type(error).__name__}: {error})"
    if program is None:  # a library version whose traced object keeps no jaxpr: nothing to read
        return False, f"not tried: tracing under {jit} gave no program to read"
    jaxpr = jaxpr_parts.closed_parts(program)[0]
    counters = {j for data in folded_inputs(jaxpr).values() for j in data}
    if not counters:
        return False, f"under {jit} no key of the program is folded with a counter"
    if all(carried_out(jaxpr, j) for j in counters):
        return True, ""
    return False, f"under {jit} the counter still does not come back out of the call"


def _module_of(jit: str) -> str:
    return next((package for name, package in _STATE_JITS.values() if name == jit), "")


def state_jit_fix(function: str, holder: str, kind: str, jit: str, worked: bool, why: str) -> str:
    """The fix of a key kept by a library with the counter the jit drops, in words, with how it was tried."""
    said = (
        f"`{holder}` ({kind}) keeps this key with a count it folds in and advances in place at each draw; "
        f"jax.jit does not carry that change out of `{function}` (its program computes the next count and drops "
        "it), so every call folds the same count into the same key. The key is the library's: "
        "`jax.random.split` is not yours to call on it."
    )
    fix = (
        f"Use `{jit}` in place of `jax.jit` on `{function}`: it carries the changed state out of each call. Or keep "
        "jax.jit and pass the state through it: `graphdef, state = nnx.split(model)` outside, `model = "
        "nnx.merge(graphdef, state)` inside, and return `nnx.state(model)` to carry forward (not tried)."
    )
    if worked:
        tried = (
            f"Tried: `{function}` traced under `{jit}` on this call's arguments - the count comes back out of the "
            "call, so each call draws anew (jaxmagic traced your function once more to try it)."
        )
    else:
        tried = (
            f"({why.removeprefix('not tried: ')}; not tried further.)"
            if why.startswith("not tried")
            else (f"(Tried: traced under `{jit}`, {why}.)")
        )
    return f"{said} {fix} {tried}"
