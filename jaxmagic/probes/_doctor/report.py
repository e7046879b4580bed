"""The doctor's report: its findings, ranked in the order to fix them, their wording and ``document()``.

What the probes measured (``jaxmagic.probes._doctor.measure``) becomes one
Finding per area here; ``rank_findings`` orders them (the order of attack in
``jaxmagic.probes.doctor``'s docstring).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from jaxmagic.probes._compiles import RecompileCause, budget_magic, why_compiled_again
from jaxmagic.probes._compiles.cost_sections import cost_findings, is_big
from jaxmagic.probes._compiles.report import LIBRARY_RECOMPILE_FIX, CompileReport, library_sentence
from jaxmagic.probes._keys import key_findings
from jaxmagic.probes._keys.report import KeyReport
from jaxmagic.probes._leaks.report import LeakReport
from jaxmagic.probes._live.report import KEEP_ON_HOST, LiveReport
from jaxmagic.probes._memory.report import OutOfMemoryReport, out_of_memory_finding
from jaxmagic.probes._nans.nonfinite import NonFiniteLeaf
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.sighting import debug_step, inf_sighting_text, nan_finding_provenance, nan_finding_text
from jaxmagic.probes._nans.watch import NanSighting
from jaxmagic.probes._support.calls.host_arguments import HostArgumentUse
from jaxmagic.probes._support.report_base import Report
from jaxmagic.probes._transfers.report import TransferReport, repeated_copies
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table, fits_headline
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.wording import counted, ended, error_line, format_bytes

PROBES = ("nans", "compiles", "leaks", "keys", "transfers", "live")
RETRACE_TOKEN = "jaxmagic-doctor"
LIVE_PILE_UP = 10  # arrays of one shape left alive by the cell from which they count as piling up

AREAS = {  # probe -> (rank, area, the magic to run next)
    "nans": (1, "NaN", "%%jax_nans"),
    "leaks": (2, "tracer leak", "%%jax_leaks"),
    "memory": (2, "out of memory", "%%jax_memory"),  # explained when the cell runs out; never skipped
    "compiles": (3, "recompilation", "%%jax_compiles"),
    "transfers": (4, "implicit transfers", "%%jax_transfers --mode disallow"),
    "live": (5, "arrays piling up", "%%jax_live"),
    "keys": (6, "random keys", "%%jax_keys"),
}
ORDER_OF_ATTACK = (
    "Fix them in this order (the chapter's section 9.4): NaN first, because a NaN makes every other symptom "
    "meaningless; then errors that stop the program; then speed and memory (recompilation, transfers, arrays "
    "piling up); then the silent logic bugs that raise nothing, such as a random key that never changes. After "
    "each fix, pin it down with an assert before moving on."
)


@dataclasses.dataclass
class Finding:
    """One problem, with its evidence and the magic that looks closer."""

    probe: str
    rank: int
    area: str
    title: str
    evidence: str = ""
    line: SourceLine | None = None
    fix: str = ""
    next_magic: str = ""
    short: str = ""  # a few words for the headline: "`mul` in the backward pass of `train_step`"
    provenance: Provenance | None = None  # where the value was made; the call that started it as context
    call_number: int = 0  # NaN: which call of the function (the user's calls) first returned it
    debug_step: str = ""  # NaN: how to stop at its line with its values (%jax_debug)
    cause: RecompileCause | None = None  # recompilation: the cause %%jax_compiles gives (compiles.why_again)


@dataclasses.dataclass
class DoctorReport(Report):
    """What ``%%jax_doctor`` found, ranked."""

    kind = "jax_doctor"

    checked: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    nan_sighting: NanSighting | None = None  # the NaN watch's first call with a NaN result
    jitted_calls_watched: int | None = None  # calls of the user's jitted functions the NaN watch saw
    inf_sighting: NanSighting | None = None  # the first call whose results held inf, no NaN seen
    # the variables the cell bound that hold NaN or inf, when the watch saw no NaN
    nonfinite_left: list[NonFiniteLeaf] = dataclasses.field(default_factory=list)
    nans: NanReport | None = None  # the re-run of the first NaN-producing call
    compiles: CompileReport | None = None
    leaks: LeakReport | None = None
    keys: KeyReport | None = None
    transfers: TransferReport | None = None
    live: LiveReport | None = None  # a snapshot, taken only when arrays piled up
    memory: OutOfMemoryReport | None = None  # when the cell ran out of memory
    live_growth: dict[str, int] = dataclasses.field(default_factory=dict)  # "float32[32, 16]" -> arrays added
    host_arguments: list[HostArgumentUse] = dataclasses.field(default_factory=list)  # NumPy arrays given to jit
    other_error: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)

    def finding(self, probe: str) -> Finding | None:
        return next((f for f in self.findings if f.probe == probe), None)

    @property
    def areas(self) -> list[str]:
        return [f.area for f in self.findings]

    def concerns(self) -> list[Concern]:
        found = [act(f"{f.area}: {f.title}") for f in self.findings]
        return found + ([failed(self.other_error)] if self.other_error else [])

    @property
    def summary(self) -> str:
        failed = f" The cell failed with {ended(self.other_error)}" if self.other_error else ""
        if not self.findings:
            if "nans" in self.checked and self.jitted_calls_watched == 0:  # the NaN watch looked at nothing
                others = [probe for probe in self.checked if probe != "nans"]
                return (
                    f"Nothing found by {', '.join(others)}; NaNs not checked (no jitted function of yours ran; "
                    f"%%jax_nans checks eager results).{failed}"
                )
            return f"Nothing found by {', '.join(self.checked)}.{failed}"
        n = len(self.findings)
        head = f"{n} problem{'s' if n > 1 else ''}, in the order to fix them: "
        listed = "; ".join(f"{i}. {f.area} ({f.short or f.title})" for i, f in enumerate(self.findings, 1))
        if not fits_headline(head + listed + failed):  # the first in words, the others by area (each below)
            first = self.findings[0]
            by_area = "; ".join(f"{i}. {f.area}" for i, f in enumerate(self.findings[1:], 2))
            listed = f"1. {first.area} ({first.short or first.title})" + (f"; {by_area}" if by_area else "")
        return head + listed + "." + failed

    def document(self) -> Document:
        sections = _findings_sections(self.findings) if self.findings else []
        sections += [_every_probe_section(self), _how_combined_section(self.notes)]
        return Document(
            "%%jax_doctor", self.status, self.summary, sections, fix=_first_fix(self), nothing_to_do=self.unexplained()
        )


def _findings_sections(findings: list[Finding]) -> list[Section]:
    """The table of the findings in the order to fix them, then a section for each."""
    # The magic to run next goes under the finding, not in a column of its own: the table then
    # fits a narrow notebook (900 px with the sidebar open) without scrolling.
    rows = [
        [str(i), f.area, f"{f.title} - look closer with `{f.next_magic}`", _where(f.line)]
        for i, f in enumerate(findings, 1)
    ]
    sections = [
        Section(
            "Findings, in the order to fix them",
            [Table(["#", "area", "finding", "your line"], rows), Paragraph(ORDER_OF_ATTACK)],
        )
    ]
    for i, f in enumerate(findings, 1):
        blocks: list[Block] = [Paragraph(f.title)]
        if f.evidence:
            blocks.append(Facts([("evidence", f.evidence)]))
        if f.provenance is not None:
            blocks += provenance_blocks(f.provenance, "it")
        elif f.line:
            blocks.append(SourceLines([f.line]))
        if f.fix and i > 1:  # the first finding's fix is the document's own line, under the headline
            blocks.append(Paragraph(f.fix))
        blocks.append(Paragraph(f"Next: `{f.next_magic}` on the same cell shows the details."))
        if f.debug_step:
            blocks.append(Paragraph(f.debug_step))
        sections.append(Section(f"{i}. {f.area}", blocks))
    return sections


def _every_probe_section(report: DoctorReport) -> Section:
    """Each probe with what it found (or its clean result) and its magic."""
    rows = []
    for probe in PROBES:
        _rank, _area, magic = AREAS[probe]
        if probe in report.skipped:
            rows.append([probe, "skipped (--skip)", "-"])
            continue
        found = [f for f in report.findings if f.probe == probe]
        sub = getattr(report, probe, None)
        result = "; ".join(f.title for f in found) if found else _clean_text(probe, sub, report)
        rows.append([probe, result, f"`{magic}`"])
    return Section("Every probe", [Table(["probe", "result", "magic"], rows)])


def _how_combined_section(notes: list[str]) -> Section:
    how = [Paragraph(n) for n in notes]
    how.append(
        Paragraph(
            "All probes ran together, around one run of the cell. None of them stopped it for a finding it can "
            "record: the first NaN was noted (not raised) and only the call that made it was run again after the "
            "cell, under jax.debug_nans; reused keys were recorded; transfers were logged. A tracer leak would "
            "still stop the cell, as under %%jax_leaks."
        )
    )
    how.append(
        Paragraph(
            "The doctor watches the calls of jitted functions your own code makes - directly or through a "
            "library's jit wrapper such as eqx.filter_jit or nnx.jit - after each call, with the calls left "
            "on JAX's fast path; NaNs made by eager operations are not watched - %%jax_nans sees those. "
            "Functions are traced and compiled once more the first time the doctor sees them, under a cache "
            "key the doctor keeps."
        )
    )
    return Section("How the probes were combined", how)


def _first_fix(report: DoctorReport) -> str:
    """The document's fix line: the first finding's fix, else the magic that looks closer at it."""
    first = report.findings[0] if report.findings else None
    if first is None:
        return ""
    if first.fix:
        return f"{first.area}: {first.fix}"
    # as the watch does: the magic that looks closer
    closer = first.next_magic or AREAS.get(first.probe, (0, "", "%%jax_doctor"))[2]
    return f"{first.area}: run `{closer}` on this cell: it looks closer than the doctor does."


def _where(line: SourceLine | None) -> str:
    if line is None:
        return "-"
    return f"{line.label or line.filename}:{line.lineno} `{line.code}`" if line.code else line.where


def _clean_text(probe: str, sub: Any, report: DoctorReport) -> str:  # sub: the probe's report, or None
    if probe == "nans":
        if report.nan_sighting is not None:
            return "NaN seen (see the finding)"
        if report.jitted_calls_watched == 0:  # nothing was looked at: no claim about the cell's results
            return "not checked: no jitted function of yours ran (eager results are not watched)"
        calls = report.jitted_calls_watched
        return f"no NaN in the results of {calls} jitted call(s)" if calls else "no NaN in any result"
    if probe == "live":
        return f"no shape of array grew by {LIVE_PILE_UP} or more"
    if sub is None:
        return "not run"
    if probe == "compiles":
        users = sub.user_functions
        slow = [s.nothing_to_fix for s in sub.sizes if s.slow and not s.unknown and not is_big(s)]
        return (
            (f"{len(users)} function(s), each compiled once" if users else "nothing of yours compiled")
            + " (the doctor's own first compilation included)"
            + "".join(f"; {text}" for text in slow[:1])
        )
    if probe == "leaks":
        return "no tracer leaked"
    if probe == "keys":
        flows = [f for f in sub.flows if f.calls]
        return (
            "a new key at every call: " + ", ".join(f"`{f.function}` {f.distinct}/{f.calls}" for f in flows)
            if flows
            else "no key reuse; no typed key reached a jitted function"
        )
    if probe == "transfers":
        if not sub.total:
            return "no implicit transfer"
        undescribed = sum(t.count for t in sub.transfers if not t.value)
        text = f"{sub.total} implicit transfer(s), no host array given to a jitted function at every call"
        if undescribed:
            text += (
                f"; JAX did not say what {undescribed} of them were (index constants and Python numbers "
                "usually): `%%jax_transfers --mode disallow` stops at each"
            )
        return text
    return sub.summary


# -- findings ------------------------------------------------------------------


def _finding(probe: str, title: str, **fields: Any) -> Finding:
    rank, area, magic = AREAS[probe]
    fields.setdefault("next_magic", magic)
    return Finding(probe=probe, rank=rank, area=area, title=title, **fields)


def _nan_findings(report: DoctorReport) -> list[Finding]:
    """The NaN finding: the same line, call number and provenance as ``%%jax_nans`` on the cell - the
    producing line inside the user's function, the call site (``w, loss = train_step(...)``) as context."""
    s = report.nan_sighting
    if s is None:
        return _left_nonfinite_findings(report)
    where = f"`{s.function}`" if s.jitted else f"the eager operation `{s.function}`"
    later = f"; {s.calls_with_nan - 1} later call(s) returned NaN too" if s.calls_with_nan > 1 else ""
    nan = report.nans
    if s.came_in:
        return [
            _finding(
                "nans",
                f"NaN already in the arguments of {where} (call {s.call_number})",
                evidence=f"the arguments of its first call with a NaN result held NaN{later}: it was made "
                "before this cell or outside JAX",
                line=s.line,
                next_magic="%%jax_nans (on the cell that made the arguments)",
                provenance=Provenance(
                    started_by=s.line, unknown="the NaN came in through the arguments, made before this call"
                ),
                call_number=s.call_number,
            )
        ]
    title, evidence, fix, short = nan_finding_text(s, nan, where)
    provenance = nan_finding_provenance(s, nan)
    line = provenance.made_at or s.line
    return [
        _finding(
            "nans",
            title,
            evidence=evidence + later_text(s, nan, later),
            line=line,
            fix=fix,
            short=short,
            provenance=provenance,
            call_number=s.call_number,
            debug_step=debug_step(s, provenance) if s.jitted else "",
        )
    ]


