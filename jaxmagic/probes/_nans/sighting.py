"""A NaN another probe saw, explained by the NaN probe: the protocol of ``%%jax_doctor`` and ``%jax_watch``.

Those probes run the user's code with a ``NanWatch`` (``probes/_nans/watch.py``), which
notes the first call whose result held a NaN and keeps what it takes to repeat it. After the cell,
``explain_nan_sighting`` repeats that call under ``nans()`` to name the operation and the line, and
``nan_finding_text`` and ``nan_finding_provenance`` word the finding for their reports.
"""

from __future__ import annotations

import contextlib
import io

from jaxmagic._jax import jit_calls
from jaxmagic._jax.monitoring_tool import why_no_tool
from jaxmagic.probes._nans.causes import is_a_fix
from jaxmagic.probes._nans.probe import apply_search, conclude, nans_of_call
from jaxmagic.probes._nans.report import BACKWARD_EXPLANATION, NanReport
from jaxmagic.probes._nans.watch import NanSighting, NanWatch
from jaxmagic.probes._support.rerun.failing_call import FailingCall
from jaxmagic.probes._support.rerun.users_python import users_python_watched
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import error_line


def nan_finding_text(s: NanSighting, nan: NanReport | None, where: str) -> tuple[str, str, str, str]:
    """(title, evidence, fix, short) of a NaN sighting (``NanSighting``) explained by ``nan`` (the
    NanReport of its re-run, or None); shared by the doctor and ``%jax_watch``."""
    evidence = f"first in call {s.call_number} of {where} ({', '.join(s.leaves)})"
    if nan is None or not nan.found:
        return f"NaN in the results of {where}", evidence, "", f"in the results of {where}"
    producer = nan.producer
    primitive = producer.primitive if producer is not None else (nan.primitive or "?")
    phase = "the backward pass (gradient)" if nan.phase == "backward" else "the forward pass"
    library = nan.library_function
    inside = f" inside `{library}`" if library else ""
    made = f"`{primitive}`{inside}"
    if producer is not None and producer.value == "inf" and producer.nan_maker:
        # the producer made inf, not the NaN; the library named is the NaN maker's when it made it there
        maker_inside = inside if library and library == producer.nan_maker_library else ""
        made = f"`{producer.nan_maker}`{maker_inside} from the inf of `{primitive}`{inside if not maker_inside else ''}"
    title = f"NaN made by {made} in {phase} of {where}"
    if producer is not None and producer.written_nan and not producer.discarded_by:
        made = f"a NaN constant passed on by `{primitive}`{inside},"
        title = f"NaN written into the program, not computed: {made} in {phase} of {where}"
    if producer is not None:
        if producer.discarded_by:
            title += f" (in a branch `{producer.discarded_by}` discarded)"
        evidence += f"; {producer.description}"
        if producer.nan_maker:
            evidence += f"; then `{producer.nan_maker}` made NaN of it ({producer.nan_maker_values})"
    fix = offered_fix(nan)
    short = f"{made} in the {nan.phase} pass of {where}"
    return title, evidence, fix, short


def offered_fix(nan: NanReport | None) -> str:
    """The NaN probe's fix as another magic offers it (the doctor, the watch, ``%jax_check``, ``%jax_debug``):
    ``NanReport.fix`` when it says what to do - a cause alone ("`exp`: typically ...") is no fix, the finding's
    own words say what happened - else, for a NaN of the backward pass, why the gradient made it; "" else."""
    if nan is None or not nan.found:
        return ""
    return nan.fix if is_a_fix(nan.fix) else (BACKWARD_EXPLANATION if nan.phase == "backward" else "")


def explain_call(call: FailingCall) -> NanReport | None:
    """The NaN probe's report of a call that made a NaN, from its program evaluated operation by operation
    (read from JAX's cache when the call was traced before: nothing of the user's runs again then): the
    operation, its line and its tried fix (``offered_fix``), as ``%%jax_nans`` gives them. For a magic that
    found the NaN its own way (``%jax_check``'s checkify, ``%jax_debug``'s re-run); None when the search
    names no operation. Never raises."""
    report = _searched_without_rerun(call)
    if report is not None:
        conclude(report)
    return report


def inf_sighting_text(s: NanSighting) -> tuple[str, str, str]:
    """(title, details, fix) of a call whose results held inf and no NaN (``NanWatch.inf_sighting``), shared
    by the doctor and ``%jax_watch``: they watch for NaN, but an inf result is no clean one either."""
    where = f"`{s.function}`" if s.jitted else f"the eager operation `{s.function}`"
    title = f"an inf, not a NaN, in the results of {where} (call {s.call_number})"
    details = (
        f"{', '.join(s.leaves)} held inf; results are watched for NaN, so the call was not re-run to name the operation"
    )
    return title, details, "Run the cell under %%jax_nans --infs to find the operation that made it."


