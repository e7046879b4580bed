"""Print probe: what ``jax.debug.print``, ``jax.debug.log`` and ``jax.debug.callback`` produced, by call site.

Usage without IPython::

    with jaxmagic.probes.prints() as report:
        stats(x)                            # a jitted function with two debug prints
    report.lines_of("mean={m:.3f}")         # ["mean=2.500"]
    report.out_of_order                     # prints of one call that came out of program order

``jax.debug.print`` inside ``jit`` runs as a host callback when the compiled
program runs (chapter section 1.1): the lines arrive asynchronously, possibly
after the cell has ended (so they land in a later cell's output), and prints
that are not ``ordered=True`` may come out in another order than the program's.
Under ``vmap`` a print makes one line per sample; in a ``lax.cond`` under
``vmap`` both branches print; under ``grad`` only forward values are printed.

For the block, every debug print, log and callback is caught where JAX binds
it (``jaxmagic._jax.debug_capture``): each line is kept with its *site* - the
format string or callback, the user's line, the transformations around it -
and with the call of a jitted function (or eager operation) during which it
arrived: the probe sees each call (``jaxmagic._jax.jit_calls``; the user's own
calls of jitted functions through ``sys.monitoring``, so they keep JAX's usual
dispatch path) and waits for its
prints (``jax.effects_barrier()``) before the next one starts, so every line
belongs to exactly one call, and none spills past the block. Within one call,
the first line of each site is compared with the sites' order in the traced
program: unordered prints that came out of order are reported, with the
``ordered=True`` fix.

Prints are kept out of stdout (the report shows them; ``echo=True`` prints
them as well); ``jax.debug.log`` records still go to ``logging``; whatever the
cell prints itself, with ``print``, is not touched. So that functions compiled
before the block are seen too, everything is traced under a cache key of the
probe's own (``jaxmagic._jax.retrace``): each function compiles once more the
first time, and later print cells reuse that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Iterator
from typing import Any

import jax

from jaxmagic._jax import jit_calls
from jaxmagic._jax.debug_capture import Capture, PrintSite, capturing
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic._jax.retrace import fresh_traces
from jaxmagic._jax.types import Params, Value
from jaxmagic.probes._support import progress
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Block, Document, Evidence, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.wording import ended, error_line, shown
from jaxmagic.usercode.source import innermost_user_frame, source_line

RETRACE_TOKEN = "jaxmagic-print"
MAX_LINES = 5000  # lines kept; later ones are only counted
SHOWN_PER_SITE = 40  # lines per site in the rendered report (the report keeps all)

CONTEXT_NOTES = {
    "vmap": "under `vmap`: one line per sample, with that sample's value",
    "grad": "under `grad`: forward (primal) values only - a gradient is never printed here; to see one, "
    "tap it with a `custom_vjp` identity whose backward rule calls `jax.debug.callback`",
    "jvp": "under `jvp`: primal values only",
    "cond": "in a `lax.cond` branch: prints only when that branch runs",
    "scan": "in a `lax.scan` body: one line per iteration",
    "loop": "in a loop body: one line per iteration",
    "backward": "in a backward pass (a custom_vjp rule): runs when the gradient is computed",
    "shard_map": "inside `shard_map`: one line per device (%%jax_per_device tells them apart)",
}
VMAP_COND_NOTE = (
    "in a `lax.cond` branch under `vmap`: `vmap` turns the cond into a select, so BOTH branches run "
    "and print, for every sample"
)


@dataclasses.dataclass
class PrintedLine:
    """One line printed (or one callback run) during the block."""

    site: str  # PrintSite.key ("" for a print whose tracing we did not see)
    text: str
    call: int = 0  # number of the observed call it arrived in (0: not within an observed call)


@dataclasses.dataclass
class ObservedCall:
    """A call of a jitted function (or an eager operation) during which something printed."""

    number: int
    function: str  # the jitted function, or the primitive of an eager operation
    jitted: bool = True
    line: SourceLine | None = None  # the user's line that made the call


@dataclasses.dataclass
class OutOfOrder:
    """Unordered prints of one call whose first lines came out in another order than the program's."""

    call: int
    function: str
    arrived: list[str]  # formats, in the order their first lines arrived
    program: list[str]  # the same formats in program (trace) order


