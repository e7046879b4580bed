"""Program probe: what JAX traced and XLA compiled for one call, ahead of time.

Usage without IPython::

    report = jaxmagic.probes.hlo(model, params, x, scope="encoder")
    report.counts            # {"jaxpr": 2, "stablehlo": 4, "hlo": 3}
    report.ops_in("hlo")     # the optimized-HLO instructions of the scope
    report.literals          # globals/closure values baked in as constants
    report.memory            # Compiled.memory_analysis() figures

The call is traced, lowered and compiled (``jit(f).trace(...).lower().compile()``)
but never run, so arguments may be ``jax.ShapeDtypeStruct``s and nothing is
allocated. The probe reads each stage from its structured source where JAX has
one - the jaxpr's equations and their ``source_info.name_stack``, the StableHLO
module through the MLIR Python bindings JAX ships (operation locations) - and
the optimized HLO from its text, through ``jaxmagic.probes._support.hlo_text`` only.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import linecache
import re
import time
import types
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

import numpy as np

from jaxmagic._jax import compat, jittable
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.name_paths import NamePath, find_run, parse_name, scope_path, split_query
from jaxmagic.report import Report, SourceLine, Status
from jaxmagic.report.source import is_user_file, source_line
from jaxmagic.report.wording import error_line, format_bytes, strip_ansi

STAGES = ("jaxpr", "stablehlo", "hlo")
STAGE_TITLES = {"jaxpr": "jaxpr", "stablehlo": "StableHLO", "hlo": "optimized HLO"}
LARGE_CONSTANT_BYTES = 1 << 20  # captured arrays from here on are a memory concern (jit cache keeps them)
# An array made while tracing (NumPy code in the function: np.random.rand(n), np.arange(n)) from here on
# is a finding: its values are fixed at trace time, and the program and the jit cache carry it.
BAKED_CONSTANT_BYTES = 1 << 14
SHOWN_ROWS = 40  # rows per table in the rendered report; the report object keeps all


# -- report -------------------------------------------------------------------


@dataclasses.dataclass
class ScopeOp:
    """One operation of the queried scope in one stage."""

    stage: str  # "jaxpr", "stablehlo" or "hlo"
    op: str  # the operation's own name segment: "dot_general", "max", "jit(relu)"
    inner: str  # scopes nested inside the queried one ("attn"), "" if none
    backward: bool  # part of a gradient's backward pass (under transpose)
    name: str  # how the stage writes it: "dot_general", "stablehlo.dot_general", "%dot_general.1"
    full_name: str  # the whole name path, e.g. "jit(f)/encoder/dot_general"
    kernel: str = ""  # HLO: the instruction that runs it, when it runs inside a fusion
    kernel_label: str = ""  # that kernel's op_name
    kernel_in_scope: bool = True
    line: SourceLine | None = None
    text: str = ""  # the jaxpr equation / the HLO instruction line

    @property
    def key(self) -> tuple[bool, str, str]:
        return (self.backward, self.inner, self.op)


@dataclasses.dataclass
class Kernel:
    """An optimized-HLO instruction that runs operations of the scope (a fusion or a single op)."""

    name: str
    opcode: str
    fusion_kind: str
    label: str  # its op_name: the name a profiler shows
    in_scope: bool  # the label itself carries the scope
    scope_ops: int  # operations of the scope inside it
    other_ops: int  # operations of other scopes fused into it


@dataclasses.dataclass
class ScopeNode:
    """One named scope of the program with its operation counts (descendants included)."""

    path: str  # "encoder/attn"
    counts: dict[str, int]  # per stage; "kernels": HLO instructions labelled with this scope


@dataclasses.dataclass
class BakedLiteral:
    """A global or closure value that tracing turned into a literal of the jaxpr."""

    name: str  # "SCALE", "cfg.scale"
    kind: str  # "global" or "closure"
    value: str  # the literal as the jaxpr prints it: "2.0:f32[]"
    equation: str  # "b:f32[] = mul a 2.0:f32[]"
    line: SourceLine | None = None


@dataclasses.dataclass
class CapturedConstant:
    """An array the traced function closes over: a constant of the program, kept by the jit cache."""

    name: str  # "TABLE", or "" when it is not a visible global/closure value
    kind: str  # "global", "closure" or "" (made inside the function)
    shape: tuple
    dtype: str
    nbytes: int
    line: SourceLine | None = None
    numpy: bool = False  # a NumPy array (NumPy code run at trace time), not a JAX array

    @property
    def large(self) -> bool:
        return self.nbytes >= LARGE_CONSTANT_BYTES

    @property
    def made_while_tracing(self) -> bool:
        """An array computed by the function's own code during tracing (no global or closure holds it)."""
        return not self.name and self.nbytes >= BAKED_CONSTANT_BYTES


