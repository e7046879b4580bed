"""Reading XLA's optimized-HLO text: the one place jaxmagic parses it.

JAX hands out the program XLA will run only as text (``Compiled.as_text()``);
there is no structured object for it in the public API. Everything the
``%jax_hlo`` probe needs from that text is read here, and nowhere else:

* computations and their instructions (name, opcode, result type), with the
  computations each instruction calls (``calls=``, ``to_apply=``, ``body=``, ...);
* each instruction's ``metadata``: ``op_name`` (JAX's name stack, e.g.
  ``jit(f)/encoder/dot_general``; XLA joins the names of merged instructions
  with ``;``), ``op_type`` and the source location;
* the source location in both formats XLA has printed: the older inline
  ``source_file="..." source_line=N`` and the compact tables since 2025
  (``FileNames`` / ``FunctionNames`` / ``FileLocations`` / ``StackFrames`` at
  the top of the module, referenced by ``stack_frame_id=K``);
* collectives (``%jax_sharding --collectives``): which opcodes are collectives, their device groups
  (``replica_groups`` in every printed form, ``source_target_pairs``) and the bytes of a shape.

The parser is tolerant: a line it does not understand is skipped, never fatal.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Iterator

# Roles of the computations an instruction refers to; "fused" bodies run inside
# one kernel, "applied" ones are scalar reducers/comparators (to_apply=...),
# "control" ones are loop bodies, conditions and branches that run as code.
_CALL_ROLES = {
    "calls": "fused",
    "to_apply": "applied",
    "body": "control",
    "condition": "control",
    "branch_computations": "control",
    "true_computation": "control",
    "false_computation": "control",
    "called_computations": "control",
}


@dataclasses.dataclass(frozen=True)
class HloFrame:
    """One frame of an instruction's Python stack (innermost first in lists)."""

    file: str
    function: str
    line: int


@dataclasses.dataclass
class HloInstruction:
    name: str  # without the leading %
    opcode: str  # "fusion", "dot", "multiply", ...
    shape: str  # "f32[3,8]{1,0}", "(f32[], s32[])"
    computation: str  # the computation it belongs to
    op_names: tuple[str, ...] = ()  # metadata op_name, split at ";"
    op_type: str = ""
    stack_frame_id: int | None = None
    source_file: str = ""  # older inline format
    source_line: int = 0
    called: tuple[tuple[str, str], ...] = ()  # (attribute, computation), e.g. ("calls", "fused_computation.1")
    fusion_kind: str = ""  # "kLoop", "kCustom", ... for fusion instructions
    is_root: bool = False
    text: str = ""  # the instruction's line, stripped
    operands: tuple[str, ...] = ()  # the instructions it reads, without the leading %
    parameter_number: int | None = None  # for ``parameter(N)``: N
    # per operand, the tuple element it reads (``%while.14#2``, newer printers) or None (the whole value);
    # a ``get-tuple-element``'s own ``index=N`` (older printers) is ``tuple_index``
    operand_indices: tuple[int | None, ...] = ()
    tuple_index: int | None = None


@dataclasses.dataclass
class HloComputation:
    name: str
    is_entry: bool
    instructions: list[HloInstruction] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class HloModuleText:
    """The parsed module. ``stack(instr)`` gives an instruction's source frames."""

    name: str
    computations: dict[str, HloComputation]
    frames: dict[int, tuple[HloFrame, int]]  # stack_frame_id -> (frame, parent id or 0)

    @property
    def entry(self) -> HloComputation | None:
        return next((c for c in self.computations.values() if c.is_entry), None)

    def instructions(self) -> Iterator[HloInstruction]:
        for computation in self.computations.values():
            yield from computation.instructions

    def stack(self, instruction: HloInstruction) -> list[HloFrame]:
        """The instruction's Python frames, innermost first ([] when XLA kept none)."""
        if instruction.stack_frame_id is not None:
            frames, seen, frame_id = [], set(), instruction.stack_frame_id
            while frame_id and frame_id in self.frames and frame_id not in seen:
                seen.add(frame_id)
                frame, frame_id = self.frames[frame_id]
                frames.append(frame)
            return frames
        if instruction.source_file:
            return [HloFrame(instruction.source_file, "", instruction.source_line)]
        return []

    @functools.cached_property
    def callers(self) -> dict[str, tuple[str, HloInstruction]]:
        """For each called computation: (its role, the first instruction calling it)."""
        found: dict[str, tuple[str, HloInstruction]] = {}
        for instruction in self.instructions():
            for attribute, target in instruction.called:
                role = _CALL_ROLES.get(attribute, "control")
                if attribute == "to_apply" and instruction.opcode in ("call", "async-start"):
                    role = "control"  # a plain call runs its computation as code, like a loop body
                found.setdefault(target, (role, instruction))
        return found

    def role(self, computation: str) -> str:
        """ "entry", "control" (runs as code), "fused" or "applied" (a reducer's body)."""
        comp = self.computations.get(computation)
        if comp is not None and comp.is_entry:
            return "entry"
        return self.callers.get(computation, ("control", None))[0]

    def kernel_of(self, instruction: HloInstruction) -> HloInstruction:
        """The instruction that runs ``instruction`` as code.

        An instruction of the entry computation or of a loop body runs itself;
        one inside a fused computation runs inside the fusion instruction that
        calls it (the outermost one, for nested fusions); one inside a reducer
        body runs inside the reduce that applies it.
        """
        kernel, seen = instruction, set()
        while kernel.computation in self.callers and kernel.computation not in seen:
            seen.add(kernel.computation)
            role, caller = self.callers[kernel.computation]
            if role == "control":
                break
            kernel = caller
        return kernel


