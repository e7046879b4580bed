"""Building the profile report from a trace: kernel time summed per line, named_scope, kernel and program.

The trace's kernel events are matched with the programs' HLO text (``jaxmagic._jax.jit_programs``,
``probes._profile.kernel_sources``), which says which named_scope and which line of the user's each
instruction came from; jaxlib's host events and the compile probe's figures split the wall time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from jaxmagic._jax.jit_programs import CompiledProgram
from jaxmagic.probes._profile.events import OpOrigin, TraceEvent, TraceReading
from jaxmagic.probes._profile.kernel_sources import (
    KernelSource,
    ProgramSources,
    program_sources,
    short_text,
    source_from_trace,
)
from jaxmagic.probes._profile.report import (
    NO_SCOPE,
    TOP_KERNELS,
    KernelTime,
    LineTime,
    OtherThreadWork,
    ProfileReport,
    ProgramTime,
    ScopeTime,
    WallTime,
)
from jaxmagic.probes._profile.trace_events import (
    DISPATCH_PREFIX,
    TRANSFER_NAMES,
    other_threads,
    outermost,
    overlap_ns,
    self_times,
    union_ns,
)
from jaxmagic.usercode.source import source_line

if TYPE_CHECKING:
    from jaxmagic.probes._compiles.report import CompileReport

    class _ProgramRuns(TypedDict):
        """One program's kernel runs (``_per_program``)."""

        ops: dict[str, list[Any]]  # op -> [self ns, runs, its OpOrigin or None]: changed in place
        runs: set[str]  # its run ids
        ns: float


def build_report(
    events: list[TraceEvent] | TraceReading,
    programs: Sequence[CompiledProgram] = (),
    *,
    wall_seconds: float | None = None,
    compile_report: CompileReport | None = None,
    warmup_runs: int = 0,
) -> ProfileReport:
    """The report of one traced block: ``events`` (or a whole ``TraceReading``, with its devices and notes)
    from ``trace_events``, the programs' HLO, the compile report."""
    report = ProfileReport(warmup_runs=warmup_runs)
    if isinstance(events, TraceReading):
        report.devices, report.trace_notes = list(events.devices), list(events.notes)
        events = events.events
    events, others = other_threads(events)  # what other threads did is theirs, not the block's
    if others is not None and (others.calls or others.kernel_ns or others.transfers or others.shared):
        report.other_threads = OtherThreadWork(
            others.functions, others.calls, others.kernel_ns / 1e9, others.transfers, others.shared
        )
    kernels = [e for e in events if e.op]  # is_kernel, without a property call per event
    dispatches = outermost([e for e in events if e.name.startswith(DISPATCH_PREFIX)])
    report.kernel_events = len(kernels)
    report.events_supported = bool(kernels) or not dispatches

    sources = _sources_by_module(programs)
    own = self_times(kernels)
    per_program = _per_program(kernels, own)
    total_ns = sum(own) or 0.0
    report.device_seconds = total_ns / 1e9
    report.trace_notes.extend(_runs_counted_by_ops(per_program))

    lines: dict[tuple[str, int, str], dict[str, Any]] = {}  # (file, line, function) -> its figures
    scopes: dict[str, list[float]] = {}  # path -> [inclusive ns, self ns]
    kernel_rows: list[KernelTime] = []
    program_rows: dict[tuple[str, int | str], ProgramTime] = {}
    for (module, program_id), group in per_program.items():
        found = _choose(sources.get(module, []), group["ops"])
        program, described = found if found else (None, None)
        key = (module, id(program) if program else module)
        row = program_rows.get(key)
        if row is None:
            row = program_rows[key] = _program_row(module, program, described is not None)
        calls = _run_count(group)
        row.calls += calls
        row.device_seconds += group["ns"] / 1e9
        for op_name, (ns, runs, origin) in group["ops"].items():
            source = described.kernels.get(op_name) if described else None
            if source is None and origin is not None:  # the trace itself places the op (a TPU's saved trace)
                source = source_from_trace(op_name, origin)
            kernel_rows.append(_kernel_row(op_name, module, ns, runs, total_ns, source, origin))
            known = described is not None or source is not None
            _attribute(lines, scopes, ns, runs, op_name, module, row, source, ((module, program_id), calls), known)
    report.kernel_count = len(kernel_rows)
    kernel_rows.sort(key=lambda k: -k.seconds)
    report.kernels = kernel_rows[:TOP_KERNELS]
    report.programs = sorted(program_rows.values(), key=lambda p: -p.device_seconds)
    seen = {(p.module, p.function) for p in report.programs}
    for program in programs:  # captured but no kernel of it ran (or none was traced)
        if (program.module, program.function) not in seen and not program.problem:
            report.programs.append(_program_row(program.module, program, True))
        elif program.problem:
            report.programs.append(_program_row(program.module or f"jit_{program.function}", program, False))
    report.lines = _line_rows(lines, total_ns)
    report.scopes = _scope_rows(scopes, total_ns)
    report.time = _wall_time(events, kernels, dispatches, wall_seconds, compile_report)
    return report