ORDERED_FIX = (
    "If the order matters, make the prints ordered - the two-call form `log = jax.debug.print(ordered=True)`, "
    'then `log("...", x=x)` - at the cost of one serial dependency between them; if it does not, nothing to do.'
)


@dataclasses.dataclass
class PrintReport(Report):
    """What ``%%jax_print`` caught."""

    kind = "jax_print"

    sites: list[PrintSite] = dataclasses.field(default_factory=list)
    lines: list[PrintedLine] = dataclasses.field(default_factory=list)
    calls: list[ObservedCall] = dataclasses.field(default_factory=list)
    out_of_order: list[OutOfOrder] = dataclasses.field(default_factory=list)
    dropped_lines: int = 0  # lines beyond MAX_LINES, counted only
    calls_observed: int = 0  # every observed call, printing or not
    calls_followed: bool = True  # False: this JAX offers no way to see calls (no per-call grouping)
    echoed: bool = False
    other_error: str = ""
    other_thread_lines: int = 0  # lines other threads printed during the cell: printed as usual, not the cell's

    # -- queries ---------------------------------------------------------------

    def site_of(self, fmt: str) -> PrintSite | None:
        """The first site whose format (or callback name) is ``fmt``."""
        return next((s for s in self.sites if s.fmt == fmt), None)

    def lines_of(self, fmt: str) -> list[str]:
        """The lines of every site with this format (or callback name), in arrival order."""
        keys = {s.key for s in self.sites if s.fmt == fmt}
        return [line.text for line in self.lines if line.site in keys]

    @property
    def texts(self) -> list[str]:
        """Every line, in the order it arrived."""
        return [line.text for line in self.lines]

    def count(self, fmt: str) -> int:
        return len(self.lines_of(fmt))

    def notes_of(self, site: PrintSite) -> list[str]:
        """What the transformations around the site do to its output, in words."""
        return _context_notes(site.context)

    # -- Report ----------------------------------------------------------------

    def concerns(self) -> list[Concern]:
        found = [act("output printed out of order")] if self.out_of_order else []
        return found + ([failed(self.other_error)] if self.other_error else [])

    @property
    def summary(self) -> str:
        printed = [s for s in self.sites if any(line.site == s.key for line in self.lines)]
        n = len(self.lines) + self.dropped_lines
        failed = f" The cell failed with {ended(self.other_error)}" if self.other_error else ""
        if not n:
            return f"No jax.debug.print, log or callback output in this cell.{failed}"
        calls = len(self.calls)
        during = f" during {calls} of the {self.calls_observed} call(s) observed (those that printed)" if calls else ""
        text = f"{n} line(s) from {len(printed) or 'unknown'} site(s){during}, grouped by site."
        if self.out_of_order:
            d = self.out_of_order[0]
            text = (
                f"Unordered prints came out of program order in `{d.function}` (call {d.call}): "
                # the format strings quoted as the user wrote them in jax.debug.print(...): a Python string, not bare text in code
                f"`{d.arrived[0]!r}` before `{d.program[0]!r}`. " + text
            )
        return text + failed

    def document(self) -> Document:
        sections: list[Section] = []
        if self.out_of_order:
            sections.append(out_of_order_section(self.out_of_order))
        sections += site_sections(self)
        untagged = [line for line in self.lines if not line.site]
        if untagged:
            sections.append(untagged_section(untagged))
        sections.append(how_captured_section(self))
        if self.other_error:
            sections.append(Section("", [Evidence("The cell's error", self.other_error)]))
        fix = ORDERED_FIX if self.out_of_order else ""
        return Document("%%jax_print", self.status, self.summary, sections, fix=fix, nothing_to_do=self.unexplained())