def debug_step(s: NanSighting, provenance: Provenance) -> str:
    """How to stop at the producing line with its values (``%jax_debug``): the doctor and the watch saw the
    NaN without an error, and ``%jax_debug`` starts from one - the NaN probe raises it."""
    at = f" `{provenance.made_at.code}`" if provenance.made_at is not None and provenance.made_at.code else ""
    where = f", {provenance.position}" if provenance.position else ""
    return (
        f"To stop at{at or ' the line'}{where} with its values in a debugger: run the cell under `%%jax_nans`, then "
        f"`%jax_debug` (it re-runs only the failing call {s.call_number} of `{s.function}`)."
    )


def nan_finding_provenance(s: NanSighting, nan: NanReport | None) -> Provenance:
    """The NaN probe's provenance of the re-run, with the call the user's cell made as ``started_by``;
    when the re-run could not be made, why the producing line is not known."""
    if nan is not None and nan.found and nan.provenance is not None:
        made = nan.provenance
        transforms = list(made.transforms)
        if s.jitted and not (transforms and transforms[0] == f"jit({s.function})"):
            transforms.insert(0, f"jit({s.function})")  # the re-run searched an expression inside the jitted call
        return Provenance(
            made_at=made.made_at,
            function=made.function,
            transforms=transforms,
            position=made.position,
            started_by=s.line,
            library_function=made.library_function,
            unknown=made.unknown,
        )
    why = s.rerun_note or "the call was not re-run under jax.debug_nans"
    return Provenance(started_by=s.line, unknown=f"only the call that returned it is known: {ended_sentence(why)}")


def _searched_without_rerun(call: FailingCall) -> NanReport | None:
    """The producer search on the call's program alone, found or None. A jitted function's program comes
    from JAX's cache, so nothing of the user's runs again; running the call under ``jax.debug_nans``
    instead would make JAX re-run its Python de-optimized (trace-time prints, counters and appends
    happening once more in a watched cell than in an unwatched one). Falls back (None) to that re-run
    when the search names nothing."""
    report = NanReport(checks=["nan"])
    try:
        with jit_calls.paused(), contextlib.redirect_stdout(io.StringIO()), users_python_watched() as python:
            apply_search(report, call, want_nan=True)
    except Exception:
        return None
    producer = report.producer
    if producer is None:
        return None
    report.traced_again = python.ran if python.known else None
    report.found = True
    report.value = "nan" if producer.value == "nan" or producer.nan_maker else producer.value
    report.primitive = producer.nan_maker if producer.value == "inf" and producer.nan_maker else producer.primitive
    report.phase = producer.phase
    report.failing_call = call.source
    if producer.line is not None:
        report.origin_lines = [producer.line]
    return report


def _how_traced(ran: list[str] | None) -> str:
    """Whether getting the program ran the user's Python again, said plainly (the trace-count rule)."""
    if ran is None:
        return f"(whether your Python ran again to trace it could not be told: {why_no_tool()})"
    if not ran:
        return "(from JAX's cache: your Python did not run again)"
    names = ", ".join(f"`{name}`" for name in ran[:3])
    return f"(traced again: your Python ran once more after the cell - {names} - since JAX had not kept it)"


def ended_sentence(text: str) -> str:
    """A sentence as the end of another one: lower-case first letter, no full stop."""
    text = text.strip()
    return text[:1].lower() + text[1:].rstrip(".") if text else text


def explain_nan_sighting(watch: NanWatch) -> NanReport | None:
    """Re-run the first NaN-producing jitted call the watch saw under the NaN probe; its NanReport (or None).

    Call this after the cell, with no other probe active. Never raises.
    """
    sighting, call = watch.take_rerun()
    if sighting is None:
        return None
    if not sighting.jitted:  # an eager operation: the primitive and the line are known
        eager = NanReport(
            found=True,
            value="nan",
            primitive=sighting.function,
            phase="forward",
            origin_lines=[sighting.line] if sighting.line else [],
            failing_call=sighting.line.code if sighting.line else "",
            call_number=sighting.call_number,
            call_line=sighting.line,
        )
        conclude(eager, sighting.line)
        return eager
    if call is None:
        return None
    searched = _searched_without_rerun(call)
    if searched is not None:
        searched.call_number = sighting.call_number
        searched.call_line = sighting.line
        conclude(searched, sighting.line)
        del call
        sighting.rerun_note = f"The program of {sighting.call_source} {_how_traced(searched.traced_again)} was " + (
            "evaluated operation by operation on the call's arguments to name the primitive and the line."
        )
        return searched
    report = None
    try:
        with jit_calls.paused(), contextlib.redirect_stdout(io.StringIO()):
            with nans_of_call(call) as report:  # the call searched first, as the cell's statement is by %%jax_nans
                call()
    except (FloatingPointError, ZeroDivisionError):
        pass
    except Exception as error:
        sighting.rerun_note = f"Re-running {call.source} under the NaN probe failed: {error_line(error)}"
        del call
        return None
    if report is not None and report.found:  # the call itself was searched first: no second trace of it here
        report.call_number = sighting.call_number
        report.call_line = sighting.line
        conclude(report, sighting.line)
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
