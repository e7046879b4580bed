"""The collectives XLA inserted into a compiled call: each one's line, scope, mesh axes, bytes and cause.

Read from the optimized HLO (``Compiled.as_text()``, parsed by ``_hlo/hlo_text.py`` only): every
all-gather, all-reduce, reduce-scatter, all-to-all and collective-permute (an async ``-start`` counts
once, its ``-done`` is the same transfer). The user's line comes from the instruction's metadata
(``stack_frame_id``) - or, when XLA kept none on the collective (a relayout of a parameter is named
after the parameter), from the first instruction that reads its result, said as "for" that line.

The cause is read from the program's data flow, never guessed: the entry parameters its operand is
computed from (through a loop's carry: ``data_flow.py``), and which of those the call's input shardings
split over the collective's axes (each input row carries its entry parameter); a
collective that hands its result straight to the output was asked for by the output sharding; a
gradient's all-reduce over the batch axis is what data parallelism costs. Fixes are tried in
``collective_fixes.py``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypeAlias

import jax

from jaxmagic.probes._hlo.hlo_text import (
    HloComputation,
    HloInstruction,
    HloModuleText,
    collective_kind,
    device_groups,
    inserted_by_partitioner,
    parse_hlo_module,
    shape_bytes,
)
from jaxmagic.probes._hlo.jaxpr import scope_names, walk_eqns
from jaxmagic.probes._hlo.name_paths import parse_name, scope_path
from jaxmagic.probes._hlo.stablehlo import first_user_frame
from jaxmagic.probes._sharding.data_flow import parameters_reached
from jaxmagic.probes._sharding.report import CallShardings, Collective, IntermediateSharding, LeafSharding
from jaxmagic.probes._support import attribution
from jaxmagic.report import SourceLine

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced

_Users: TypeAlias = "dict[str, list[HloInstruction]]"  # instruction name -> the instructions that read it

# Instructions that only move or view data: a collective whose result reaches the output through
# these alone was made for the output's sharding.
_PASS_THROUGH = {"bitcast", "copy", "tuple", "get-tuple-element", "reshape", "transpose"}
_AXIS = re.compile(r"'([^']+)'")


def mesh_of(compiled: Compiled) -> jax.sharding.Mesh | None:
    """The mesh of the call's first NamedSharding (inputs, then outputs); None without one."""
    is_sharding = lambda s: isinstance(s, jax.sharding.Sharding)  # noqa: E731
    leaves = jax.tree_util.tree_leaves(compiled.input_shardings, is_leaf=is_sharding)
    leaves += jax.tree_util.tree_leaves(compiled.output_shardings, is_leaf=is_sharding)
    return next((s.mesh for s in leaves if getattr(s, "mesh", None) is not None), None)


def count_collectives(module: HloModuleText) -> tuple[dict[str, int], int]:
    """How many collectives of each kind the module has, and the bytes they move per device in all."""
    counts: dict[str, int] = {}
    moved = 0
    for computation in module.computations.values():
        by_name = {i.name: i for i in computation.instructions}
        for instruction in computation.instructions:
            kind = collective_kind(instruction)
            if kind:
                counts[kind] = counts.get(kind, 0) + 1
                moved += _traffic(instruction, kind, by_name)[0]
    return counts, moved


def _traffic(
    instruction: HloInstruction, kind: str, by_name: dict[str, HloInstruction]
) -> tuple[int, int, list[HloInstruction]]:
    """Bytes each device receives, the size of its groups, and the operands read."""
    groups = device_groups(instruction)
    group_size = max((len(g) for g in groups.groups), default=1) if groups.groups else 2
    operands = [by_name[o] for o in instruction.operands if o in by_name]
    operand_bytes = sum(shape_bytes(o.shape) for o in operands)
    return _moved_bytes(kind, operand_bytes, shape_bytes(instruction.shape), group_size), group_size, operands


