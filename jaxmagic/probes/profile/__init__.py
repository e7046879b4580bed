"""Profile probe: where the run time of a block goes - by the user's source line, named_scope and kernel.

Usage without IPython::

    with jaxmagic.probes.profile() as report:
        for _ in range(10):
            loss = train_step(params, x).block_until_ready()
    report.lines[0].line.code, report.lines[0].share      # the line whose kernels took the most device time
    report.scope("encoder").seconds, report.bound          # "device", "host", "compile" or "idle"

The chapter's section 5.5, step 4 ("which operation does the run time go
to?"), without TensorBoard: the block runs under ``jax.profiler.trace`` (kept in
memory; ``save=DIR`` also writes it for Perfetto/xprof). The trace has one
event per executed kernel, named after its optimized-HLO instruction; the
programs' HLO text (see ``jaxmagic._jax.jit_programs``) says which named_scope
and which line of the user's each instruction came from, so kernel time is
summed per line and per scope. jaxlib's host events (``PjitFunction(f)`` around
each call) and the compile probe's figures split the block's wall time into
compilation, host dispatch, device execution and waiting.

Python's own function calls are not traced (``python_tracer_level=0``): they
would slow the Python code under measurement several-fold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from jaxmagic._jax import compat
from jaxmagic._jax.exclusive import AlreadyActive
from jaxmagic._jax.jit_programs import CompiledProgram, ProgramCapture
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.kernel_sources import KernelSource, ProgramSources, program_sources
from jaxmagic.probes._support.trace_events import (
    DISPATCH_PREFIX,
    TRANSFER_NAMES,
    TraceEvent,
    events_from_profile_data,
    outermost,
    overlap_ns,
    self_times,
    union_ns,
)
from jaxmagic.report import Report, SourceLine, Status
from jaxmagic.report.source import source_line
from jaxmagic.report.wording import ended, error_line, format_bytes

TOP_KERNELS = 12
TOP_LINES = 20
NO_SCOPE = "(no named_scope)"

SHARED_NOTE = (
    "A kernel that fuses operations of several lines is split between them, in proportion to a rough count "
    "of each line's operations in it (a matmul's multiply-adds, other operations' output elements); the last "
    "column counts such kernels."
)
HOST_NOTE = (
    "Host dispatch is jaxlib's time inside each call of a jitted function (argument checks, launching; "
    "compilation taken out). Waiting is time outside any call while the device was busy - normally "
    "block_until_ready or reading a result; Python of yours running alongside the device counts there too. "
    "The rest is your Python and other host work."
)


PROFILER_BUSY = (
    "cannot run while a jax.profiler trace is already running (traces do not nest): stop it with "
    "jax.profiler.stop_trace(), or leave its `with jax.profiler.trace(...)` block, then run again"
)


class ProfilerBusy(AlreadyActive):
    """A jax.profiler trace is already running; traces do not nest."""

    def __init__(self):
        super().__init__(PROFILER_BUSY)


def trace_running() -> bool:
    """True while a jax.profiler trace is running (a profile cannot start then)."""
    return compat.profiler_session_active()


@dataclasses.dataclass
class LineTime:
    """Device time of the kernels made by one line of the user's code."""

    line: SourceLine | None  # None: kernels with no known line (see ``what``)
    seconds: float
    share: float  # of all device time, 0..1
    kernel_runs: int  # kernel executions that served this line
    kernels: int  # distinct kernels
    calls: int = 0  # executions of the programs this line is in (a loop's calls count each)
    shared_kernels: int = 0  # of its kernels, those that also serve other lines (their time is split)
    scopes: list[str] = dataclasses.field(default_factory=list)
    what: str = ""  # for line None: "eager operation `multiply`", ...

    @property
    def where(self) -> str:
        if self.line is None:
            return self.what
        return f"{self.line.label or os.path.basename(self.line.filename)}:{self.line.lineno}"


