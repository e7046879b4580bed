"""The memory reports: ``OutOfMemoryReport`` (an out-of-memory error explained, wherever it surfaced) and
``MemoryReport`` (``%%jax_memory`` / ``%jax_memory CALL``: each program's peak by the user's line). Both are
data plus small section builders, one per section, shared through ``program_sections``."""

from __future__ import annotations

import dataclasses
import os

from jaxmagic.probes._memory.messages import OutOfMemoryMessage
from jaxmagic.probes._memory.records import (
    ARGUMENT,
    OFFER_ORDER,
    SAVED_FOR_BACKWARD,
    Capacity,
    EagerAllocation,
    FreeHeld,
    HeldArrays,
    ProgramMemory,
    WayDown,
)
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed, note
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.wording import ended, format_bytes

# Allocator settings of JAX's GPU client (https://docs.jax.dev/en/latest/gpu_memory_allocation.html).
ALLOCATOR_SETTINGS = (
    "XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate on demand, not 75% up front), "
    "XLA_PYTHON_CLIENT_MEM_FRACTION=.90 (a larger share), or XLA_PYTHON_CLIENT_ALLOCATOR=platform "
    "(no pool: slow, but frees at once); set before JAX starts"
)


# -- what both reports say of one program -----------------------------------------------------------


def peak_sentence(program: ProgramMemory, available: int | None = None, short: bool = False) -> str:
    """ "`nearest` needs 64 GiB at its peak (22.7 GiB available); 64 GiB of it is one f32[131072,131072]
    temporary made by `sort` at In [3], line 5 (in place over `abs` at line 4)" - or, when activations kept
    for the backward pass fill most of it, how much they take and which function made them."""
    have = f" ({format_bytes(available)} available)" if available is not None else ""
    text = f"`{program.function}` needs {format_bytes(program.peak_bytes)} at its peak{have}"
    if program.buffers and program.buffers[0].stacked:
        return text + _stacks_clause(program, short)
    saved = [b for b in program.buffers if b.role == SAVED_FOR_BACKWARD]
    saved_bytes = sum(b.bytes for b in saved)
    if saved and saved_bytes * 2 >= program.peak_bytes:
        functions = list(dict.fromkeys(f"`{b.made_at.function}`" for b in saved if b.made_at is not None))
        made = f", made in {', '.join(functions[:3])}" if functions else ""
        return f"{text}; {format_bytes(saved_bytes)} of it are activations saved for the backward pass{made}"
    if program.buffers:
        top = program.buffers[0]
        what = ("one " + top.shape if top.count == 1 else top.what) + (
            f" {top.role}" if top.role != ARGUMENT and not short else ""
        )
        over = f" (in place over {', '.join(top.reuses)})" if top.reuses and not short else ""
        made_by = top.made_by
        if short and top.made_at is not None and top.operation:  # the line alone: the cell is said once
            made_by = made_by.split(" at ")[0] + f" at {short_place(top.made_at)}"
        text += f"; {format_bytes(top.bytes)} of it is {what} made by {made_by}{over}"
    if program.compile_error is not None and not short:
        code = f" ({program.compile_error.code})" if program.compile_error.code else ""
        text += f"; XLA's compiler refused it{code}"
    return text