@dataclasses.dataclass
class MemoryFigures:
    """``Compiled.memory_analysis()``, in bytes."""

    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    generated_code_bytes: int = 0
    peak_bytes: int = 0  # 0 when the backend does not say

    @property
    def total_bytes(self) -> int:
        """Arguments + outputs + temporaries, minus outputs that reuse (alias) argument buffers."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes


@dataclasses.dataclass
class SweepPoint:
    value: str
    memory: MemoryFigures | None = None
    flops: float | None = None
    failure: str = ""


@dataclasses.dataclass
class HloReport(Report):
    """What ``%jax_hlo`` found for one call."""

    kind = "jax_hlo"

    call: str = ""
    function: str = ""  # "jit(scoped_mlp)"
    scope: str = ""  # the queried scope, "" for the scope tree
    stages: list[str] = dataclasses.field(default_factory=lambda: list(STAGES))
    inputs: list[str] = dataclasses.field(default_factory=list)  # "x: f32[3,4]"
    outputs: list[str] = dataclasses.field(default_factory=list)
    ops: list[ScopeOp] = dataclasses.field(default_factory=list)
    kernels: list[Kernel] = dataclasses.field(default_factory=list)
    tree: list[ScopeNode] = dataclasses.field(default_factory=list)
    unscoped: dict[str, int] = dataclasses.field(default_factory=dict)  # operations outside any scope
    suggestions: list[str] = dataclasses.field(default_factory=list)  # scopes close to a missing one
    literals: list[BakedLiteral] = dataclasses.field(default_factory=list)
    constants: list[CapturedConstant] = dataclasses.field(default_factory=list)
    memory: MemoryFigures | None = None
    cost: dict[str, float] = dataclasses.field(default_factory=dict)
    sweep_name: str = ""
    sweep: list[SweepPoint] = dataclasses.field(default_factory=list)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # trace, lower, compile
    failure: str = ""  # "ValueError: ..." when a stage could not be built
    failure_stage: str = ""
    failure_line: SourceLine | None = None

    # -- derived --------------------------------------------------------------

    def ops_in(self, stage: str) -> list[ScopeOp]:
        return [op for op in self.ops if op.stage == stage]

    @property
    def counts(self) -> dict[str, int]:
        """Operations of the queried scope per stage that was built."""
        return {stage: len(self.ops_in(stage)) for stage in self.stages}

    @property
    def scope_found(self) -> bool:
        return bool(self.ops)

    @property
    def scope_paths(self) -> list[str]:
        return [node.path for node in self.tree]

    @property
    def fused_away(self) -> list[Kernel]:
        """Kernels running operations of the scope under another scope's label."""
        return [k for k in self.kernels if not k.in_scope]

    @property
    def named_constants(self) -> list[CapturedConstant]:
        return [c for c in self.constants if c.name]

    @property
    def status(self) -> Status:
        if self.failure:
            return Status.ERROR
        if self.literals or self.named_constants or any(c.large or c.made_while_tracing for c in self.constants):
            return Status.PROBLEM
        if self.scope and not self.scope_found:
            return Status.PROBLEM
        return Status.OK

    @property
    def summary(self) -> str:
        if self.failure:
            return f"{self.call} could not be {_STAGE_VERBS.get(self.failure_stage, 'built')}: {self.failure}"
        parts = []
        if self.literals:
            first = self.literals[0]
            more = f" (and {len(self.literals) - 1} more)" if len(self.literals) > 1 else ""
            parts.append(
                f"{first.kind} `{first.name}` is baked into {self.function} as the constant "
                f"`{first.value}`{more}: changing it later has no effect on the compiled function."
            )
        made = [c for c in self.constants if c.made_while_tracing]
        for c in made[:2]:
            what = "a NumPy array" if c.numpy else "an array"
            at = f", first used at {_where(c.line)}" if c.line else ""
            parts.append(
                f"{self.function} builds {what} of {format_bytes(c.nbytes)} ({c.dtype}{list(c.shape)}) while it is "
                f"traced{at}: it is a constant of the compiled program, computed once at trace time (a NumPy "
                "random draw gives the same numbers on every call) and kept alive by the jit cache."
            )
        if len(made) > 2:
            parts.append(f"{len(made) - 2} more such constant(s) below.")
        captured = self.named_constants or [c for c in self.constants if c.large and c.name]
        if captured:
            total = sum(c.nbytes for c in captured)
            names = ", ".join(f"`{c.name}`" for c in captured[:3] if c.name) or "arrays made inside the function"
            parts.append(
                f"{len(captured)} captured array(s) ({format_bytes(total)}: {names}) are constants of the "
                "program; the jit cache keeps them alive."
            )
        if self.sweep:
            parts.append(self._sweep_sentence())
        if self.scope or self.tree or not parts:
            parts.append(self._scope_sentence())
        return " ".join(parts)

    def _sweep_sentence(self) -> str:
        good = [p for p in self.sweep if p.memory]
        values = ", ".join(p.value for p in self.sweep)
        text = f"{self.function} compiled for {self.sweep_name} = {values}"
        if len(good) >= 2:
            first, last = good[0].memory, good[-1].memory
            text += (
                f": outputs {format_bytes(first.output_bytes)} -> {format_bytes(last.output_bytes)}, temporaries "
                f"{format_bytes(first.temp_bytes)} \u2192 {format_bytes(last.temp_bytes)}, total {format_bytes(first.total_bytes)} "
                f"\u2192 {format_bytes(last.total_bytes)}"
            )
        failed = [p for p in self.sweep if p.failure]
        if failed:
            text += f" ({len(failed)} value(s) failed: {failed[0].failure})"
        return text + " (memory_analysis; nothing allocated)."

    def _scope_sentence(self) -> str:
        if not self.scope:
            stages = ", ".join(_counted(self.unscoped_total(s), _UNITS[s]) for s in self.stages)
            scopes = _counted(len(self.tree), "named scope") if self.tree else "no named scopes"
            return f"{self.function}: {stages}; {scopes}."
        if not self.scope_found:
            hint = f" Did you mean {', '.join(repr(s) for s in self.suggestions)}?" if self.suggestions else ""
            known = (
                ""
                if self.suggestions or not self.tree
                else (f" Scopes in this program: {', '.join(self.scope_paths[:8])}.")
            )
            if not self.tree:
                known = " This program has no named scopes (jax.named_scope)."
            return f"Scope `{self.scope}` not found in {self.function}.{hint}{known}"
        counts = ", ".join(_counted(self.counts[s], _UNITS[s]) for s in self.stages)
        text = f"Scope `{self.scope}` in {self.function}: {counts}"
        if "hlo" in self.stages and self.kernels:
            text += f" in {_counted(len(self.kernels), 'kernel')}"
        away = self.fused_away
        if away:
            n = sum(k.scope_ops for k in away)
            text += (
                f"; {n} of them {'runs' if n == 1 else 'run'} in a kernel XLA labels with another "
                f"name ({', '.join('%' + k.name for k in away[:2])})"
            )
        return text + "."

    def unscoped_total(self, stage: str) -> int:
        return self.unscoped.get(stage, 0) + sum(
            node.counts.get(stage, 0) for node in self.tree if "/" not in node.path
        )

    # -- rendering ------------------------------------------------------------

    def document(self):
        from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, SourceLines, Table

        sections = []
        if self.failure:
            blocks = [
                Paragraph(
                    f"Building the {STAGE_TITLES.get(self.failure_stage, self.failure_stage)} failed: {self.failure}"
                )
            ]
            if self.failure_line:
                blocks.append(SourceLines([self.failure_line], "Your line:"))
            sections.append(Section("Failure", blocks))
        if self.sweep:
            sections.append(self._sweep_section(Section, Table, Paragraph))
        if self.literals:
            rows = [
                [f"`{lit.name}`", lit.kind, f"`{lit.value}`", f"`{lit.equation}`", _where(lit.line)]
                for lit in self.literals
            ]
            sections.append(
                Section(
                    "Baked-in values",
                    [
                        Table(["name", "kind", "literal", "equation", "line"], rows),
                        *_lines_block(SourceLines, [lit.line for lit in self.literals]),
                        Paragraph(
                            "Tracing read these values once and wrote them into the program as literals. The jit "
                            "cache keeps that program, so assigning a new value later does not change the result "
                            "and does not recompile. Pass the value as an argument (or mark it static with "
                            "`static_argnums` if it must stay a Python constant)."
                        ),
                    ],
                )
            )
        if self.constants:
            rows = [
                [
                    f"`{c.name}`" if c.name else "(made inside the function)",
                    c.kind or "-",
                    str(tuple(c.shape)),
                    c.dtype,
                    format_bytes(c.nbytes),
                    _where(c.line),
                ]
                for c in self.constants
            ]
            sections.append(
                Section(
                    "Captured arrays",
                    [
                        Table(["name", "kind", "shape", "dtype", "size", "used at"], rows),
                        *_lines_block(SourceLines, [c.line for c in self.constants]),
                        *(
                            [
                                Paragraph(
                                    "Arrays made inside the function by NumPy (or from Python data) are computed once, "
                                    "when the function is traced, and written into the program: np.random draws the "
                                    "same numbers on every call, and the array travels with the compiled program. "
                                    "Use jax.numpy (jax.random with a key argument) so the value is computed when "
                                    "the program runs, or pass the array in as an argument."
                                )
                            ]
                            if any(c.made_while_tracing for c in self.constants)
                            else []
                        ),
                        Paragraph(
                            "These arrays are closed over, not passed in: they become constants of the program, "
                            "the jit cache holds them for as long as the jitted function lives (even after the "
                            "name is rebound), and a new value needs a new trace. Tracing the call here keeps them "
                            "in JAX's cache just as calling it would. Pass large arrays as arguments; "
                            "`jax.clear_caches()` frees the ones already held."
                        ),
                    ],
                )
            )
        if self.scope:
            sections += self._scope_sections(Table, Paragraph, Evidence, SourceLines)
        if self.tree or not self.scope:
            sections.append(self._tree_section(Section, Table, Paragraph))
        if self.memory or self.cost:
            sections.append(self._memory_section(Section, Facts, Paragraph))
        facts = [("call", self.call), ("function", self.function), ("stages", ", ".join(self.stages))]
        if self.inputs:
            facts.append(("inputs", "; ".join(self.inputs[:8]) + (" ..." if len(self.inputs) > 8 else "")))
        if self.outputs:
            facts.append(("outputs", "; ".join(self.outputs[:8]) + (" ..." if len(self.outputs) > 8 else "")))
        for stage, seconds in self.seconds.items():
            facts.append((f"{stage} time", f"{seconds * 1e3:.1f} ms"))
        sections.append(
            Section(
                "Program",
                [
                    Facts(facts),
                    Paragraph(
                        "Built ahead of time, never run: `jax.jit(f).trace(*args)` (jax.stages.Traced: .jaxpr, .out_info) -> "
                        "`.lower()` (Lowered: .as_text(debug_info=True)) -> `.compile()` (Compiled: .as_text(), "
                        ".memory_analysis(), .cost_analysis())."
                    ),
                ],
            )
        )
        return Document("%jax_hlo", self.status, self.summary, sections)

    def _scope_sections(self, Table, Paragraph, Evidence, SourceLines):
        from jaxmagic.report.document import Section

        if not self.scope_found:
            return []
        rows_by_key: dict[tuple, dict[str, list[ScopeOp]]] = {}
        for op in self.ops:
            rows_by_key.setdefault(op.key, {}).setdefault(op.stage, []).append(op)
        any_backward = any(op.backward for op in self.ops)
        columns = ["operation"] + [STAGE_TITLES[s] for s in self.stages] + ["your line"]
        rows = []
        for (backward, inner, name), by_stage in list(rows_by_key.items())[:SHOWN_ROWS]:
            label = f"{inner}/{name}" if inner else name
            if any_backward:
                label += " (backward)" if backward else " (forward)"
            cells = [f"`{label}`"]
            for stage in self.stages:
                cells.append(_stage_cell(stage, by_stage.get(stage, [])))
            line = next((op.line for s in STAGES for op in by_stage.get(s, []) if op.line), None)
            cells.append(_where(line))
            rows.append(cells)
        blocks = [Table(columns, rows)]
        if len(rows_by_key) > SHOWN_ROWS:
            blocks.append(
                Paragraph(
                    f"... and {len(rows_by_key) - SHOWN_ROWS} more operations (all of them are in the report's `.ops`)."
                )
            )
        if any(op.kernel and not op.kernel_in_scope for op in self.ops):
            blocks.append(Paragraph("* runs inside a kernel that XLA labels with another name: see Kernels."))
        blocks += _lines_block(SourceLines, [op.line for op in self.ops])
        blocks.append(
            Paragraph(
                "One row per operation of the scope, matched across stages by its name path (the jaxpr's "
                "`source_info.name_stack`, the StableHLO location - `as_text(debug_info=True)` prints it - and the "
                "HLO `metadata={op_name=...}`). XLA may drop, merge or duplicate operations while optimizing, so "
                "a row can be empty in one stage."
            )
        )
        sections = [Section(f"Scope {self.scope}", blocks)]
        if self.kernels:
            krows = [
                [
                    f"%{k.name}",
                    k.fusion_kind or k.opcode,
                    f"`{k.label}`",
                    "yes" if k.in_scope else "no",
                    str(k.scope_ops),
                    str(k.other_ops),
                ]
                for k in self.kernels[:SHOWN_ROWS]
            ]
            kblocks = [
                Table(["kernel", "kind", "label (op_name)", "label in scope", "ops of the scope", "other ops"], krows)
            ]
            away = self.fused_away
            if away:
                kblocks.append(
                    Paragraph(
                        f"XLA fused operations of `{self.scope}` into kernels whose label belongs to other code "
                        f"({', '.join('%' + k.name for k in away[:4])}). A fusion keeps one op_name - usually its "
                        "root's - so a profiler trace shows this work under that label, not under "
                        f"`{self.scope}`. The instructions inside the fusion keep their own op_name, which is "
                        "how they were found here."
                    )
                )
            else:
                kblocks.append(
                    Paragraph(
                        f"Every kernel running `{self.scope}` is labelled with it: a profiler "
                        "trace shows its time under this scope."
                    )
                )
            sections.append(Section("Kernels (optimized HLO)", kblocks))
        hlo_lines = [op.text for op in self.ops_in("hlo") if op.text]
        eqns = [op.text for op in self.ops_in("jaxpr") if op.text]
        evidence = []
        if eqns:
            evidence.append(Evidence(f"jaxpr equations ({len(eqns)})", "\n".join(eqns[:200])))
        if hlo_lines:
            evidence.append(Evidence(f"optimized HLO instructions ({len(hlo_lines)})", "\n".join(hlo_lines[:200])))
        if evidence:
            sections.append(Section("", evidence))
        return sections

    def _tree_section(self, Section, Table, Paragraph):
        columns = ["scope"] + [STAGE_TITLES[s] for s in self.stages]
        if "hlo" in self.stages:
            columns.append("kernels labelled")
        rows = []
        for node in self.tree[: SHOWN_ROWS * 2]:
            depth = node.path.count("/")
            name = node.path.rsplit("/", 1)[-1]
            cells = [("\u00a0\u00a0" * depth) + f"`{name}`"] + [str(node.counts.get(s, 0)) for s in self.stages]
            if "hlo" in self.stages:
                cells.append(str(node.counts.get("kernels", 0)))
            rows.append(cells)
        if self.unscoped:
            cells = ["(outside any scope)"] + [str(self.unscoped.get(s, 0)) for s in self.stages]
            if "hlo" in self.stages:
                cells.append(str(self.unscoped.get("kernels", 0)))
            rows.append(cells)
        blocks = [Table(columns, rows)] if rows and self.tree else []
        if not self.tree:
            blocks.append(
                Paragraph(
                    "The program has no named scopes. Wrap parts of your function in "
                    '`with jax.named_scope("name"):` to find them in every stage.'
                )
            )
        else:
            blocks.append(
                Paragraph(
                    "Counts include nested scopes. Ask for one with `%jax_hlo SCOPE EXPR` "
                    "(a nested one as `outer/inner`)."
                )
            )
        return Section("Named scopes", blocks)

    def _memory_section(self, Section, Facts, Paragraph):
        pairs = []
        if self.memory:
            m = self.memory
            pairs += [
                ("arguments", format_bytes(m.argument_bytes)),
                ("outputs", format_bytes(m.output_bytes)),
                ("temporaries", format_bytes(m.temp_bytes)),
                ("aliased (donated)", format_bytes(m.alias_bytes)),
                ("generated code", format_bytes(m.generated_code_bytes)),
                ("total", format_bytes(m.total_bytes)),
            ]
            if m.peak_bytes:
                pairs.append(("peak", format_bytes(m.peak_bytes)))
        names = [("flops", "flops"), ("transcendentals", "transcendentals"), ("bytes accessed", "bytes accessed")]
        pairs += [(label, _number(self.cost[key])) for key, label in names if key in self.cost]
        blocks = [
            Facts(pairs),
            Paragraph(
                "From `Compiled.memory_analysis()` and `cost_analysis()`: figures of the compiled program, known before "
                "anything runs. Temporaries are XLA's scratch buffers; total = arguments + outputs + temporaries - "
                "aliased."
                + (
                    f" The sweep above compiled the call once per value of {self.sweep_name}; these "
                    f"figures are for {self.sweep_name}={self.sweep[0].value}."
                    if self.sweep
                    else ""
                )
            ),
        ]
        return Section("Memory and cost", blocks)

    def _sweep_section(self, Section, Table, Paragraph):
        rows = []
        for point in self.sweep:
            if point.failure:
                rows.append([point.value, point.failure, "", "", "", "", ""])
                continue
            m = point.memory or MemoryFigures()
            rows.append(
                [
                    point.value,
                    format_bytes(m.argument_bytes),
                    format_bytes(m.output_bytes),
                    format_bytes(m.temp_bytes),
                    format_bytes(m.generated_code_bytes),
                    format_bytes(m.total_bytes),
                    _number(point.flops) if point.flops is not None else "-",
                ]
            )
        blocks = [
            Table([self.sweep_name, "arguments", "outputs", "temporaries", "generated code", "total", "flops"], rows)
        ]
        growth = _sweep_growth(self.sweep_name, self.sweep)
        if growth:
            blocks.append(Paragraph(growth))
        return Section(f"Sweep over {self.sweep_name}", blocks)