def _left_nonfinite_findings(report: DoctorReport) -> list[Finding]:
    """No NaN in a watched result, but a variable the cell bound holds inf (only NaN is watched) or a NaN
    (an eager operation's: not watched): the same words as ``%%jax_nans`` on the cell, never OK."""
    s = report.inf_sighting
    if s is not None:  # a watched call's results held inf: named by the call, as a NaN sighting is
        title, details, fix = inf_sighting_text(s)
        return [
            _finding("nans", title, evidence=details, line=s.line, fix=fix, short=title, next_magic="%%jax_nans --infs")
        ]
    leaves = report.nonfinite_left
    if not leaves:
        return []
    names = ", ".join(f"`{_leaf_path(leaf.name)}`" for leaf in leaves[:3]) + (
        f" and {len(leaves) - 3} more" if len(leaves) > 3 else ""
    )
    nan = any(leaf.nan_count for leaf in leaves)
    held = "NaN" if nan else "inf"
    why = (
        "the doctor watches the results of your jitted calls, and none held one: an eager operation made it"
        if nan
        else "the doctor watches results for NaN only"
    )
    magic = "%%jax_nans" if nan else "%%jax_nans --infs"
    return [
        _finding(
            "nans",
            f"No NaN seen, but {names} holds {held}",
            evidence=f"{why}; "
            + "; ".join(f"{leaf.name}: {leaf.nan_count} NaN, {leaf.inf_count} inf" for leaf in leaves[:3]),
            short=f"{names} holds {held}",
            fix=f"Run the cell under {magic} to find the operation that made it.",
            next_magic=magic,
        )
    ]