def _stacks_clause(program: ProgramMemory, short: bool) -> str:
    """ "; 384 MiB of it is what the scan at line 12 stacks for the backward pass, one row per iteration:
    3 x f32[8,2048,2048] made in `block` (lines 8, 9)" - the largest buffer a scan's stack."""
    top = program.buffers[0]
    where = _place(top.scan_at)
    # what the top one is stacked for: residuals the backward pass reads, or the scan's (or its gradient's) outputs
    saved = top.role == SAVED_FOR_BACKWARD
    stacks = [
        b
        for b in program.buffers
        if b.stacked and _place(b.scan_at) == where and (b.role == SAVED_FOR_BACKWARD) == saved
    ]
    stacks = stacks if where else [top]
    total = sum(b.bytes for b in stacks)
    count = sum(b.count for b in stacks if b.bytes)  # a value made in place over another is no buffer more
    shapes = list(dict.fromkeys(b.shape for b in stacks))
    what = f"{count} x {shapes[0]}" if len(shapes) == 1 else f"{count} buffers"
    lines = sorted({b.made_at.lineno for b in stacks if b.made_at is not None})
    functions = list(dict.fromkeys(f"`{b.made_at.function}`" for b in stacks if b.made_at is not None))
    made = (
        f" made in {', '.join(functions)} (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})"
        if lines
        else ""
    )
    kept = " for the backward pass" if all(b.role == SAVED_FOR_BACKWARD for b in stacks) else ""
    scan = f"the scan at line {top.scan_at.lineno}" if top.scan_at is not None else "a scan"
    if short:
        return f"; {format_bytes(total)} of it is what {scan} stacks{kept}"
    return f"; {format_bytes(total)} of it is what {scan} stacks{kept}, one row per iteration: {what}{made}"


def _place(line: SourceLine | None) -> tuple[str, int] | None:
    return (line.filename, line.lineno) if line is not None else None


def short_place(line: SourceLine) -> str:
    """``In [9], line 4`` (a cell) or ``train.py, line 4``: where, without the function, for a headline."""
    return f"{line.label or os.path.basename(line.filename)}, line {line.lineno}"


def way_down_text(way: WayDown) -> str:
    """ "donate `params` (donate_argnums=(0,)): peak 74 MiB -> 58 MiB, fits (compiled ...; traced again)"."""
    fits = ", fits" if way.fits else ", still does not fit" if way.fits is False else ""
    again = "; your function was traced again" if way.traced_again else ""
    where = f" for {way.platform}" if way.platform else ""
    return f"{way.title}: {way.effect}{fits} (tried by compiling{where}{again})"


def first_way_down(programs: list[ProgramMemory]) -> str:
    """The fix line: the first offered way down of the largest program, with what compiling it showed."""
    for program in sorted(programs, key=lambda p: -p.peak_bytes):
        if program.offered:
            way = program.offered[0]
            code = f" Write `{way.code.split('  #')[0]}`." if way.code else ""
            return f"{way_down_text(way)}.{code}"
    return ""


def _nothing_offered(program: ProgramMemory) -> str:
    """The fix line when no way down is offered: why, from what was tried - never a way not proven. A way
    that lowered the peak but is withheld (donating what the caller may still use) and one that could not be
    measured here (a trial nothing here compiles for the device) are said as such, never as a fix."""
    if not program.ways_down:
        return ""
    untried = [w for w in program.ways_down if w.peak_after is None]
    untried.sort(key=lambda w: OFFER_ORDER.index(w.kind) if w.kind in OFFER_ORDER else len(OFFER_ORDER))
    if len(untried) == len(program.ways_down):
        return (
            f"No way down could be measured ({untried[0].title or untried[0].kind}: {untried[0].problem}); see below."
        )
    withheld = [w for w in program.ways_down if w.lowers and w.withheld]
    unmeasured = [w for w in untried if w.unmeasured]
    said = []
    if unmeasured:
        said.append(f"Not measured: {unmeasured[0].title or unmeasured[0].kind} ({unmeasured[0].problem}).")
    if withheld:
        way = withheld[0]
        before, after = format_bytes(way.peak_before), format_bytes(way.peak_after or 0)
        said.append(f"Not offered: {way.title or way.kind}, peak {before} -> {after}: {way.withheld}.")
    if said:
        return "No way down offered. " + " ".join(said)
    return "Nothing tried lowered the peak enough: see the ways tried below."