_UNITS = {"jaxpr": "jaxpr equation", "stablehlo": "StableHLO operation", "hlo": "HLO instruction"}


def _counted(n: int, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


_STAGE_VERBS = {"trace": "traced", "jaxpr": "traced", "stablehlo": "lowered", "hlo": "compiled"}


def _stage_cell(stage: str, ops: list[ScopeOp]) -> str:
    if not ops:
        return "-"
    if stage == "hlo":
        parts = []
        for op in ops[:3]:
            where = f" in %{op.kernel}" if op.kernel else ""
            parts.append(f"`{op.name}`{where}" + (" *" if op.kernel and not op.kernel_in_scope else ""))
        return ", ".join(parts) + (f" +{len(ops) - 3}" if len(ops) > 3 else "")
    names = [op.name.removeprefix("stablehlo.") for op in ops]
    distinct = list(dict.fromkeys(names))
    text = ", ".join(f"`{n}`" + (f" \u00d7{names.count(n)}" if names.count(n) > 1 else "") for n in distinct[:4])
    return text + (f" +{len(distinct) - 4}" if len(distinct) > 4 else "")


def _lines_block(SourceLines, lines: list) -> list:
    """A SourceLines block with each distinct line once (none when no line is known)."""
    distinct = list({(line.filename, line.lineno): line for line in lines if line is not None}.values())
    return [SourceLines(distinct[:8], "Your lines:")] if distinct else []


def _where(line: SourceLine | None) -> str:
    if line is None:
        return "-"
    return f"{line.label or line.filename}:{line.lineno}"


def _number(x: float) -> str:
    if x >= 1e9:
        return f"{x / 1e9:.2f} G"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:g}"