@dataclasses.dataclass
class ScopeTime:
    path: str  # "encoder/attn"; NO_SCOPE for operations outside any named_scope
    seconds: float  # this scope and the scopes inside it
    self_seconds: float
    share: float

    @property
    def depth(self) -> int:
        return 0 if self.path == NO_SCOPE else self.path.count("/")


@dataclasses.dataclass
class KernelTime:
    name: str  # the HLO instruction, e.g. "ynn_fusion.1"
    program: str  # "jit_mlp"
    seconds: float
    runs: int
    share: float
    opcode: str = ""
    op_types: list[str] = dataclasses.field(default_factory=list)
    scopes: list[str] = dataclasses.field(default_factory=list)
    lines: list[str] = dataclasses.field(default_factory=list)  # "In [3]:4"
    hlo: str = ""  # the instruction's HLO line


@dataclasses.dataclass
class ProgramTime:
    function: str  # "mlp" (or the module name when not identified)
    module: str  # "jit_mlp"
    calls: int
    device_seconds: float
    identified: bool  # its HLO text was had, so its kernels have lines and scopes
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    call_site: str = ""
    problem: str = ""


@dataclasses.dataclass
class WallTime:
    """The block's wall time, split. Seconds; the parts sum to ``wall``."""

    wall: float = 0.0
    compile: float = 0.0  # trace + lower + XLA compile (the compile probe's figures)
    dispatch: float = 0.0
    device_inline: float = 0.0  # device work run inside a call (small programs on CPU run synchronously)
    waiting: float = 0.0
    python: float = 0.0
    device_busy: float = 0.0  # time at least one kernel ran (inside or outside calls)
    compilations: int = 0
    user_compilations: int = 0
    recompiled: list[str] = dataclasses.field(default_factory=list)  # "step (3x: static argument value changed)"
    calls: int = 0  # outermost dispatches
    transfers: int = 0  # DevicePut spans

    @property
    def device(self) -> float:
        return self.device_inline + self.waiting

    @property
    def host(self) -> float:
        return self.dispatch + self.python