def later_text(s: NanSighting, nan: NanReport | None, later: str) -> str:
    text = later
    if nan is not None and nan.found and nan.nonfinite:
        names = [_leaf_path(leaf.name) for leaf in nan.nonfinite]
        text += (
            "; non-finite: "
            + ", ".join(f"`{n}`" for n in names[:4])
            + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        )
    if s.donated:
        text += (
            f". `{s.function}` donates {', '.join(s.donated)}: the re-run used the copies the watch kept, "
            "without donation"
        )
    if s.rerun_note:
        text += ". " + s.rerun_note
    return text


def _leaf_path(name: str) -> str:
    """``result of jax.grad(f)(p, x)[1][0]['b']`` -> ``grad(f)(...)[1][0]['b']``: the call shortened, the path kept."""
    match = re.match(r"(result of|argument) (.*?)(\(.*\))((?:\[[^\]]*\])*)$", name)
    if match is None:
        return name
    callee = match.group(2).replace("jax.", "")
    return f"{callee}(...){match.group(4)}"


def _memory_findings(report: DoctorReport) -> list[Finding]:
    """The cell ran out of memory: the finding in the words the explainer uses (``out_of_memory_finding``)."""
    if report.memory is None:
        return []
    told = out_of_memory_finding(report.memory)
    return [_finding("memory", told.title, short=told.short, evidence=told.evidence, line=told.line, fix=told.fix)]


