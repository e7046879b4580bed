"""The transfer probe's report: implicit transfers grouped by line and value, and their wording."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

from jaxmagic.probes._support.calls.host_arguments import HostArgumentUse
from jaxmagic.probes._support.report_base import Report
from jaxmagic.probes._transfers.wording import HOST_ARRAY_FIX, WHY, transfer_fix
from jaxmagic.report import Concern, SourceLine, act, failed, note
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.usercode.source import quoted_code

MAX_GROUPS = 200  # distinct (line, value) groups kept; further transfers are only counted
REPEATED_TRANSFERS = 2  # implicit copies of one host array from one line from which they count as per-step copies

CPU_NOTE = (
    "On the CPU backend arrays already live in host memory, so reading a result back (float(x), "
    "np.asarray(x), printing) is not intercepted. On GPU and TPU the guard catches those device-to-host "
    "transfers too; that cannot be shown on this machine."
)


@dataclasses.dataclass
class Transfer:
    """Implicit transfers of one kind of value made by one line (``count`` of them)."""

    direction: str  # "host-to-device"
    value: str  # "f32[3]", "f32[] weak"; "" when JAX did not describe it
    line: SourceLine | None  # the user's line that handed the host value to JAX (the call that passed it)
    count: int = 1
    argument: str = ""  # the argument whose value was copied ("batch['x']", or the line's "batch"); "" when not told
    function: str = ""  # the jitted function given it, when the call was observed ("step")
    candidates: list[str] = dataclasses.field(default_factory=list)  # several arguments of that type: one of them
    traced: str = ""  # the user function a trace of this call ran ("loss"), when the call was traced first
    # line is None: the lines one of which made it, when lines had gone quiet (see probe.py)
    among: list[SourceLine] = dataclasses.field(default_factory=list)
    provenance: Provenance | None = None  # made_at: the line above; started_by: the outermost call

    @property
    def what(self) -> str:
        """What the transferred value probably was, from its type."""
        if not self.value:
            return "not described by JAX (its fast path)"
        if self.value.endswith(" weak"):
            return "a Python scalar"
        return "a NumPy array or other host data"


@dataclasses.dataclass
class RepeatedCopy:
    """Host data copied to the device again and again: the finding, in the same words on every path."""

    identity: tuple[object, ...]  # what it is about, the same from cell to cell (the watch tells it once, then counts)
    function: str  # the jitted function given it; "" for a copy only the transfer log saw
    headline: str
    line: SourceLine | None
    count: int
    fix: str = HOST_ARRAY_FIX


def repeated_copies(transfers: Sequence[Transfer], host_arguments: Sequence[HostArgumentUse]) -> list[RepeatedCopy]:
    """The copies of host arrays made at every step, as ``%%jax_transfers`` leads with them, ``%%jax_doctor``
    ranks them and ``%jax_watch`` tells them: each NumPy array given to a jitted function at more than one
    call (named by the function and the argument), then the transfer log's other lines that copied a host
    array of more than one element ``REPEATED_TRANSFERS`` times or more. A Python scalar or an index constant
    copied each step costs next to nothing; a copy JAX did not describe (its fast path) may be either, and is
    left to the transfer table."""
    found = [
        # the line's code, not its cell: the same loop run again in a new cell is the same problem
        RepeatedCopy(
            ("argument", h.function, h.argument, h.value, h.line.code.strip() if h.line else ""),
            h.function,
            h.title,
            h.line,
            h.calls,
        )
        for h in host_arguments
        if h.repeated
    ]
    told = {(h.line.filename, h.line.lineno) for h in host_arguments if h.line is not None}
    for t in transfers:
        if t.line is not None and (t.line.filename, t.line.lineno) in told:
            continue  # the same copies, told by the finding that names the function and the argument
        if t.count >= REPEATED_TRANSFERS and is_host_array(t.value):
            headline = f"{t.count} implicit host-to-device copies of {t.value} ({t.what}) from one line"
            where = (t.line.filename, t.line.lineno) if t.line is not None else ()
            found.append(RepeatedCopy(("line", *where, t.value), t.function, headline, t.line, t.count))
    return found


def is_host_array(value: str) -> bool:
    """True for a transferred value of more than one element ("f32[512,16]"), False for scalars and unknowns."""
    match = re.search(r"\[([\d,\s]*)\]", value or "")
    if match is None:
        return False
    dims = [int(d) for d in match.group(1).replace(" ", "").split(",") if d]
    return bool(dims) and math.prod(dims) > 1


@dataclasses.dataclass
class TransferReport(Report):
    """What ``%%jax_transfers`` found: implicit transfers, grouped by line and value."""

    kind = "jax_transfers"

    mode: str = "log"
    transfers: list[Transfer] = dataclasses.field(default_factory=list)
    total: int = 0  # every implicit transfer seen, also those not kept in a group
    blocked: bool = False  # disallow: the block stopped at a transfer (the error was not caught)
    message: str = ""  # disallow: JAX's error, first line
    lines_followed: bool = True  # False when no watcher could follow them (lines_unfollowed says why)
    lines_unfollowed: str = ""  # why, in words ("Python 3.11 has no sys.monitoring ...")
    # the NumPy arrays the jitted calls were given (the same records %%jax_doctor and %jax_watch report)
    host_arguments: list[HostArgumentUse] = dataclasses.field(default_factory=list)
    calls_unobserved: str = ""  # why the jitted calls were not observed (another probe observed them)
    backend: str = ""
    other_error: str = ""
    other_threads: int = 0  # transfers other threads logged while the block ran: not the block's, not counted

    def concerns(self) -> list[Concern]:
        found = [act(f"{t.count} implicit transfer(s) of {t.value or 'a value'}") for t in self.transfers]
        if self.total > sum(t.count for t in self.transfers):
            found.append(act(f"{self.total - sum(t.count for t in self.transfers)} more implicit transfer(s)"))
        found += [note(self.other_threads_sentence)] if self.other_threads else []
        return found + ([failed(self.other_error)] if self.other_error else [])

    @property
    def other_threads_sentence(self) -> str:
        return (
            f"{self.other_threads} implicit transfer(s) were made by other threads while the cell ran (their "
            "transfer guard logs too): not counted here, and no line of this cell made them"
        )

    @property
    def lines(self) -> list[SourceLine]:
        """The user's lines that made implicit transfers, in order of first transfer, without repeats."""
        return list({(t.line.filename, t.line.lineno): t.line for t in self.transfers if t.line}.values())

    @property
    def summary(self) -> str:
        others = f" {self.other_threads_sentence}." if self.other_threads else ""
        return self._own_summary() + others

    def _own_summary(self) -> str:
        if self.blocked:
            last = self.transfers[-1] if self.transfers else None
            at = _at(last.line) if last and last.line else ""
            value = f" of {last.value} ({last.what})" if last and last.value else ""
            earlier = f" ({self.total - 1} earlier one(s) blocked and caught by your code)" if self.total > 1 else ""
            return f"Stopped at an implicit host-to-device transfer{value}{at}{earlier}."
        if self.total:
            lines = self.lines
            where = f" on {len(lines)} line(s) of yours" if lines else ""
            verb = "blocked (your code caught the errors)" if self.mode == "disallow" else "made"
            first = self.transfers[0]
            repeated = repeated_copies(self.transfers, self.host_arguments) if self.mode == "log" else []
            if repeated:  # the copy made at every step first, as the doctor and the watch tell it
                return f"{repeated[0].headline}; {self.total} implicit transfer(s) in all{where}."
            head = f"{self.total} implicit transfer(s) {verb}{where}"
            if first.line:
                head += f"; the first{_at(first.line)}"
                if first.argument:
                    head += f" (argument `{first.argument}`)"
            elif first.among:
                head += "; the first on one of " + ", ".join(f"line {line.lineno}" for line in first.among)
            return head + "."
        if self.other_error:
            return f"The cell failed with {self.other_error}; no implicit transfer happened before."
        return "No implicit host-to-device transfer in this cell."

    def document(self) -> Document:
        sections: list[Section] = []
        if self.transfers:
            sections.append(implicit_transfers_section(self))
            sections.append(Section("Why it matters", [Paragraph(WHY)]))
        if self.blocked and self.message:
            sections.append(Section("JAX's error", [Paragraph(self.message)]))
        facts = [("mode", f"jax.transfer_guard({self.mode!r})"), ("backend", self.backend or "-")]
        checked: list[Block] = [Facts(facts), *([Paragraph(CPU_NOTE)] if self.backend == "cpu" else [])]
        sections.append(Section("Checked", checked))
        return Document(
            "%%jax_transfers", self.status, self.summary, sections, fix=self.fix, nothing_to_do=self.unexplained()
        )

    @property
    def fix(self) -> str:
        """The fix of what the headline leads with: a copy made at every step (as the doctor and the watch show
        it), else the transfer that was stopped, else the first one; "" without a transfer."""
        repeated = repeated_copies(self.transfers, self.host_arguments) if self.mode == "log" else []
        if repeated:
            return repeated[0].fix
        if not self.transfers:
            return ""
        return transfer_fix((self.transfers[-1] if self.blocked else self.transfers[0]).what)


