"""Matching the operations of every stage to named scopes: the queried scope's operations and the
kernels that run them, and the tree of scopes with counts per stage. ``StageOp`` is what each stage
module (``jaxpr``, ``stablehlo``, ``optimized_hlo``) hands over to be matched."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jaxmagic.probes._hlo.name_paths import NamePath, find_run, parse_name, scope_path
from jaxmagic.probes._hlo.records import Kernel, ScopeNode, ScopeOp
from jaxmagic.probes._hlo.report import HloReport
from jaxmagic.report import SourceLine

if TYPE_CHECKING:
    from jaxmagic.probes._hlo.hlo_text import HloInstruction, HloModuleText


@dataclasses.dataclass
class StageOp:
    """An operation of one stage, before it is matched to the query."""

    stage: str
    name: str
    path: NamePath
    full_name: str
    where: Callable[[], SourceLine | None]
    text: Callable[[], str]
    instruction: Any = None  # HLO instruction


class ScopePaths:
    """Scope paths of name texts (op_names, location names), each distinct text parsed once."""

    def __init__(self, known: set[str]):
        self.known = known
        self._cache: dict[str, tuple[str, ...]] = {}

    def of(self, text: str) -> tuple[str, ...]:
        scopes = self._cache.get(text)
        if scopes is None:
            scopes = self._cache[text] = scope_path(parse_name(text), self.known)
        return scopes

    def contains(self, text: str, query: tuple[str, ...]) -> bool:
        return find_run(self.of(text), query) >= 0


def _matches(op: StageOp, scopes: ScopePaths, query: tuple[str, ...]) -> tuple[str, str] | None:
    """``(inner scopes, full name)`` when ``op`` lies inside the queried scope, else None."""
    names = op.instruction.op_names if op.instruction is not None else (op.full_name,)
    for full in names:
        path = scopes.of(full)
        end = find_run(path, query)
        if end >= 0:
            return "/".join(path[end:]), full
    return None


def collect_scope(
    report: HloReport,
    per_stage: dict[str, list[StageOp]],
    scopes: ScopePaths,
    query: tuple[str, ...],
    module: HloModuleText | None,
) -> None:
    kernel_ops: dict[str, int] = {}
    kernels_seen: dict[str, Any] = {}
    for stage in report.stages:
        for op in per_stage.get(stage, []):
            matched = _matches(op, scopes, query)
            if matched is None:
                continue
            inner, full = matched
            path = op.path if full == op.full_name else parse_name(full)
            item = ScopeOp(
                stage=stage,
                op=path.op,
                inner=inner,
                backward=path.backward,
                name=op.name,
                full_name=full,
                line=op.where(),
                text=op.text(),
            )
            if stage == "hlo" and module is not None:
                kernel = module.kernel_of(op.instruction)
                kernels_seen[kernel.name] = kernel
                kernel_ops[kernel.name] = kernel_ops.get(kernel.name, 0) + 1
                if kernel is not op.instruction:
                    item.kernel = kernel.name
                    item.kernel_label = kernel.op_names[0] if kernel.op_names else ""
                    item.kernel_in_scope = any(scopes.contains(n, query) for n in kernel.op_names)
            report.ops.append(item)
    if module is None:
        return
    for name, kernel in kernels_seen.items():
        in_scope = any(scopes.contains(n, query) for n in kernel.op_names)
        inside = _fused_instructions(module, kernel)
        other = sum(1 for i in inside if i.op_names and not any(scopes.contains(n, query) for n in i.op_names))
        report.kernels.append(
            Kernel(
                name=name,
                opcode=kernel.opcode,
                fusion_kind=kernel.fusion_kind,
                label=kernel.op_names[0] if kernel.op_names else "",
                in_scope=in_scope,
                scope_ops=kernel_ops[name],
                other_ops=other,
            )
        )


def every_scope_ops(
    per_stage: dict[str, list[StageOp]], scopes: ScopePaths, stages: list[str], module: HloModuleText | None
) -> list[ScopeOp]:
    """Every operation of every stage with its whole scope path as ``inner`` ("" outside any scope), its
    line, its text and, in HLO, the kernel that runs it: plain data for an explorer of all scopes."""
    ops = []
    for stage in stages:
        for op in per_stage.get(stage, []):
            item = ScopeOp(
                stage=stage,
                op=op.path.op,
                inner="/".join(scopes.of(op.full_name)),
                backward=op.path.backward,
                name=op.name,
                full_name=op.full_name,
                line=op.where(),
                text=op.text(),
            )
            if stage == "hlo" and module is not None and op.instruction is not None:
                kernel = module.kernel_of(op.instruction)
                if kernel is not op.instruction:
                    item.kernel = kernel.name
                    item.kernel_label = kernel.op_names[0] if kernel.op_names else ""
            ops.append(item)
    return ops


def _fused_instructions(module: HloModuleText, kernel: HloInstruction) -> list[HloInstruction]:
    """The instructions inside a fusion (nested fusions included), or the instruction itself."""
    if kernel.opcode != "fusion":
        return [kernel]
    out, stack = [], [target for role, target in kernel.called]
    seen = set()
    while stack:
        name = stack.pop()
        if name in seen or name not in module.computations:
            continue
        seen.add(name)
        for instruction in module.computations[name].instructions:
            if instruction.opcode == "fusion":
                stack.extend(target for _role, target in instruction.called)
            elif instruction.opcode != "parameter":
                out.append(instruction)
    return out


def scope_tree(
    per_stage: dict[str, list[StageOp]], scopes: ScopePaths, stages: list[str]
) -> tuple[list[ScopeNode], dict[str, int]]:
    """Each scope path (and its ancestors) with operation counts per stage, descendants included."""
    counts: dict[tuple[str, ...], dict[str, int]] = {}
    unscoped: dict[str, int] = {}
    order: list[tuple[str, ...]] = []

    def add(path: tuple[str, ...], key: str) -> None:
        if not path:
            unscoped[key] = unscoped.get(key, 0) + 1
            return
        for end in range(1, len(path) + 1):
            prefix = path[:end]
            if prefix not in counts:
                counts[prefix] = {}
                order.append(prefix)
            counts[prefix][key] = counts[prefix].get(key, 0) + 1

    for stage in ["jaxpr"] + [s for s in stages if s != "jaxpr"]:
        if stage not in stages and stage != "jaxpr":
            continue
        for op in per_stage.get(stage, []):
            add(scopes.of(op.full_name), stage)
    for op in per_stage.get("kernels", []):
        add(scopes.of(op.full_name), "kernels")
    first_seen = {path: i for i, path in enumerate(order)}
    tree = sorted(order, key=lambda p: [first_seen[p[: i + 1]] for i in range(len(p))])
    nodes = [ScopeNode("/".join(p), {k: v for k, v in counts[p].items()}) for p in tree]
    if "jaxpr" not in stages:
        for node in nodes:
            node.counts.pop("jaxpr", None)
        unscoped.pop("jaxpr", None)
    return nodes, unscoped