def _per_program(kernels: list[TraceEvent], own: list[float]) -> dict[tuple[str, str], _ProgramRuns]:
    """The kernel runs grouped by program (module + program_id): per op its time, runs and what the trace
    says of it; the program's run ids; its time."""
    per_program: dict[tuple[str, str], _ProgramRuns] = {}
    for event, self_ns in zip(kernels, own):
        group = per_program.get((event.module, event.program_id))
        if group is None:
            group = per_program[(event.module, event.program_id)] = {"ops": {}, "runs": set(), "ns": 0.0}
        op = group["ops"].get(event.op)
        if op is None:
            op = group["ops"][event.op] = [0.0, 0, event.origin]
        op[0] += self_ns
        op[1] += 1
        group["runs"].add(event.run_id)
        group["ns"] += self_ns
    return per_program


def _run_count(group: _ProgramRuns) -> int:
    """A program's runs: its distinct run ids; without any (a GPU's kernels carry none), the runs of its
    least-run op - every run runs each op of the program's entry at least once."""
    named = group["runs"] - {""}
    if named:
        return len(named)
    return min(runs for _ns, runs, _origin in group["ops"].values())


def _runs_counted_by_ops(per_program: dict[tuple[str, str], _ProgramRuns]) -> list[str]:
    named = sorted({f"`{module}`" for (module, _id), group in per_program.items() if module and group["runs"] <= {""}})
    if not named:
        return []
    return [
        f"The trace gives no run id for {', '.join(named[:4])}: its runs are counted as those of its least-run "
        "kernel (a kernel in a loop or a branch runs more or fewer times than the program)."
    ]


def _sources_by_module(programs: Sequence[CompiledProgram]) -> dict[str, list[tuple[CompiledProgram, ProgramSources]]]:
    found: dict[str, list[tuple[CompiledProgram, ProgramSources]]] = {}
    for program in programs:
        if not program.hlo_text:
            continue
        try:
            described = program_sources(program.hlo_text)
        except Exception:
            continue
        found.setdefault(described.module or program.module, []).append((program, described))
    return found


def _choose(
    candidates: list[tuple[CompiledProgram, ProgramSources]], ops: dict[str, list[Any]]
) -> tuple[CompiledProgram, ProgramSources] | None:
    """The captured program whose instructions include every kernel that ran (the first such), or None."""
    names = set(ops)
    for program, described in candidates:
        if names <= described.instruction_names:
            return program, described
    return None


