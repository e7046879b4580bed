"""What each kernel of a compiled program computes: its named_scope(s) and the user's line(s).

A kernel event in a trace is named after an optimized-HLO instruction that runs
as code - a fusion, a custom call, a copy. Its own metadata, and that of the
instructions inside the computations it fuses or applies (a reduce's adder),
carry ``op_name`` (``jit(mlp)/encoder/dot_general``: the named_scope path
between the program and the primitive) and the Python stack of the line that
made it. A kernel that fuses operations of several lines serves them all; its
time is split between them in proportion to a rough count of each line's
operations there: a matmul's multiply-adds, any other operation's output
elements (an element-wise add fused behind a matmul costs little beside it).
"""

from __future__ import annotations

import dataclasses
import re

from jaxmagic.probes._hlo.hlo_text import HloInstruction, HloModuleText, parse_hlo_module
from jaxmagic.probes._profile.events import OpOrigin
from jaxmagic.usercode.source import is_user_file

_NOT_WORK = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}
_TRANSFORM = re.compile(
    r"^(?:jvp|transpose|vmap|pmap|remat|checkpoint|xmap|pjit|shard_map|custom_jvp_call|custom_vjp_call)\((.*)\)$"
)


@dataclasses.dataclass(frozen=True)
class Owner:
    """A share of a kernel: the named_scope path and user line that made part of it."""

    scope: str  # "encoder/attn"; "" outside any named_scope
    file: str
    line: int
    function: str
    weight: float  # the share of the kernel's time, all owners of a kernel summing to 1


@dataclasses.dataclass
class KernelSource:
    name: str
    opcode: str  # "fusion (kCustom)", "copy", ...
    op_types: tuple[str, ...]  # the primitives inside it: dot_general, tanh
    owners: tuple[Owner, ...]
    text: str  # the instruction's line of HLO, shortened


@dataclasses.dataclass
class ProgramSources:
    module: str
    kernels: dict[str, KernelSource]
    instruction_names: frozenset[str]


def program_sources(hlo_text: str) -> ProgramSources:
    """Parse a program's optimized HLO and describe every instruction that may show as a kernel."""
    module = parse_hlo_module(hlo_text)
    kernels: dict[str, KernelSource] = {}
    for computation in module.computations.values():
        if module.role(computation.name) in ("fused", "applied"):
            continue  # runs inside its caller's kernel
        for instruction in computation.instructions:
            if instruction.opcode in _NOT_WORK:
                continue
            kernels[instruction.name] = _describe(module, instruction)
    names = frozenset(i.name for i in module.instructions())
    return ProgramSources(module.name, kernels, names)


def _describe(module: HloModuleText, kernel: HloInstruction) -> KernelSource:
    members = [kernel] + _inside(module, kernel)
    made = [m for m in members if m.opcode not in _NOT_WORK and _has_origin(m)]
    shapes = {i.name: i.shape for i in members}
    shares: dict[tuple[str, str, int, str], float] = {}  # (scope, file, line, function) -> cost
    for member in made:
        scope = scope_of(member.op_names[0]) if member.op_names else ""
        frame = _user_frame(module, member)
        key = (scope, *frame)
        shares[key] = shares.get(key, 0.0) + _cost(member, shapes, module)
    total = sum(shares.values()) or 1.0
    owners = tuple(Owner(key[0], key[1], key[2], key[3], cost / total) for key, cost in shares.items())
    opcode = kernel.opcode + (f" ({kernel.fusion_kind})" if kernel.fusion_kind else "")
    op_types = tuple(dict.fromkeys(filter(None, (m.op_type or _primitive(m) for m in made))))
    return KernelSource(kernel.name, opcode, op_types, owners, short_text(kernel.text))


def short_text(text: str) -> str:
    """An instruction's HLO line as a report keeps it: at most 300 characters."""
    return text if len(text) <= 300 else text[:297] + "..."


_DIMS = re.compile(r"\[([\d,]*)\]")
_OPERANDS = re.compile(r"\((%?[\w.\-]+)")
_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")


def _dims(shape: str) -> list[int]:
    match = _DIMS.search(shape or "")
    if not match or not match.group(1):
        return []
    return [int(d) for d in match.group(1).split(",") if d]


def _elements(shape: str) -> int:
    count = 1
    for dim in _dims(shape):
        count *= dim
    return count