def _leak_findings(report: DoctorReport) -> list[Finding]:
    """The leak, with %%jax_leaks' own headline, line and fix (``LeakReport.line`` and ``.fix``)."""
    leaks = report.leaks
    if leaks is None or not (leaks.leaked or leaks.unexpected):
        return []
    return [_finding("leaks", leaks.summary.rstrip("."), line=leaks.line, fix=leaks.fix)]


def _compile_findings(report: DoctorReport) -> list[Finding]:
    compiles = report.compiles
    if compiles is None:
        return []
    found = []
    for f in compiles.recompiled_functions:
        cause = f.again or why_compiled_again(f)  # %%jax_compiles' own cause object, worded the same
        found.append(
            _finding(
                "compiles",
                f"`{f.name}` compiled {counted(f.count, 'time')}: {cause.reason}",
                evidence=cause.evidence,
                line=f.first_line,
                fix=cause.fix,
                next_magic=budget_magic(f.name),
                short=f"`{f.name}` {f.count} times, {cause.title}",
                cause=cause,
            )
        )
    for f in compiles.library_recompiles:  # worded as %%jax_compiles words it
        found.append(
            _finding(
                "compiles",
                library_sentence(f).rstrip("."),
                line=f.first_line,
                fix=LIBRARY_RECOMPILE_FIX,
                next_magic="%%jax_compiles",
                short=f"a library's `{f.name}` {f.count} times",
            )
        )
    # The compile probe's other findings, worded as %%jax_compiles words them (one home: compiles/cost_sections).
    for cost in cost_findings(compiles.sizes, compiles.donations, compiles.cache_misses, compiles.stale_globals):
        found.append(
            _finding(
                "compiles",
                cost.headline,
                line=cost.line,
                fix=cost.fix,
                next_magic="%%jax_compiles",
                short=cost.short,
                provenance=cost.provenance,
            )
        )
    return found


