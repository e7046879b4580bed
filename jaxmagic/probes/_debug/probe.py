"""``%jax_debug`` after a failed cell: re-run only the failing call so it stops at the user's failing line.

Usage without IPython::

    try:
        run(c0, xs)
    except FloatingPointError as error:
        session = jaxmagic.probes.debug_after(error)
    session.report.stopped.line.code          # 'y = jnp.log(c - x)'
    session.report.steps[0].index             # 900: the scan iteration it stopped in
    session.traceback                         # the user's frames of the re-run, for a debugger
    session.release()                         # drop the frames (and their arrays)

The failing call is found on the user's lines of the error's traceback and evaluated
without side effects (``_support/rerun/failing_call.py``); calling it is the one thing
repeated, and the report says so.
"""

from __future__ import annotations

import dataclasses
import re
import types
from types import TracebackType

import jax

from jaxmagic.probes._debug.forward_stop import forward_line_of_nan, stop_before
from jaxmagic.probes._debug.report import DebugReport, FrameView, StepView
from jaxmagic.probes._debug.stepping import SteppingLog, run_call
from jaxmagic.probes._debug.values import frame_values, host_copy, summarize, tree_leaves
from jaxmagic.probes._nans import explain_call, offered_fix
from jaxmagic.probes._support.rerun.failing_call import FailingCall, failing_calls
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import error_line, message_of
from jaxmagic.usercode.source import defining_code, is_jaxmagic_file, is_user_file, line_of, runs_a_cell_magic


@dataclasses.dataclass
class DebugSession:
    """The report, and - while the session is held - the live frames of the stopped re-run."""

    report: DebugReport
    traceback: TracebackType | None = None  # the user's frames only, outermost first, ending where it stopped

    @property
    def stopped_frame(self) -> types.FrameType | None:
        tb = self.traceback
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb.tb_frame if tb is not None else None

    def namespace(self) -> types.SimpleNamespace:
        """The stopped frame's values as NumPy copies (what ``--ns NAME`` binds); empty when it did not stop."""
        frame = self.stopped_frame
        if frame is None:
            return types.SimpleNamespace()
        copies = {name: host_copy(value) for name, value in dict(frame.f_locals).items() if not name.startswith("__")}
        return types.SimpleNamespace(**{name: value for name, value in copies.items() if value is not None})

    def release(self) -> None:
        self.traceback = None


def _has_deleted(call: FailingCall) -> bool:
    """Whether an argument's buffer is gone: donated to the call that failed (``donate_argnums``) or deleted."""
    values = [value for _, value in call.args] + list(call.kwargs.values())
    return any(
        isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer) and leaf.is_deleted()
        for leaf in tree_leaves(values)
    )


def _has_tracer(call: FailingCall) -> bool:
    values = [value for _, value in call.args] + list(call.kwargs.values())
    try:
        return any(isinstance(leaf, jax.core.Tracer) for leaf in tree_leaves(values))
    except Exception:
        return True


@dataclasses.dataclass
class _Located:
    """A call on a user's line of the error's traceback that can be evaluated again, with where it is."""

    call: FailingCall
    line: SourceLine | None
    entry: TracebackType  # the traceback entry of the frame making the call