def implicit_transfers_section(report: TransferReport) -> Section:
    """ "Implicit transfers": the transfers by line and value, where the first traced ones were made, and
    what was counted but not listed or could not be followed."""
    rows = [
        [_line_cell(t.line, t.among), t.value or "-", t.what, _argument_cell(t), str(t.count)] for t in report.transfers
    ]
    kept = sum(t.count for t in report.transfers)
    blocks: list[Block] = [Table(["your line", "value", "what it is", "argument", "times"], rows)]
    for t in report.transfers[:3]:
        if t.traced and t.provenance is not None and (t.argument or t.candidates):
            blocks += provenance_blocks(t.provenance, f"the transfer of {t.value or 'the value'}")
            blocks.append(
                Paragraph(
                    f"This call traced `{t.traced}` first; its argument {_argument_cell(t)} was copied "
                    "to the device after the trace, when the call ran on this line (not by the last "
                    "line traced inside the function)."
                )
            )
    if report.total > kept:
        blocks.append(
            Paragraph(
                f"{report.total - kept} more transfer(s) on other lines or values were "
                f"counted but not listed (the first {MAX_GROUPS} groups are)."
            )
        )
    if report.calls_unobserved:
        blocks.append(
            Paragraph(
                f"The arguments of your jitted calls were not observed ({report.calls_unobserved}): a "
                "copy is named only by the host values its line passed, never by a path inside them."
            )
        )
    if not report.lines_followed:
        blocks.append(
            Paragraph(
                f"Lines could not be followed ({report.lines_unfollowed or 'no watcher could be had'}), so the "
                "transfers are counted but not tied to their lines."
            )
        )
    return Section("Implicit transfers", blocks)


def _at(line: SourceLine) -> str:
    code = quoted_code(line)
    return f" at {line.label or line.filename}, line {line.lineno}" + (f": `{code}`" if code else "")


def _argument_cell(t: Transfer) -> str:
    if t.argument and t.function and t.function != t.traced:  # a path into the arguments of the jitted function
        return f"`{t.argument}` of `{t.function}`"
    if t.argument:
        return f"`{t.argument}`"
    if t.candidates:
        return "one of " + ", ".join(f"`{c}`" for c in t.candidates)
    return "-"


def _line_cell(line: SourceLine | None, among: Sequence[SourceLine] = ()) -> str:
    if line is None:
        return "one of " + "; ".join(_line_cell(candidate) for candidate in among) if among else "(not known)"
    inside = f" in {line.function}" if line.function not in ("<module>", "") else ""
    return f"{line.label or line.filename}:{line.lineno}{inside} `{line.code}`"
