"""The profile report: where the block's time went, by line, named_scope, kernel and program, in words and as a document.

Plain data filled in by ``build.build_report`` from the trace; nothing here measures or calls into JAX.
"""

from __future__ import annotations

import dataclasses
import os

from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, failed, note
from jaxmagic.report.document import Block, Document, Evidence, Facts, Paragraph, Section, Table, split_headline
from jaxmagic.report.wording import counted, ended, error_line, format_bytes

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
class OtherThreadWork:
    """What other threads ran while the block did (a data loader, a thread looping on its own jitted function):
    left out of every figure of the report, and said."""

    functions: list[str]  # the jitted functions only other threads called
    calls: int
    kernel_seconds: float
    transfers: int
    shared: list[str] = dataclasses.field(default_factory=list)  # called by the block and by another thread

    @property
    def sentence(self) -> str:
        said = []
        if self.calls or self.kernel_seconds:
            names = ", ".join(f"`{f}`" for f in self.functions[:4]) or "jitted functions"
            said.append(
                f"another thread ran {names} while the cell did ({self.calls} call(s), {_ms(self.kernel_seconds)} "
                "of kernels): left out of every figure here"
            )
        if self.transfers:
            said.append(f"its {self.transfers} host-to-device copies too")
        if self.shared:
            shared = ", ".join(f"`{f}`" for f in self.shared[:4])
            said.append(
                f"{shared} ran on this thread and on another: its kernels on XLA's worker threads cannot be told "
                "apart in a CPU trace, so they are all counted here"
            )
        text = "; ".join(said)
        return text[:1].upper() + text[1:] + "." if text else ""


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
    other_threads: OtherThreadWork | None = None  # what other threads ran meanwhile (not counted)
    devices: list[str] = dataclasses.field(default_factory=list)  # where kernel time came from: "TPU 0 (...)"
    trace_notes: list[str] = dataclasses.field(default_factory=list)  # what the trace could not give, and why

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
        return max(parts, key=lambda part: parts[part])

    @property
    def host_only(self) -> bool:
        """True when no kernel ran: all the time was host-side."""
        return self.kernel_events == 0 and self.events_supported

    # -- Report ----------------------------------------------------------------

    def concerns(self) -> list[Concern]:
        others = [note(self.other_threads.sentence)] if self.other_threads is not None else []
        unread = [note(text) for text in self.trace_notes]
        return ([failed(self.other_error)] if self.other_error else []) + others + unread

    @property
    def summary(self) -> str:
        if self.failed_in_warmup:
            return f"Warm-up run {self.failed_in_warmup} failed with {self.other_error}; nothing was profiled."
        return split_headline(self._sentences(), noun="detail")[0]

    @property
    def also_found(self) -> list[str]:
        """What the headline had no room for (``split_headline``): said first below it."""
        return [] if self.failed_in_warmup else split_headline(self._sentences(), noun="detail")[1]

    def _sentences(self) -> list[str]:
        """The split of the wall time first, then another thread's work beside the cell's, then the line
        with most kernel time."""
        lead, most, rest = self._findings().partition(" Most kernel time:")
        if self.other_error:
            lead = f"The cell failed with {ended(self.other_error)} Until then: {lead[0].lower()}{lead[1:]}"
        others = [self.other_threads.sentence] if self.other_threads is not None else []
        return [lead, *others, *([most.strip() + rest] if most else [])]

    def _findings(self) -> str:
        t = self.time
        wall = _ms(t.wall)
        if not self.events_supported:
            why = (
                f"no kernel time could be read from the trace ({self.trace_notes[0].rstrip('.')})"
                if self.trace_notes
                else "this JAX's profiler emitted no kernel events"
            )
            return (
                f"{wall}: {why}, so device time cannot be split by "
                f"line or scope; {_pct(t.compile, t.wall)} compilation, {_pct(t.dispatch, t.wall)} host dispatch."
            )
        if self.host_only:
            compiled = f", {_pct(t.compile, t.wall)} of it compiling" if t.compile else ""
            return f"No JAX computation ran on the device: the time was all host-side ({wall}{compiled})."
        split = (
            f"{wall} wall time: on the device {_pct(t.device, t.wall)}, host dispatch and Python {_pct(t.host, t.wall)}, "
            f"compiling {_pct(t.compile, t.wall)}"
        )
        bound = {"device": "compute-bound", "host": "host-bound (dispatch / Python)", "compile": "compile-bound"}
        text = f"{split} - {bound[self.bound]}."
        top = next((t for t in self.lines if t.line is not None), None)
        if top is not None and top.line is not None:
            text += f" Most kernel time: `{_code(top.line)}` ({top.where}, {_pct(top.share, 1)} of kernel time)"
            scope = next((s for s in self.scopes if s.depth == 0), None)
            text += f", scope `{scope.path}`." if scope is not None and scope.path != NO_SCOPE else "."
        elif self.lines:
            text += f" Most kernel time: {self.lines[0].what} ({_pct(self.lines[0].share, 1)} of kernel time)."
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

    def document(self) -> Document:
        if self.failed_in_warmup:
            return Document(
                "%%jax_profile",
                self.status,
                self.summary,
                [Section("Warm-up", [Paragraph(self.summary)])],
                nothing_to_do=self.unexplained(),
            )
        sections: list[Section] = []
        also = self.also_found  # the summary's sentences its headline had no room for, right below it
        if also:
            sections.append(Section("Also", [Paragraph(text) for text in also], pinned=True))
        if self.trace_notes:
            unread = [Paragraph(text) for text in self.trace_notes]
            sections.append(Section("What the trace could not give", unread, pinned=True))
        sections.append(wall_time_section(self))
        steps = self.next_steps
        if steps:
            sections.append(Section("What to look at next", [Paragraph(s) for s in steps]))
        if not self.events_supported and not self.trace_notes:
            sections.append(Section("No kernel events", [Paragraph(NO_KERNEL_EVENTS)]))
        if self.lines:
            sections.append(by_line_section(self.lines))
        if self.scopes:
            sections.append(by_scope_section(self.scopes))
        if self.kernels:
            sections.append(by_kernel_section(self.kernels))
        if self.programs:
            sections.append(programs_section(self.programs, self.capture_note))
        sections.append(trace_section(self))
        return Document("%%jax_profile", self.status, self.summary, sections, nothing_to_do=self.unexplained())


