"""Watch cell after cell: the doctor's cheap mechanisms switched on for one cell at a time.

``Watch.begin_cell(label)`` switches on, for that cell only, what
``%%jax_doctor`` watches with: the calls of the user's own jitted functions
on JAX's fast path (the post-call hook and ``cache_miss`` monitoring, through
``jaxmagic.probes.keys(record=True, check_calls=False, fast_path=True)``, which
also counts the keys each function gets), the NaN watch
(``probes._nans.watch``), NumPy arguments
(``probes._support.host_arguments``) and the compile log
(``jaxmagic.probes.compiles``). ``end_cell()`` switches every one of them off
again - nothing of JAX stays on between cells - re-runs the first NaN-making
call alone under ``jax.debug_nans`` (as the doctor does), counts live arrays,
and returns the findings that are new. A problem already told is counted,
not told again.

A cell without JAX (``jax`` not imported) switches nothing on.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from jaxmagic._jax import jit_calls
from jaxmagic._jax.call_sampling import CallSampler
from jaxmagic.probes._compiles import CompileHistory, budget_magic, compiles, why_compiled_again
from jaxmagic.probes._compiles.cause import KINDS
from jaxmagic.probes._compiles.cost_sections import cost_findings
from jaxmagic.probes._compiles.report import LIBRARY_RECOMPILE_FIX, library_sentence
from jaxmagic.probes._keys import key_findings, keys
from jaxmagic.probes._live.report import KEEP_ON_HOST
from jaxmagic.probes._memory import explain_out_of_memory, is_out_of_memory
from jaxmagic.probes._memory.report import out_of_memory_finding
from jaxmagic.probes._nans.sighting import (
    debug_step,
    explain_nan_sighting,
    inf_sighting_text,
    nan_finding_provenance,
    nan_finding_text,
)
from jaxmagic.probes._nans.watch import NanWatch
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.calls.host_arguments import HostArguments, live_counts
from jaxmagic.probes._transfers.report import repeated_copies
from jaxmagic.probes._watch.report import CellFindings, WatchFinding, WatchLog
from jaxmagic.report.watch_areas import UnknownArea, areas_named
from jaxmagic.report.wording import counted, format_bytes, short_dtype

if TYPE_CHECKING:
    from jaxmagic._jax.jit_calls import CallObserver
    from jaxmagic.probes._compiles import CompileReport
    from jaxmagic.probes._keys import KeyReport

# A kind of array (shape, dtype) -> how many are alive (host_arguments.live_counts)
LiveCounts = dict[tuple[tuple[int, ...], Any], int]

MEMORY_CELLS = 3  # a (shape, dtype) whose live count grows in this many cells in a row
MEMORY_BYTES = 256 * 2**20  # device bytes in use growing by this much since the watch began
# Counting walks every live array (~70 ns each: 7 ms at 100,000): after a cell only when the last count
# took at most this share of the cell's time (or under COUNT_ALWAYS), and at least every COUNT_EVERY cells.
COUNT_SHARE, COUNT_ALWAYS, COUNT_EVERY = 0.05, 0.0002, 10


def check_areas(only: Iterable[str]) -> list[str]:
    """The areas to watch (all by default); ProbeArgumentError for an unknown one."""
    try:
        return areas_named(only)
    except UnknownArea as error:
        raise ProbeArgumentError("only", str(error)) from None


class Watch:
    """The state of one ``%jax_watch`` session (plain Python: usable without IPython)."""

    def __init__(self, *, only: Iterable[str] = (), budget: int = 2, memory_bytes: int = MEMORY_BYTES):
        if budget < 0:
            raise ProbeArgumentError("budget", f"must be 0 or more, got {budget}")
        self.log = WatchLog(on=True, areas=check_areas(only), budget=budget)
        self.memory_bytes = memory_bytes
        self._stack: contextlib.ExitStack | None = None
        self._cell = ""
        self._nan: NanWatch | None = None
        self._hosts: HostArguments | None = None
        self._keys: KeyReport | None = None
        self._compiles: CompileReport | None = None
        self._sampler: CallSampler | None = None
        self._compilations: dict[tuple[str, str], int] = {}  # (name, defined at) -> compilations in watched cells
        # What each function last compiled with, from cell to cell: a function rebuilt once per cell is told
        # as rebuilt (and its baked value named), as %%jax_compiles tells it in one cell
        self._compile_history = CompileHistory()
        self._told: dict[tuple[object, ...], WatchFinding] = {}  # (area, what it is about...) -> finding
        self._live_before: LiveCounts = {}
        self._streaks: dict[tuple[tuple[int, ...], Any], int] = {}  # a LiveCounts key -> cells it grew in a row
        self._bytes_start: int | None = None
        self._held: tuple[object, ...] = ()
        self._cell_began = 0.0
        self._count_seconds = 0.0  # how long the last count of the live arrays took
        self._cells_since_count = 0
        self._counts_in_consecutive_cells = True  # the streaks so far: counted after every cell

    @property
    def in_cell(self) -> bool:
        return self._stack is not None

    def live_progress(self) -> tuple[list[tuple[str, int]], list[str]]:
        """What a live view shows while a watched cell runs (another thread: reads only). A watched
        cell shows nothing until something is found, so only a problem not told before counts."""
        nan = self._nan
        sighting = nan.sighting if nan is not None else None
        counters: list[tuple[str, int]] = [("jitted calls watched", nan.calls_seen)] if nan is not None else []
        findings = self._over_budget_so_far()
        if sighting is not None and ("NaN", sighting.function) not in self._told:
            where = f" ({sighting.line.where})" if sighting.line is not None else ""
            findings.append(f"NaN in the results of `{sighting.function}` (call {sighting.call_number}){where}")
        return counters, findings

    def _over_budget_so_far(self) -> list[str]:
        """Functions over the compilation budget in this cell so far (with the cells before), or compiled again
        for an avoidable cause, not told yet: the finding the cell's report will make, shown while the cell
        still runs."""
        report = self._compiles
        if report is None:
            return []
        over = []
        for f in list(report.functions):
            if f.kind != "user":
                continue
            function = (f.name, f.defined_at)
            total = self._compilations.get(function, 0) + f.count
            try:
                due = self._recompilation_due(total, f.main_cause)
            except RuntimeError:  # its causes changed meanwhile (the cell's thread compiles): at the next refresh
                continue
            if due and ("recompilation", *function) not in self._told:
                where = f", called at {f.first_line.where}" if f.first_line is not None else ""
                avoidable = "" if total > self.log.budget else ", avoidable"
                over.append(
                    f"`{f.name}` compiled {counted(total, 'time')} so far (budget {self.log.budget}{avoidable}){where}"
                )
        return over

    def begin_cell(self, label: str, held: tuple[object, ...] = ()) -> None:
        """Switch the watch on for one cell; never raises.

        ``held``: values whose arrays are not the cell's to count (IPython's ``Out``, ``_``, ...).
        """
        self._cell = label
        self._cell_began = time.perf_counter()
        if "jax" not in sys.modules:
            return
        areas = self.log.areas
        stack = contextlib.ExitStack()
        try:
            # No snapshot of the JAX state of its own: each probe below puts back what it set (a third
            # walk of JAX's ~25 loggers, taken and compared, was ~45 us of every watched cell).
            if "memory" in areas and self._bytes_start is None:  # later cells compare with the last one's end
                self._live_before, self._bytes_start = live_counts(_ids_of(held))
            if "recompilation" in areas:
                self._compiles = stack.enter_context(
                    compiles(raise_over_budget=False, history=self._compile_history, try_fixes=False, slowest=False)
                )
            observers: list[CallObserver] = []
            if "NaN" in areas:
                self._nan = NanWatch()
                observers.append(self._nan)
            if "transfers" in areas:
                self._hosts = HostArguments()
                observers.append(self._hosts)
            sampler = self._sampler = CallSampler()
            if "random keys" in areas:
                self._keys = stack.enter_context(
                    keys(
                        record=True,
                        check_calls=False,
                        also_observe=tuple(observers),
                        only_user_calls=True,
                        fast_path=True,
                        sampler=sampler,
                    )
                )
            elif observers:
                stack.enter_context(
                    jit_calls.observing_calls(*observers, only_user_calls=True, fast_path=True, sampler=sampler)
                )
        except Exception as error:
            stack.close()
            self._nan = self._hosts = self._keys = self._compiles = None
            self._note(f"{label} was not watched: {type(error).__name__}: {error}")
            return
        self._stack = stack

    def end_cell(
        self,
        label: str | None = None,
        held: tuple[object, ...] = (),
        error: BaseException | None = None,
        namespace: dict[str, Any] | None = None,
    ) -> CellFindings:
        """Switch everything off again; the cell's new findings (none: a clean cell). Never raises.

        ``label`` names the cell, when known only now (IPython numbers a cell as it ends). ``error``: the
        exception the cell raised; an out-of-memory error is explained (``namespace``, the user's variables,
        names what holds memory) - the watch pays nothing for it until a cell fails.
        """
        if label:
            self._cell = label
        self._held = held
        result = CellFindings(self._cell)
        stack, self._stack = self._stack, None
        if stack is None:
            return result
        try:
            stack.close()
        except Exception as error:
            self._note(f"{self._cell}: the watch could not be switched off cleanly: {type(error).__name__}")
        nan, hosts, keys, compiles = self._nan, self._hosts, self._keys, self._compiles
        self._nan = self._hosts = self._keys = self._compiles = None
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            result.jitted_calls = sampler.total_calls
            self.log.calls_counted += sampler.total_calls
            self.log.calls_looked_at += sampler.total_calls - sampler.total_skipped
        readers: list[partial[list[WatchFinding]]] = []  # each area's findings, read one by one
        if nan is not None:
            readers.append(partial(self._nan_findings, nan))
        if compiles is not None:
            readers.append(partial(self._compile_findings, compiles))
        if hosts is not None:
            readers.append(partial(self._transfer_findings, hosts))
        if keys is not None:
            readers.append(partial(self._key_findings, keys))
        if "memory" in self.log.areas and self._count_due():
            readers.append(partial(self._memory_findings))
        if "memory" in self.log.areas and error is not None:
            readers.append(partial(self._out_of_memory_findings, error, namespace))
        for read in readers:
            try:
                result.findings += read()
            except Exception as failure:  # one area's odd report must not hide the others
                self._note(f"{self._cell}: jaxmagic could not read one area ({read.func.__name__}): {failure}")
        self.log.cells_watched += 1
        return result

    def close(self) -> None:
        """End the watch (switching off a cell still in progress, after an interrupt)."""
        if self._stack is not None:
            self.end_cell()
        self.log.on = False

    # -- findings ---------------------------------------------------------------------

    def _note(self, text: str) -> None:
        if text not in self.log.notes:
            self.log.notes.append(text)

    def _new(self, key: tuple[object, ...], **fields: Any) -> list[WatchFinding]:
        told = self._told.get(key)
        if told is not None:
            told.count += fields.get("count", 1) if fields.get("area") != "recompilation" else 0
            return []
        finding = self._told[key] = WatchFinding(cell=self._cell, **fields)
        self.log.findings.append(finding)
        return [finding]

    def _nan_findings(self, watch: NanWatch) -> list[WatchFinding]:
        watch.flush()
        s = watch.sighting
        if s is None and watch.inf_sighting is not None:
            inf = watch.inf_sighting
            title, details, fix = inf_sighting_text(inf)
            return self._new(
                ("inf", inf.function),
                area="NaN",
                headline=title,
                function=inf.function,
                line=inf.line,
                call=inf.call_number,
                details=details,
                fix=fix,
                next_magic="%%jax_nans --infs",
            )
        if s is None:
            return []
        key = ("NaN", s.function)  # the same function making NaN again, from any line: counted, not re-run
        if key in self._told:
            self._told[key].count += 1
            return []
        nan = explain_nan_sighting(watch)
        where = f"`{s.function}`" if s.jitted else f"the eager operation `{s.function}`"
        title, details, fix, _ = nan_finding_text(s, nan, where)
        headline = f"{title} (call {s.call_number} in this cell)"
        unread = ""
        if s.unread_before:
            first, last = s.unread_before
            calls = f"call {first}" if first == last else f"calls {first}-{last}"
            unread = (
                f"{calls} of `{s.function}`, which the watch counted but did not look at (on fast loops it looks "
                "at a share of the calls, to cost under 5%)"
            )
            if not s.came_in:
                headline = f"{title} (first seen at call {s.call_number} in this cell; {calls} were not looked at)"
                details += f". An earlier call among {unread} may have made a NaN first: %%jax_nans looks at every call"
        if s.calls_with_nan > 1:
            details += f"; {s.calls_with_nan - 1} later call(s) returned NaN too"
        provenance = nan_finding_provenance(s, nan)
        line = provenance.made_at or s.line
        if s.came_in:
            headline = f"NaN already in the arguments of `{s.function}` (call {s.call_number})"
            fix, line = "", s.line
            provenance.unknown = "the NaN came in through the arguments, made before this call"
            if unread:
                provenance.unknown += f", perhaps by {unread}: %%jax_nans on this cell looks at every call"
            provenance.made_at = None
        if s.donated:
            details += f". `{s.function}` donates {', '.join(s.donated)}: the re-run used the copies the watch kept"
        if s.rerun_note:
            details += ". " + s.rerun_note
        return self._new(
            key,
            area="NaN",
            headline=headline,
            function=s.function,
            line=line,
            call=s.call_number,
            details=details,
            fix=fix,
            next_magic="%%jax_nans",
            debug_step=debug_step(s, provenance) if s.jitted and not s.came_in else "",
            provenance=provenance,
            producer=nan.producer if nan is not None and not s.came_in else None,
        )

    def _compile_findings(self, report: CompileReport) -> list[WatchFinding]:
        found = []
        for f in report.user_functions:
            # One function is one name at one definition: a second `train_step` defined elsewhere (a
            # fixed version of the step, say) is counted apart.
            function = (f.name, f.defined_at)
            total = self._compilations[function] = self._compilations.get(function, 0) + f.count
            key = ("recompilation", *function)
            if key in self._told:
                self._told[key].count = total
                continue
            if self._recompilation_due(total, f.again.kind if f.again is not None else f.main_cause):
                # The cause is %%jax_compiles' own (compiles.why_again), compared across the watched cells
                cause = f.again or why_compiled_again(f)
                within = "" if total > self.log.budget else ", avoidable: told within the budget"
                found += self._new(
                    key,
                    area="recompilation",
                    headline=f"`{f.name}` compiled {counted(total, 'time')} (budget {self.log.budget}{within}): "
                    f"{cause.reason}",
                    function=f.name,
                    line=f.first_line,
                    details=cause.evidence,
                    fix=cause.fix,
                    next_magic=budget_magic(f.name),
                    count=total,
                    cause=cause,
                )
        for f in report.library_recompiles:  # a library's own function compiled again: %%jax_compiles' words
            found += self._new(
                ("recompilation", f.name, f.defined_at),
                area="recompilation",
                headline=library_sentence(f).rstrip("."),
                function=f.name,
                line=f.first_line,
                fix=LIBRARY_RECOMPILE_FIX,
                next_magic="%%jax_compiles",
                count=f.count,
            )
        # A slow compilation's size, an unusable donation, a persistent-cache miss: %%jax_compiles' own words
        for cost in cost_findings(report.sizes, report.donations, report.cache_misses, report.stale_globals):
            found += self._new(
                cost.key,
                area="recompilation",
                headline=cost.headline,
                function=cost.key[1],
                line=cost.line,
                fix=cost.fix,
                next_magic="%%jax_compiles",
                provenance=cost.provenance,
            )
        return found

    def _recompilation_due(self, total: int, kind: str) -> bool:
        """Whether a function compiled ``total`` times in the watched cells, again mainly for a cause of
        ``kind``, is a finding: past the budget, or at its first repeat when the cause is avoidable (a weak
        type, a new wrapper per call: ``CauseKind.avoidable``) - a new shape, a static mode, waits for the
        budget. The one place the watch decides it; the live view asks here too."""
        if total > self.log.budget:
            return True
        cause = KINDS.get(kind)
        return total >= 2 and cause is not None and cause.avoidable

    def _transfer_findings(self, hosts: HostArguments) -> list[WatchFinding]:
        found = []
        # %%jax_transfers' and the doctor's findings, in their words; the watch sees the jitted calls'
        # arguments only (no transfer guard: it would log every copy of every cell)
        for c in repeated_copies((), list(hosts.seen.values())):
            found += self._new(
                ("transfers", *c.identity[1:]),
                area="transfers",
                headline=c.headline,
                function=c.function,
                line=c.line,
                details=f"{c.count} calls in this cell",
                fix=c.fix,
                next_magic="%%jax_transfers --mode disallow",
                count=c.count,
            )
        return found

    def _key_findings(self, keys: KeyReport) -> list[WatchFinding]:
        self.log.draws_counted += sum(d.calls for d in keys.draws)
        self.log.draws_compared += sum(d.compared_calls for d in keys.draws)
        found = []
        for k in key_findings(keys):  # %%jax_keys' and the doctor's findings, in their words
            found += self._new(
                ("random keys", *k.identity),
                area="random keys",
                headline=k.headline,
                function=k.function,
                line=k.line,
                details=k.evidence,
                fix=k.fix,
                provenance=k.provenance,
                next_magic="%%jax_keys",
            )
        return found

    def _count_due(self) -> bool:
        """Whether to count the live arrays after this cell (see COUNT_SHARE)."""
        cell_seconds = time.perf_counter() - self._cell_began
        self._cells_since_count += 1
        due = (
            self._count_seconds <= max(COUNT_ALWAYS, COUNT_SHARE * cell_seconds)
            or self._cells_since_count >= COUNT_EVERY
        )
        if due:
            self._counts_in_consecutive_cells &= self._cells_since_count == 1
            self._cells_since_count = 0
        return due

    def _out_of_memory_findings(self, error: BaseException, namespace: dict[str, Any] | None) -> list[WatchFinding]:
        if not is_out_of_memory(error):
            return []
        report = explain_out_of_memory(error, namespace)
        if report is None:
            return []
        told = out_of_memory_finding(report)
        return self._new(
            ("out of memory", told.function, told.line and (told.line.filename, told.line.lineno)),
            area="memory",
            headline=told.title,
            function=told.function,
            line=told.line,
            details=told.evidence,
            fix=told.fix,
            next_magic="%%jax_memory",
        )

    def _memory_findings(self) -> list[WatchFinding]:
        # Counted once per cell, at its end: the growth since the last watched cell ended (each count walks
        # every live array).
        began = time.perf_counter()
        after, total = live_counts(_ids_of(self._held))
        self._count_seconds = time.perf_counter() - began
        self._held = ()
        before, self._live_before = self._live_before, after
        found = []

        def in_a_row(streak: int) -> str:
            if self._counts_in_consecutive_cells:
                return f"in {streak} cells in a row"
            return f"at {streak} counts in a row (the live arrays are counted after a share of the cells)"

        for key in set(before) | set(after):
            grew = after.get(key, 0) > before.get(key, 0)
            streak = self._streaks[key] = self._streaks.get(key, 0) + 1 if grew else 0
            if not grew:
                self._streaks.pop(key, None)
            if streak >= MEMORY_CELLS:
                shape, dtype = key
                text = f"{short_dtype(str(dtype))}[{','.join(map(str, shape))}]"
                found += self._new(
                    ("memory", key),
                    area="memory",
                    headline=f"live `{text}` arrays grew {in_a_row(streak)} ({after.get(key, 0)} now)",
                    details=f"{after.get(key, 0) - before.get(key, 0)} more in this cell",
                    fix=f"Arrays kept in a list grow with every step: {KEEP_ON_HOST} (del the container); "
                    "x.delete() frees an array at once.",
                    next_magic="%jax_live",
                )
        if self._bytes_start is not None and total - self._bytes_start >= self.memory_bytes:
            found += self._new(
                ("memory", "bytes"),
                area="memory",
                headline=f"device memory in use grew by {format_bytes(total - self._bytes_start)} since the "
                "watch began",
                details=f"{format_bytes(total)} in live arrays now",
                next_magic="%jax_live",
            )
        return found


def _ids_of(held: Iterable[Any]) -> frozenset[int]:
    """The ids of the arrays among ``held`` (one level of lists, tuples and dict values)."""
    ids: set[int] = set()
    for value in held:
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if hasattr(item, "dtype") and hasattr(item, "shape"):
                ids.add(id(item))
    return frozenset(ids)