def list_collectives(
    compiled: Compiled,
    call: CallShardings,
    *,
    started: SourceLine | None = None,
    module: HloModuleText | None = None,
    traced: Traced | None = None,
) -> list[Collective]:
    """Every collective of ``compiled`` (the call's ``Compiled``), with ``call``'s inputs and outputs as causes.

    ``traced`` (the call's ``Traced``) gives the user's ``named_scope`` names: a segment of an op_name
    is a scope only when the program's name stacks have it as one (JAX adds ``while/body/eval_jaxpr``)."""
    module = module if module is not None else parse_hlo_module(compiled.as_text() or "")
    known = scope_names(list(walk_eqns(traced.jaxpr))) if traced is not None else set()
    mesh = mesh_of(compiled)
    names = [str(n) for n in getattr(mesh, "axis_names", ())]
    sizes = [int(n) for n in getattr(getattr(mesh, "devices", None), "shape", ())]
    device_ids = [int(d.id) for d in mesh.devices.flat] if mesh is not None else []
    found = []
    for computation in module.computations.values():
        by_name = {i.name: i for i in computation.instructions}
        users: dict[str, list[HloInstruction]] = {}
        for instruction in computation.instructions:
            for operand in instruction.operands:
                users.setdefault(operand, []).append(instruction)
        for instruction in computation.instructions:
            kind = collective_kind(instruction)
            if kind:
                found.append(
                    _collective(
                        module,
                        computation,
                        instruction,
                        kind,
                        by_name,
                        users,
                        call,
                        (names, sizes, device_ids),
                        started,
                        known,
                    )
                )
    return found


def _collective(
    module: HloModuleText,
    computation: HloComputation,
    instruction: HloInstruction,
    kind: str,
    by_name: dict[str, HloInstruction],
    users: _Users,
    call: CallShardings,
    mesh: tuple[list[str], list[int], list[int]],
    started: SourceLine | None,
    known: set[str],
) -> Collective:
    names, sizes, device_ids = mesh
    groups = device_groups(instruction)
    members = groups.groups or [list(pair) for pair in groups.pairs]
    if groups.axes:
        # XLA names the mesh's axes itself (axis_0, axis_1) when it does not know the user's names
        printed = [name for name, _ in groups.mesh_axes]
        axes = [
            names[printed.index(a)] if a not in names and a in printed and printed.index(a) < len(names) else a
            for a in groups.axes
        ]
    else:
        axes = _axes_varying(members, sizes, names)
    moved, group_size, operands = _traffic(instruction, kind, by_name)
    before = _shapes_text([_per_device(o.shape) for o in operands])
    frames, op_name, for_line = _where(module, instruction, users)
    line = first_user_frame(frames)
    reached = parameters_reached(module, instruction)
    parameters = reached.parameters
    inputs = _inputs_of(parameters, call.inputs)
    values = [leaf.path for leaf in inputs] or [p.op_names[0] for p in parameters if p.op_names]
    written = not inserted_by_partitioner(instruction)
    if written:  # the program's own lax collective (psum in a shard_map): the user's line is the cause
        operation = (parse_name(op_name).op if op_name else kind).removesuffix("_invariant")  # JAX's psum_invariant
        kind_of_cause, cause = (
            "written",
            f"your program asks for it: `{operation}`" + (" in a shard_map" if "shard_map" in op_name else ""),
        )
    else:
        kind_of_cause, cause = _cause(kind, axes, instruction, users, inputs, call.outputs, op_name, computation)
        if not reached.complete and kind_of_cause in ("", "intermediate"):  # an input on a path not followed
            kind_of_cause, cause = (
                "",
                (
                    f"could not tell: it runs inside `{computation.name}`, and not every value it reads could be "
                    "followed back to the call's arguments (a branch of a cond, or a tuple built elsewhere)"
                    + (f"; it reads {', '.join(f'`{leaf.path}`' for leaf in inputs)} at least" if inputs else "")
                ),
            )
    path = parse_name(op_name) if op_name else None
    transforms = attribution.transforms_of_name_path(op_name) if op_name else []
    provenance = attribution.of_source_line(line, started, transforms)
    if line is None:
        provenance.unknown = (
            "XLA kept no source location on it or on the instructions that read it"
            if not op_name
            else f"its name path `{op_name}` carries no frame of your code"
        )
    return Collective(
        kind=kind,
        instruction=f"%{instruction.name}",
        axes=axes,
        groups=" ".join("{" + ",".join(str(_device(n, device_ids)) for n in g) + "}" for g in members[:8])
        + (" ..." if len(members) > 8 else "")
        or groups.unread,
        group_size=group_size,
        shape_before=before,
        shape_after=_per_device(instruction.shape),
        bytes_per_device=moved,
        values=values,
        op_name=op_name,
        scope="/".join(scope_path(path, known)) if path else "",
        for_line=for_line and line is not None,
        inserted=not written,
        cause_kind=kind_of_cause,
        cause=cause,
        provenance=provenance,
    )