NO_KERNEL_EVENTS = (
    "The trace has calls of jitted functions but not one kernel event: this JAX/jaxlib "
    "does not report kernels to the profiler on this backend. Open the trace in xprof "
    "(--save DIR) or use %jax_stages for the run time of one call."
)


def wall_time_section(report: ProfileReport) -> Section:
    """ "Where the wall time went": the calling thread's time split into rows that add up to the wall time."""
    t = report.time
    wall_rows = [
        ["compiling (trace, lower, XLA compile)", _ms(t.compile), _pct(t.compile, t.wall), _compile_detail(t)],
        ["host dispatch (jaxlib, inside calls)", _ms(t.dispatch), _pct(t.dispatch, t.wall), f"{t.calls} call(s)"],
        [
            "device: running kernels inside a call, on the calling thread",
            _ms(t.device_inline),
            _pct(t.device_inline, t.wall),
            "small programs on CPU run inline" if t.device_inline else "none: no kernel ran inside a call",
        ],
        [
            "device: waiting outside calls while kernels ran",
            _ms(t.waiting),
            _pct(t.waiting, t.wall),
            "block_until_ready, reading results",
        ],
        ["your Python, other host work", _ms(t.python), _pct(t.python, t.wall), ""],
    ]
    blocks: list[Block] = [Table(["what the calling thread did", "time", "share of wall time", "detail"], wall_rows)]
    blocks.append(
        Paragraph(
            f"Wall time {_ms(t.wall)}: the rows above split it and add up to it. The headline's \"on the "
            f'device" {_pct(t.device, t.wall)} is the two device rows together ({_ms(t.device)}). '
            f"Counted differently, kernels were running on some thread during {_ms(t.device_busy)} "
            f"({_pct(t.device_busy, t.wall)} of the wall time); that span also overlaps host dispatch and "
            "Python (the device works while the host goes on), so it is not a row of the split. "
            f"{report.kernel_events} kernel run(s) of {report.kernel_count} kernel(s), {_ms(report.device_seconds)} "
            'of kernel time summed over all threads: the "kernel time" of the tables below, and the whole '
            f"their shares are of. {HOST_NOTE}"
        )
    )
    if report.warmup_runs:
        blocks.append(Paragraph(f"The cell ran {report.warmup_runs} time(s) before, unprofiled (--warmup)."))
    return Section("Where the wall time went", blocks)