_HEADER = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->.*\{\s*$")
# name = shape opcode(...: a tuple shape has spaces but no "=", so it is matched up to the
# ")" that is followed by the opcode and its operand list.
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(\([^=]*?\)|\S+)\s+([\w\-]+)\((.*)$")
_CALLED = re.compile(
    r"\b(calls|to_apply|body|condition|branch_computations|true_computation|"
    r"false_computation|called_computations)=(\{[^}]*\}|%?[\w.\-]+)"
)
_FUSION_KIND = re.compile(r"\bkind=(k\w+)")
_TABLE_NAMES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def parse_hlo_module(text: str) -> HloModuleText:
    """Parse the text of ``Compiled.as_text()`` (one HLO module)."""
    lines = text.splitlines()
    module_name = ""
    tables: dict[str, list[str]] = {name: [] for name in _TABLE_NAMES}
    computations: dict[str, HloComputation] = {}
    current: HloComputation | None = None
    table: str | None = None
    for line in lines:
        stripped = line.strip()
        if current is None:
            if stripped.startswith("HloModule "):
                module_name = stripped.split()[1].rstrip(",")
                table = None
                continue
            if stripped in _TABLE_NAMES:
                table = stripped
                continue
            header = _HEADER.match(line)
            if header and not stripped.startswith(("HloModule",)):
                current = HloComputation(header.group(2), bool(header.group(1)))
                computations[current.name] = current
                table = None
                continue
            if table and stripped:
                tables[table].append(stripped)
            elif not stripped:
                table = None
            continue
        if stripped == "}":
            current = None
            continue
        instruction = _parse_instruction(line, current.name)
        if instruction is not None:
            current.instructions.append(instruction)
    return HloModuleText(module_name, computations, _stack_frames(tables))


def _parse_instruction(line: str, computation: str) -> HloInstruction | None:
    # XLA numbers long tuples' elements in comments (``/*index=5*/``), whose "=" the shape pattern stops at:
    # without this a loop's ``while`` and its body's tuples of six or more elements were not read at all
    match = _INSTRUCTION.match(_INDEX_COMMENT.sub("", line) if "/*index=" in line else line)
    if not match:
        return None
    is_root, name, shape, opcode, rest = match.groups()
    metadata: dict[str, str] = {}
    meta = _METADATA.search(rest)
    if meta:
        metadata = _metadata_fields(meta.group(1))
        rest = rest[: meta.start()] + rest[meta.end() :]
    called = []
    for attribute, value in _CALLED.findall(rest):
        for target in value.strip("{}").split(","):
            target = target.strip().lstrip("%")
            if target:
                called.append((attribute, target))
    kind = _FUSION_KIND.search(rest) if opcode == "fusion" else None
    operand_text = _operand_list(rest)
    referenced = _OPERAND_REF.findall(operand_text)
    operands = tuple(name for name, _ in referenced)
    gte_index = _TUPLE_INDEX.search(rest) if opcode == "get-tuple-element" else None
    number = operand_text.strip() if opcode == "parameter" else ""
    op_name = metadata.get("op_name", "")
    frame_id = metadata.get("stack_frame_id", "")
    source_line = metadata.get("source_line", "")
    return HloInstruction(
        name=name,
        opcode=opcode,
        shape=shape,
        computation=computation,
        op_names=tuple(n for n in op_name.split(";") if n) if op_name else (),
        op_type=metadata.get("op_type", ""),
        stack_frame_id=int(frame_id) if frame_id.isdigit() else None,
        source_file=metadata.get("source_file", ""),
        source_line=int(source_line) if source_line.isdigit() else 0,
        called=tuple(called),
        fusion_kind=kind.group(1) if kind else "",
        is_root=bool(is_root),
        text=line.strip(),
        operands=operands,
        parameter_number=int(number) if number.isdigit() else None,
        operand_indices=tuple(int(index) if index else None for _, index in referenced),
        tuple_index=int(gte_index.group(1)) if gte_index else None,
    )


# An operand in the list: "%name" (newer printers) or "f32[4,8]{1,0} %name" (older ones).
_INDEX_COMMENT = re.compile(r"/\*index=\d+\*/")
_OPERAND_REF = re.compile(r"%([\w.\-]+)(?:#(\d+))?")  # with the tuple element a newer printer reads inline
_TUPLE_INDEX = re.compile(r"\bindex=(\d+)")


def _operand_list(rest: str) -> str:
    """The text inside the opcode's parentheses (``rest`` starts just after the opening one)."""
    depth = 0
    for i, char in enumerate(rest):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return rest[:i]
            depth -= 1
    return rest


# metadata={...}: braces inside quoted strings (an op_name may contain any text) do not end it.
_METADATA = re.compile(r'metadata=\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
_METADATA_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


def _metadata_fields(body: str) -> dict[str, str]:
    """The fields of ``op_name="..." stack_frame_id=3 ...``, strings unescaped."""
    fields = {}
    for key, value in _METADATA_FIELD.findall(body):
        if value.startswith('"'):
            value = _unescape(value[1:-1])
        fields[key] = value
    return fields


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_FIELD = re.compile(r"(\w+)=(-?\d+)")


def _stack_frames(tables: dict[str, list[str]]) -> dict[int, tuple[HloFrame, int]]:
    """stack_frame_id -> (frame, parent id or 0) from the compact tables."""

    def rows(name: str) -> dict[int, str]:
        out = {}
        for row in tables.get(name, []):
            match = _TABLE_ROW.match(row)
            if match:
                out[int(match.group(1))] = match.group(2)
        return out

    def quoted(value: str) -> str:
        value = value.strip()
        return _unescape(value[1:-1]) if value.startswith('"') and value.endswith('"') else value

    files = {k: quoted(v) for k, v in rows("FileNames").items()}
    functions = {k: quoted(v) for k, v in rows("FunctionNames").items()}
    locations = {k: dict((f, int(n)) for f, n in _FIELD.findall(v)) for k, v in rows("FileLocations").items()}
    stack = {k: dict((f, int(n)) for f, n in _FIELD.findall(v)) for k, v in rows("StackFrames").items()}
    # XLA prints parent_frame_id one higher than the parent's row number (1 = no
    # parent), so a frame whose "parent" is itself is a top frame. Older
    # printers wrote the row number itself (0 = no parent); detect which.
    shifted = any(fields.get("parent_frame_id") == k and k > 1 for k, fields in stack.items()) or (
        stack.get(1, {}).get("parent_frame_id") == 1
    )
    frames = {}
    for frame_id, fields in stack.items():
        location = locations.get(fields.get("file_location_id", 0), {})
        frame = HloFrame(
            file=files.get(location.get("file_name_id", 0), ""),
            function=functions.get(location.get("function_name_id", 0), ""),
            line=location.get("line", 0),
        )
        parent = fields.get("parent_frame_id", 0)
        parent = parent - 1 if shifted else parent
        frames[frame_id] = (frame, parent if parent != frame_id else 0)
    return frames


# -- collectives: who talks to whom -------------------------------------------------------------

COLLECTIVE_OPCODES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")


def collective_kind(instruction: HloInstruction) -> str:
    """ "all-gather", ... for a collective or its async start (``all-gather-start``); "" otherwise
    (the ``-done`` half of an async pair is the same transfer and is not counted again)."""
    opcode = instruction.opcode
    if opcode.endswith("-start"):
        opcode = opcode[: -len("-start")]
    return opcode if opcode in COLLECTIVE_OPCODES else ""


def inserted_by_partitioner(instruction: HloInstruction) -> bool:
    """True for a collective XLA's SPMD partitioner made (``frontend_attributes={is_spmd_generated="true"}``);
    False for one the program asked for itself (``lax.psum`` in a ``shard_map``)."""
    return 'is_spmd_generated="true"' in instruction.text


@dataclasses.dataclass
class DeviceGroups:
    """The groups of devices a collective runs in, in one of the forms XLA prints.

    ``groups`` holds partition numbers (indices into the program's device assignment);
    ``axes`` the mesh axes when XLA printed them by name (``mesh['data'=4,'model'=2] {'data'}``);
    ``axis_sizes`` the mesh XLA printed (its axes may be named ``axis_0``, ``axis_1``, ...).
    """

    groups: list[list[int]] = dataclasses.field(default_factory=list)
    axes: list[str] = dataclasses.field(default_factory=list)
    mesh_axes: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    pairs: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # collective-permute: source, target
    unread: str = ""  # the attribute's text when its form was not understood


_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_LIST_GROUPS = re.compile(r"replica_groups=\{((?:\{[\d,\s]*\},?\s*)*)\}")
_PAIRS = re.compile(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}")


def device_groups(instruction: HloInstruction) -> DeviceGroups:
    """Read ``replica_groups=`` (explicit lists, iota ``[4,2]<=[8]`` with an optional transpose,
    or the named ``mesh[...] {axes}``) or ``source_target_pairs=`` of a collective."""
    text = instruction.text
    found = DeviceGroups()
    if match := _MESH_GROUPS.search(text):
        for part in match.group(1).split(","):
            name, _, size = part.partition("=")
            found.mesh_axes.append((name.strip().strip("'\""), int(size) if size.strip().isdigit() else 0))
        found.axes = [a.strip().strip("'\"") for a in match.group(2).split(",") if a.strip()]
        found.groups = _groups_over_axes(found.mesh_axes, found.axes)
        return found
    if match := _IOTA_GROUPS.search(text):
        shape = [int(n) for n in match.group(1).split(",")]
        dims = [int(n) for n in match.group(2).split(",")]
        order = [int(n) for n in match.group(3).split(",")] if match.group(3) else list(range(len(dims)))
        found.groups = _iota_groups(shape, dims, order)
        return found
    if match := _LIST_GROUPS.search(text):
        found.groups = [
            [int(n) for n in g.split(",") if n.strip()] for g in re.findall(r"\{([\d,\s]*)\}", match.group(1))
        ]
        return found
    if match := _PAIRS.search(text):
        found.pairs = [(int(a), int(b)) for a, b in re.findall(r"\{(\d+),(\d+)\}", match.group(1))]
        return found
    unread = re.search(r"(replica_groups=\S+|source_target_pairs=\S+)", text)
    found.unread = unread.group(1) if unread else ""
    return found


def _iota_groups(shape: list[int], dims: list[int], order: list[int]) -> list[list[int]]:
    """``[G,S]<=[dims]T(order)``: 0..N-1 laid out as ``dims``, transposed by ``order``, cut in G groups of S."""
    total = math.prod(dims)
    strides = [math.prod(dims[k + 1 :]) for k in range(len(dims))]
    moved = [dims[k] for k in order]
    flat = []
    for position in range(total):
        index, rest = [], position
        for size in reversed(moved):
            index.append(rest % size)
            rest //= size
        index.reverse()
        flat.append(sum(index[n] * strides[order[n]] for n in range(len(order))))
    size = shape[-1] if shape else total
    return [flat[i : i + size] for i in range(0, total, size)] if size else []


def _groups_over_axes(mesh_axes: list[tuple[str, int]], axes: list[str]) -> list[list[int]]:
    """Partition numbers grouped so that each group varies only along ``axes`` (row-major mesh)."""
    names = [name for name, _ in mesh_axes]
    sizes = [size for _, size in mesh_axes]
    if not sizes or any(size <= 0 for size in sizes) or any(a not in names for a in axes):
        return []
    groups: dict[tuple[int, ...], list[int]] = {}
    for number in range(math.prod(sizes)):
        index, rest = [], number
        for size in reversed(sizes):
            index.append(rest % size)
            rest //= size
        index.reverse()
        key = tuple(i for name, i in zip(names, index) if name not in axes)
        groups.setdefault(key, []).append(number)
    return list(groups.values())


_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16|f8e\w+|c64|c128|token)\[([\d,]*)\]")
_BITS = {"pred": 8, "bf16": 16, "c64": 64, "c128": 128}


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape (``f32[4,8]{1,0}``; a tuple's elements added up)."""
    total = 0
    for dtype, dims in _SHAPE.findall(shape):
        if dtype == "token":
            continue
        bits = _BITS.get(dtype) or int(re.sub(r"\D", "", dtype.split("e")[0]) or 8)
        total += math.prod(int(d) for d in dims.split(",") if d) * bits // 8
    return total