@dataclasses.dataclass
class ProfileReport(Report):
    """What ``%%jax_profile`` found: device time by line, scope and kernel; the block's wall time split."""

    kind = "jax_profile"

    lines: list[LineTime] = dataclasses.field(default_factory=list)
    scopes: list[ScopeTime] = dataclasses.field(default_factory=list)
    kernels: list[KernelTime] = dataclasses.field(default_factory=list)
    programs: list[ProgramTime] = dataclasses.field(default_factory=list)
    time: WallTime = dataclasses.field(default_factory=WallTime)
    device_seconds: float = 0.0  # sum of kernel (self) times
    kernel_events: int = 0
    kernel_count: int = 0  # distinct kernels
    events_supported: bool = True  # False: the trace had dispatches but no kernel events (this JAX emits none)
    warmup_runs: int = 0
    saved_to: str = ""
    saved_files: list[str] = dataclasses.field(default_factory=list)
    capture_note: str = ""  # why programs could not be identified, when they could not
    other_error: str = ""  # the block failed: "ValueError: ..."
    failed_in_warmup: int = 0  # the warm-up run (1-based) that failed; the profile did not run

    @classmethod
    def warmup_failed(cls, run: int, runs: int, error: BaseException) -> ProfileReport:
        """The report when warm-up run ``run`` of ``runs`` raised ``error``: nothing was profiled."""
        return cls(warmup_runs=runs, failed_in_warmup=run, other_error=error_line(error))

    # -- queries -------------------------------------------------------------

    def line(self, code: str) -> LineTime | None:
        """The first (most costly) line whose code contains ``code``."""
        return next((t for t in self.lines if t.line is not None and code in t.line.code), None)

    def scope(self, path: str) -> ScopeTime | None:
        return next((s for s in self.scopes if s.path == path), None)

    def program(self, function: str) -> ProgramTime | None:
        """The program of ``function`` ("mlp" or "jit_mlp") that took the most device time."""
        found = [p for p in self.programs if function in (p.function, p.module)]
        return max(found, key=lambda p: p.device_seconds) if found else None

    @property
    def bound(self) -> str:
        """What the wall time went to most: "device", "host" (dispatch and Python), "compile"; "idle" if nothing ran."""
        t = self.time
        if not t.wall:
            return "idle"
        parts = {"compile": t.compile, "host": t.host, "device": t.device}
        return max(parts, key=parts.get)

    @property
    def host_only(self) -> bool:
        """True when no kernel ran: all the time was host-side."""
        return self.kernel_events == 0 and self.events_supported

    # -- Report ----------------------------------------------------------------

    @property
    def status(self) -> Status:
        return Status.ERROR if self.other_error else Status.OK

    @property
    def summary(self) -> str:
        if self.failed_in_warmup:
            return f"Warm-up run {self.failed_in_warmup} failed with {self.other_error}; nothing was profiled."
        text = self._findings()
        if self.other_error:
            text = f"The cell failed with {ended(self.other_error)} Until then: {text[0].lower()}{text[1:]}"
        return text

    def _findings(self) -> str:
        t = self.time
        wall = _ms(t.wall)
        if not self.events_supported:
            return (
                f"{wall}: this JAX's profiler emitted no kernel events, so device time cannot be split by "
                f"line or scope; {_pct(t.compile, t.wall)} compilation, {_pct(t.dispatch, t.wall)} host dispatch."
            )
        if self.host_only:
            compiled = f", {_pct(t.compile, t.wall)} of it compiling" if t.compile else ""
            return f"No JAX computation ran on the device: the time was all host-side ({wall}{compiled})."
        split = (
            f"{wall}: device {_pct(t.device, t.wall)}, host dispatch and Python {_pct(t.host, t.wall)}, "
            f"compilation {_pct(t.compile, t.wall)}"
        )
        bound = {"device": "compute-bound", "host": "host-bound (dispatch / Python)", "compile": "compile-bound"}
        text = f"{split} - {bound[self.bound]}."
        top = next((t for t in self.lines if t.line is not None), None)
        if top is not None:
            text += f" Most device time: `{_code(top.line)}` ({top.where}, {_pct(top.share, 1)})"
            scope = next((s for s in self.scopes if s.depth == 0), None)
            text += f", scope `{scope.path}`." if scope is not None and scope.path != NO_SCOPE else "."
        elif self.lines:
            text += f" Most device time: {self.lines[0].what} ({_pct(self.lines[0].share, 1)})."
        return text

    @property
    def next_steps(self) -> list[str]:
        """What to look at next, in the chapter's order (section 5.5)."""
        t, steps = self.time, []
        if t.recompiled:
            steps.append(
                f"Recompilation: {', '.join(t.recompiled[:3])}. %%jax_compiles names what changed between "
                "the calls; fix that first (chapter 5.1-5.4)."
            )
        elif self.bound == "compile":
            steps.append(
                "Compilation dominates, but nothing compiled twice: that is the first call's price. Profile "
                "the steady state with --warmup 1; %jax_stages f(x) splits trace / lower / compile."
            )
        if t.transfers:
            steps.append(
                f"{t.transfers} host-to-device copies (DevicePut) in the trace: %%jax_transfers names the "
                "lines that pass NumPy arrays or Python scalars to JAX on every call."
            )
        if self.bound == "host" and not self.host_only:
            steps.append(
                "The device is idle most of the time: the program is a stream of small calls. Put more work "
                "into one jitted function (a loop into lax.scan / fori_loop, bigger batches), so each call "
                "does enough to hide its dispatch."
            )
        if self.bound == "device" and self.lines:
            top = self.scopes[0].path if self.scopes and self.scopes[0].path != NO_SCOPE else ""
            at = f" (%jax_hlo {top} f(args) shows that scope's kernels)" if top else ""
            steps.append(f"Compute-bound: speed up the top line or scope{at}.")
        return steps

    def document(self):
        from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, Table

        sections = []
        t = self.time
        if self.failed_in_warmup:
            return Document("%%jax_profile", self.status, self.summary, [Section("Warm-up", [Paragraph(self.summary)])])
        wall_rows = [
            ["compilation", _ms(t.compile), _pct(t.compile, t.wall), _compile_detail(t)],
            ["host dispatch (jaxlib, per call)", _ms(t.dispatch), _pct(t.dispatch, t.wall), f"{t.calls} call(s)"],
            [
                "device, inside the call",
                _ms(t.device_inline),
                _pct(t.device_inline, t.wall),
                "small programs run inline",
            ],
            ["waiting for the device", _ms(t.waiting), _pct(t.waiting, t.wall), "block_until_ready, reading results"],
            ["your Python, other host work", _ms(t.python), _pct(t.python, t.wall), ""],
        ]
        blocks = [Table(["part", "time", "share", "detail"], wall_rows)]
        blocks.append(
            Paragraph(
                f"Wall time {_ms(t.wall)}; the device was busy {_ms(t.device_busy)} "
                f"({_pct(t.device_busy, t.wall)}), {self.kernel_events} kernel run(s) of "
                f"{self.kernel_count} kernel(s). {HOST_NOTE}"
            )
        )
        if self.warmup_runs:
            blocks.append(Paragraph(f"The cell ran {self.warmup_runs} time(s) before, unprofiled (--warmup)."))
        sections.append(Section("Where the wall time went", blocks))
        steps = self.next_steps
        if steps:
            sections.append(Section("What to look at next", [Paragraph(s) for s in steps]))
        if not self.events_supported:
            sections.append(
                Section(
                    "No kernel events",
                    [
                        Paragraph(
                            "The trace has calls of jitted functions but not one kernel event: this JAX/jaxlib "
                            "does not report kernels to the profiler on this backend. Open the trace in xprof "
                            "(--save DIR) or use %jax_stages for the run time of one call."
                        )
                    ],
                )
            )
        if self.lines:
            rows = [
                [
                    _line_cell(lt),
                    _ms(lt.seconds),
                    _pct(lt.share, 1),
                    str(lt.calls),
                    str(lt.kernel_runs),
                    ", ".join(lt.scopes[:3]) or "-",
                    f"{lt.shared_kernels} of {lt.kernels} kernels shared" if lt.shared_kernels else "",
                ]
                for lt in self.lines[:TOP_LINES]
            ]
            blocks = [Table(["your line", "device time", "share", "calls", "kernel runs", "scope", ""], rows)]
            if len(self.lines) > TOP_LINES:
                blocks.append(Paragraph(f"{len(self.lines) - TOP_LINES} more line(s) in the report object."))
            if any(lt.shared_kernels for lt in self.lines):
                blocks.append(Paragraph(SHARED_NOTE))
            sections.append(Section("By your source line", blocks))
        if self.scopes:
            rows = [
                # non-breaking spaces: HTML keeps the tree's indentation
                ["\u00a0\u00a0" * s.depth + s.path, _ms(s.seconds), _pct(s.share, 1), _ms(s.self_seconds)]
                for s in self.scopes
            ]
            sections.append(Section("By named_scope", [Table(["scope", "device time", "share", "self"], rows)]))
        if self.kernels:
            rows = [
                [
                    f"`{k.name}`",
                    k.program,
                    _ms(k.seconds),
                    _pct(k.share, 1),
                    str(k.runs),
                    " ".join(filter(None, [k.opcode, ", ".join(k.op_types)])) or "-",
                    ", ".join(k.scopes) or "-",
                    ", ".join(k.lines) or "-",
                ]
                for k in self.kernels
            ]
            table = Table(["kernel", "program", "time", "share", "runs", "what", "scope", "lines"], rows)
            hlo = "\n".join(f"{k.program}: {k.hlo}" for k in self.kernels[:6] if k.hlo)
            blocks = [table] + ([Evidence("HLO of the top kernels", hlo)] if hlo else [])
            sections.append(Section("By kernel", blocks))
        if self.programs:
            rows = [
                [
                    f"`{p.function}`" + ("" if p.identified else " (HLO not seen)"),
                    str(p.calls),
                    _ms(p.device_seconds),
                    *[format_bytes(p.memory[k]) if k in p.memory else "-" for k in _MEMORY_COLUMNS],
                ]
                for p in self.programs
            ]
            blocks = [Table(["program", "calls", "device time", *_MEMORY_COLUMNS], rows)]
            blocks.append(Paragraph("Memory is each compiled program's memory_analysis()."))
            problems = [f"`{p.function}`: {p.problem}" for p in self.programs if p.problem]
            if problems:
                blocks.append(Paragraph("HLO text could not be had for " + "; ".join(problems) + "."))
            if self.capture_note:
                blocks.append(Paragraph(self.capture_note))
            sections.append(Section("Programs", blocks))
        facts = [("profiler", "jax.profiler.trace, Python tracer off")]
        if self.saved_to:
            facts.append(("saved to", self.saved_to))
        blocks = [Facts(facts)]
        if self.saved_files:
            perfetto = next((f for f in self.saved_files if f.endswith("perfetto_trace.json.gz")), "")
            how = []
            if perfetto:
                how.append(f"Perfetto: open https://ui.perfetto.dev and drop {perfetto} onto it")
            how.append(f"xprof / TensorBoard: xprof --logdir {self.saved_to} (or tensorboard --logdir {self.saved_to})")
            blocks.append(Paragraph("; ".join(how) + "."))
        if self.other_error:
            blocks.append(Paragraph(f"The cell failed with {self.other_error}; the profile covers it until then."))
        sections.append(Section("Trace", blocks))
        return Document("%%jax_profile", self.status, self.summary, sections)