def _sweep_growth(name: str, points: list[SweepPoint]) -> str:
    good = [p for p in points if p.memory]
    if len(good) < 2:
        return ""
    first, last = good[0], good[-1]
    try:
        factor = float(last.value) / float(first.value)
    except ValueError:
        factor = None

    def ratio(a: int, b: int) -> str:
        return f"\u00d7{b / a:.2f}" if a else ("unchanged" if a == b else "from 0")

    parts = [
        f"arguments {ratio(first.memory.argument_bytes, last.memory.argument_bytes)}",
        f"outputs {ratio(first.memory.output_bytes, last.memory.output_bytes)}",
        f"temporaries {ratio(first.memory.temp_bytes, last.memory.temp_bytes)}",
    ]
    scale = f" (\u00d7{factor:g})" if factor else ""
    return (
        f"From {name}={first.value} to {name}={last.value}{scale}: {', '.join(parts)}. Figures that grow "
        f"in proportion to {name} will keep doing so: extrapolate before you allocate."
    )


# -- the probe ----------------------------------------------------------------


@dataclasses.dataclass
class Sweep:
    """``--sweep B=64,256,1024``: ``build(value)`` returns ``(fn, args, kwargs)`` for one value."""

    name: str
    values: list
    build: Callable[[Any], tuple]


def parse_stages(text: str | Iterable[str]) -> list[str]:
    """``"all"`` / ``"jaxpr,hlo"`` -> the stages in pipeline order."""
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    if "all" in names:
        return list(STAGES)
    unknown = [n for n in names if n not in STAGES]
    if unknown or not names:
        raise ProbeArgumentError(
            "stage",
            f"names unknown stages {', '.join(unknown) or '(none given)'}; choose from jaxpr, stablehlo, hlo, all",
        )
    return [s for s in STAGES if s in names]


def hlo(
    fn: Callable,
    *args: Any,
    scope: str | None = None,
    stage: str | Iterable[str] = "all",
    call_text: str = "",
    namespace: dict | None = None,
    sweep: Sweep | None = None,
    **kwargs: Any,
) -> HloReport:
    """``hlo_of_call(fn, args, kwargs, ...)`` for people: the call's own keywords may not be
    named like this function's options here (use :func:`hlo_of_call` then)."""
    return hlo_of_call(
        fn, args, kwargs, scope=scope, stage=stage, call_text=call_text, namespace=namespace, sweep=sweep
    )


def hlo_of_call(fn: Callable, args: tuple | list = (), kwargs: dict | None = None, **options: Any) -> HloReport:
    """Trace, lower and compile ``fn(*args, **kwargs)`` (never run it) and report on the program.

    ``options`` are :func:`run_call`'s. With ``scope`` (``"encoder"``,
    ``"encoder/attn"``): the operations of that ``jax.named_scope`` in each
    stage, side by side. Without: the tree of named scopes with counts per
    stage. Always: literals baked in from globals/closures and captured
    constant arrays; with the ``hlo`` stage,
    ``memory_analysis()``/``cost_analysis()`` of the compiled program.
    ``namespace`` (the user's globals) helps name baked globals. ``sweep``
    compiles the call once per value and tabulates the memory figures.
    Returns the report; errors while building a stage are reported, not raised
    (use :func:`run_call` to also get the exception).
    """
    return run_call(fn, args, kwargs, **options)[0]


