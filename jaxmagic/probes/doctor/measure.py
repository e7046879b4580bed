"""The doctor's measuring: one run of the block under every probe not skipped, and what it adds.

Besides entering the probes, the doctor watches jitted calls for NumPy
arguments (``_HostArguments``), counts live arrays before and after
(``_live_growth``), and after the block re-runs the first NaN-producing call
under the NaN probe (``explain_nan_sighting``). See ``jaxmagic.probes.doctor``.
"""

from __future__ import annotations

import contextlib
import inspect
import io
from collections.abc import Iterator

import numpy as np

from jaxmagic._jax import compat, jit_calls
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.nan_watch import NanWatch, user_frame
from jaxmagic.probes.compiles import compiles
from jaxmagic.probes.doctor.report import (
    LIVE_PILE_UP,
    PROBES,
    RETRACE_TOKEN,
    DoctorReport,
    HostArgument,
    rank_findings,
)
from jaxmagic.probes.keys import keys
from jaxmagic.probes.leaks import leaks
from jaxmagic.probes.live import live
from jaxmagic.probes.nans import NanReport, apply_search, nans
from jaxmagic.probes.transfers import transfers
from jaxmagic.report.source import source_line
from jaxmagic.report.wording import error_line, message_of


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
    import jax  # deferred: importing jaxmagic.probes imports no JAX

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