_MEMORY_COLUMNS = ("arguments", "outputs", "temporaries", "generated code")


def _ms(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.0f} us"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def _code(line: SourceLine) -> str:
    return line.code.split("  #")[0].rstrip() or f"line {line.lineno}"


def _line_cell(lt: LineTime) -> str:
    if lt.line is None:
        return lt.what
    inside = f" in {lt.line.function}" if lt.line.function not in ("<module>", "") else ""
    return f"{lt.where}{inside} `{lt.line.code}`"


def _compile_detail(t: WallTime) -> str:
    if not t.compilations:
        return "nothing compiled"
    text = f"{t.compilations} compilation(s), {t.user_compilations} of your functions"
    return text + (f"; recompiled: {', '.join(t.recompiled[:3])}" if t.recompiled else "")


# -- building the report from a trace ------------------------------------------------


def build_report(
    events: list[TraceEvent],
    programs: list[CompiledProgram] = (),
    *,
    wall_seconds: float | None = None,
    compile_report=None,
    warmup_runs: int = 0,
) -> ProfileReport:
    """The report of one traced block: ``events`` from ``trace_events``, the programs' HLO, the compile report."""
    report = ProfileReport(warmup_runs=warmup_runs)
    kernels = [e for e in events if e.is_kernel]
    dispatches = outermost([e for e in events if e.name.startswith(DISPATCH_PREFIX)])
    report.kernel_events = len(kernels)
    report.events_supported = bool(kernels) or not dispatches

    sources = _sources_by_module(programs)
    own = self_times(kernels)
    # group the kernel runs by program (module + program_id), then choose its HLO by the ops that ran
    per_program: dict[tuple[str, str], dict] = {}
    for event, self_ns in zip(kernels, own):
        group = per_program.get((event.module, event.program_id))
        if group is None:
            group = per_program[(event.module, event.program_id)] = {"ops": {}, "runs": set(), "ns": 0.0}
        op = group["ops"].get(event.op)
        if op is None:
            op = group["ops"][event.op] = [0.0, 0]
        op[0] += self_ns
        op[1] += 1
        group["runs"].add(event.run_id)
        group["ns"] += self_ns
    total_ns = sum(own) or 0.0
    report.device_seconds = total_ns / 1e9

    lines: dict[tuple, dict] = {}
    scopes: dict[str, list[float]] = {}  # path -> [inclusive ns, self ns]
    kernel_rows: list[KernelTime] = []
    program_rows: dict[tuple, ProgramTime] = {}
    for (module, program_id), group in per_program.items():
        found = _choose(sources.get(module, []), group["ops"])
        program, described = found if found else (None, None)
        key = (module, id(program) if program else module)
        row = program_rows.get(key)
        if row is None:
            row = program_rows[key] = _program_row(module, program, described is not None)
        row.calls += len(group["runs"])
        row.device_seconds += group["ns"] / 1e9
        for op_name, (ns, runs) in group["ops"].items():
            source = described.kernels.get(op_name) if described else None
            kernel_rows.append(_kernel_row(op_name, module, ns, runs, total_ns, source))
            _attribute(
                lines, scopes, ns, runs, op_name, module, row, source, ((module, program_id), len(group["runs"]))
            )
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


