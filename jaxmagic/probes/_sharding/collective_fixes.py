"""Fixes for inserted collectives, tried by compiling the call's program again - never by running it.

The program is the one JAX already traced for the call (``traced.jaxpr``, evaluated equation by
equation under a fresh ``jax.jit``), so none of the user's Python runs again. Two changes are tried:

* an input the collective's operand is computed from, split over the collective's mesh axes, laid
  out without those axes (the all-gather of a weight split over 'model' goes when the weight is kept
  whole on each device - at the memory cost the fix states);
* a ``with_sharding_constraint`` of the program left out, when no input explains the collective
  (the constraint forced a relayout).

A fix is offered only when the program compiled with it has fewer collectives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import jax
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from jaxmagic._jax import jaxpr_parts, jit_internals
from jaxmagic._jax.jaxpr_interpreter import Interpreter, Level
from jaxmagic._jax.program_inputs import input_shardings_flat
from jaxmagic.probes._hlo.hlo_text import parse_hlo_module
from jaxmagic.probes._sharding.collectives import count_collectives, spec_axes
from jaxmagic.probes._sharding.report import CallShardings, Collective, CollectiveFix
from jaxmagic.report.wording import error_line, format_bytes

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced, Wrapped

    from jaxmagic._jax.types import ClosedJaxpr, Equation, Value

MAX_TRIALS = 3  # each trial is one compilation of the program
# Collectives that only move blocks: another input layout can make them unnecessary. An all-reduce or
# reduce-scatter sums over a split dimension - that is the computation itself, and undoing the split
# only moves the work, so no layout is offered for them.
RELAYOUTS = ("all-gather", "all-to-all", "collective-permute")


def try_collective_fixes(
    jitted: Wrapped, traced: Traced, compiled: Compiled, call: CallShardings, collectives: list[Collective]
) -> list[CollectiveFix]:
    before = len(collectives)
    moved_before = sum(c.bytes_per_device for c in collectives)
    fixes: list[CollectiveFix] = []
    tried: set[str] = set()
    relayouts = [c for c in collectives if c.kind in RELAYOUTS and c.cause_kind in ("input", "intermediate")]
    if relayouts and call.constraints:
        # a constraint that forces a relayout is the cause to name before the inputs' layouts
        tried.add("constraints")
        for fix in _without_constraints(jitted, traced, compiled, call, before):
            fix.bytes_before = moved_before
            fixes.append(fix)
            for collective in relayouts:
                if fix.helps and fix.kinds_after.get(collective.kind, 0) < _count(collectives, collective.kind):
                    collective.cause_kind = "constraint"
                    collective.cause = f"{fix.asked_by}: without it the compiler needs no {collective.kind}"
    for collective in sorted(collectives, key=lambda c: -c.bytes_per_device):  # the heaviest first
        if len(fixes) >= MAX_TRIALS:
            break
        if collective.cause_kind == "input" and collective.kind in RELAYOUTS:
            split = [
                (index, leaf.path)
                for index, leaf in enumerate(call.inputs)
                if leaf.path in collective.values and set(spec_axes(leaf.spec)) & set(collective.axes)
            ]
            key = ",".join(path for _, path in split)
            if split and key not in tried:
                tried.add(key)
                fixes.append(_without_axes(jitted, traced, compiled, split, collective.axes, before))
        elif collective.cause_kind == "intermediate" and "constraints" not in tried:
            tried.add("constraints")
            fixes += _without_constraints(jitted, traced, compiled, call, before)[: MAX_TRIALS - len(fixes)]
    for fix in fixes:
        fix.bytes_before = moved_before
    return fixes


def _count(collectives: list[Collective], kind: str) -> int:
    return sum(1 for c in collectives if c.kind == kind)


def _shardings(compiled: Compiled) -> tuple[list[Sharding | None], list[Sharding]]:
    """The call's flat input and output shardings; an input the program does not read (JAX gives it
    None) is placed replicated, so the positions stay those of the program's inputs."""
    inputs = input_shardings_flat(compiled)  # by the call's input structure: a None argument is no input
    outputs = jax.tree_util.tree_leaves(  # a None the function returns is no output
        compiled.output_shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding)
    )
    mesh = next((s.mesh for s in inputs + outputs if getattr(s, "mesh", None) is not None), None)  # type: ignore[union-attr]  # getattr said it has one
    if mesh is not None:
        inputs = [NamedSharding(mesh, PartitionSpec()) if s is None else s for s in inputs]
    return inputs, outputs


def _outputs_given(jitted: Wrapped) -> bool:
    """True when the user's jit fixed the output shardings (then a trial keeps them)."""
    info = jit_internals.jit_options(jitted)
    leaves = getattr(info, "out_shardings_leaves", ()) or ()
    return any(type(s).__name__ != "UnspecifiedValue" for s in leaves)


