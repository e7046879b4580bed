"""The ``profile`` probe: the ``with`` block run under ``jax.profiler.trace``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from types import TracebackType

import jax

from jaxmagic._jax import profiler_trace, runtime
from jaxmagic._jax.exclusive import AlreadyActive
from jaxmagic._jax.jit_programs import ProgramCapture
from jaxmagic.probes._compiles import compiles
from jaxmagic.probes._profile.build import build_report
from jaxmagic.probes._profile.events import TraceReading
from jaxmagic.probes._profile.report import ProfileReport
from jaxmagic.probes._profile.trace_events import CELL_MARK, read_profile_data
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.report.wording import error_line

PROFILER_BUSY = (
    "cannot run while a jax.profiler trace is already running (traces do not nest): stop it with "
    "jax.profiler.stop_trace(), or leave its `with jax.profiler.trace(...)` block, then run again"
)


class ProfilerBusy(AlreadyActive):
    """A jax.profiler trace is already running; traces do not nest."""

    def __init__(self) -> None:
        super().__init__(PROFILER_BUSY)


def trace_running() -> bool:
    """True while a jax.profiler trace is running (a profile cannot start then)."""
    return runtime.profiler_session_active()


def _make_folder(save: str) -> None:
    """Create the ``save`` folder; one the system refuses (``/proc/nope``, a path through a file, a name too
    long) is a ``ProbeArgumentError`` naming the option, with the system's reason."""
    try:
        os.makedirs(save, exist_ok=True)
    except (OSError, ValueError) as error:  # ValueError: a name with a NUL byte
        reason = getattr(error, "strerror", None) or str(error)
        shown = save if len(save) <= 80 else f"{save[:60]}...({len(save)} characters)"
        raise ProbeArgumentError("save", f"cannot create the folder {shown!r}: {reason}") from None


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
        if save is not None:
            _make_folder(save)  # here, where a bad folder is an argument error (the magic's UsageError)
        self.save = save
        self.report = ProfileReport(warmup_runs=warmup_runs)
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> ProfileReport:
        if runtime.profiler_session_active():
            raise ProfilerBusy()
        if self.save is not None:
            _make_folder(self.save)  # made at construction; again, should it have gone since
        # The compile probe keeps the JAX state contract (config, loggers, listeners) for the block;
        # the profiler and the call capture touch none of it.
        stack = contextlib.ExitStack()
        try:
            self._compiles = compiles(raise_over_budget=False, donation_warnings="shown")  # not in this report
            self._compile_report = stack.enter_context(self._compiles)
            self._capture = stack.enter_context(ProgramCapture())
            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0
            profiler_trace.start(self.save, options)  # kept in memory, or written to self.save too
            with jax.profiler.TraceAnnotation(CELL_MARK):  # marks the block's thread in the trace
                pass
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        self._started = time.perf_counter()
        return self.report

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        __tracebackhide__ = True

        wall = time.perf_counter() - self._started
        profile_data, stop_problem = None, ""
        try:
            try:
                profile_data = profiler_trace.stop(self.save)
            except RuntimeError as problem:  # the block stopped the trace itself
                stop_problem = error_line(problem)
        finally:
            try:
                if self._stack is not None:  # set by __enter__, which ran
                    self._stack.__exit__(exc_type, exc, tb)
            finally:
                if runtime.profiler_session_active():  # interrupted while stopping: never leave it running
                    with contextlib.suppress(Exception):
                        jax.profiler.stop_trace()
        try:
            programs = self._capture.programs()
            # the same reading a recorded trace gets (tests replay TPU/GPU traces through it)
            reading = read_profile_data(profile_data) if profile_data is not None else TraceReading()
            del profile_data
            built = build_report(
                reading,
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
                f"The jitted calls could not be followed here ({self._capture.unavailable}), so kernels "
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