def _calls_with_lines(tb: TracebackType | None) -> list[_Located]:
    """The calls on the user's lines of ``tb`` that can be evaluated again, outermost first, each with its line."""
    found = []
    for entry in _user_entries(tb):
        alone = TracebackType(None, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        found += [_Located(call, line_of(entry.tb_frame, entry.tb_lineno), entry) for call in failing_calls(alone)]
    return found


def _calls_users_code(call: FailingCall) -> bool:
    """Whether the call runs the user's code: its callee is the user's function, or a JAX function is given one
    (``lax.scan(body, c0, xs)``). Re-running a call of JAX's alone (``jnp.log(c - x)``) would stop inside JAX."""
    return _is_users(call.function) or any(callable(value) and _is_users(value) for _, value in call.args)


def _is_users(function: object) -> bool:
    """Whether ``function`` is (through jit, vmap, grad, partial) defined in the user's code - a call of JAX's
    that is given one (``lax.scan(body, c0, xs)``) runs the user's code too."""
    try:
        code, _ = defining_code(function)
    except Exception:  # an object whose attributes raise: not a function of the user's we can tell
        return False
    return code is not None and is_user_file(code.co_filename) and not is_jaxmagic_file(code.co_filename)


def _user_entries(tb: TracebackType | None) -> list[TracebackType]:
    """The entries of ``tb`` whose frames run the user's code (never JAX's, a library's or jaxmagic's)."""
    entries = []
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if is_user_file(filename) and not is_jaxmagic_file(filename) and not runs_a_cell_magic(filename, tb.tb_lineno):
            entries.append(tb)
        tb = tb.tb_next
    return entries


def _chained(entries: list[TracebackType]) -> TracebackType | None:
    """A new traceback through ``entries`` alone, outermost first (what the debugger walks with u and d)."""
    chain = None
    for entry in reversed(entries):
        chain = TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chain


def _frame_view(tb: TracebackType) -> FrameView:
    frame = tb.tb_frame
    line = line_of(frame, tb.tb_lineno)
    assert line is not None
    if frame.f_code.co_name == "<module>":  # a cell's top level: its locals are the whole notebook
        return FrameView(line, [])
    values, arguments = frame_values(frame)
    return FrameView(line, values, arguments)


def debug_after(error: BaseException | None, *, eager: bool = False) -> DebugSession:
    """Re-run the call that raised ``error`` op by op so it stops at the user's failing line.

    ``eager=True`` runs loops and vmaps op by op in full instead of compiled up to the failing step.
    """
    if error is None:
        return DebugSession(DebugReport(error="no exception", unavailable="There is no failed cell to debug."))
    report = DebugReport(error=error_line(error))
    if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit: the user stopped it, nothing failed
        report.unavailable = f"{type(error).__name__} stopped the cell: nothing failed, so nothing is re-run"
        return DebugSession(report)
    located = _calls_with_lines(error.__traceback__)
    # The innermost call of the user's own function with concrete arguments: the least to run again, and its
    # frame is where the cell's computation was (a failing jitted call's outer frames only led to it).
    calls = [found for found in reversed(located) if _calls_users_code(found.call) and not _has_tracer(found.call)]
    donated = [found for found in calls if _has_deleted(found.call)]
    calls = [found for found in calls if found not in donated]
    if not calls:
        return _without_a_rerun(error, report, located, donated)
    chosen = calls[0]
    call, report.call_line = chosen.call, chosen.line
    # the user's frames that led to the re-run call, as they were when it failed (the call's own included)
    outer = _user_entries(error.__traceback__)
    outer = outer[: next(i for i, entry in enumerate(outer) if entry is chosen.entry) + 1]
    report.call = call.source
    report.reran_user_code = True
    message = message_of(error).lower()
    nan_error = isinstance(error, FloatingPointError)
    rerun_error, log = run_call(
        call,
        nan_check=nan_error or re.search(r"\bnan\b", message) is not None,
        inf_check=nan_error and re.search(r"\binf\b", message) is not None,
        key_check=type(error).__name__ == "KeyReuseError",
        fast=not eager,
        line=report.call_line,
    )
    del calls, located, chosen
    _fill_log(report, log)
    if rerun_error is None and nan_error:
        # a NaN of the backward pass the re-run did not raise again (a vmap ran compiled, its derivative batched):
        # stop before the forward line it is the derivative of
        rerun = _forward_stop(call, report)
        if rerun:
            report.rerun_error = report.error
            report.notes = [n for n in report.notes if not n.endswith("no element made a NaN or inf")]
            return _stopped(report, outer + rerun)
    if rerun_error is None:
        report.unavailable = "The re-run finished without an error, so there is no failing line to stop at" + (
            "; a loop or vmap ran compiled (--eager runs it op by op)" if log.notes and not eager else ""
        )
        return DebugSession(report)
    report.rerun_error = error_line(rerun_error)
    rerun = _user_entries(rerun_error.__traceback__)
    if not rerun and nan_error:  # a NaN of the backward pass: stop before the forward line it is the derivative of
        rerun = _forward_stop(call, report)
    if nan_error:  # the NaN's fix is the NaN probe's, as %%jax_nans offers it
        report.fix = offered_fix(explain_call(call))
    del call
    if not rerun:
        report.unavailable = f"The re-run raised {report.rerun_error} outside your code (no frame of yours ran)" + (
            f"; {report.forward_stop_failure}" if report.forward_stop_failure else ""
        )
        return DebugSession(report)
    return _stopped(report, outer + rerun)


def _without_a_rerun(
    error: Exception, report: DebugReport, located: list[_Located], donated: list[_Located]
) -> DebugSession:
    """No call of the user's can run again: the session at the failing frame as it was (when it was kept),
    else the report of why nothing can be re-run."""
    candidates = [found.call for found in located]
    as_it_failed = _where_it_failed(error, report, located)
    if as_it_failed is not None:
        return as_it_failed
    if donated:
        report.unavailable = (
            f"`{donated[0].call.source}` cannot run again: an argument's buffer was donated to the call that "
            "failed (donate_argnums) and no copy was kept; run the cell again without donation, then %jax_debug"
        )
    elif not candidates:
        report.unavailable = (
            "No call on your lines of the traceback can be evaluated again without side effects (its callee "
            "or an argument is computed by a call, or a name it reads is gone)"
        )
    elif not any(_calls_users_code(call) for call in candidates):
        report.unavailable = (
            "The calls on your lines of the traceback that can be evaluated again call JAX's or a library's "
            f"functions ({', '.join(f'`{call.source}`' for call in candidates[:3])}), not a function of yours "
            "to run again op by op"
        )
    else:
        report.unavailable = (
            "The arguments of the failing calls of your functions are traced values of a trace that has "
            "ended: there is nothing concrete to run again"
        )
    report.callers = [_frame_view(tb) for tb in _user_entries(error.__traceback__)]
    return DebugSession(report)


def _stopped(report: DebugReport, entries: list[TracebackType]) -> DebugSession:
    """The session stopped in the last of ``entries`` (the user's frames, outermost first)."""
    report.stopped = _frame_view(entries[-1])
    report.callers = [_frame_view(tb) for tb in entries[:-1]]
    if any(value.kind == "primal" for value in report.stopped.values):
        report.notes.append(
            "the line runs under a derivative (jax.grad, jax.vjp): the values marked `primal` are the forward "
            "values the derivative is taken at; in the debugger they are JAX's tracers (`.primal` holds the value)"
        )
    if any(value.kind == "tracer" for value in report.stopped.values):
        report.notes.append(
            "some values of the stopped frame are traced, not concrete: a transformation around the line still "
            "traced under disable_jit (the re-run replaces only `jax.vmap` and `jax.lax.scan` looked up by those "
            "names), so their values are not known here"
        )
    return DebugSession(report, _chained(entries))


def _forward_stop(call: FailingCall, report: DebugReport) -> list[TracebackType]:
    """The user's frames stopped before the forward line whose derivative made the NaN ([] if not found)."""
    line = forward_line_of_nan(call)
    if line is None:
        report.forward_stop_failure = "the NaN search did not name a forward line whose derivative made it"
        return []
    log = SteppingLog()
    stop, why = stop_before(call, line, log)
    report.compiled_runs += log.compiled_runs
    report.notes += log.notes
    if stop is None:
        report.forward_stop_failure = f"stopping before `{line.code}` failed: {why}"
        return []
    report.steps += [StepView(step.kind, step.index, step.size, step.line, step.text) for step in log.steps]
    report.notes.append(
        f"The NaN was made by the derivative JAX computed for `{line.code}` ({line.where}), in the backward pass, "
        "where no line of yours runs: the forward function was run again op by op and stopped before that line, "
        "so the values shown are the forward values the derivative was taken at."
    )
    return _user_entries(stop)


def _where_it_failed(error: BaseException, report: DebugReport, located: list[_Located]) -> DebugSession | None:
    """The user's innermost frame itself, when its failing line called JAX directly with concrete values
    (``jnp.log(g - 10)`` in a cell): it already is the stop, and nothing needs to run again."""
    entries = _user_entries(error.__traceback__)
    if not entries or not located:
        return None
    innermost = entries[-1]
    call, line = located[-1].call, located[-1].line
    frame = innermost.tb_frame
    if line is None or (line.filename, line.lineno) != (frame.f_code.co_filename, innermost.tb_lineno):
        return None
    if _has_tracer(call) or _calls_users_code(call):  # a call of the user's code fails below this line, not on it
        return None
    view = _frame_view(innermost)
    if frame.f_code.co_name == "<module>":  # a cell's top level: the values the line passes, named as written
        view.values = [summary for text, value in call.args if (summary := summarize(text, value)) is not None]
    if any(value.kind == "tracer" for value in view.values):
        return None
    report.stopped = view
    report.callers = [_frame_view(tb) for tb in entries[:-1]]
    report.rerun_error = report.error
    if isinstance(error, FloatingPointError):  # the NaN's fix is the NaN probe's, as %%jax_nans offers it
        report.fix = offered_fix(explain_call(call))
    report.notes.append(
        "your failing line calls JAX directly with concrete values: it is shown as it failed, and nothing ran again"
    )
    return DebugSession(report, _chained(entries))


def _fill_log(report: DebugReport, log: SteppingLog) -> None:
    report.steps = [StepView(step.kind, step.index, step.size, step.line, step.text) for step in log.steps]
    report.compiled_runs = log.compiled_runs
    report.notes = list(log.notes) + ([log.put_back.rstrip(".")] if log.put_back else [])