def run_call(
    fn: Callable,
    args: tuple | list = (),
    kwargs: dict | None = None,
    *,
    scope: str | None = None,
    stage: str | Iterable[str] = "all",
    call_text: str = "",
    namespace: dict | None = None,
    sweep: Sweep | None = None,
) -> tuple[HloReport, Exception | None]:
    """Like :func:`hlo_of_call`, also returning the exception of the stage that failed (None if none).

    The magic shows the report, then raises it.
    """

    args, kwargs = tuple(args), dict(kwargs or {})
    failed: list[Exception] = []  # the exception of the stage that failed, for the magic to raise
    stages = parse_stages(stage)
    jitted = fn if compat.is_jitted(fn) else jittable.jit(fn)
    report = HloReport(
        call=call_text or f"{getattr(fn, '__name__', 'fn')}(...)",
        scope=scope or "",
        stages=stages,
        function=f"jit({_function_name(fn)})",
    )
    with preserved_jax_state(()):
        traced = _timed(report, "trace", lambda: jitted.trace(*args, **kwargs), failed)
        if traced is None:
            return report, failed[0]
        closed = traced.jaxpr
        report.function = f"jit({_traced_name(closed, fn)})"
        report.inputs, report.outputs = _signature(traced)
        walked = list(_walk_eqns(closed))
        jaxpr_ops = _jaxpr_ops(walked, report.function)
        known = _scope_names(walked)
        query = split_query(scope) if scope else ()
        known |= set(query)
        env = _NameEnvironment(fn, namespace)
        report.literals = _baked_literals(walked, env)
        report.constants = _captured_constants(closed, walked, env)
        per_stage: dict[str, list[_Op]] = {"jaxpr": jaxpr_ops}
        module = None
        if "stablehlo" in stages or "hlo" in stages:
            lowered = _timed(report, "lower", traced.lower, failed)
            if lowered is None:
                report.failure_stage = "stablehlo"
                return report, failed[0]
            if "stablehlo" in stages:
                per_stage["stablehlo"] = _stablehlo_ops(lowered)
            if "hlo" in stages:
                compiled = _timed(report, "compile", lowered.compile, failed)
                if compiled is None:
                    report.failure_stage = "hlo"
                    return report, failed[0]
                from jaxmagic.probes._support.hlo_text import parse_hlo_module

                module = parse_hlo_module(compiled.as_text())
                per_stage["hlo"] = _hlo_ops(module)
                per_stage["kernels"] = _hlo_kernels(module)
                report.memory = _memory_figures(compiled)
                report.cost = _cost(compiled)
        scopes = _Scopes(known)
        if scope:
            _collect_scope(report, per_stage, scopes, query, module)
        report.tree, report.unscoped = _scope_tree(per_stage, scopes, stages)
        if scope and not report.ops:
            report.suggestions = difflib.get_close_matches(scope, report.scope_paths, n=3, cutoff=0.5)
        if sweep is not None:
            report.sweep_name = sweep.name
            report.sweep = [_sweep_point(sweep, value) for value in sweep.values]
    return report, None


