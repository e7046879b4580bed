"""Doctor probe: one run of a cell under every applicable probe, findings ranked in the order to fix them.

Usage without IPython::

    with jaxmagic.probes.doctor(namespace=globals()) as report:
        params, losses = train(step_fn, params0, X, Y, 8)
    [f.area for f in report.findings]     # ["NaN", "recompilation", "random keys"]
    report.compiles.count("train_step"), report.nan_sighting.function, report.keys.repeated_flows

The probes - NaN/inf, compilations, tracer leaks, key reuse, implicit
transfers, live arrays - are entered together, around one run of the cell.
Two of JAX's tools stop a program at the first finding, which would hide
everything after it; the doctor uses them so that they do not:

* NaN: ``jax.debug_nans`` raises at the first NaN - at step 0 of a training
  loop, before any recompilation or key problem could show. The doctor watches
  the results of every call instead (``jaxmagic.probes._support.nan_watch``) and, after the
  cell, re-runs only the one jitted call that first produced a NaN, with the
  same arguments, under the ``%%jax_nans`` probe - a jitted function is pure,
  so nothing the user would mind happens twice. The cell itself is never run
  again.
* Key reuse: recorded, not raised (``jaxmagic.probes.keys(record=True)``); each
  traced function is checked for a key used twice, and the keys reaching each
  jitted function are counted. Keys consumed twice between calls are not
  checked call by call (that check re-traces operations at every call and
  would make the doctor several times slower); the count shows their effect,
  and ``%%jax_keys`` gives the line.
* Transfers: logged (``jax.transfer_guard("log")``), never disallowed.

A tracer leak still stops the cell, as under ``%%jax_leaks``: the leaked tracer
would break the code that uses it anyway. Traces are made under a cache key of
the doctor's own, kept from one doctor cell to the next, so a function is traced
(with leak checking) and compiled once more the first time the doctor sees it,
not at every doctor cell.

Order of attack (chapter section 9.4): NaN first, because it makes every other
symptom meaningless; then errors that stop the program (leaked tracers); then
speed and memory (recompilation, implicit transfers, arrays piling up); then
silent logic bugs such as a random key that never changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Iterator

import numpy as np

from jaxmagic._jax import compat, jit_calls
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.nan_watch import NanWatch, user_frame
from jaxmagic.probes.nans import NanReport, apply_search, nans
from jaxmagic.report import Report, SourceLine, Status
from jaxmagic.report.source import source_line
from jaxmagic.report.wording import ended, error_line, message_of

PROBES = ("nans", "compiles", "leaks", "keys", "transfers", "live")
RETRACE_TOKEN = "jaxmagic-doctor"
LIVE_PILE_UP = 10  # arrays of one shape left alive by the cell from which they count as piling up
REPEATED_TRANSFERS = 2  # implicit transfers of one line from which they count as per-step copies

AREAS = {  # probe -> (rank, area, the magic to run next)
    "nans": (1, "NaN", "%%jax_nans"),
    "leaks": (2, "tracer leak", "%%jax_leaks"),
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


@dataclasses.dataclass
class HostArgument:
    """A NumPy array given to one of your jitted functions: JAX copies it to the device at every call."""

    function: str
    argument: str  # "x" or "args[1]"
    value: str  # "f32[4,4]"
    calls: int = 0
    line: SourceLine | None = None


@dataclasses.dataclass
class DoctorReport(Report):
    """What ``%%jax_doctor`` found, ranked."""

    kind = "jax_doctor"

    checked: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    nan_sighting: object = None  # _nan_watch.NanSighting
    nans: object = None  # NanReport of the re-run of the first NaN-producing call
    compiles: object = None  # CompileReport
    leaks: object = None  # LeakReport
    keys: object = None  # KeyReport
    transfers: object = None  # TransferReport
    live: object = None  # LiveReport (a snapshot, taken only when arrays piled up)
    live_growth: dict = dataclasses.field(default_factory=dict)  # "float32[32, 16]" -> arrays added by the cell
    host_arguments: list = dataclasses.field(default_factory=list)  # HostArgument: NumPy arrays given to jit
    other_error: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)

    def finding(self, probe: str) -> Finding | None:
        return next((f for f in self.findings if f.probe == probe), None)

    @property
    def areas(self) -> list[str]:
        return [f.area for f in self.findings]

    @property
    def status(self) -> Status:
        if self.findings:
            return Status.PROBLEM
        return Status.ERROR if self.other_error else Status.OK

    @property
    def summary(self) -> str:
        failed = f" The cell failed with {ended(self.other_error)}" if self.other_error else ""
        if not self.findings:
            return f"Nothing found by {', '.join(self.checked)}.{failed}"
        n = len(self.findings)
        head = f"{n} problem{'s' if n > 1 else ''}, in the order to fix them: "
        return (
            head
            + "; ".join(f"{i}. {f.area} ({f.short or f.title})" for i, f in enumerate(self.findings, 1))
            + "."
            + failed
        )

    def document(self):
        from jaxmagic.report.document import Document, Facts, Paragraph, Section, SourceLines, Table

        sections = []
        if self.findings:
            rows = [
                [str(i), f.area, f.title, _where(f.line), f"`{f.next_magic}`"] for i, f in enumerate(self.findings, 1)
            ]
            sections.append(
                Section(
                    "Findings, in the order to fix them",
                    [
                        Table(["#", "area", "finding", "your line", "look closer with"], rows),
                        Paragraph(ORDER_OF_ATTACK),
                    ],
                )
            )
            for i, f in enumerate(self.findings, 1):
                blocks = []
                if f.evidence:
                    blocks.append(Facts([("evidence", f.evidence)]))
                if f.line:
                    blocks.append(SourceLines([f.line]))
                if f.fix:
                    blocks.append(Paragraph(f.fix))
                blocks.append(Paragraph(f"Next: `{f.next_magic}` on the same cell shows the details."))
                sections.append(Section(f"{i}. {f.area}", [Paragraph(f.title)] + blocks))
        rows = []
        for probe in PROBES:
            rank, area, magic = AREAS[probe]
            if probe in self.skipped:
                rows.append([probe, "skipped (--skip)", "-"])
                continue
            found = [f for f in self.findings if f.probe == probe]
            sub = getattr(self, probe, None)
            result = "; ".join(f.title for f in found) if found else _clean_text(probe, sub, self)
            rows.append([probe, result, f"`{magic}`"])
        sections.append(Section("Every probe", [Table(["probe", "result", "magic"], rows)]))
        how = [Paragraph(n) for n in self.notes]
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
                "The doctor watches the calls of jitted functions made by your own code, after each call, "
                "with the calls left on JAX's fast path; NaNs made by eager operations or inside library code "
                "are not watched - %%jax_nans sees those. Functions are traced and compiled once more the first "
                "time the doctor sees them, under a cache key the doctor keeps."
            )
        )
        sections.append(Section("How the probes were combined", how))
        return Document("%%jax_doctor", self.status, self.summary, sections)


def _where(line: SourceLine | None) -> str:
    if line is None:
        return "-"
    return f"{line.label or line.filename}:{line.lineno} `{line.code}`" if line.code else line.where


def _clean_text(probe: str, sub, report: DoctorReport) -> str:
    if probe == "nans":
        sighting = report.nan_sighting
        return "no NaN in any result" if sighting is None else "NaN seen (see the finding)"
    if probe == "live":
        return f"no shape of array grew by {LIVE_PILE_UP} or more"
    if sub is None:
        return "not run"
    if probe == "compiles":
        users = sub.user_functions
        return (
            f"{len(users)} function(s), each compiled once" if users else "nothing of yours compiled"
        ) + " (the doctor's own first compilation included)"
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


def _finding(probe: str, title: str, **fields) -> Finding:
    rank, area, magic = AREAS[probe]
    fields.setdefault("next_magic", magic)
    return Finding(probe=probe, rank=rank, area=area, title=title, **fields)


def _nan_findings(report: DoctorReport) -> list[Finding]:
    from jaxmagic.probes.nans import BACKWARD_EXPLANATION, FORWARD_CAUSES

    s = report.nan_sighting
    if s is None:
        return []
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
            )
        ]
    evidence = f"first in call {s.call_number} of {where} ({', '.join(s.leaves)}){later}"
    line, fix = s.line, ""
    producer = nan.producer if nan is not None and nan.found else None
    if producer is not None:
        phase = "the backward pass (gradient)" if producer.phase == "backward" else "the forward pass"
        inside = f" inside `{producer.library_function}`" if producer.library_function else ""
        title = f"NaN made by `{producer.primitive}`{inside} in {phase} of {where}"
        if producer.discarded_by:
            title += f" (in a branch `{producer.discarded_by}` discarded)"
        # The line JAX attached (a backward pass's forward line), else the call site; the producer's
        # own line is in report.nans and in %%jax_nans.
        line = nan.origin_lines[-1] if nan.origin_lines else s.line
        evidence += f"; {producer.description}"
        if producer.nan_maker:
            evidence += f"; then `{producer.nan_maker}` made NaN of it ({producer.nan_maker_values})"
    if nan is not None and nan.found:
        if producer is None:
            phase = "the backward pass (gradient)" if nan.phase == "backward" else "the forward pass"
            title = f"NaN made by `{nan.primitive or '?'}` in {phase} of {where}"
            if nan.origin_lines:
                line = nan.origin_lines[-1]
        if nan.nonfinite:
            names = [_leaf_path(leaf.name) for leaf in nan.nonfinite]
            evidence += (
                "; non-finite: "
                + ", ".join(f"`{n}`" for n in names[:4])
                + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            )
        fix = (
            BACKWARD_EXPLANATION
            if nan.phase == "backward"
            else (
                f"`{nan.primitive}`: typically {FORWARD_CAUSES[nan.primitive]}."
                if nan.primitive in FORWARD_CAUSES
                else ""
            )
        )
        if producer is not None and producer.phase == "forward" and producer.primitive in FORWARD_CAUSES:
            fix = f"`{producer.primitive}`: typically {FORWARD_CAUSES[producer.primitive]}."
    else:
        title = f"NaN in the results of {where}"
    if s.rerun_note:
        evidence += ". " + s.rerun_note
    short = (
        f"`{producer.primitive if producer else nan.primitive}` in the {nan.phase} pass of {where}"
        if nan is not None and nan.found
        else f"in the results of {where}"
    )
    return [_finding("nans", title, evidence=evidence, line=line, fix=fix, short=short)]


def _leaf_path(name: str) -> str:
    """``result of jax.grad(f)(p, x)[1][0]['b']`` -> ``grad(f)(...)[1][0]['b']``: the call shortened, the path kept."""
    import re

    match = re.match(r"(result of|argument) (.*?)(\(.*\))((?:\[[^\]]*\])*)$", name)
    if match is None:
        return name
    callee = match.group(2).replace("jax.", "")
    return f"{callee}(...){match.group(4)}"


def _leak_findings(report: DoctorReport) -> list[Finding]:
    from jaxmagic.probes.leaks import LEAK_FIX

    leaks = report.leaks
    if leaks is None or not (leaks.leaked or leaks.unexpected):
        return []
    line = None
    if leaks.leaked:
        first = leaks.primary[0] if leaks.primary else leaks.leaked[0]
        line = first.created_at
    elif leaks.unexpected is not None:
        line = leaks.unexpected.created_at or leaks.unexpected.used_at
    return [_finding("leaks", leaks.summary.rstrip("."), line=line, fix=LEAK_FIX)]


def _compile_findings(report: DoctorReport) -> list[Finding]:
    from jaxmagic.probes.compiles import CAUSE_TITLES

    compiles = report.compiles
    if compiles is None:
        return []
    found = []
    for f in compiles.recompiled_functions:
        found.append(
            _finding(
                "compiles",
                f"`{f.name}` compiled {f.count} times: {f.reason}",
                evidence=f.evidence or f.cause_breakdown,
                line=f.first_line,
                fix=f.fix,
                next_magic=f"%%jax_compiles --budget 1 --fn {f.name}",
                short=f"`{f.name}` {f.count} times, {CAUSE_TITLES.get(f.main_cause, f.main_cause)}",
            )
        )
    return found


def _transfer_findings(report: DoctorReport) -> list[Finding]:
    transfers = report.transfers
    if transfers is None:
        return []
    from jaxmagic.probes.transfers import WHY

    found = []
    for t in transfers.transfers:
        # Python scalars and index constants copied each step cost next to nothing; host arrays do not.
        # JAX's fast path does not describe the value: then it may be either, and the line is shown.
        # JAX's fast path does not describe the value (then it may be either): those are left to
        # %%jax_transfers, except host arrays given to a jitted function, which the doctor sees itself.
        if t.count >= REPEATED_TRANSFERS and _is_host_array(t.value):
            found.append(
                _finding(
                    "transfers",
                    f"{t.count} implicit host-to-device copies of {t.value} ({t.what}) from one line",
                    line=t.line,
                    fix=WHY,
                )
            )
    for h in report.host_arguments:
        if h.calls >= REPEATED_TRANSFERS:
            found.append(
                _finding(
                    "transfers",
                    f"`{h.function}` was given a NumPy array ({h.value}, argument "
                    f"`{h.argument}`) in {h.calls} calls: copied to the device every time",
                    line=h.line,
                    fix=WHY,
                )
            )
    return found[:3]


def _is_host_array(value: str) -> bool:
    """True for a transferred value of more than one element ("f32[512,16]"), False for scalars and unknowns."""
    import re

    match = re.search(r"\[([\d,\s]*)\]", value or "")
    if match is None:
        return False
    dims = [int(d) for d in match.group(1).replace(" ", "").split(",") if d]
    size = 1
    for d in dims:
        size *= d
    return bool(dims) and size > 1


def _live_findings(report: DoctorReport) -> list[Finding]:
    from jaxmagic.report.wording import format_bytes as _bytes

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
                    f"{added} more `{g.type_text}` alive after the cell ({_bytes(added * g.bytes_each)}){held}",
                    fix="Arrays kept in a list grow with every step: keep Python numbers "
                    "(float(loss)) or del the container; x.delete() frees an array at once.",
                )
            )
    return found[:3]


def _key_findings(report: DoctorReport) -> list[Finding]:
    from jaxmagic.probes.keys import FIX

    keys = report.keys
    if keys is None:
        return []
    found = []
    for f in keys.repeated_flows:
        found.append(
            _finding(
                "keys",
                f"`{f.function}` got the same key in {f.repeated_times} of its {f.calls} "
                f"calls (argument `{f.argument}`)",
                short=f"`{f.function}` got the same key {f.repeated_times} times",
                evidence=f"{f.distinct} distinct key(s) in {f.calls} calls; the repeated key's data "
                f"is {f.repeated_key}: the same random numbers (e.g. the same dropout mask) "
                "every call" + (" (a legacy uint32 key, followed by its data)" if f.legacy else ""),
                line=f.first_call,
                fix=FIX,
            )
        )
    for r in keys.reuse:
        found.append(
            _finding(
                "keys",
                f"key used twice: `{r.consumer}` got an already consumed key"
                + (f" ({r.count} times)" if r.count > 1 else ""),
                evidence=r.explanation,
                line=r.reused_at,
                fix=FIX,
            )
        )
    if not keys.repeated_flows:  # the same bug seen from the eager side: named once, by the flow if there is one
        for d in keys.repeated_draws[:3]:
            found.append(
                _finding(
                    "keys",
                    d.text,
                    short=f"`jax.random.{d.api}` got the same key {d.repeated_times} times",
                    evidence=f"{d.distinct} distinct key(s) in {d.calls} calls; the repeated key's data is "
                    f"{d.repeated_key}: the same random numbers every call"
                    + (" (a legacy uint32 key, followed by its data)" if d.legacy else ""),
                    line=d.line,
                    fix=FIX,
                )
            )
    return found


def rank_findings(report: DoctorReport) -> list[Finding]:
    """Every finding of the sub-reports, in the order to fix them."""
    found = []
    for collect in (
        _nan_findings,
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


def doctor(
    *, skip: list[str] | tuple[str, ...] = (), namespace: dict | None = None
) -> contextlib.AbstractContextManager[DoctorReport]:
    """Run the block under every probe not in ``skip``; the report ranks what they found.

    The block's own exception (or a tracer leak's) propagates unchanged after
    the report is filled in. ``namespace`` (the user's variables) lets the
    probes name what holds leaked tracers and live arrays. An unknown name in
    ``skip`` raises ProbeArgumentError here, before any block runs.
    """
    skip = list(dict.fromkeys(skip))
    unknown = [name for name in skip if name not in PROBES]
    if unknown:
        raise ProbeArgumentError("skip", f"takes probes among {', '.join(PROBES)}; unknown: {', '.join(unknown)}")
    return _doctor_block(skip, namespace)


@contextlib.contextmanager
def _doctor_block(skip: list[str], namespace: dict | None) -> Iterator[DoctorReport]:
    from jaxmagic.probes.compiles import compiles
    from jaxmagic.probes.keys import keys
    from jaxmagic.probes.leaks import leaks
    from jaxmagic.probes.transfers import transfers

    report = DoctorReport(checked=[p for p in PROBES if p not in skip], skipped=skip)
    watch = NanWatch() if "nans" not in skip else None
    try:
        with preserved_jax_state(()), contextlib.ExitStack() as stack:
            # Entered outermost first; they exit in reverse, so the NaN re-run happens after every probe
            # but the live-array one has finished (it must not count as the cell's compilations, transfers
            # or traces) and before the live-array diff (so the arguments it held are released).
            if "live" not in skip:
                stack.enter_context(_live_growth(report, namespace))
            if watch is not None:
                stack.callback(_explain_nan, report, watch)
            if "leaks" not in skip:
                report.leaks = stack.enter_context(leaks(namespace=namespace, retrace_token=RETRACE_TOKEN))
            if "compiles" not in skip:
                report.compiles = stack.enter_context(compiles(raise_over_budget=False))
            if "transfers" not in skip:
                report.transfers = stack.enter_context(transfers(mode="log"))
            observers = ((watch,) if watch is not None else ()) + (
                (_HostArguments(report),) if "transfers" not in skip else ()
            )

            def calls_unseen():
                report.notes.append(
                    "The cell switched jax.debug_nans (or debug_infs) itself, which takes over the hook the "
                    "doctor watches jitted calls through: calls after that were not watched for NaN, keys or "
                    "NumPy arguments."
                )

            watching = {"only_user_calls": True, "fast_path": True, "on_calls_unseen": calls_unseen}
            if "keys" not in skip:
                report.keys = stack.enter_context(
                    keys(record=True, check_calls=False, also_observe=observers, **watching)
                )
            elif observers:
                if not stack.enter_context(jit_calls.observing_calls(*observers, **watching)):
                    report.notes.append("This JAX gives no way to see single calls: NaNs were not watched.")
            yield report
    except BaseException as error:
        lines = message_of(error).strip().splitlines()
        report.other_error = f"{type(error).__name__}: {lines[0] if lines else ''}"
        raise
    finally:
        report.findings = rank_findings(report)


class _HostArguments:
    """A call observer noting NumPy arrays (more than one element) among the arguments of jitted calls."""

    def __init__(self, report: DoctorReport):
        self.report = report
        self.seen: dict[tuple, HostArgument] = {}

    def before(self, name, is_jit, args, params) -> None:
        if not is_jit:
            return
        local = jit_calls.call_locals()
        if local is None:
            return
        given = local.get("args") or ()
        for index, value in enumerate(given):
            if isinstance(value, np.ndarray) and value.size > 1:
                key = (name, index, value.shape, str(value.dtype))
                entry = self.seen.get(key)
                if entry is None:
                    user = user_frame()
                    entry = self.seen[key] = HostArgument(
                        name,
                        _parameter_name(local.get("fun"), index) or f"argument {index}",
                        f"{_short(str(value.dtype))}[{','.join(map(str, value.shape))}]",
                        line=source_line(user.f_code.co_filename, user.f_lineno, user.f_code.co_name) if user else None,
                    )
                    self.report.host_arguments.append(entry)
                entry.calls += 1

    def after(self, *args) -> None:
        pass


def _parameter_name(fun, index: int) -> str:
    """The name of the ``index``-th positional parameter of ``fun`` ("" when it has none)."""
    import inspect

    try:
        names = [
            p.name
            for p in inspect.signature(fun).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return ""
    return names[index] if index < len(names) else ""


def _short(dtype: str) -> str:
    return {
        "float32": "f32",
        "float64": "f64",
        "int32": "i32",
        "int64": "i64",
        "float16": "f16",
        "bfloat16": "bf16",
        "uint8": "u8",
        "bool": "bool",
    }.get(dtype, dtype)


@contextlib.contextmanager
def _live_growth(report: DoctorReport, namespace: dict | None) -> Iterator[None]:
    """Count live arrays by shape and dtype before and after; name the holders only of groups that grew.

    Counting needs no garbage collection (a full collection costs tens of
    milliseconds in a notebook process, twice per cell); only when a group grew
    by ``LIVE_PILE_UP`` or more does the live-array probe run, collect garbage
    and name the holders. Garbage not yet collected makes a group look larger
    before, so growth is never overstated.
    """
    from jaxmagic.probes.live import live

    before = _live_counts()
    try:
        yield
    finally:
        grown = {k: n - before.get(k, 0) for k, n in _live_counts().items() if n - before.get(k, 0) >= LIVE_PILE_UP}
        if grown:
            snapshot = live(namespace=namespace)
            report.live = snapshot
            report.live_growth = {
                f"{dtype}{list(shape)}": snapshot_count - before.get((shape, dtype), 0)
                for (shape, dtype) in grown
                for snapshot_count in [
                    sum(g.count for g in snapshot.groups if (tuple(g.shape), g.dtype) == (shape, dtype))
                ]
            }


def _live_counts() -> dict[tuple, int]:
    if not compat.backend_started():
        return {}
    import jax

    counts: dict[tuple, int] = {}
    for array in jax.live_arrays():
        key = (tuple(array.shape), str(array.dtype))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _explain_nan(report: DoctorReport, watch) -> None:
    watch.flush()  # the last call of the cell is looked at only now: its results were never flushed by a next call
    report.nan_sighting = watch.sighting
    try:
        report.nans = explain_nan_sighting(watch)
    except Exception as error:  # never let our analysis hide the user's results
        report.notes.append(f"jaxmagic could not explain the NaN: {error_line(error)}")


def explain_nan_sighting(watch: NanWatch):
    """Re-run the first NaN-producing jitted call the watch saw under the NaN probe; its NanReport (or None).

    Call this after the cell, with no other probe active. Never raises.
    """
    sighting, call = watch.take_rerun()
    if sighting is None:
        return None
    if not sighting.jitted:  # an eager operation: the primitive and the line are known
        return NanReport(
            found=True,
            value="nan",
            primitive=sighting.function,
            phase="forward",
            origin_lines=[sighting.line] if sighting.line else [],
            failing_call=sighting.line.code if sighting.line else "",
        )
    if call is None:
        return None
    report = None
    try:
        with jit_calls.paused(), contextlib.redirect_stdout(io.StringIO()):
            with nans() as report:
                call()
    except (FloatingPointError, ZeroDivisionError):
        pass
    except Exception as error:
        lines = message_of(error).strip().splitlines()
        sighting.rerun_note = (
            f"Re-running {call.source} under the NaN probe failed: {type(error).__name__}: {lines[0] if lines else ''}"
        )
        del call
        return None
    if report is not None and report.found:
        if report.producer is None:  # the whole jitted call, traced once more with its arguments
            with jit_calls.paused():
                apply_search(report, call, want_nan=report.value != "inf")
        report.call_number = sighting.call_number
        report.call_line = sighting.line
    del call
    if report is not None and not report.found:
        sighting.rerun_note = (
            f"{sighting.call_source} gave no NaN when re-run with the same arguments under "
            "jax.debug_nans: the result depends on something besides the arguments."
        )
    elif report is not None:
        sighting.rerun_note = (
            f"{sighting.call_source} was run once more after the cell, with the same "
            "arguments, under jax.debug_nans (the %%jax_nans probe) to name the primitive "
            "and the line."
        )
    return report