def buffers_section(program: ProgramMemory) -> Section:
    rows = []
    shown = 0
    for buffer in program.buffers[:8]:
        line = buffer.made_at.where if buffer.made_at is not None else "-"
        made = buffer.operation + (f" over {', '.join(buffer.reuses)}" if buffer.reuses else "")
        made += f" ({buffer.stacking})" if buffer.stacking else ""
        rows.append([buffer.what, format_bytes(buffer.bytes), buffer.role, buffer.argument or made or "-", line])
        shown += buffer.bytes
    rest = sum(b.bytes for b in program.buffers[8:])
    if rest:
        rows.append([f"{len(program.buffers) - 8} more groups", format_bytes(rest), "", "", ""])
    blocks: list[Block] = []
    if rows:
        blocks.append(Table(["buffers", "bytes", "what for", "made by", "your line"], rows))
        lines = _lines_of(program)
        if lines:
            blocks.append(SourceLines(lines, "the lines that made the largest buffers"))
    else:
        blocks.append(Paragraph(f"Not known: {program.buffers_problem or program.problem or 'XLA said nothing'}."))
    saved = sum(b.bytes for b in program.buffers if b.role == SAVED_FOR_BACKWARD)
    if saved:
        blocks.append(
            Paragraph(
                f"{format_bytes(saved)} of the peak are activations of the forward pass kept for the backward "
                "pass (read by operations under transpose(...))."
            )
        )
    return Section(f"What fills the peak of `{program.function}` ({format_bytes(program.peak_bytes)})", blocks)


def _lines_of(program: ProgramMemory) -> list[SourceLine]:
    seen: dict[tuple[str, int], SourceLine] = {}
    for buffer in program.buffers[:4]:
        if buffer.made_at is not None:
            seen.setdefault((buffer.made_at.filename, buffer.made_at.lineno), buffer.made_at)
    return sorted(seen.values(), key=lambda line: line.lineno)


def ways_section(program: ProgramMemory) -> Section | None:
    if not program.ways_down:
        return None
    offered = program.offered
    rows = [
        [way.title, format_bytes(way.peak_after or 0), _fits_word(way), f"`{way.code}`" if way.code else "-", way.how]
        for way in offered
    ]
    blocks: list[Block] = []
    if rows:
        blocks.append(Table(["change", "new peak", "fits", "write", "how it was tried"], rows))
    left = [w for w in program.ways_down if w not in offered]
    withheld = [w for w in left if w.lowers and w.withheld]
    untried = [w for w in left if w.unmeasured]
    tried = [w for w in left if w not in withheld and w not in untried]
    for label, ways in (("Lower, not offered", withheld), ("Tried and not offered", tried), ("Not measured", untried)):
        if ways:
            blocks.append(Paragraph(f"{label}: " + "; ".join(f"{w.title or w.kind} ({w.effect})" for w in ways) + "."))
    if not rows and not withheld and tried:
        blocks.insert(0, Paragraph("Nothing tried lowered the peak."))
    return Section(f"Ways down from {format_bytes(program.peak_bytes)}, tried by compiling", blocks)


def _fits_word(way: WayDown) -> str:
    return "yes" if way.fits else "no" if way.fits is False else "-"


def figures_facts(program: ProgramMemory) -> list[tuple[str, str]]:
    facts = [("function", f"`{program.function}`")]
    if program.call:
        facts.append(("call", f"`{program.call}`"))
    if program.called_at is not None:
        facts.append(("called at", program.called_at.where))
    if program.signature:
        facts.append(("arguments", program.signature))
    figures = program.figures
    if figures is not None:
        facts.append(
            (
                "memory_analysis()",
                f"arguments {format_bytes(figures.argument_bytes)}, outputs {format_bytes(figures.output_bytes)}, "
                f"temporaries {format_bytes(figures.temp_bytes)}, aliased {format_bytes(figures.alias_bytes)}, "
                f"generated code {format_bytes(figures.generated_code_bytes)}",
            )
        )
    facts.append(("peak", _peak_source(program)))
    if program.compile_error is not None:
        facts.append(
            (
                "compiled",
                f"refused by XLA's compiler for {program.platform or 'this device'}: {program.compile_error.text}",
            )
        )
    elif program.platform:
        facts.append(("compiled", f"for {program.platform}"))
    traced = (
        "traced again (not in JAX's trace cache): your function ran at trace time"
        if program.traced_again
        else "read from JAX's trace cache, compiled again; nothing of yours ran"
    )
    facts.append(("measured", traced))
    return facts


