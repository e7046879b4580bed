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
from jaxmagic.report import Concern, JsonDict, SourceLine, act, failed
from jaxmagic.report.document import Block, Document, Evidence, Facts, Paragraph, Section, SourceLines, Table
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

    def to_dict(self) -> JsonDict:
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
                f"{format_bytes(first.temp_bytes)} -> {format_bytes(last.temp_bytes)}, total {format_bytes(first.total_bytes)} "
                f"-> {format_bytes(last.total_bytes)}"
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

    def document(self) -> Document:
        sections: list[Section] = []
        if self.failure:
            sections.append(failure_section(self))
        if self.sweep:
            sections.append(sweep_section(self.sweep_name, self.sweep))
        if self.literals:
            sections.append(baked_in_section(self.literals))
        if self.constants:
            sections.append(captured_arrays_section(self.constants))
        if self.scope and self.scope_found:
            sections += [scope_section(self), *([kernels_section(self)] if self.kernels else [])]
            evidence = scope_evidence_section(self)
            if evidence is not None:
                sections.append(evidence)
        if self.tree or not self.scope:
            sections.append(named_scopes_section(self))
        if self.memory or self.cost:
            sections.append(memory_section(self))
        sections.append(program_section(self))
        return Document("%jax_hlo", self.status, self.summary, sections, fix=self.fix, nothing_to_do=self.unexplained())


def failure_section(report: HloReport) -> Section:
    """ "Failure": the stage that could not be built, and the user's line it failed at."""
    stage = STAGE_TITLES.get(report.failure_stage, report.failure_stage)
    blocks: list[Block] = [Paragraph(f"Building the {stage} failed: {report.failure}")]
    if report.failure_line:
        blocks.append(SourceLines([report.failure_line], "Your line:"))
    return Section("Failure", blocks)


def baked_in_section(literals: list[BakedLiteral]) -> Section:
    """ "Baked-in values": Python values tracing wrote into the program as literals."""
    rows = [[f"`{lit.name}`", lit.kind, f"`{lit.value}`", f"`{lit.equation}`", _where(lit.line)] for lit in literals]
    return Section(
        "Baked-in values",
        [
            Table(["name", "kind", "literal", "equation", "line"], rows),
            *_lines_block([lit.line for lit in literals]),
            Paragraph(
                "Tracing read these values once and wrote them into the program as literals. The jit "
                "cache keeps that program, so assigning a new value later does not change the result "
                "and does not recompile."
            ),
        ],
    )


MADE_WHILE_TRACING_NOTE = (
    "Arrays made inside the function by NumPy (or from Python data) are computed once, "
    "when the function is traced, and written into the program: np.random draws the "
    "same numbers on every call, and the array travels with the compiled program."
)
CLOSED_OVER_NOTE = (
    "These arrays are closed over, not passed in: they become constants of the program, "
    "the jit cache holds them for as long as the jitted function lives (even after the "
    "name is rebound), and a new value needs a new trace. Tracing the call here keeps them "
    "in JAX's cache just as calling it would."
)


def captured_arrays_section(constants: list[CapturedConstant]) -> Section:
    """ "Captured arrays": arrays closed over (or made while tracing) that became constants of the program,
    with where the first few were made."""
    rows = [
        [
            f"`{c.name}`" if c.name else "(made inside the function)",
            c.kind or "-",
            str(tuple(c.shape)),
            c.dtype,
            format_bytes(c.nbytes),
            _where(c.line),
        ]
        for c in constants
    ]
    blocks: list[Block] = [Table(["name", "kind", "shape", "dtype", "size", "used at"], rows)]
    blocks += _lines_block([c.line for c in constants])
    for c in constants[:3]:
        if c.made_while_tracing and c.provenance is not None:
            blocks += provenance_blocks(c.provenance, f"the {c.dtype}{list(c.shape)} array")
    for c in [c for c in constants if c.name][:3]:
        # a global's line: where the user assigned it (global_assignment), not where traced
        if c.provenance is not None and (c.provenance.made_at is not None or c.earlier):
            blocks += provenance_blocks(c.provenance, f"`{c.name}`")
    if any(c.made_while_tracing for c in constants):
        blocks.append(Paragraph(MADE_WHILE_TRACING_NOTE))
    blocks.append(Paragraph(CLOSED_OVER_NOTE))
    return Section("Captured arrays", blocks)