def _sources_by_module(programs) -> dict[str, list[tuple[CompiledProgram, ProgramSources]]]:
    found: dict[str, list] = {}
    for program in programs:
        if not program.hlo_text:
            continue
        try:
            described = program_sources(program.hlo_text)
        except Exception:
            continue
        found.setdefault(described.module or program.module, []).append((program, described))
    return found


def _choose(candidates: list, ops: dict) -> tuple | None:
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


def _kernel_row(name: str, module: str, ns: float, runs: int, total_ns: float, source: KernelSource | None):
    row = KernelTime(name=name, program=module, seconds=ns / 1e9, runs=runs, share=ns / total_ns if total_ns else 0.0)
    if source is not None:
        row.opcode, row.op_types, row.hlo = source.opcode, list(source.op_types), source.text
        owners = sorted(source.owners, key=lambda o: -o.weight)  # the larger share first
        row.scopes = list(dict.fromkeys(o.scope or NO_SCOPE for o in owners))
        row.lines = list(dict.fromkeys(_short_where(o.file, o.line) for o in owners if o.line))
    return row


_LABELS: dict[str, str] = {}


def _short_where(filename: str, lineno: int) -> str:
    label = _LABELS.get(filename)
    if label is None:
        label = _LABELS[filename] = source_line(filename, lineno, "").label or os.path.basename(filename)
    return f"{label}:{lineno}"


