"""The doctor's measuring: one run of the block under every probe not skipped, and what it adds.

Besides entering the probes, the doctor watches jitted calls for NumPy
arguments (``_support.host_arguments``), counts live arrays before and after
(``_live_growth``), and after the block re-runs the first NaN-producing call
under the NaN probe (``nans.explain_nan_sighting``). See ``jaxmagic.probes.doctor``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from jaxmagic._jax import jit_calls
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic._jax.retrace import fresh_traces
from jaxmagic.probes._compiles import compiles
from jaxmagic.probes._doctor.report import (
    LIVE_PILE_UP,
    PROBES,
    RETRACE_TOKEN,
    DoctorReport,
    rank_findings,
)
from jaxmagic.probes._keys import keys
from jaxmagic.probes._leaks import leaks
from jaxmagic.probes._live import live
from jaxmagic.probes._memory import explain_out_of_memory, is_out_of_memory
from jaxmagic.probes._nans.nonfinite import bindings, nonfinite_rebound
from jaxmagic.probes._nans.sighting import explain_nan_sighting
from jaxmagic.probes._nans.watch import NanWatch
from jaxmagic.probes._support import progress
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.calls.host_arguments import HostArguments, live_counts
from jaxmagic.probes._support.explained import mark_explained
from jaxmagic.probes._transfers import transfers
from jaxmagic.report.wording import error_line


def doctor(
    *, skip: list[str] | tuple[str, ...] = (), namespace: dict[str, object] | None = None
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
def _doctor_block(skip: list[str], namespace: dict[str, object] | None) -> Iterator[DoctorReport]:
    report = DoctorReport(checked=[p for p in PROBES if p not in skip], skipped=skip)
    host = HostArguments() if "transfers" not in skip else None  # NumPy arrays given to jitted calls
    watch = NanWatch() if "nans" not in skip else None
    try:
        with preserved_jax_state(()), contextlib.ExitStack() as stack:
            # Entered outermost first; they exit in reverse, so the NaN re-run happens after every probe
            # but the live-array one has finished (it must not count as the cell's compilations, transfers
            # or traces) and before the live-array diff (so the arguments it held are released).
            if "live" not in skip:
                stack.enter_context(_live_growth(report, namespace))
            if watch is not None:
                stack.callback(_explain_nan, report, watch, namespace, bindings(namespace), "leaks" not in skip)
            if "leaks" not in skip:
                report.leaks = stack.enter_context(leaks(namespace=namespace, retrace_token=RETRACE_TOKEN))
            if "compiles" not in skip:
                report.compiles = stack.enter_context(compiles(raise_over_budget=False))
            if "transfers" not in skip:
                report.transfers = stack.enter_context(transfers(mode="log", host_observer=host))
            observers = ((watch,) if watch is not None else ()) + ((host,) if host is not None else ())

            def calls_unseen() -> None:
                report.notes.append(
                    "The cell switched jax.debug_nans (or debug_infs) itself, which takes over the hook the "
                    "doctor watches jitted calls through: calls made while it was on (and after it, until a "
                    "call traced a function) were not watched for NaN, keys or NumPy arguments."
                )

            # Both ways watch the user's own calls on JAX's fast path.
            if "keys" not in skip:
                report.keys = stack.enter_context(
                    keys(
                        record=True,
                        check_calls=False,
                        also_observe=observers,
                        only_user_calls=True,
                        fast_path=True,
                        on_calls_unseen=calls_unseen,
                    )
                )
            elif observers:
                watched = jit_calls.observing_calls(
                    *observers, only_user_calls=True, fast_path=True, on_calls_unseen=calls_unseen
                )
                if not stack.enter_context(watched):
                    report.notes.append("This JAX gives no way to see single calls: NaNs were not watched.")
            progress.publish(lambda: _doctor_progress(report, watch))
            yield report
    except BaseException as error:
        report.other_error = error_line(error)
        if is_out_of_memory(error):  # explained after every probe is off: its trials compile, nothing runs
            report.memory = explain_out_of_memory(error, namespace)
            if report.memory is not None:
                mark_explained(error, report.memory)  # the doctor's finding tells it: no second report
        raise
    finally:
        if host is not None:
            report.host_arguments = list(host.seen.values())
        report.findings = rank_findings(report)


@contextlib.contextmanager
def _live_growth(report: DoctorReport, namespace: dict[str, object] | None) -> Iterator[None]:
    """Count live arrays by shape and dtype before and after; name the holders only of groups that grew.

    Counting needs no garbage collection (a full collection costs tens of
    milliseconds in a notebook process, twice per cell); only when a group grew
    by ``LIVE_PILE_UP`` or more does the live-array probe run, collect garbage
    and name the holders. Garbage not yet collected makes a group look larger
    before, so growth is never overstated.
    """
    before = live_counts()[0]
    try:
        yield
    finally:
        grown = {k: n - before.get(k, 0) for k, n in live_counts()[0].items() if n - before.get(k, 0) >= LIVE_PILE_UP}
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


def _explain_nan(
    report: DoctorReport,
    watch: NanWatch,
    namespace: dict[str, object] | None,
    before: dict[str, int],
    under_own_key: bool,
) -> None:
    """Explain the first NaN the watch saw. When the leak probe ran, the cell's calls were traced under the
    doctor's cache key (``RETRACE_TOKEN``): the explanation reads the call's program from there, as the
    watch and ``%%jax_nans`` read it from the user's cache - not from a new trace of the user's Python
    outside the library's context (an ``nnx.jit`` function cannot be traced again from outside its call)."""
    watch.flush()  # the last call of the cell is looked at only now: its results were never flushed by a next call
    report.nan_sighting = watch.sighting
    report.jitted_calls_watched = watch.calls_seen
    if watch.sighting is None:
        # the watch reads the jitted calls' results for NaN only; an inf the cell left in a variable (a
        # gradient's digamma(0), jax-ml/jax#37763), or a NaN of an eager operation, is still no clean result
        report.inf_sighting = watch.inf_sighting
        report.nonfinite_left = nonfinite_rebound(namespace, before)
    try:
        with fresh_traces(RETRACE_TOKEN) if under_own_key else contextlib.nullcontext():
            report.nans = explain_nan_sighting(watch)
    except Exception as error:  # never let our analysis hide the user's results
        report.notes.append(f"jaxmagic could not explain the NaN: {error_line(error)}")


def _doctor_progress(report: DoctorReport, watch: NanWatch | None) -> tuple[list[tuple[str, int]], list[str]]:
    """What a live view shows while the doctor's block runs (another thread: reads only)."""
    counters: list[tuple[str, int]] = []
    findings: list[str] = []
    sighting = watch.sighting if watch is not None else None
    if watch is not None:
        counters.append(("jitted calls watched", watch.calls_seen))
    if sighting is not None:
        where = f" ({sighting.line.where})" if sighting.line is not None else ""
        findings.append(f"NaN in the result of call {sighting.call_number} of `{sighting.function}`{where}")
    # The compilations: the compiles probe the doctor runs publishes them itself (counted here too, the
    # board would add the two up: "6 compilations" for 3).
    return counters, findings