def scope_section(report: HloReport) -> Section:
    """ "Scope NAME": one row per operation of the queried scope, matched across the stages."""
    rows_by_key: dict[tuple[bool, str, str], dict[str, list[ScopeOp]]] = {}
    for op in report.ops:
        rows_by_key.setdefault(op.key, {}).setdefault(op.stage, []).append(op)
    any_backward = any(op.backward for op in report.ops)
    columns = ["operation"] + [STAGE_TITLES[s] for s in report.stages] + ["your line"]
    rows = []
    for (backward, inner, name), by_stage in list(rows_by_key.items())[:SHOWN_ROWS]:
        label = f"{inner}/{name}" if inner else name
        if any_backward:
            label += " (backward)" if backward else " (forward)"
        line = next((op.line for s in STAGES for op in by_stage.get(s, []) if op.line), None)
        rows.append(
            [f"`{label}`", *[_stage_cell(stage, by_stage.get(stage, [])) for stage in report.stages], _where(line)]
        )
    blocks: list[Block] = [Table(columns, rows)]
    if len(rows_by_key) > SHOWN_ROWS:
        more = len(rows_by_key) - SHOWN_ROWS
        blocks.append(Paragraph(f"... and {more} more operations (all of them are in the report's `.ops`)."))
    if any(op.kernel and not op.kernel_in_scope for op in report.ops):
        blocks.append(Paragraph("* runs inside a kernel that XLA labels with another name: see Kernels."))
    blocks += _lines_block([op.line for op in report.ops])
    blocks.append(
        Paragraph(
            "One row per operation of the scope, matched across stages by its name path (the jaxpr's "
            "`source_info.name_stack`, the StableHLO location - `as_text(debug_info=True)` prints it - and the "
            "HLO `metadata={op_name=...}`). XLA may drop, merge or duplicate operations while optimizing, so "
            "a row can be empty in one stage."
        )
    )
    return Section(f"Scope {report.scope}", blocks)


def kernels_section(report: HloReport) -> Section:
    """ "Kernels (optimized HLO)": the kernels running the scope's operations, and whether their label
    (the op_name a profiler shows) is the scope's."""
    rows = [
        [
            f"%{k.name}",
            k.fusion_kind or k.opcode,
            f"`{k.label}`",
            "yes" if k.in_scope else "no",
            str(k.scope_ops),
            str(k.other_ops),
        ]
        for k in report.kernels[:SHOWN_ROWS]
    ]
    columns = ["kernel", "kind", "label (op_name)", "label in scope", "ops of the scope", "other ops"]
    away = report.fused_away
    if away:
        said = (
            f"XLA fused operations of `{report.scope}` into kernels whose label belongs to other code "
            f"({', '.join('%' + k.name for k in away[:4])}). A fusion keeps one op_name - usually its "
            "root's - so a profiler trace shows this work under that label, not under "
            f"`{report.scope}`. The instructions inside the fusion keep their own op_name, which is "
            "how they were found here."
        )
    else:
        said = (
            f"Every kernel running `{report.scope}` is labelled with it: a profiler "
            "trace shows its time under this scope."
        )
    return Section("Kernels (optimized HLO)", [Table(columns, rows), Paragraph(said)])


def scope_evidence_section(report: HloReport) -> Section | None:
    """The untitled section of raw text: the scope's jaxpr equations and optimized HLO instructions."""
    hlo_lines = [op.text for op in report.ops_in("hlo") if op.text]
    eqns = [op.text for op in report.ops_in("jaxpr") if op.text]
    evidence: list[Block] = []
    if eqns:
        evidence.append(Evidence(f"jaxpr equations ({len(eqns)})", "\n".join(eqns[:200])))
    if hlo_lines:
        evidence.append(Evidence(f"optimized HLO instructions ({len(hlo_lines)})", "\n".join(hlo_lines[:200])))
    return Section("", evidence) if evidence else None