def _attribute(lines, scopes, ns, runs, op_name, module, program_row, source, program_calls) -> None:
    if source is None or not source.owners:
        what = (
            f"`{module}` (its HLO was not seen)"
            if program_row.identified or program_row.calls
            else f"`{module}`: an eager operation or a program run by library code"
        )
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


def _add_scope(scopes, path: str, ns: float) -> None:
    entry = scopes.setdefault(path, [0.0, 0.0])
    entry[1] += ns
    if path == NO_SCOPE:
        entry[0] += ns
        return
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        scopes.setdefault("/".join(parts[:depth]), [0.0, 0.0])[0] += ns


def _line_rows(lines: dict, total_ns: float) -> list[LineTime]:
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


def _scope_rows(scopes: dict, total_ns: float) -> list[ScopeTime]:
    rows = [
        ScopeTime(path, inclusive / 1e9, own / 1e9, inclusive / total_ns if total_ns else 0.0)
        for path, (inclusive, own) in scopes.items()
    ]
    # a tree: siblings by time, children right after their parent; outside any scope last
    by_path = {r.path: r for r in rows}

    def sort_key(row: ScopeTime):
        if row.path == NO_SCOPE:
            return ((float("inf"), row.path),)
        parts = row.path.split("/")
        return tuple((-by_path["/".join(parts[: d + 1])].seconds, parts[d]) for d in range(len(parts)))

    rows.sort(key=sort_key)
    return rows


def _wall_time(events, kernels, dispatches, wall_seconds, compile_report) -> WallTime:
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
    t.device_busy = union_ns(kernel_spans) / 1e9
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
    busy_outside = max(union_ns(kernel_spans) - overlap_ns(kernel_spans, dispatch_spans), 0.0) / 1e9
    t.waiting = min(rest, busy_outside)
    t.python = rest - t.waiting
    return t


# -- the probe --------------------------------------------------------------------


