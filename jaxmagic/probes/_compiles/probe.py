"""The ``compiles`` probe: the ``with`` block that switches the compilation sources on and off."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import Literal

import jax
from jax import monitoring

from jaxmagic._jax import runtime
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._compiles.collector import Collector
from jaxmagic.probes._compiles.donations import DonationWarnings
from jaxmagic.probes._compiles.function_state import CompileHistory
from jaxmagic.probes._compiles.logs import compile_logs_captured
from jaxmagic.probes._compiles.report import CompileReport
from jaxmagic.probes._support import progress
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import counted, error_line

CONFIG_NAMES = ("jax_log_compiles", "jax_explain_cache_misses")


class compiles:
    """Count and explain every backend compilation in a ``with`` block.

    ``budget``: at most this many compilations per user function (or only of
    ``fn`` when given); when exceeded and the block itself did not raise,
    leaving the block raises ``CompileBudgetExceeded`` (``raise_over_budget=False``
    leaves that to the caller: ``report.raise_if_over_budget()``). ``show_all``
    makes the report list eager-operation compilations as well. ``history``
    carries what each function last compiled with from one block to the next
    (``%jax_watch`` gives one to every cell), so the causes compare across blocks. ``try_fixes``: after
    the block, trace once more each function a static number compiled again, with
    that number traced, to tell whether "pass it traced" works (the report says it
    did: ``FunctionCompiles.traced_again_to_try``); False offers that fix untried,
    for a caller that may not show the report. ``slowest``: examine where the size of the cell's slowest
    compilation comes from even when it is not slow (``%%jax_compiles``, the doctor); False examines only
    slow ones (the watch). Slow: over 1 s, or over 0.2 s and half the block's time (``cost_sections``).
    Donated buffers JAX could not reuse and persistent-cache misses are reported too; JAX's own "Some donated
    buffers were not usable" warning for a donation the report names is not shown beside it
    (``donation_warnings="explained"``), or is, as JAX wrote it (``"shown"``: a caller that does not show these
    findings, such as ``%%jax_profile``).
    """

    def __init__(
        self,
        *,
        budget: int | None = None,
        fn: str | None = None,
        show_all: bool = False,
        raise_over_budget: bool = True,
        history: CompileHistory | None = None,
        try_fixes: bool = True,
        slowest: bool = True,
        donation_warnings: Literal["explained", "shown"] = "explained",
    ):
        if budget is not None and budget < 0:
            raise ProbeArgumentError("budget", f"must be 0 or more, got {budget}")
        self.report = CompileReport(show_all=show_all, budget=budget, budget_function=fn or "")
        self.raise_over_budget = raise_over_budget
        self._history = history
        self.try_fixes = try_fixes
        self.slowest = slowest
        self.hide_explained_warnings = donation_warnings == "explained"
        self._started = 0.0
        self._collector: Collector | None = None
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> CompileReport:
        stack = contextlib.ExitStack()
        stack.enter_context(preserved_jax_state(CONFIG_NAMES))
        collector = Collector(self.report, stack, self._history, self.try_fixes, self.slowest)
        try:
            stack.enter_context(compile_logs_captured(collector.on_log))
            stack.enter_context(DonationWarnings(self.report.donations, self.hide_explained_warnings))
            monitoring.register_event_duration_secs_listener(collector.on_duration)  # type: ignore[arg-type]  # JAX's Protocol names the second parameter duration_secs
            stack.callback(_unregister, collector.on_duration)
            stack.enter_context(jax.log_compiles(True))
            stack.enter_context(jax.explain_cache_misses(True))
        except BaseException:
            stack.close()
            raise
        self._collector, self._stack = collector, stack
        self._started = time.perf_counter()
        progress.publish(lambda: compile_progress(self.report))
        return self.report

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:  # the user's exception propagates unchanged
        __tracebackhide__ = True
        try:
            if self._stack is not None:
                self._stack.close()
        finally:
            if self._collector is not None:
                self._collector.finish(time.perf_counter() - self._started)
            if exc is not None:
                self.report.other_error = error_line(exc)
        if exc is None and self.raise_over_budget:
            self.report.raise_if_over_budget()


def _unregister(listener: Callable[..., None]) -> None:
    runtime.unregister_duration_listener(listener)  # restored by preserved_jax_state in any case


def compile_progress(report: CompileReport) -> tuple[list[tuple[str, int]], list[str]]:
    """What a live view shows while the block runs (read from another thread: reads and copies only)."""
    yours = [function for function in list(report.functions) if function.kind == "user"]
    findings = [
        f"`{function.name}` compiled {counted(function.count, 'time')} so far"
        + (_called_at(function.first_line) if function.first_line is not None else f", {function.defined_at}")
        for function in yours
        if function.count > 1
    ]
    return [("compilations of your functions", sum(function.count for function in yours))], findings


def _called_at(line: SourceLine) -> str:
    """Where the call that compiled it was made: the line the final report points at (not the decorator)."""
    return f", called at {line.where}" if line.where else ""
