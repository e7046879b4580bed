"""``HloReport``: what ``%jax_hlo`` found for one call, its wording and its document."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._hlo.records import (
    STAGES,
    BakedLiteral,
    CapturedConstant,
    Kernel,
    MemoryFigures,
    ScopeNode,
    ScopeOp,
    SweepPoint,
)
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import provenance_blocks
from jaxmagic.report.wording import format_bytes

STAGE_TITLES = {"jaxpr": "jaxpr", "stablehlo": "StableHLO", "hlo": "optimized HLO"}
SHOWN_ROWS = 40  # rows per table in the rendered report; the report object keeps all


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
    cached: list[str] = dataclasses.field(default_factory=list)  # steps JAX served from its caches (no work timed)
    compile_from_disk: bool = False  # the compile step read the program from JAX's persistent compilation cache
    failure: str = ""  # "ValueError: ..." when a stage could not be built
    failure_stage: str = ""
    failure_line: SourceLine | None = None
    # every operation of every stage, ``inner`` its whole scope path ("" outside any scope); filled only when
    # asked (``every_scope=True``: %jax_hlo --explore), never drawn in the report
    scope_ops: list[ScopeOp] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        """As every report's; ``scope_ops`` (thousands of records under --explore) is copied from each record's
        attributes: the dicts ``dataclasses.asdict`` gives, without its deep copy of every value."""
        data = super(HloReport, dataclasses.replace(self, scope_ops=[])).to_dict()
        data["scope_ops"] = [_scope_op_dict(op) for op in self.scope_ops]
        return data

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

    def concerns(self) -> list[Concern]:
        if self.failure:
            return [failed(self.failure)]
        found = [act(f"`{literal.name}` baked in as {literal.value}") for literal in self.literals]
        found += [act(f"`{c.name}` captured as a constant") for c in self.named_constants]
        found += [
            act("a large constant, or one made while tracing")
            for c in self.constants
            if c.large or c.made_while_tracing
        ]
        if self.scope and not self.scope_found:
            found.append(act(f"scope {self.scope!r} not found"))
        return found

    @property
    def fix(self) -> str:
        """What to do about what the summary tells first (a baked-in value, an array made while tracing, a
        captured array, a scope not found); "" when it tells none of them."""
        if self.failure:
            return ""
        if self.literals:
            name = self.literals[0].name
            return (
                f"Pass `{name}` as an argument, so each call reads its value (or mark it static with "
                "`static_argnums` if it must stay a Python constant: a new value then compiles again)."
            )
        if any(c.made_while_tracing for c in self.constants):
            return (
                "Make the array with jax.numpy (jax.random with a key argument), so it is computed when the "
                "program runs, or pass it in as an argument."
            )
        if self.named_constants or any(c.large for c in self.constants):
            return "Pass large arrays as arguments instead of closing over them; `jax.clear_caches()` frees the ones already held."
        if self.scope and not self.scope_found:
            known = self.suggestions or self.scope_paths[:3]
            if known:
                others = f" (or {', '.join(f'`{s}`' for s in known[1:3])})" if len(known) > 1 else ""
                return f"Ask for a scope the program has: `%jax_hlo {known[0]} {self.call}`{others}."
            return "Name the part you want with `with jax.named_scope(name):` in your function, then ask for that name."
        return ""

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
            built = c.provenance.made_at if c.provenance is not None else None
            if built is not None:
                at = f", built at {_where(built)}{at}"
            elif c.line:
                at += " (the line that built it could not be told)"
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
            names = ", ".join(f"`{c.name}`{_made_where(c)}" for c in captured[:3] if c.name)
            names = names or "arrays made inside the function"
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
        good = [p.memory for p in self.sweep if p.memory]
        values = ", ".join(p.value for p in self.sweep)
        text = f"{self.function} compiled for {self.sweep_name} = {values}"
        if len(good) >= 2:
            first, last = good[0], good[-1]
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
            sections.append(self._sweep_section())
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
                        *_lines_block([lit.line for lit in self.literals]),
                        Paragraph(
                            "Tracing read these values once and wrote them into the program as literals. The jit "
                            "cache keeps that program, so assigning a new value later does not change the result "
                            "and does not recompile."
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
                        *_lines_block([c.line for c in self.constants]),
                        *[
                            block
                            for c in self.constants[:3]
                            if c.made_while_tracing and c.provenance is not None
                            for block in provenance_blocks(c.provenance, f"the {c.dtype}{list(c.shape)} array")
                        ],
                        *[  # a global's line: where the user assigned it (global_assignment), not where traced
                            block
                            for c in self.named_constants[:3]
                            if c.provenance is not None and (c.provenance.made_at is not None or c.earlier)
                            for block in provenance_blocks(c.provenance, f"`{c.name}`")
                        ],
                        *(
                            [
                                Paragraph(
                                    "Arrays made inside the function by NumPy (or from Python data) are computed once, "
                                    "when the function is traced, and written into the program: np.random draws the "
                                    "same numbers on every call, and the array travels with the compiled program."
                                )
                            ]
                            if any(c.made_while_tracing for c in self.constants)
                            else []
                        ),
                        Paragraph(
                            "These arrays are closed over, not passed in: they become constants of the program, "
                            "the jit cache holds them for as long as the jitted function lives (even after the "
                            "name is rebound), and a new value needs a new trace. Tracing the call here keeps them "
                            "in JAX's cache just as calling it would."
                        ),
                    ],
                )
            )
        if self.scope:
            sections += self._scope_sections()
        if self.tree or not self.scope:
            sections.append(self._tree_section())
        if self.memory or self.cost:
            sections.append(self._memory_section())
        facts = [("call", self.call), ("function", self.function), ("stages", ", ".join(self.stages))]
        if self.inputs:
            facts.append(("inputs", "; ".join(self.inputs[:8]) + (" ..." if len(self.inputs) > 8 else "")))
        if self.outputs:
            facts.append(("outputs", "; ".join(self.outputs[:8]) + (" ..." if len(self.outputs) > 8 else "")))
        for stage, seconds in self.seconds.items():
            if stage in self.cached:
                facts.append(
                    (
                        f"{stage} time",
                        f"cached ({_DONE_BEFORE[stage]} before in this process; the {seconds * 1e3:.1f} ms "
                        f"measured is the cache look-up, not a {stage} - `%jax_stages` times a fresh one)",
                    )
                )
            elif stage == "compile" and self.compile_from_disk:
                facts.append(
                    (
                        "compile time",
                        f"{seconds * 1e3:.1f} ms, reading the program from JAX's persistent compilation cache "
                        "(not compiled)",
                    )
                )
            else:
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
        return Document("%jax_hlo", self.status, self.summary, sections, fix=self.fix, nothing_to_do=self.unexplained())

    def _scope_sections(self):
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
        blocks += _lines_block([op.line for op in self.ops])
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

    def _tree_section(self):
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

    def _memory_section(self):
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

    def _sweep_section(self):
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


_DONE_BEFORE = {"trace": "traced", "lower": "lowered", "compile": "compiled"}
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


def _lines_block(lines: list) -> list:
    """A SourceLines block with each distinct line once (none when no line is known)."""
    distinct = list({(line.filename, line.lineno): line for line in lines if line is not None}.values())
    return [SourceLines(distinct[:8], "Your lines:")] if distinct else []


def _made_where(constant: CapturedConstant) -> str:
    if constant.earlier:
        return " - an earlier value of it, traced before it was assigned again"
    made = constant.provenance.made_at if constant.provenance is not None else None
    return f" made at {_where(made)}" if made is not None else ""


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

    before, after = first.memory, last.memory
    assert before is not None and after is not None  # good points have memory figures
    parts = [
        f"arguments {ratio(before.argument_bytes, after.argument_bytes)}",
        f"outputs {ratio(before.output_bytes, after.output_bytes)}",
        f"temporaries {ratio(before.temp_bytes, after.temp_bytes)}",
    ]
    scale = f" (\u00d7{factor:g})" if factor else ""
    return (
        f"From {name}={first.value} to {name}={last.value}{scale}: {', '.join(parts)}. Figures that grow "
        f"in proportion to {name} will keep doing so: extrapolate before you allocate."
    )


def _scope_op_dict(op: ScopeOp) -> dict:
    """``dataclasses.asdict(op)``: a ScopeOp's fields are plain values and one flat SourceLine
    (tests/test_explorers.py checks the two agree)."""
    data = dict(vars(op))
    if op.line is not None:
        data["line"] = dict(vars(op.line))
    return data