def _cost(instruction: HloInstruction, shapes: dict[str, str], module: HloModuleText) -> float:
    """A rough operation count: a matmul's multiply-adds, any other instruction's output elements.

    Only the relative sizes matter: they split a fused kernel's time between the lines in it.
    """
    elements = float(_elements(instruction.shape))
    if instruction.opcode == "dot":
        lhs = _OPERANDS.search(
            instruction.text[instruction.text.index(" dot(") :] if " dot(" in instruction.text else ""
        )
        contracting = _CONTRACTING.search(instruction.text)
        if lhs and contracting and contracting.group(1):
            lhs_dims = _dims(shapes.get(lhs.group(1).lstrip("%"), ""))
            for index in (int(i) for i in contracting.group(1).split(",")):
                if index < len(lhs_dims):
                    elements *= lhs_dims[index]
    elif instruction.opcode in ("convolution", "custom-call"):
        elements *= 64  # unknown inner size: weigh it as a heavy operation
    return max(elements, 1.0)


def _inside(module: HloModuleText, kernel: HloInstruction) -> list[HloInstruction]:
    """The instructions of the computations a kernel fuses or applies, recursively."""
    found, todo, seen = [], [target for _attr, target in kernel.called], set()
    while todo:
        name = todo.pop()
        if name in seen or module.role(name) not in ("fused", "applied"):
            continue
        seen.add(name)
        computation = module.computations.get(name)
        if computation is None:
            continue
        for instruction in computation.instructions:
            found.append(instruction)
            todo.extend(target for _attr, target in instruction.called)
    return found


def _primitive(instruction: HloInstruction) -> str:
    """The JAX primitive an instruction came from: the last part of its op_name (``dot_general``)."""
    return _split(instruction.op_names[0])[-1] if instruction.op_names and "/" in instruction.op_names[0] else ""


def _has_origin(instruction: HloInstruction) -> bool:
    return bool(instruction.stack_frame_id or instruction.source_file or any("/" in n for n in instruction.op_names))


def _user_frame(module: HloModuleText, instruction: HloInstruction) -> tuple[str, int, str]:
    stack = module.stack(instruction)
    for frame in stack:  # innermost first
        if is_user_file(frame.file):
            return frame.file, frame.line, frame.function
    if stack:
        return stack[0].file, stack[0].line, stack[0].function
    return "", 0, ""


def scope_of(op_name: str) -> str:
    """``jit(mlp)/encoder/attn/dot_general`` -> ``encoder/attn``: the named_scope path inside the program.

    The program's own ``jit(...)`` and the primitive are dropped; transformation
    wrappers around a scope (``jvp(encoder)``, ``transpose(jvp(encoder))``) are
    unwrapped to the scope's name. A nested jitted function stays a scope of its own.
    """
    parts = _split(op_name)
    if len(parts) < 2:
        return ""
    inner = parts[1:-1] if parts[0].startswith(("jit(", "pjit(")) else parts[:-1]
    scopes = []
    for part in inner:
        while True:
            match = _TRANSFORM.match(part)
            if not match:
                break
            part = match.group(1)
        if part:
            scopes.append(part)
    return "/".join(scopes)


def _split(op_name: str) -> list[str]:
    """Split at the slashes that are not inside parentheses (``jit(f)/vmap(a/b)/add``)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in op_name:
        if char == "/" and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += char == "("
        depth -= char == ")"
        current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p]


def source_from_trace(name: str, origin: OpOrigin) -> KernelSource | None:
    """What a device trace says of one op by itself, as a kernel's description (one owner, its whole time).

    For an op whose program's HLO was not seen: a TPU's saved trace names the op's scope (``tf_op``, JAX's
    name stack) and the Python stack of its line; the innermost of the user's frames is the line, as for
    HLO metadata. None when the trace says neither.
    """
    user = next((frame for frame in origin.frames if is_user_file(frame[0])), None)
    where = user or (origin.frames[0] if origin.frames else ("", 0))
    scope = scope_of(origin.name_stack) if origin.name_stack else ""
    if not where[1] and not scope:
        return None
    primitive = _split(origin.name_stack)[-1] if "/" in origin.name_stack else ""
    owner = Owner(scope, where[0], where[1], "", 1.0)
    return KernelSource(
        name, origin.category, (primitive,) if primitive else (), (owner,), short_text(origin.instruction)
    )