def _program_row(module: str, program: CompiledProgram | None, identified: bool) -> ProgramTime:
    if program is None:
        function = module[4:] if module.startswith("jit_") else module
        return ProgramTime(function=function, module=module, calls=0, device_seconds=0.0, identified=False)
    site = ""
    if program.call_site:
        line = source_line(*program.call_site)
        site = f"{line.label or os.path.basename(line.filename)}:{line.lineno}"
    return ProgramTime(
        function=program.function,
        module=module,
        calls=0,
        device_seconds=0.0,
        identified=identified,
        memory=dict(program.memory),
        call_site=site,
        problem=program.problem,
    )


def _kernel_row(
    name: str, module: str, ns: float, runs: int, total_ns: float, source: KernelSource | None, origin: OpOrigin | None
) -> KernelTime:
    row = KernelTime(name=name, program=module, seconds=ns / 1e9, runs=runs, share=ns / total_ns if total_ns else 0.0)
    if source is not None:
        row.opcode, row.op_types, row.hlo = source.opcode, list(source.op_types), source.text
        owners = sorted(source.owners, key=lambda o: -o.weight)  # the larger share first
        row.scopes = list(dict.fromkeys(o.scope or NO_SCOPE for o in owners))
        row.lines = list(dict.fromkeys(_short_where(o.file, o.line) for o in owners if o.line))
    elif origin is not None:  # a device trace names the op's instruction even where nothing places it
        row.opcode = origin.category
        row.hlo = short_text(origin.instruction)
    return row


_LABELS: dict[str, str] = {}


def _short_where(filename: str, lineno: int) -> str:
    label = _LABELS.get(filename)
    if label is None:
        label = _LABELS[filename] = source_line(filename, lineno, "").label or os.path.basename(filename)
    return f"{label}:{lineno}"


def _attribute(
    lines: dict[tuple[str, int, str], dict[str, Any]],
    scopes: dict[str, list[float]],
    ns: float,
    runs: int,
    op_name: str,
    module: str,
    program_row: ProgramTime,
    source: KernelSource | None,
    program_calls: tuple[tuple[str, str], int],
    known: bool,
) -> None:
    if source is None or not source.owners:
        if known:  # XLA's own instructions (a copy, a layout change) carry no metadata
            what = f"`{module}`: ops XLA added (copies, layouts), no line in their metadata"
        elif program_row.identified or program_row.calls:
            what = f"`{module}` (its HLO was not seen)"
        else:
            what = f"`{module}`: an eager operation or a program run by library code"
        entry = lines.setdefault(("", 0, module), {"ns": 0.0, "runs": 0, "kernels": 0, "shared": 0, "scopes": {}})
        entry["ns"] += ns
        entry["runs"] += runs
        entry["kernels"] += 1
        entry["what"] = what
        entry.setdefault("calls", {})[program_calls[0]] = program_calls[1]
        _add_scope(scopes, NO_SCOPE, ns)
        return
    distinct_lines = {(o.file, o.line) for o in source.owners}
    for owner in source.owners:
        share = ns * owner.weight
        key = (owner.file, owner.line, owner.function) if owner.line else ("", 0, f"{module}:{op_name}")
        entry = lines.setdefault(key, {"ns": 0.0, "runs": 0, "kernels": 0, "shared": 0, "scopes": {}})
        entry["ns"] += share
        entry["runs"] += runs
        entry["kernels"] += 1
        entry["shared"] += len(distinct_lines) > 1
        entry["scopes"][owner.scope or NO_SCOPE] = None
        entry.setdefault("calls", {})[program_calls[0]] = program_calls[1]
        if not owner.line:
            entry["what"] = f"`{op_name}` in `{module}` (no source line in its HLO)"
        _add_scope(scopes, owner.scope or NO_SCOPE, share)


def _add_scope(scopes: dict[str, list[float]], path: str, ns: float) -> None:
    entry = scopes.setdefault(path, [0.0, 0.0])
    entry[1] += ns
    if path == NO_SCOPE:
        entry[0] += ns
        return
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        scopes.setdefault("/".join(parts[:depth]), [0.0, 0.0])[0] += ns