_API_NAMES = {"print": "jax.debug.print", "log": "jax.debug.log", "callback": "jax.debug.callback"}


def out_of_order_section(out_of_order: list[OutOfOrder]) -> Section:
    """ "Out of program order": the calls whose unordered prints arrived in another order than the program's."""
    rows = [
        [
            str(d.call),
            f"`{d.function}`",
            " -> ".join(f"`{f}`" for f in d.arrived),
            " -> ".join(f"`{f}`" for f in d.program),
        ]
        for d in out_of_order[:8]
    ]
    return Section(
        "Out of program order",
        [
            Table(["call", "function", "first lines arrived", "program order"], rows),
            Paragraph("Prints that are not ordered have no order among themselves: XLA may run them in any order."),
        ],
    )


def site_sections(report: PrintReport) -> list[Section]:
    """One section per site that printed, in the order their first lines arrived, titled by the API, the line
    and the transformations around it."""
    by_site: dict[str, list[PrintedLine]] = {}
    for line in report.lines:
        by_site.setdefault(line.site, []).append(line)
    calls = {c.number: c for c in report.calls}
    first_arrival = {}
    for i, line in reversed(list(enumerate(report.lines))):
        first_arrival[line.site] = i
    sections: list[Section] = []
    titles: set[str] = set()
    for site in sorted(report.sites, key=lambda s: first_arrival.get(s.key, len(report.lines))):
        lines = by_site.get(site.key, [])
        if not lines:
            continue
        under = [c for c in site.context if c != "jit"]
        title = f"{_API_NAMES[site.api]} in {site.where or '(line unknown)'}" + (
            f", under {' > '.join(under)}" if under else ""
        )
        if title in titles:  # two prints on one line: tell the sections apart by what they print
            title += f": `{shown(site.fmt, limit=40, quoted=False)}`"
        titles.add(title)
        sections.append(Section(title, site_blocks(site, lines, calls)))
    return sections


def site_blocks(site: PrintSite, lines: list[PrintedLine], calls: dict[int, ObservedCall]) -> list[Block]:
    """The blocks of one site's section: its facts, its line, what the transformations do, its lines."""
    facts = [
        ("format" if site.api != "callback" else "callback", f"`{site.fmt}`"),
        ("lines" if site.api != "callback" else "calls", str(len(lines))),
    ]
    if site.ordered:
        facts.append(("ordered", "yes"))
    if site.context:
        facts.append(("traced under", " > ".join(site.context)))
    blocks: list[Block] = [Facts(facts)]
    if site.line:
        blocks.append(SourceLines([site.line]))
    for note in _context_notes(site.context):
        blocks.append(Paragraph(note[0].upper() + note[1:] + "."))
    if site.api == "log":
        blocks.append(
            Paragraph(
                "jax.debug.log records also went to Python logging (logger "
                "`jax._src.debugging`, level INFO), as they do without jaxmagic."
            )
        )
    rows = [
        [str(line.call) if line.call else "-", _call_name(calls.get(line.call)), line.text]
        for line in lines[:SHOWN_PER_SITE]
    ]
    blocks.append(Table(["call", "in", "printed" if site.api != "callback" else "arguments"], rows))
    if len(lines) > SHOWN_PER_SITE:
        more = len(lines) - SHOWN_PER_SITE
        blocks.append(Paragraph(f"... and {more} more line(s) (all are in the report object's `lines`)."))
    return blocks


def untagged_section(untagged: list[PrintedLine]) -> Section:
    """ "Printed by code traced before the cell": lines whose print was not seen traced."""
    return Section(
        "Printed by code traced before the cell",
        [
            Paragraph(
                "These lines came from programs JAX had traced before this cell, so jaxmagic could not "
                "see which print made them."
            ),
            Table(["printed"], [[line.text] for line in untagged[:SHOWN_PER_SITE]]),
        ],
    )