def _device(number: int, device_ids: list[int]) -> int:
    """The device id of partition ``number`` (the mesh's devices in order)."""
    return device_ids[number] if number < len(device_ids) else number


def _axes_varying(groups: list[list[int]], sizes: list[int], names: list[str]) -> list[str]:
    """The mesh axes along which the members of a group differ (row-major mesh positions)."""
    if not groups or not sizes:
        return []

    def position(number: int) -> list[int]:
        index, rest = [], number
        for size in reversed(sizes):
            index.append(rest % size)
            rest //= size
        return index[::-1]

    varying: set[int] = set()
    for group in groups:
        positions = [position(n) for n in group]
        for axis in range(len(sizes)):
            if len({p[axis] for p in positions}) > 1:
                varying.add(axis)
    return [names[a] for a in sorted(varying)]


def _shapes_text(shapes: list[str]) -> str:
    """``f32[4,8]``; ``4 x f32[4,1,8]`` for an all-to-all's equal pieces; "?" when unknown."""
    if not shapes:
        return "?"
    if len(shapes) > 1 and len(set(shapes)) == 1:
        return f"{len(shapes)} x {shapes[0]}"
    return ", ".join(shapes)


def _per_device(shape: str) -> str:
    """``f32[4,16]{1,0}`` -> ``f32[4,16]`` (the layout braces say nothing to the user)."""
    shape = re.sub(r"\{[\d,]*\}", "", shape)
    pieces = re.findall(r"\w+\[[\d,]*\]", shape) if shape.startswith("(") else []
    if len(pieces) > 1 and len(set(pieces)) == 1:
        return f"{len(pieces)} x {pieces[0]}"
    return shape


def _moved_bytes(kind: str, operand_bytes: int, result_bytes: int, group_size: int) -> int:
    """What each device receives, for a ring of ``group_size`` devices: the blocks it did not hold."""
    if kind == "collective-permute":
        return operand_bytes
    share = (group_size - 1) / group_size if group_size > 1 else 0.0
    if kind == "all-gather":
        return int(result_bytes * share)
    if kind == "all-reduce":  # a reduce-scatter then an all-gather
        return int(2 * result_bytes * share)
    return int(operand_bytes * share)  # reduce-scatter, all-to-all


def _where(
    module: HloModuleText, instruction: HloInstruction, users: _Users
) -> tuple[list[tuple[str, int, str]], str, bool]:
    """The instruction's frames and op_name; when it has no frame of its own, its first reader's."""
    frames = [(f.file, f.line, f.function) for f in module.stack(instruction)]
    op_name = instruction.op_names[0] if instruction.op_names else ""
    if first_user_frame(frames) is not None:
        return frames, op_name, False
    seen, queue = set(), list(users.get(instruction.name, []))
    while queue:
        reader = queue.pop(0)
        if reader.name in seen:
            continue
        seen.add(reader.name)
        reader_frames = [(f.file, f.line, f.function) for f in module.stack(reader)]
        if first_user_frame(reader_frames) is not None:
            return reader_frames, reader.op_names[0] if reader.op_names else op_name, True
        queue += users.get(reader.name, [])
    return frames, op_name, False