def named_scopes_section(report: HloReport) -> Section:
    """ "Named scopes": the program's scope tree with its operations counted per stage."""
    with_kernels = "hlo" in report.stages
    columns = ["scope"] + [STAGE_TITLES[s] for s in report.stages] + (["kernels labelled"] if with_kernels else [])
    rows = []
    for node in report.tree[: SHOWN_ROWS * 2]:
        depth = node.path.count("/")
        name = node.path.rsplit("/", 1)[-1]
        cells = [("\u00a0\u00a0" * depth) + f"`{name}`"] + [str(node.counts.get(s, 0)) for s in report.stages]
        rows.append(cells + ([str(node.counts.get("kernels", 0))] if with_kernels else []))
    if report.unscoped:
        cells = ["(outside any scope)"] + [str(report.unscoped.get(s, 0)) for s in report.stages]
        rows.append(cells + ([str(report.unscoped.get("kernels", 0))] if with_kernels else []))
    blocks: list[Block] = [Table(columns, rows)] if rows and report.tree else []
    if not report.tree:
        blocks.append(
            Paragraph(
                "The program has no named scopes. Wrap parts of your function in "
                '`with jax.named_scope("name"):` to find them in every stage.'
            )
        )
    else:
        blocks.append(
            Paragraph(
                "Counts include nested scopes. Ask for one with `%jax_hlo SCOPE EXPR` (a nested one as `outer/inner`)."
            )
        )
    return Section("Named scopes", blocks)


def memory_section(report: HloReport) -> Section:
    """ "Memory and cost": the compiled program's memory_analysis() and cost_analysis() figures."""
    pairs = []
    if report.memory:
        m = report.memory
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
    pairs += [(label, _number(report.cost[key])) for key, label in names if key in report.cost]
    swept = (
        f" The sweep above compiled the call once per value of {report.sweep_name}; these "
        f"figures are for {report.sweep_name}={report.sweep[0].value}."
        if report.sweep
        else ""
    )
    said = (
        "From `Compiled.memory_analysis()` and `cost_analysis()`: figures of the compiled program, known before "
        "anything runs. Temporaries are XLA's scratch buffers; total = arguments + outputs + temporaries - "
        "aliased." + swept
    )
    return Section("Memory and cost", [Facts(pairs), Paragraph(said)])


def sweep_section(name: str, sweep: list[SweepPoint]) -> Section:
    """ "Sweep over NAME": the compiled program's memory and flops for each value of the swept argument."""
    rows = []
    for point in sweep:
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
    blocks: list[Block] = [
        Table([name, "arguments", "outputs", "temporaries", "generated code", "total", "flops"], rows)
    ]
    growth = _sweep_growth(name, sweep)
    if growth:
        blocks.append(Paragraph(growth))
    return Section(f"Sweep over {name}", blocks)


def program_section(report: HloReport) -> Section:
    """ "Program": the call, its inputs and outputs, and how long each stage took (or that it was cached)."""
    facts = [("call", report.call), ("function", report.function), ("stages", ", ".join(report.stages))]
    if report.inputs:
        facts.append(("inputs", "; ".join(report.inputs[:8]) + (" ..." if len(report.inputs) > 8 else "")))
    if report.outputs:
        facts.append(("outputs", "; ".join(report.outputs[:8]) + (" ..." if len(report.outputs) > 8 else "")))
    for stage, seconds in report.seconds.items():
        if stage in report.cached:
            took = (
                f"cached ({_DONE_BEFORE[stage]} before in this process; the {seconds * 1e3:.1f} ms "
                f"measured is the cache look-up, not a {stage} - `%jax_stages` times a fresh one)"
            )
        elif stage == "compile" and report.compile_from_disk:
            took = f"{seconds * 1e3:.1f} ms, reading the program from JAX's persistent compilation cache (not compiled)"
        else:
            took = f"{seconds * 1e3:.1f} ms"
        facts.append((f"{stage} time", took))
    how = (
        "Built ahead of time, never run: `jax.jit(f).trace(*args)` (jax.stages.Traced: .jaxpr, .out_info) -> "
        "`.lower()` (Lowered: .as_text(debug_info=True)) -> `.compile()` (Compiled: .as_text(), "
        ".memory_analysis(), .cost_analysis())."
    )
    return Section("Program", [Facts(facts), Paragraph(how)])


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


def _lines_block(lines: list[SourceLine | None]) -> list[Block]:
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


def _scope_op_dict(op: ScopeOp) -> JsonDict:
    """``dataclasses.asdict(op)``: a ScopeOp's fields are plain values and one flat SourceLine
    (tests/test_explorers.py checks the two agree)."""
    data = dict(vars(op))
    if op.line is not None:
        data["line"] = dict(vars(op.line))
    return data