def _function_name(fn) -> str:
    target = inspect.unwrap(fn) if callable(fn) else fn
    return getattr(target, "__name__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _traced_name(closed, fn) -> str:
    info = getattr(closed, "debug_info", None)
    name = getattr(info, "func_name", None) if info is not None else None
    return name or _function_name(fn)


def _timed(report: HloReport, step: str, build: Callable[[], Any], failed: list[Exception]):
    start = time.perf_counter()
    try:
        result = build()
    except Exception as error:  # the user's program failed to trace/lower/compile: report it, hand it back
        failed.append(error)
        report.failure = error_line(error)
        report.failure_stage = {"trace": "jaxpr", "lower": "stablehlo", "compile": "hlo"}[step]
        report.failure_line = _innermost_user_line(error.__traceback__)
        return None
    report.seconds[step] = time.perf_counter() - start
    return result


def _innermost_user_line(tb) -> SourceLine | None:
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            found = source_line(code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return found


def _signature(traced) -> tuple[list[str], list[str]]:
    import jax

    info = getattr(traced.jaxpr, "debug_info", None)
    names = list(getattr(info, "arg_names", None) or [])
    avals = jax.tree_util.tree_leaves(traced.in_avals)
    inputs = [f"{names[i] if i < len(names) and names[i] else f'arg{i}'}: {_aval_text(a)}" for i, a in enumerate(avals)]
    outs = jax.tree_util.tree_leaves(traced.out_info)
    outputs = [_aval_text(o) for o in outs]
    return inputs, outputs


def _aval_text(aval) -> str:
    shape = getattr(aval, "shape", ())
    dtype = getattr(aval, "dtype", "")
    short = np.dtype(dtype).name if dtype is not None and str(dtype) else str(dtype)
    short = {
        "float32": "f32",
        "float64": "f64",
        "float16": "f16",
        "bfloat16": "bf16",
        "int32": "i32",
        "int64": "i64",
        "bool": "bool",
        "uint8": "u8",
        "int8": "i8",
        "uint32": "u32",
    }.get(short, short)
    return f"{short}[{','.join(str(d) for d in shape)}]"


# -- stage 1: the jaxpr -------------------------------------------------------


@dataclasses.dataclass
class _Op:
    """An operation of one stage, before it is matched to the query."""

    stage: str
    name: str
    path: NamePath
    full_name: str
    where: Callable[[], SourceLine | None]
    text: Callable[[], str]
    instruction: Any = None  # HLO instruction


def _sub_jaxprs(eqn):
    return compat.sub_jaxprs(eqn)


def _walk_eqns(jaxpr, segments: tuple[str, ...] = (), backward: bool = False, parents: tuple = ()):
    """Yield ``(eqn, segments, backward, sub_jaxprs, parents)`` for every equation, sub-jaxprs included.

    ``segments`` is the name path above the equation: the enclosing equations'
    name stacks and, for calls to jitted functions, ``jit(name)`` as JAX's
    lowering names them.
    """
    for eqn in jaxpr.eqns:
        own = parse_name(str(eqn.source_info.name_stack))
        here = segments + own.segments
        back = backward or own.backward
        subs = _sub_jaxprs(eqn)
        yield eqn, here, back, subs, parents
        if subs:
            marker = ()
            if eqn.primitive.name in ("pjit", "jit", "closed_call", "core_call") and eqn.params.get("name"):
                marker = (f"jit({eqn.params['name']})",)
            for sub in subs:
                yield from _walk_eqns(getattr(sub, "jaxpr", sub), here + marker, back, parents + (eqn,))


def _scope_names(walked: list) -> set[str]:
    """Every user scope name on a name stack of the program (structured: Scope entries)."""
    names: set[str] = set()
    scope_type = compat.scope_entry_type()
    for eqn, _segments, _back, _subs, _parents in walked:
        for entry in eqn.source_info.name_stack.stack:
            if scope_type is None or isinstance(entry, scope_type):
                name = getattr(entry, "name", "")
                if name:
                    names.add(name)
    return names


def _jaxpr_ops(walked: list, function: str) -> list[_Op]:
    ops = []
    for eqn, segments, backward, subs, parents in walked:
        if subs:
            continue
        prim = eqn.primitive.name
        path = NamePath(segments + (prim,), backward)
        ops.append(
            _Op(
                "jaxpr",
                prim,
                path,
                "/".join((function,) + path.segments),
                where=(lambda e=eqn, ps=parents: _eqn_line(e, ps)),
                text=(lambda e=eqn: _eqn_text(e)),
            )
        )
    return ops


def _eqn_line(eqn, parents: tuple = ()) -> SourceLine | None:
    """The innermost line of the user's code on the equation's stack.

    An equation inside a call (the max in jax.nn.relu's custom_jvp) may have been
    traced from JAX's own code only; it then gets the line of the innermost
    enclosing equation that has one - the user's call of relu.
    """
    for candidate in (eqn,) + tuple(reversed(parents)):
        tb = candidate.source_info.traceback
        if tb is None:
            continue
        for frame in tb.frames:  # innermost first
            if is_user_file(frame.file_name):
                return source_line(frame.file_name, frame.line_num, frame.function_name)
    return None


def _eqn_text(eqn) -> str:
    try:
        text = strip_ansi(str(eqn)).strip()
    except Exception:
        return eqn.primitive.name
    return text if len(text) <= 240 else text[:237] + "..."


# -- stage 2: StableHLO, through the MLIR bindings ----------------------------

_NOT_OPERATIONS = {"func.return", "stablehlo.return", "func.call", "func.func"}
_CONTROL_FLOW = {"stablehlo.while", "stablehlo.if", "stablehlo.case"}


def _stablehlo_ops(lowered) -> list[_Op]:
    """Operations of the StableHLO module with their location names and user frames.

    Calls into private functions (``func.call @relu``) are followed, and the
    callee's operations - whose own locations are relative (``loc("max")``) -
    are named under the call's location, as XLA names them after inlining.
    """
    ir = compat.mlir_ir()

    module = lowered.compiler_ir("stablehlo")
    functions = {}
    for op in module.body.operations:
        operation = op.operation
        if operation.name == "func.func" and "sym_name" in operation.attributes:
            functions[ir.StringAttr(operation.attributes["sym_name"]).value] = operation
    main = functions.get("main") or next(iter(functions.values()), None)
    ops: list[_Op] = []
    if main is None:
        return ops

    def walk_regions(operation, prefix: str, outer_frames, depth: int):
        for region in operation.regions:
            for block in region.blocks:
                for child in block.operations:
                    visit(child.operation, prefix, outer_frames, depth)

    def visit(operation, prefix: str, outer_frames, depth: int):
        location = operation.location
        full = _join_name(prefix, _location_name(location))

        def frames(location=location, outer=outer_frames):
            # Read only for the operations that are shown; an op of a called function has no
            # file location of its own and takes its call's.
            return _location_frames(location) or (outer() if outer else [])

        kind = operation.name
        if kind == "func.call" and depth < 32:
            callee = ir.FlatSymbolRefAttr(operation.attributes["callee"]).value
            if callee in functions:
                walk_regions(functions[callee], full, frames, depth + 1)
            return
        if kind in _NOT_OPERATIONS:
            return
        ops.append(
            _Op(
                "stablehlo",
                kind,
                parse_name(full),
                full,
                where=(lambda f=frames: _first_user_frame(f())),
                text=lambda k=kind, n=full: f"{k}  {n}",
            )
        )
        if kind in _CONTROL_FLOW:
            walk_regions(operation, prefix, outer_frames, depth)

    walk_regions(main, "", None, 0)
    return ops


def _join_name(prefix: str, name: str | None) -> str:
    if not prefix:
        return name or ""
    if not name:
        return prefix
    return f"{prefix}/{name}"


def _location_name(location) -> str | None:
    """The operation's name path: the outermost name of its MLIR location (None if it has none)."""
    ir = compat.mlir_ir()

    if isinstance(location, ir.NameLoc):
        return location.name_str
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            if isinstance(inner, ir.NameLoc):
                return inner.name_str
    return None


def _location_frames(location) -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of an MLIR location's call stack, innermost first.

    JAX writes ``loc("jit(f)/encoder/dot_general"(callsite("f"("x.py":4:2) at ...)))``:
    below the operation's name, call sites whose callee is the function's
    name around its file position.
    """
    ir = compat.mlir_ir()

    frames: list[tuple[str, int, str]] = []

    def visit(loc, function: str = "", top: bool = False):
        if isinstance(loc, ir.NameLoc):
            visit(loc.child_loc, "" if top else loc.name_str)
        elif isinstance(loc, ir.CallSiteLoc):
            visit(loc.callee, function)
            visit(loc.caller)
        elif isinstance(loc, ir.FileLineColLoc):
            frames.append((loc.filename, loc.start_line, function))
        elif isinstance(loc, ir.FusedLoc):
            for inner in loc.locations:
                visit(inner, function, top)

    visit(location, top=True)
    return frames


def _first_user_frame(frames: list[tuple[str, int, str]]) -> SourceLine | None:
    for filename, lineno, function in frames:
        if is_user_file(filename):
            return source_line(filename, lineno, function)
    return None


# -- stage 3: optimized HLO ---------------------------------------------------


def _hlo_ops(module) -> list[_Op]:
    """The operations XLA will run: every instruction with a name path, fusions and reducer bodies aside."""
    ops = []
    for instruction in module.instructions():
        if not instruction.op_names or instruction.opcode == "fusion":
            continue
        if module.role(instruction.computation) == "applied":
            continue  # the scalar body of a reduce/sort: part of that instruction
        for op_name in instruction.op_names:
            ops.append(
                _Op(
                    "hlo",
                    f"%{instruction.name}",
                    parse_name(op_name),
                    op_name,
                    where=(lambda i=instruction: _hlo_line(module, i)),
                    text=(lambda i=instruction: i.text),
                    instruction=instruction,
                )
            )
            break  # one entry per instruction; merged op_names are checked when matching
    return ops


def _hlo_kernels(module) -> list[_Op]:
    """Instructions that run as code (entry and loop computations), labelled by their op_name."""
    ops = []
    for instruction in module.instructions():
        if not instruction.op_names or instruction.opcode in ("parameter", "tuple", "get-tuple-element"):
            continue
        if module.role(instruction.computation) in ("entry", "control"):
            op_name = instruction.op_names[0]
            ops.append(
                _Op(
                    "kernels",
                    f"%{instruction.name}",
                    parse_name(op_name),
                    op_name,
                    where=lambda: None,
                    text=lambda i=instruction: i.text,
                    instruction=instruction,
                )
            )
    return ops


def _hlo_line(module, instruction) -> SourceLine | None:
    return _first_user_frame([(f.file, f.line, f.function) for f in module.stack(instruction)])


# -- matching -----------------------------------------------------------------


class _Scopes:
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


def _matches(op: _Op, scopes: _Scopes, query: tuple[str, ...]) -> tuple[str, str] | None:
    """``(inner scopes, full name)`` when ``op`` lies inside the queried scope, else None."""
    names = op.instruction.op_names if op.instruction is not None else (op.full_name,)
    for full in names:
        path = scopes.of(full)
        end = find_run(path, query)
        if end >= 0:
            return "/".join(path[end:]), full
    return None


def _collect_scope(
    report: HloReport, per_stage: dict[str, list[_Op]], scopes: _Scopes, query: tuple[str, ...], module
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


def _fused_instructions(module, kernel) -> list:
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


def _scope_tree(per_stage: dict[str, list[_Op]], scopes: _Scopes, stages: list[str]):
    """Each scope path (and its ancestors) with operation counts per stage, descendants included."""
    counts: dict[tuple[str, ...], dict[str, int]] = {}
    unscoped: dict[str, int] = {}
    order: list[tuple[str, ...]] = []

    def add(path: tuple[str, ...], key: str):
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


# -- baked literals and captured constants ------------------------------------


class _NameEnvironment:
    """The values a traced function can read by name: its closure, its globals, the user's namespace."""

    def __init__(self, fn, namespace: dict | None):
        self.closure: dict[str, Any] = {}
        self.globals: dict[str, Any] = {}
        seen = set()
        pending = [fn]
        for _ in range(3):  # the function, the functions it names, and theirs
            following = []
            for f in pending:
                f = _unwrapped(f)
                if id(f) in seen or not inspect.isfunction(f):
                    continue
                seen.add(id(f))
                try:
                    found = inspect.getclosurevars(f)
                except (TypeError, ValueError):
                    continue
                for name, value in found.nonlocals.items():
                    self.closure.setdefault(name, value)
                for name, value in found.globals.items():
                    self.globals.setdefault(name, value)
                following += [v for v in list(found.nonlocals.values()) + list(found.globals.values()) if callable(v)]
            pending = following
        self.namespace = namespace or {}
        self._module_globals = getattr(_unwrapped(fn), "__globals__", None) or {}

    def resolve(self, dotted: str) -> tuple[Any, str] | None:
        root, _, rest = dotted.partition(".")
        root_name = re.match(r"[A-Za-z_]\w*", root)
        if root_name is None:
            return None
        base = root_name.group(0)
        for table, kind in (  # noqa: B007 - kind is read after the break
            (self.closure, "closure"),
            (self.globals, "global"),
            (self.namespace, "global"),
            (self._module_globals, "global"),
        ):
            if base in table:
                value = table[base]
                break
        else:
            return None
        value = _follow(value, dotted[len(base) :])
        return None if value is _MISSING else (value, kind)

    def scalar_values(self) -> set:
        """Every Python number a name (or one attribute/key below it) can give: literals equal to
        none of these cannot be baked globals, and need no closer look."""
        values = set()

        def add(value):
            number = _scalar(value, python_only=True)
            if number is not None:
                values.add(_rounded(number))

        for table in (self.closure, self.globals, self.namespace, self._module_globals):
            for name, value in list(table.items()):
                if name.startswith("_") or name in ("In", "Out", "exit", "quit", "get_ipython"):
                    continue  # IPython's history and caches are nobody's settings
                if isinstance(value, (bool, int, float, np.generic)):
                    add(value)
                elif isinstance(value, dict):
                    for item in list(value.values())[:1000]:
                        add(item)
                elif not isinstance(value, (type, types.ModuleType, types.FunctionType)):
                    for attributes in (_attribute(value, "__dict__"), _attribute(type(value), "__dict__")):
                        if isinstance(attributes, (dict, types.MappingProxyType)):
                            for item in list(attributes.values())[:1000]:
                                add(item)
        return values

    def by_identity(self) -> dict[int, tuple[str, str]]:
        out: dict[int, tuple[str, str]] = {}
        for table, kind in (
            (self.namespace, "global"),
            (self._module_globals, "global"),
            (self.globals, "global"),
            (self.closure, "closure"),
        ):
            for name, value in table.items():
                if (
                    not name.startswith("_")
                    and _attribute(value, "shape") is not None
                    and _attribute(value, "dtype") is not None
                ):
                    out[id(value)] = (name, kind)
        return out


_MISSING = object()


def _attribute(value, name: str):
    """``getattr(value, name, None)`` for any object of the user's: a property or ``__getattr__`` that
    raises something other than AttributeError means "no such attribute" here, not our failure."""
    try:
        return getattr(value, name, None)
    except Exception:
        return None


def _follow(value, accessors: str):
    """Apply ``.attr`` / ``['key']`` / ``[0]`` accessors without running user code."""
    for match in re.finditer(r"\.(\w+)|\[('([^']*)'|\"([^\"]*)\"|(-?\d+))\]", accessors):
        try:
            if match.group(1):
                value = inspect.getattr_static(value, match.group(1))
            elif match.group(5) is not None:
                value = value[int(match.group(5))] if isinstance(value, (list, tuple)) else _MISSING
            else:
                key = match.group(3) if match.group(3) is not None else match.group(4)
                value = value[key] if isinstance(value, dict) else _MISSING
        except (AttributeError, KeyError, IndexError, TypeError):
            return _MISSING
        if value is _MISSING:
            return value
    return value


def _unwrapped(fn):
    try:
        return inspect.unwrap(fn)
    except ValueError:
        return fn


def _baked_literals(walked: list, env: _NameEnvironment) -> list[BakedLiteral]:
    found: list[BakedLiteral] = []
    seen: set[tuple] = set()
    candidates = env.scalar_values()
    for eqn, _segments, _back, _subs, _parents in walked:
        literals = [v for v in eqn.invars if compat.is_literal(v) and _rounded(_scalar(v.val)) in candidates]
        if not literals:
            continue  # no global or closure value equals any literal here: nothing to look up
        line = _eqn_line(eqn, _parents)
        if line is None or not line.code:
            continue
        names, constants = _names_in_code(line.code)
        local = _local_names(line.filename, line.lineno)
        for literal in literals:
            value = _scalar(literal.val)
            if value is None or any(_equal(value, c) for c in constants):
                continue  # written in the code itself
            for dotted in names:
                if dotted.split(".")[0].split("[")[0] in local:
                    continue
                resolved = env.resolve(dotted)
                if resolved is None:
                    continue
                target, kind = resolved
                target_value = _scalar(target, python_only=True)
                if target_value is None or not _equal(value, target_value, literal):
                    continue
                key = (dotted, line.filename, line.lineno, str(literal))
                if key in seen:
                    break
                seen.add(key)
                found.append(
                    BakedLiteral(
                        name=dotted, kind=kind, value=_literal_text(literal), equation=_eqn_text(eqn), line=line
                    )
                )
                break
    return found


def _rounded(value):
    """A number as float32 would hold it (literals are usually f32): equal values compare equal."""
    if value is None or isinstance(value, bool):
        return value
    try:
        return float(np.float32(value))
    except (OverflowError, TypeError, ValueError):
        return value


def _literal_text(literal) -> str:
    """``2.0:f32[]``, as the jaxpr prints a literal (the value at its own precision: 0.9, not 0.8999...)."""
    aval = getattr(literal, "aval", None)
    value = _scalar(literal.val)
    try:
        shown = str(np.asarray(value, dtype=aval.dtype)[()]) if aval is not None else str(value)
    except (TypeError, ValueError):
        shown = str(value)
    return f"{shown}:{_aval_text(aval)}" if aval is not None else shown


def _scalar(value, python_only: bool = False):
    """A Python number for a scalar value, else None (arrays with more than one element are not literals)."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)  # also JAX's TypedInt/TypedFloat literals: plain Python numbers
    if isinstance(value, float):
        return float(value)
    if isinstance(value, np.generic):
        return value.item()
    if python_only:
        return None  # a global array is a captured constant, not a baked Python value
    try:
        array = np.asarray(value)
    except Exception:
        return None
    if array.shape == () and array.dtype.kind in "biuf":
        return array.item()
    return None


def _equal(a, b, literal=None) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    try:
        if literal is not None and hasattr(literal, "aval"):
            dtype = np.dtype(literal.aval.dtype)
            return bool(np.asarray(a, dtype=dtype) == np.asarray(b, dtype=dtype))
        return float(a) == float(b)
    except (TypeError, ValueError, OverflowError):
        return False


@lru_cache(maxsize=512)
def _names_in_code(code: str) -> tuple[tuple[str, ...], tuple]:
    """Dotted names (``SCALE``, ``cfg.scale``, ``CONFIG['lr']``) and numeric constants in one line."""
    tree = None
    for candidate in (code, code.rstrip(":") + ": pass", "(" + code + ")"):
        try:
            tree = ast.parse(candidate.strip())
            break
        except SyntaxError:
            continue
    if tree is None:
        return (), ()
    names, constants = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            constants.append(node.value)
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(
            getattr(node, "ctx", None), ast.Load
        ):
            text = _dotted(node)
            if text:
                names.append(text)
    # Longest first: cfg.scale before cfg.
    return tuple(sorted(dict.fromkeys(names), key=len, reverse=True)), tuple(constants)


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _dotted(node.value)
        return f"{base}[{node.slice.value!r}]" if base else None
    return None


@lru_cache(maxsize=256)
def _local_names(filename: str, lineno: int) -> frozenset[str]:
    """Parameters and assigned names of the function enclosing ``filename:lineno`` (not globals)."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return frozenset()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            end = getattr(node, "end_lineno", node.lineno)
            if node.lineno <= lineno <= end and (best is None or node.lineno >= best.lineno):
                best = node
    if best is None:
        return frozenset()
    names = set()
    args = best.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]:
        names.add(arg.arg)
    declared_global = set()
    body = best.body if isinstance(best.body, list) else [best.body]
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                declared_global.update(node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return frozenset(names - declared_global)


def captured_constants_of_call(
    jitted: Callable, args: tuple, kwargs: dict, *, fn: Callable, namespace: dict | None = None
) -> list[CapturedConstant]:
    """The arrays ``jitted(*args, **kwargs)`` holds as constants, named from ``fn``'s globals and closure.

    Only the trace and the constants, none of the rest of the report: for a probe that already ran
    ``jitted`` with these arguments, whose trace JAX then has in its cache. Raises what tracing raises.
    """
    closed = jitted.trace(*args, **kwargs).jaxpr
    return _captured_constants(closed, list(_walk_eqns(closed)), _NameEnvironment(fn, namespace))


def _captured_constants(closed, walked: list, env: _NameEnvironment) -> list[CapturedConstant]:
    """Arrays held as constants of the traced program (closed-over globals and closure values)."""
    identities = env.by_identity()
    found, seen = [], set()
    jaxprs = [closed] + [sub for _eqn, _segments, _back, subs, _parents in walked for sub in subs]
    for jaxpr in jaxprs:
        consts = list(getattr(jaxpr, "consts", None) or [])
        if not consts:
            continue
        inner = getattr(jaxpr, "jaxpr", jaxpr)
        constvars = list(getattr(inner, "constvars", []))
        for index, value in enumerate(consts):
            shape = tuple(getattr(value, "shape", ()) or ())
            if id(value) in seen or not hasattr(value, "dtype"):
                continue
            seen.add(id(value))
            name, kind = identities.get(id(value), ("", ""))
            nbytes = int(getattr(value, "nbytes", 0) or 0)
            if not name and nbytes < BAKED_CONSTANT_BYTES:
                continue  # a small array made inside the function: ordinary, not worth a line
            line = _first_use_line(inner, constvars[index]) if index < len(constvars) else None
            import numpy as np

            found.append(
                CapturedConstant(
                    name=name,
                    kind=kind,
                    shape=shape,
                    dtype=str(value.dtype),
                    nbytes=nbytes,
                    line=line,
                    numpy=isinstance(value, np.ndarray),
                )
            )
    found.sort(key=lambda c: -c.nbytes)
    return found


def _first_use_line(jaxpr, var) -> SourceLine | None:
    for eqn in jaxpr.eqns:
        if any(v is var for v in eqn.invars):
            return _eqn_line(eqn)
    return None


# -- memory and cost ----------------------------------------------------------


def _memory_figures(compiled) -> MemoryFigures | None:
    try:
        stats = compiled.memory_analysis()
    except Exception:
        return None
    if stats is None:
        return None

    def get(name: str) -> int:
        return int(getattr(stats, name, 0) or 0)

    return MemoryFigures(
        argument_bytes=get("argument_size_in_bytes"),
        output_bytes=get("output_size_in_bytes"),
        alias_bytes=get("alias_size_in_bytes"),
        temp_bytes=get("temp_size_in_bytes"),
        generated_code_bytes=get("generated_code_size_in_bytes"),
        peak_bytes=get("peak_memory_in_bytes"),
    )


def _cost(compiled) -> dict[str, float]:
    try:
        cost = compiled.cost_analysis()
    except Exception:
        return {}
    if isinstance(cost, (list, tuple)):  # older JAX: one dict per device program
        cost = cost[0] if cost else {}
    if not isinstance(cost, dict):
        return {}
    return {k: float(v) for k, v in cost.items() if k in ("flops", "transcendentals", "bytes accessed")}


def _sweep_point(sweep: Sweep, value) -> SweepPoint:

    point = SweepPoint(value=repr(value))
    try:
        fn, args, kwargs = sweep.build(value)
        jitted = fn if compat.is_jitted(fn) else jittable.jit(fn)
        compiled = jitted.lower(*args, **kwargs).compile()
    except Exception as error:
        point.failure = error_line(error)
        return point
    point.memory = _memory_figures(compiled)
    point.flops = _cost(compiled).get("flops")
    return point