def _inputs_of(parameters: list[HloInstruction], inputs: list[LeafSharding]) -> list[LeafSharding]:
    """The call's input leaves behind those entry parameters, by the parameter number each input row
    carries (``compiled.inputs_as_compiled``: pruned inputs and hoisted constants accounted for); a
    parameter no row claims (a constant JAX hoisted) is left out, never guessed."""
    by_parameter = {leaf.parameter: leaf for leaf in inputs if leaf.parameter is not None}
    return [by_parameter[p.parameter_number] for p in parameters if p.parameter_number in by_parameter]


def spec_axes(spec: str) -> list[str]:
    """The mesh axes a spec text names: ``P('data', ('x', 'y'))`` -> ``['data', 'x', 'y']``."""
    return _AXIS.findall(spec)


def _cause(
    kind: str,
    axes: list[str],
    instruction: HloInstruction,
    users: _Users,
    inputs: list[LeafSharding],
    outputs: list[LeafSharding],
    op_name: str,
    computation: HloComputation,
) -> tuple[str, str]:
    split = [leaf for leaf in inputs if set(spec_axes(leaf.spec)) & set(axes)]
    over = ", ".join(repr(a) for a in axes)
    if kind == "all-reduce" and parse_name(op_name).backward and split:
        names = ", ".join(f"`{leaf.path}` ({leaf.spec})" for leaf in split)
        return "gradient", (
            f"the gradient is summed over {over} because {names} is split over it: data parallelism needs this "
            "all-reduce, once per step"
        )
    reduces = kind in ("all-reduce", "reduce-scatter")  # arithmetic: the output's layout does not make it
    if not reduces and _feeds_output(instruction, users, computation):
        result = ", ".join(f"`{leaf.path}` ({leaf.spec})" for leaf in outputs[:2]) or "the result"
        return "output", f"the output sharding of {result} asks for this layout of the result"
    if split:
        parts = [
            f"`{leaf.path}` ({leaf.spec}){' is split' if n == 0 else ''} over "
            + ", ".join(repr(a) for a in axes if a in spec_axes(leaf.spec))
            for n, leaf in enumerate(split)
        ]
        need = {
            "all-gather": "the operation needs it whole along that axis",
            "all-reduce": "the operation reduces (sums) across the split dimension",
            "reduce-scatter": "the operation sums across the split dimension and keeps a part",
            "all-to-all": "the operation needs it split along another dimension",
            "collective-permute": "the operation needs neighbouring blocks",
        }[kind]
        return "input", f"{' and '.join(parts)}, and {need}"
    if inputs:
        names = ", ".join(f"`{leaf.path}`" for leaf in inputs)
        return "intermediate", (
            f"no input on its path ({names}) is split over {over}: the compiler chose that layout for a "
            "value inside the call (a with_sharding_constraint there, or a missing one, decides it)"
        )
    return "", ""


def _feeds_output(instruction: HloInstruction, users: _Users, computation: HloComputation) -> bool:
    """True when the result reaches the computation's root only through data movement."""
    if not computation.is_entry:
        return False
    frontier, seen = [instruction], set()
    while frontier:
        current = frontier.pop()
        if current.is_root:
            return True
        if current.name in seen:
            continue
        seen.add(current.name)
        for reader in users.get(current.name, []):
            if reader.opcode in _PASS_THROUGH or reader.is_root and reader.opcode == "tuple":
                frontier.append(reader)
    return False


def chosen_around(collective: Collective, intermediates: list[IntermediateSharding]) -> list[str]:
    """The shardings the compiler chose for the values made on the collective's line (--intermediates)."""
    if collective.line is None:
        return []
    return [
        f"{row.op} -> {row.spec}"
        for row in intermediates
        if row.line is not None
        and (row.line.filename, row.line.lineno) == (collective.line.filename, collective.line.lineno)
        and row.spec
    ][:4]