def _compile_count(
    jitted: Wrapped,
    traced: Traced,
    compiled: Compiled,
    in_shardings: Sequence[Sharding | None],
    function: Callable[..., object] | None = None,
) -> tuple[dict[str, int], int]:
    closed = traced.jaxpr
    _, out_shardings = _shardings(compiled)
    run = function or jaxpr_parts.jaxpr_function(closed)
    abstract = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s) for a, s in zip(closed.in_avals, in_shardings)]
    if _outputs_given(jitted):  # the user's out_shardings stay; else the compiler chooses, as it did for the call
        jitted_variant = jax.jit(run, in_shardings=tuple(in_shardings), out_shardings=list(out_shardings))
    else:
        jitted_variant = jax.jit(run, in_shardings=tuple(in_shardings))
    variant = jitted_variant.lower(*abstract).compile()
    return count_collectives(parse_hlo_module(variant.as_text() or ""))


def _without_axes(
    jitted: Wrapped, traced: Traced, compiled: Compiled, split: list[tuple[int, str]], axes: list[str], before: int
) -> CollectiveFix:
    in_shardings, _ = _shardings(compiled)
    changed = list(in_shardings)
    changes, code, costs = [], [], []
    for index, path in split:  # a row of CallShardings.inputs is the call's flat input of that index
        sharding = cast(NamedSharding, in_shardings[index])  # split over mesh axes: a NamedSharding
        entries = []
        for entry in tuple(getattr(sharding, "spec", ()) or ()):
            names = entry if isinstance(entry, tuple) else (entry,) if entry is not None else ()
            kept = tuple(n for n in names if n not in axes)
            entries.append(None if not kept else kept[0] if len(kept) == 1 else kept)
        while entries and entries[-1] is None:
            entries.pop()
        spec = PartitionSpec(*entries)
        changed[index] = relaid = NamedSharding(sharding.mesh, spec)
        changes.append(f"`{path}` as {spec}")
        code.append(f"{path} = jax.device_put({path}, NamedSharding({path}.sharding.mesh, {spec}))")
        aval = traced.jaxpr.in_avals[index] if index < len(traced.jaxpr.in_avals) else None
        if aval is not None:
            held_before = _size(sharding.shard_shape(aval.shape)) * aval.dtype.itemsize
            held_after = _size(relaid.shard_shape(aval.shape)) * aval.dtype.itemsize
            if held_after > held_before:
                costs.append(f"{format_bytes(held_after)} of `{path}` instead of {format_bytes(held_before)}")
    over = ", ".join(repr(a) for a in axes)
    fix = CollectiveFix(
        change=f"lay out {' and '.join(changes)} (not split over {over})",
        code="; ".join(code),
        collectives_before=before,
        collectives_after=before,
        cost=f"each device then holds {', '.join(costs)}" if costs else "",
    )
    try:
        counts, moved = _compile_count(jitted, traced, compiled, changed)
    except Exception as failure:
        fix.failure = error_line(failure)
        return fix
    fix.collectives_after, fix.kinds_after, fix.bytes_after = sum(counts.values()), counts, moved
    return fix


def _size(shape: Sequence[int]) -> int:
    total = 1
    for n in shape:
        total *= int(n)
    return total


def _without_constraints(
    jitted: Wrapped, traced: Traced, compiled: Compiled, call: CallShardings, before: int
) -> list[CollectiveFix]:
    """Each top-level ``sharding_constraint`` left out in turn."""
    closed = traced.jaxpr
    positions = [i for i, eqn in enumerate(closed.jaxpr.eqns) if eqn.primitive.name == "sharding_constraint"]
    in_shardings, _ = _shardings(compiled)
    fixes = []
    for n, position in enumerate(positions[:MAX_TRIALS]):
        check = call.constraints[n] if n < len(call.constraints) else None
        where = f" at line {check.line.lineno}" if check is not None and check.line is not None else ""
        asked = f" ({check.requested})" if check is not None else ""
        fix = CollectiveFix(
            asked_by=f"the with_sharding_constraint{asked}{where} asks for this layout",
            change=f"leave out the with_sharding_constraint{asked}{where}, or constrain to the layout the value has",
            code="# remove or change: jax.lax.with_sharding_constraint(...)" + where,
            collectives_before=before,
            collectives_after=before,
        )
        try:
            counts, moved = _compile_count(jitted, traced, compiled, in_shardings, _program_without(closed, position))
        except Exception as failure:
            fix.failure = error_line(failure)
        else:
            fix.collectives_after, fix.kinds_after, fix.bytes_after = sum(counts.values()), counts, moved
        fixes.append(fix)
    return fixes


def _program_without(closed: ClosedJaxpr, skipped: int) -> Callable[..., list[Value]]:
    """The program with its equation number ``skipped`` (a sharding constraint) passing its input on."""

    def run(*args: Value) -> list[Value]:
        return _Without(skipped).run(closed, list(args))

    return run


class _Without(Interpreter):
    """The interpreter's policy of ``_program_without``: the top-level equation ``skipped`` passes its
    inputs on as its outputs; every other equation is bound as it is."""

    def __init__(self, skipped: int) -> None:
        self.skipped = skipped

    def outputs(self, level: Level, eqn: Equation, inputs: list[Value]) -> list[Value]:
        return inputs if level.index == self.skipped else jaxpr_parts.bind_equation(eqn, inputs)