def _peak_source(program: ProgramMemory) -> str:
    live, reserved = program.live_bytes, program.reserved_bytes
    if live and live >= reserved:
        return (
            f"{format_bytes(program.peak_bytes)} (XLA's live ranges: the arguments and outputs, and the "
            "temporaries live when most are)"
        )
    if live:
        return (
            f"{format_bytes(program.peak_bytes)} (what XLA reserves: arguments, outputs and its temporaries' block; "
            f"by its live ranges, arguments, outputs and the temporaries live when most are take {format_bytes(live)})"
        )
    return f"{format_bytes(program.peak_bytes)} (what XLA reserves: arguments, outputs and temporaries)"


def listed_section(facts: OutOfMemoryMessage) -> Section | None:
    """The peak buffers XLA's GPU message lists itself (``BufferAssignment OOM Debugging``), when the program
    could not be compiled again here: its own words, with the line its metadata names."""
    if not facts.buffers:
        return None
    rows = []
    for buffer in facts.buffers[:8]:
        made = "argument" if buffer.parameter else (buffer.op_name.rsplit("/", 1)[-1] or buffer.label or "-")
        line = f"{os.path.basename(buffer.source_file)}, line {buffer.source_line}" if buffer.source_file else "-"
        rows.append([buffer.shape or "-", format_bytes(buffer.size), buffer.label or "-", made, line])
    stats = ", ".join(f"{k} {format_bytes(v)}" for k, v in facts.stats.items())
    blocks: list[Block] = [Table(["buffer", "bytes", "XLA label", "made by", "line"], rows)]
    if stats:
        blocks.append(Paragraph(f"XLA's allocation stats: {stats}."))
    return Section("The peak buffers XLA's message lists", blocks)


def held_section(held: list[HeldArrays]) -> Section | None:
    if not held:
        return None
    rows = [[h.what, format_bytes(h.bytes), ", ".join(h.holders[:4]) or "no name of yours"] for h in held]
    return Section("Arrays already holding memory", [Table(["arrays", "bytes", "held by"], rows)])


# -- an out-of-memory error explained ----------------------------------------------------------------