class profile:
    """Run a block under ``jax.profiler.trace`` and report where its time went.

    ``save``: a directory to keep the trace in (Perfetto JSON and xprof's
    ``.xplane.pb``); otherwise it stays in memory and is dropped. ``warmup_runs``
    is only recorded (the caller ran the code that many times before).
    Raises ``ProfilerBusy`` on entry when a trace is already running.
    """

    def __init__(self, *, save: str | None = None, warmup_runs: int = 0):
        if save is not None and os.path.exists(save) and not os.path.isdir(save):
            raise ProbeArgumentError("save", f"takes a directory; {save!r} is a file")
        if warmup_runs < 0:
            raise ProbeArgumentError("warmup_runs", "takes a number of runs, 0 or more")
        self.save = save
        self.report = ProfileReport(warmup_runs=warmup_runs)
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> ProfileReport:
        import jax

        from jaxmagic.probes.compiles import compiles

        if compat.profiler_session_active():
            raise ProfilerBusy()
        if self.save is not None:
            os.makedirs(self.save, exist_ok=True)
        # The compile probe keeps the JAX state contract (config, loggers, listeners) for the block;
        # the profiler and the call capture touch none of it.
        stack = contextlib.ExitStack()
        try:
            self._compiles = compiles(raise_over_budget=False)
            self._compile_report = stack.enter_context(self._compiles)
            self._capture = stack.enter_context(ProgramCapture())
            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0
            jax.profiler.start_trace(self.save, create_perfetto_trace=self.save is not None, profiler_options=options)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        self._started = time.perf_counter()
        return self.report

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True
        import jax

        wall = time.perf_counter() - self._started
        profile_data, stop_problem = None, ""
        try:
            try:
                profile_data = jax.profiler.stop_trace()
            except RuntimeError as problem:  # the block stopped the trace itself
                stop_problem = error_line(problem)
        finally:
            try:
                self._stack.__exit__(exc_type, exc, tb)
            finally:
                if compat.profiler_session_active():  # interrupted while stopping: never leave it running
                    with contextlib.suppress(Exception):
                        jax.profiler.stop_trace()
        try:
            programs = self._capture.programs()
            events = events_from_profile_data(profile_data) if profile_data is not None else []
            del profile_data
            built = build_report(
                events,
                programs,
                wall_seconds=wall,
                compile_report=self._compile_report,
                warmup_runs=self.report.warmup_runs,
            )
        except Exception as problem:  # a report we cannot build must not hide the block's own outcome
            built = ProfileReport(warmup_runs=self.report.warmup_runs)
            built.capture_note = f"The trace could not be read: {error_line(problem)}."
        for field in dataclasses.fields(ProfileReport):
            setattr(self.report, field.name, getattr(built, field.name))
        if not self._capture.available and not self.report.capture_note:
            self.report.capture_note = (
                "The jitted calls could not be followed here (no free sys.monitoring tool id), so kernels "
                "show by name only, without lines or scopes."
            )
        elif self._capture.overflow and not self.report.capture_note:
            self.report.capture_note = f"{self._capture.overflow} more program(s) than jaxmagic keeps were not named."
        if stop_problem:
            self.report.capture_note = f"The trace was stopped inside the block ({stop_problem}); nothing was kept."
        if self.save is not None:
            self.report.saved_to = os.path.abspath(self.save)
            self.report.saved_files = _trace_files(self.save, since=self._started_epoch())
        if exc is not None:
            self.report.other_error = error_line(exc)
            if isinstance(exc, RuntimeError) and "Only one profile may be run" in str(exc):
                self.report.other_error += " (the cell started a profiler trace of its own; traces do not nest)"
        return False

    def _started_epoch(self) -> float:
        return time.time() - (time.perf_counter() - self._started) - 1.0


def _trace_files(directory: str, since: float) -> list[str]:
    """The trace files written into ``directory`` by this run (newest run folder first)."""
    found = []
    for root, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith((".json.gz", ".xplane.pb")) and os.path.getmtime(path) >= since:
                found.append(os.path.abspath(path))
    return sorted(found)