def _transfer_findings(report: DoctorReport) -> list[Finding]:
    """The copies made at every step, as ``%%jax_transfers`` and the watch tell them (``repeated_copies``)."""
    if report.transfers is None:
        return []
    copies = repeated_copies(report.transfers.transfers, report.host_arguments)
    return [_finding("transfers", c.headline, line=c.line, fix=c.fix) for c in copies[:3]]


def _live_findings(report: DoctorReport) -> list[Finding]:
    live = report.live
    if live is None:
        return []
    found = []
    for g in live.groups:
        added = report.live_growth.get(f"{g.dtype}{list(g.shape)}", 0)
        if added < LIVE_PILE_UP:
            continue
        held = f", held by {', '.join(f'`{h}`' for h in g.holders[:2])}" if g.holders else ""
        if g.in_jit_cache and not g.holders:
            functions = ", ".join(f"jit({f})" for f in g.jit_functions[:2])
            found.append(
                _finding(
                    "live",
                    f"{added} more `{g.type_text}` kept by the jit cache as constants of "
                    f"{functions or 'a traced function'}",
                    fix="Pass large arrays as arguments instead of reading them from globals; "
                    "jax.clear_caches() frees them.",
                )
            )
        else:
            found.append(
                _finding(
                    "live",
                    f"{added} more `{g.type_text}` alive after the cell ({format_bytes(added * g.bytes_each)}){held}",
                    fix=f"Arrays kept in a list grow with every step: {KEEP_ON_HOST} (del the container); "
                    "x.delete() frees an array at once.",
                )
            )
    return found[:3]


def _key_findings(report: DoctorReport) -> list[Finding]:
    """The key findings ``%%jax_keys`` and the watch tell, in their words (``keys.key_findings``)."""
    if report.keys is None:
        return []
    return [
        _finding(
            "keys",
            k.headline,
            short=k.short,
            evidence=k.evidence,
            line=k.line,
            fix=k.fix,
            provenance=k.provenance,
        )
        for k in key_findings(report.keys)
    ]


def rank_findings(report: DoctorReport) -> list[Finding]:
    """Every finding of the sub-reports, in the order to fix them."""
    found = []
    for collect in (
        _nan_findings,
        _memory_findings,
        _leak_findings,
        _compile_findings,
        _transfer_findings,
        _live_findings,
        _key_findings,
    ):
        try:
            found += collect(report)
        except Exception as error:  # one probe's odd report must not hide the others
            report.notes.append(f"jaxmagic could not read one report ({collect.__name__}): {error_line(error)}")
    return sorted(found, key=lambda f: f.rank)


# -- the probe ------------------------------------------------------------------