def _line_rows(lines: dict[tuple[str, int, str], dict[str, Any]], total_ns: float) -> list[LineTime]:
    rows = []
    for (filename, lineno, function), entry in lines.items():
        line = source_line(filename, lineno, function) if lineno else None
        rows.append(
            LineTime(
                line=line,
                seconds=entry["ns"] / 1e9,
                share=entry["ns"] / total_ns if total_ns else 0.0,
                kernel_runs=entry["runs"],
                calls=sum(entry.get("calls", {}).values()),
                kernels=entry["kernels"],
                shared_kernels=entry["shared"],
                scopes=list(entry["scopes"]),
                what=entry.get("what", ""),
            )
        )
    rows.sort(key=lambda r: -r.seconds)
    return rows


def _scope_rows(scopes: dict[str, list[float]], total_ns: float) -> list[ScopeTime]:
    rows = [
        ScopeTime(path, inclusive / 1e9, own / 1e9, inclusive / total_ns if total_ns else 0.0)
        for path, (inclusive, own) in scopes.items()
    ]
    # a tree: siblings by time, children right after their parent; outside any scope last
    by_path = {r.path: r for r in rows}

    def sort_key(row: ScopeTime) -> tuple[tuple[float, str], ...]:
        if row.path == NO_SCOPE:
            return ((float("inf"), row.path),)
        parts = row.path.split("/")
        return tuple((-by_path["/".join(parts[: d + 1])].seconds, parts[d]) for d in range(len(parts)))

    rows.sort(key=sort_key)
    return rows


def _wall_time(
    events: list[TraceEvent],
    kernels: list[TraceEvent],
    dispatches: list[TraceEvent],
    wall_seconds: float | None,
    compile_report: CompileReport | None,
) -> WallTime:
    t = WallTime()
    kernel_spans = [(k.start_ns, k.end_ns) for k in kernels]
    dispatch_spans = [(d.start_ns, d.end_ns) for d in dispatches]
    if wall_seconds is None:
        spans = kernel_spans + dispatch_spans
        wall_seconds = (max(e for _s, e in spans) - min(s for s, _e in spans)) / 1e9 if spans else 0.0
    t.wall = wall_seconds
    t.calls = len(dispatches)
    t.transfers = sum(1 for e in events if e.name in TRANSFER_NAMES)
    if compile_report is not None:
        t.compile = sum(f.trace_seconds + f.lower_seconds + f.compile_seconds for f in compile_report.functions)
        t.compilations = compile_report.total_compilations or sum(f.count for f in compile_report.functions)
        t.user_compilations = sum(f.count for f in compile_report.user_functions)
        t.recompiled = [f"{f.name} ({f.count}x: {f.reason})" for f in compile_report.recompiled_functions]
    t.compile = min(t.compile, t.wall)
    kernel_busy_ns = union_ns(kernel_spans)
    t.device_busy = kernel_busy_ns / 1e9
    inline_ns = 0.0
    threads = {d.thread for d in dispatches}
    for thread in threads:
        inline_ns += overlap_ns(
            [(k.start_ns, k.end_ns) for k in kernels if k.thread == thread],
            [(d.start_ns, d.end_ns) for d in dispatches if d.thread == thread],
        )
    dispatch_total = sum(d.duration_ns for d in dispatches) / 1e9
    t.device_inline = min(inline_ns / 1e9, max(t.wall - t.compile, 0.0))
    compile_inside = min(t.compile, max(dispatch_total - t.device_inline, 0.0))
    t.dispatch = max(min(dispatch_total - t.device_inline - compile_inside, t.wall - t.compile - t.device_inline), 0.0)
    rest = max(t.wall - t.compile - t.dispatch - t.device_inline, 0.0)
    busy_outside = max(kernel_busy_ns - overlap_ns(kernel_spans, dispatch_spans), 0.0) / 1e9
    t.waiting = min(rest, busy_outside)
    t.python = rest - t.waiting
    return t