def by_line_section(lines: list[LineTime]) -> Section:
    """ "By your source line": kernel time per line of the user's code, the top ``TOP_LINES``."""
    rows = [
        [
            _line_cell(lt),
            _ms(lt.seconds),
            _pct(lt.share, 1),
            str(lt.calls),
            str(lt.kernel_runs),
            ", ".join(lt.scopes[:3]) or "-",
            f"{lt.shared_kernels} of {counted(lt.kernels, 'kernel')} shared" if lt.shared_kernels else "",
        ]
        for lt in lines[:TOP_LINES]
    ]
    blocks: list[Block] = [
        Table(["your line", "kernel time", "of kernel time", "calls", "kernel runs", "scope", ""], rows)
    ]
    if len(lines) > TOP_LINES:
        blocks.append(Paragraph(f"{len(lines) - TOP_LINES} more line(s) in the report object."))
    if any(lt.shared_kernels for lt in lines):
        blocks.append(Paragraph(SHARED_NOTE))
    return Section("By your source line", blocks)


def by_scope_section(scopes: list[ScopeTime]) -> Section:
    """ "By named_scope": the scope tree with kernel time, indented by depth."""
    rows = [
        # non-breaking spaces: HTML keeps the tree's indentation
        ["\u00a0\u00a0" * s.depth + s.path, _ms(s.seconds), _pct(s.share, 1), _ms(s.self_seconds)]
        for s in scopes
    ]
    return Section("By named_scope", [Table(["scope", "kernel time", "of kernel time", "self"], rows)])


def by_kernel_section(kernels: list[KernelTime]) -> Section:
    """ "By kernel": the costliest kernels, with the HLO of the first six."""
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
        for k in kernels
    ]
    table = Table(["kernel", "program", "kernel time", "of kernel time", "runs", "what", "scope", "lines"], rows)
    hlo = "\n".join(f"{k.program}: {k.hlo}" for k in kernels[:6] if k.hlo)
    return Section("By kernel", [table, *([Evidence("HLO of the top kernels", hlo)] if hlo else [])])


def programs_section(programs: list[ProgramTime], capture_note: str) -> Section:
    """ "Programs": each compiled program's calls, kernel time and memory_analysis()."""
    rows = [
        [
            f"`{p.function}`" + ("" if p.identified else " (HLO not seen)"),
            str(p.calls),
            _ms(p.device_seconds),
            *[format_bytes(p.memory[k]) if k in p.memory else "-" for k in _MEMORY_COLUMNS],
        ]
        for p in programs
    ]
    blocks: list[Block] = [Table(["program", "calls", "kernel time", *_MEMORY_COLUMNS], rows)]
    blocks.append(Paragraph("Memory is each compiled program's memory_analysis()."))
    problems = [f"`{p.function}`: {p.problem}" for p in programs if p.problem]
    if problems:
        blocks.append(Paragraph("HLO text could not be had for " + "; ".join(problems) + "."))
    if capture_note:
        blocks.append(Paragraph(capture_note))
    return Section("Programs", blocks)


def trace_section(report: ProfileReport) -> Section:
    """ "Trace": how the profile was taken, where it was saved and how to open it."""
    facts = [("profiler", "jax.profiler.trace, Python tracer off")]
    if report.devices:
        facts.append(("kernel time read from", "; ".join(report.devices)))
    if report.saved_to:
        facts.append(("saved to", report.saved_to))
    blocks: list[Block] = [Facts(facts)]
    if report.saved_files:
        perfetto = next((f for f in report.saved_files if f.endswith("perfetto_trace.json.gz")), "")
        how = []
        if perfetto:
            how.append(f"Perfetto: open https://ui.perfetto.dev and drop {perfetto} onto it")
        how.append(f"xprof / TensorBoard: xprof --logdir {report.saved_to} (or tensorboard --logdir {report.saved_to})")
        blocks.append(Paragraph("; ".join(how) + "."))
    if report.other_error:
        blocks.append(Paragraph(f"The cell failed with {report.other_error}; the profile covers it until then."))
    return Section("Trace", blocks)


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