@dataclasses.dataclass
class OutOfMemoryReport(Report):
    """An out-of-memory error, explained: the call whose program ran out, what filled it by line, ways down."""

    kind = "jax_explain"

    error_type: str = "JaxRuntimeError"
    error_kind: str = "out_of_memory"  # beside the explainer's other kinds: one field to read
    message: str = ""
    asked: int | None = None  # bytes XLA could not get
    capacity: Capacity | None = None
    program: ProgramMemory | None = None  # the jitted call that ran out
    eager: EagerAllocation | None = None  # or: an allocation outside any program
    surfaced_at: SourceLine | None = None  # a later read where the error surfaced (asynchronous dispatch)
    read: str = ""  # the name read there
    held: list[HeldArrays] = dataclasses.field(default_factory=list)
    allocator: bool = False  # the program fits what the device can give: the allocator failed, not the size
    problem: str = ""  # why the call could not be told or analysed
    facts: OutOfMemoryMessage | None = None  # what the message says (its whole text, a compiler's figures)
    free_held: FreeHeld | None = None  # the program fits alone: freeing what is held is the first way down

    def concerns(self) -> list[Concern]:
        if self.program is None and self.eager is None and self.free_held is None:
            return [failed(f"{self.error_type}: out of memory; {self.problem or 'the call could not be told'}")]
        return [act(f"{self.error_type} explained: out of memory")]

    @property
    def summary(self) -> str:
        asked = f" asking for {format_bytes(self.asked)}" if self.asked else ""
        available = self.capacity.available if self.capacity is not None else None
        have = f"; {format_bytes(available)} available" if available is not None else ""
        if self.eager is not None:
            made = f" makes {self.eager.shape} ({format_bytes(self.eager.bytes)})" if self.eager.shape else ""
            return f"Out of memory outside any jitted program: `{self.eager.call}`{made}{have}."
        if self.program is None and self.free_held is not None:
            return self._held_summary(asked, "")
        if self.program is None:
            return f"{self._out_of_memory()}{asked}{have}: jaxmagic could not tell which call ran out ({self.problem})."
        later = (
            f" (raised at {short_place(self.surfaced_at)}, where `{self.read}` is read)"
            if self.surfaced_at is not None
            else ""
        )
        called = f" called at {self.program.called_at.where}" if self.program.called_at is not None else ""
        if self.free_held is not None:
            return self._held_summary(asked, called + later)
        if self.allocator:
            return (
                f"Out of memory{asked} in `{self.program.function}`{called}{later}, though its program needs only "
                f"{format_bytes(self.program.peak_bytes)}{have}: the allocator could not give it, not the program's size."
            )
        return f"{self._out_of_memory()}: {peak_sentence(self.program, available, short=True)}{later}."

    def _held_summary(self, asked: str, where: str) -> str:
        assert self.free_held is not None
        facts = self.facts
        name = self.program.function if self.program is not None else (facts.function if facts is not None else "")
        needs = "its program needs" if self.program is not None else "the runtime reserves"
        return (
            f"Out of memory{asked} in `{name or 'the program'}`{where}: {needs} "
            f"{format_bytes(self.free_held.program_bytes)} of the device's {format_bytes(self.free_held.limit)}, "
            f"and arrays you hold take {format_bytes(self.free_held.held_bytes)} of it."
        )

    def _out_of_memory(self) -> str:
        facts = self.facts
        if facts is not None and facts.at_compile:
            figures = ""
            if facts.required and facts.capacity:
                figures = f" ({format_bytes(facts.required)} of temporaries for {format_bytes(facts.capacity)} of {facts.memory or 'memory'})"
            return f"Out of memory while compiling{figures}, before anything ran"
        return "Out of memory"

    @property
    def fix(self) -> str:
        if self.free_held is not None:
            return self.free_held.text[0].upper() + self.free_held.text[1:] + "."
        if self.allocator:
            return f"Free memory held elsewhere, or set {ALLOCATOR_SETTINGS}."
        if self.program is not None:
            return first_way_down([self.program]) or _nothing_offered(self.program)
        if self.eager is not None:
            return "Make the array smaller, or build it inside a jitted function that reduces it (XLA can fuse a reduction so the whole array never exists)."
        # the call could not be told: the next step that tells it
        return (
            "Measure the call that ran out without running it: %jax_memory CALL (its arguments may be "
            "jax.ShapeDtypeStruct), or run the cell under %%jax_memory."
        )

    def document(self) -> Document:
        sections: list[Section] = []
        if self.program is not None:
            sections.append(buffers_section(self.program))
            ways = ways_section(self.program)
            if ways is not None:
                sections.append(ways)
        listed = listed_section(self.facts) if self.program is None and self.facts is not None else None
        if listed is not None:
            sections.append(listed)
        sections.append(Section("The error", [Facts(self._error_facts())]))
        if self.program is not None:
            sections.append(Section("The program", [Facts(figures_facts(self.program))]))
        held = held_section(self.held)
        if held is not None:
            sections.append(held)
        sections.append(Section("Why", [Paragraph(p) for p in self._why()]))
        return Document(
            "%jax_explain", self.status, self.summary, sections, fix=self.fix, nothing_to_do=self.unexplained()
        )

    def _error_facts(self) -> list[tuple[str, str]]:
        facts = [("error", f"{self.error_type}: {self.message}")]
        said = self.facts
        if said is not None and said.whole and said.whole != self.message:
            facts.append(("the whole message", said.whole))
        if said is not None and said.module:
            facts.append(("XLA's module", f"`{said.module}`" + (f" ({said.code})" if said.code else "")))
        if said is not None and said.required:
            facts.append(("the compiler needed", f"{format_bytes(said.required)} of temporaries"))
        if self.asked:
            facts.append(("asked for", format_bytes(self.asked)))
        if said is not None and said.free is not None:
            reservable = f", {format_bytes(said.reservable)} of it in one piece" if said.reservable is not None else ""
            facts.append(("free then", format_bytes(said.free) + reservable))
        if self.capacity is not None:
            facts.append(("the device", self.capacity.described))
        if self.surfaced_at is not None:
            facts.append(("surfaced at", f"{self.surfaced_at.where}, reading `{self.read}`"))
        if self.eager is not None:
            facts.append(
                ("allocation", f"`{self.eager.call}`" + (f" -> {self.eager.shape}" if self.eager.shape else ""))
            )
        if self.problem:
            facts.append(("not told", self.problem))
        return facts

    def _why(self) -> list[str]:
        why = []
        if self.surfaced_at is not None:
            why.append(
                "JAX dispatches a jitted call asynchronously: the call returns at once, and an error of its "
                f"program is raised where a result is first read - here `{self.read}` at "
                f"{self.surfaced_at.where} - not on the line that made it."
            )
        facts = self.facts
        if facts is not None and facts.at_compile:
            why.append(
                "XLA lays out every buffer of a program while it compiles it; a compiler that finds no room "
                "(XLA:TPU's CompileTimeHbmOom) refuses the program before it runs. It wrote its buffer assignment "
                "and live ranges first: the buffers above are from them. A way down is proven the same way - "
                "compiled for this device, where a program that still does not fit is refused again."
            )
        if self.free_held is not None:
            why.append(
                "The program was compiled again and alone needs less than the device has; the device's "
                "memory_stats() show the rest held by live arrays, and the runtime could not reserve the program "
                "beside them. Freeing them (or moving them to the host) is the way down that changes no code "
                "of the program."
            )
        elif self.allocator:
            why.append(
                "The program's own peak fits what the device reports free, so the allocation failed for another "
                "reason: memory held by other arrays or processes, fragmentation, or a pool sized at start "
                f"(GPU: {ALLOCATOR_SETTINGS})."
            )
        elif self.program is not None and not (facts is not None and facts.at_compile):
            why.append(
                "XLA allocates a program's buffers when it runs: its arguments and outputs for the whole run, and one "
                "block for its temporaries, as large as they are when most are live - the peak. A way down changes what is live at once: donating an argument lets an output reuse it, "
                "jax.checkpoint recomputes activations instead of keeping them, computing the results a block of "
                "rows at a time (where the program's data flow says each result row needs only its own) keeps "
                "one block's buffers. Each was compiled for this device, never run, to measure its peak; a peak "
                "is never less than what XLA's memory_analysis() says the program reserves."
            )
        if self.capacity is not None and self.capacity.device.startswith("cpu"):
            why.append(
                "On CPU, XLA allocates from the host: what it can get is the host's available memory, and an "
                "allocation the host cannot give raises the same RESOURCE_EXHAUSTED error as a GPU's."
            )
        return why