def how_captured_section(report: PrintReport) -> Section:
    """ "How this was captured": lines dropped, how calls were followed, where the lines went."""
    notes: list[Block] = []
    if report.dropped_lines:
        notes.append(Paragraph(f"{report.dropped_lines} line(s) after the first {MAX_LINES} were counted, not kept."))
    if report.calls_followed:
        notes.append(
            Paragraph(
                f"The cell made {report.calls_observed} call(s) of jitted functions and eager operations "
                f"(all counted, printing or not); {len(report.calls)} of them printed, and only those are numbered "
                "(call 1, 2, ...) in the tables above. After each call, jaxmagic waited for its prints "
                "(jax.effects_barrier()), so each line belongs to one call and none arrives after the cell."
            )
        )
    else:
        notes.append(
            Paragraph(
                "This JAX version gives no way to follow single calls: lines are grouped by site, "
                "not by call, and order within a call is not checked."
            )
        )
    if not report.echoed:
        notes.append(
            Paragraph(
                "The lines are shown here instead of in the cell's output (`--echo` prints them "
                "too); what the cell printed with `print` appeared as usual."
            )
        )
    if report.other_thread_lines:
        notes.append(
            Paragraph(
                f"Other threads printed {report.other_thread_lines} line(s) while the cell ran; those lines are "
                "not the cell's: they were printed as usual and are not listed."
            )
        )
    return Section("How this was captured", notes)


def _call_name(call: ObservedCall | None) -> str:
    if call is None:
        return "-"
    at = f" ({call.line.label or call.line.filename}:{call.line.lineno})" if call.line else ""
    return f"`{call.function}`{at}" if call.jitted else f"eager `{call.function}`{at}"


def _context_notes(context: list[str]) -> list[str]:
    notes = []
    if "cond" in context and "vmap" in context[: context.index("cond")]:
        notes.append(VMAP_COND_NOTE)
    for label in dict.fromkeys(context):
        if label == "jit":
            continue
        if label in ("cond", "vmap") and notes and notes[0] == VMAP_COND_NOTE:
            continue
        if label in CONTEXT_NOTES:
            notes.append(CONTEXT_NOTES[label])
    return notes


# -- the probe ---------------------------------------------------------------------


class _Recorder(Capture, jit_calls.CallObserver):
    def __init__(self, report: PrintReport, echo: bool):
        self.report = report
        self.echo = echo
        self.lock = threading.Lock()
        self.call = 0  # the observed call running now (0: none)
        self.call_info: ObservedCall | None = None
        self.call_printed = False
        self.call_sites: dict[int, tuple[str, int, str] | None] = {}  # call number -> where it was made
        self._known: dict[str, str] = {}  # site key -> key of this report's equal site (a print's every line)

    # Capture
    def register(self, site: PrintSite) -> PrintSite:
        where = (site.line.filename, site.line.lineno) if site.line else None
        with self.lock:
            for known in self.report.sites:
                known_where = (known.line.filename, known.line.lineno) if known.line else None
                if (known.api, known.fmt, known_where, known.context) == (site.api, site.fmt, where, site.context):
                    return known
            self.report.sites.append(site)
        return site

    def _add(self, key: str, text: str) -> None:
        with self.lock:
            if len(self.report.lines) >= MAX_LINES:
                self.report.dropped_lines += 1
                return
            self.report.lines.append(PrintedLine(key, text, self.call))
            if self.call and not self.call_printed and self.call_info is not None:
                self.call_printed = True
                self.report.calls.append(self.call_info)

    def on_print(self, site: PrintSite | None, text: str, hidden: dict[str, Any], is_log: bool) -> bool:
        # register() also maps a site made by an earlier print cell (its executable is cached) to this
        # report's; it compares with every site, so each site is mapped once and then looked up.
        key = ""
        if site is not None:
            known = self._known.get(site.key)
            if known is None:
                known = self._known[site.key] = self.register(site).key
            key = known
        self._add(key, text)
        return self.echo or is_log

    def on_callback(self, site: PrintSite, arguments: str) -> None:
        self._add(self.register(site).key, f"{site.fmt}({arguments})")

    # CallObserver
    def before(self, name: str, is_jit: bool, args: tuple[Value, ...], params: Params) -> None:
        self.report.calls_observed += 1
        self.call = self.report.calls_observed
        # Where the call was made: a (file, line, function) tuple now, its source line only for the
        # calls that print, at the end (finish_calls) - a call that prints nothing costs no lookup.
        self.call_info = ObservedCall(self.call, name, is_jit)
        self.call_sites[self.call] = self._caller()
        self.call_printed = False

    def after(self, name: str, is_jit: bool, args: tuple[Value, ...], params: Params, outputs: list[Value]) -> None:
        try:
            jax.effects_barrier()  # this call's prints arrive now, before the next call starts
        finally:
            if not self.call_printed:
                self.call_sites.pop(self.call, None)
            self.call, self.call_info = 0, None

    def _caller(self) -> tuple[str, int, str] | None:
        """(file, line, function) of the innermost user frame on the stack."""
        frame = innermost_user_frame(sys._getframe(2))
        try:
            return (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name) if frame else None
        finally:
            del frame

    def finish_calls(self) -> None:
        """Give each call that printed its source line (looked up once per distinct line)."""
        lines: dict[tuple[str, int, str], SourceLine] = {}
        for call in self.report.calls:
            where = self.call_sites.get(call.number)
            if where is not None:
                call.line = lines.get(where) or lines.setdefault(where, source_line(*where))
        self.call_sites.clear()