# -- %%jax_memory -------------------------------------------------------------------------------------


@dataclasses.dataclass
class MemoryReport(Report):
    """``%%jax_memory`` / ``%jax_memory CALL``: each jitted program's peak by line, and ways down tried."""

    kind = "jax_memory"

    programs: list[ProgramMemory] = dataclasses.field(default_factory=list)  # largest peak first
    capacity: Capacity | None = None
    held: list[HeldArrays] = dataclasses.field(default_factory=list)
    out_of_memory: OutOfMemoryReport | None = None  # the cell ran out
    other_error: str = ""  # the cell failed for another reason
    notes: list[str] = dataclasses.field(default_factory=list)
    magic: str = "%%jax_memory"  # the form that made it: "%jax_memory" measured one call

    def concerns(self) -> list[Concern]:
        found: list[Concern] = []
        if self.out_of_memory is not None:
            found += self.out_of_memory.concerns()
        available = self.capacity.available if self.capacity is not None else None
        for program in self.programs:
            if program.compile_error is not None:
                found.append(act(f"`{program.function}` does not fit: XLA's compiler refused it"))
            elif available is not None and program.peak_bytes > available:
                found.append(act(f"`{program.function}` needs more than the device can give"))
            elif program.offered:
                found.append(note(f"`{program.function}` can go lower"))
        if self.other_error:
            found.append(failed(self.other_error))
        return found

    @property
    def summary(self) -> str:
        if self.out_of_memory is not None:
            return self.out_of_memory.summary
        failed = f" The cell failed with {ended(self.other_error)}" if self.other_error else ""
        if not self.programs and self.other_error and self.magic == "%jax_memory":
            return f"Nothing measured: the call raised {ended(self.other_error)} while traced."
        if not self.programs:
            return (
                "No jitted call to measure: the cell made none (eager operations are not programs of their own)."
                + failed
            )
        available = self.capacity.available if self.capacity is not None else None
        more = f" The largest of {len(self.programs)} programs." if len(self.programs) > 1 else ""
        return f"{peak_sentence(self.programs[0], available)}.{more}{failed}"

    @property
    def fix(self) -> str:
        if self.out_of_memory is not None:
            return self.out_of_memory.fix
        found = first_way_down(self.programs)
        if found or not self.programs:
            return found
        # nothing offered: a way that lowered the peak but is withheld, or one not measured here, is said
        largest = self.programs[0]
        if any(w.unmeasured or (w.lowers and w.withheld) for w in largest.ways_down):
            return _nothing_offered(largest)
        return ""

    def document(self) -> Document:
        sections: list[Section] = []
        if self.out_of_memory is not None and self.out_of_memory.program is None:
            sections.append(Section("The error", [Facts(self.out_of_memory._error_facts())]))
        for program in self.programs:
            sections.append(buffers_section(program))
            ways = ways_section(program)
            if ways is not None:
                sections.append(ways)
        if self.programs:
            rows = [
                [f"`{p.function}`", format_bytes(p.peak_bytes), p.signature, p.called_at.where if p.called_at else "-"]
                for p in self.programs
            ]
            sections.append(
                Section("Programs the cell ran", [Table(["function", "peak", "arguments", "called at"], rows)])
            )
        if self.capacity is not None:
            sections.append(Section("The device", [Paragraph(self.capacity.described)]))
        held = held_section(self.held)
        if held is not None:
            sections.append(held)
        if self.out_of_memory is not None:
            sections.append(Section("Why", [Paragraph(p) for p in self.out_of_memory._why()]))
        if self.notes:
            sections.append(Section("Notes", [Paragraph(n) for n in self.notes]))
        return Document(self.magic, self.status, self.summary, sections, fix=self.fix, nothing_to_do=self.unexplained())