def _find_out_of_order(report: PrintReport) -> list[OutOfOrder]:
    sites = {s.key: s for s in report.sites}
    calls = {c.number: c for c in report.calls}
    found = []
    first: dict[int, list[PrintSite]] = {}
    for line in report.lines:
        site = sites.get(line.site)
        # Branches of a cond and bodies of loops have no program order among themselves.
        if site is None or site.api == "callback" or {"cond", "scan", "loop"} & set(site.context) or not line.call:
            continue
        seen = first.setdefault(line.call, [])
        if site not in seen:
            seen.append(site)
    for call, arrived in first.items():
        program = sorted(arrived, key=lambda s: s.position)
        if arrived != program and not all(s.ordered for s in arrived):
            info = calls.get(call)
            found.append(
                OutOfOrder(call, info.function if info else "?", [s.fmt for s in arrived], [s.fmt for s in program])
            )
    return found


@contextlib.contextmanager
def prints(*, echo: bool = False) -> Iterator[PrintReport]:
    """Catch the block's jax.debug print/log/callback output, grouped by site and by call.

    ``echo``: print the lines as well (by default they go to the report only).
    The block's exception propagates unchanged; the report is filled in first.
    """
    report = PrintReport(echoed=echo)
    recorder = _Recorder(report, echo)
    progress.publish(lambda: ([("lines printed", len(report.lines)), ("calls", report.calls_observed)], []))
    try:
        with (
            preserved_jax_state(("jax_debug_key_reuse",)),
            fresh_traces(RETRACE_TOKEN),
            capturing(recorder),
            jit_calls.observing_calls(recorder, direct_user_jit_calls=True) as followed,
        ):
            report.calls_followed = followed
            yield report
    except BaseException as error:
        report.other_error = error_line(error)
        raise
    finally:
        report.other_thread_lines = recorder.other_thread_lines
        recorder.finish_calls()
        _number_printing_calls(report)
        report.out_of_order = _find_out_of_order(report)


def _number_printing_calls(report: PrintReport) -> None:
    """Number the calls that printed 1, 2, 3, ... (calls that printed nothing are only counted)."""
    numbers = {call.number: i for i, call in enumerate(report.calls, 1)}
    for call in report.calls:
        call.number = numbers[call.number]
    for line in report.lines:
        line.call = numbers.get(line.call, 0)