# -- the doctor's and the watch's finding --------------------------------------------------------------


@dataclasses.dataclass
class MemoryFindingText:
    """An out-of-memory error as the doctor and the watch tell it: the words of ``OutOfMemoryReport``."""

    title: str
    short: str
    evidence: str
    fix: str
    line: SourceLine | None
    function: str = ""


def out_of_memory_finding(report: OutOfMemoryReport) -> MemoryFindingText:
    """The one wording of an out-of-memory finding, for ``%%jax_doctor`` and ``%jax_watch``."""
    program = report.program
    line = None
    if program is not None and program.buffers:
        line = next((b.made_at for b in program.buffers if b.made_at is not None), program.called_at)
    elif program is not None:
        line = program.called_at
    short = f"`{program.function}` needs {format_bytes(program.peak_bytes)}" if program is not None else "out of memory"
    evidence = []
    if report.asked:
        evidence.append(f"XLA asked for {format_bytes(report.asked)}")
    if report.capacity is not None:
        evidence.append(report.capacity.described)
    if report.surfaced_at is not None:
        evidence.append(f"the error surfaced at {report.surfaced_at.where}, reading `{report.read}`")
    return MemoryFindingText(
        title=report.summary,
        short=short,
        evidence="; ".join(evidence),
        fix=report.fix,
        line=line,
        function=program.function if program is not None else "",
    )
