"""The explainer's analysis: from an error, its traceback and JAX's message, the facts of a report.

``explain`` classifies the error (``kinds``), reads your frames (``frames``), where the offending
value was made and which argument of the jitted function it comes from, writes the fixes
(``fixes``) and fits them to the program (``program_fixes``). A tracer kept past its trace is
explained by the leak probe's analysis.
"""

from __future__ import annotations

import dataclasses
import linecache
import re
import sys
import types

from jaxmagic._jax.transform_stack import Transformation, stack_at_raise, transformations
from jaxmagic.probes._explain.fixes import fixes_for
from jaxmagic.probes._explain.frames import (
    innermost_user_frame,
    lambda_body,
    parameter_names,
    resolver,
    tracers_on_failing_line,
)
from jaxmagic.probes._explain.kinds import KINDS, classify
from jaxmagic.probes._explain.library_code import library_fixes, library_raise
from jaxmagic.probes._explain.library_trace import explain_library_trace, is_library_trace_error
from jaxmagic.probes._explain.non_array import explain_non_array_argument, is_non_array_argument
from jaxmagic.probes._explain.program_fixes import fit_static_fixes
from jaxmagic.probes._explain.report import TracerErrorReport, UnexplainedErrorReport
from jaxmagic.probes._explain.unhashable_static import explain_unhashable_static, is_unhashable_static
from jaxmagic.probes._leaks import UnexpectedTracer, explain_kept_tracer, explain_leak, explain_unexpected_tracer
from jaxmagic.probes._leaks.tracers import origin as tracer_origin
from jaxmagic.probes._leaks.tracers import text
from jaxmagic.probes._memory import explain_out_of_memory, is_out_of_memory
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.fixes.leak_fixes import leak_fixes
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import error_line, first_line, message_of
from jaxmagic.usercode.source import is_user_file, source_line, user_lines


def explain(error: BaseException, namespace: dict[str, object] | None = None) -> TracerErrorReport | None:
    """Explain a tracer-family error; None when ``error`` is of another kind.

    ``namespace`` (the user's variables) lets an UnexpectedTracerError name the
    variable that still holds the leaked tracer.
    """
    kind_key = classify(error)
    kept = None
    carries_tracer = text.mentions_tracer(message_of(error)) or any(
        type(arg).__name__ in text.TRANSFORMATION_OF_TRACER or "Tracer" in type(arg).__name__ for arg in error.args
    )
    if kind_key not in ("leak", "key_reuse") and (kind_key is not None or carries_tracer):
        try:
            kept = explain_kept_tracer(error, namespace)
        except Exception:  # the explanation is a bonus: never fail on an error we cannot read
            kept = None
    disguised = ""
    if kept is not None:
        kind_key, disguised = "leak", kind_key or "other"
    if kind_key is None:
        return None
    kind = KINDS[kind_key]
    message = message_of(error)
    context = text.tracing_context(message)
    report = TracerErrorReport(
        error_type=type(error).__name__,
        error_kind=kind_key,
        title=kind.title,
        message=first_line(message),
        jax_hint=_jax_hint(message),
        jax_message_text=message,
        why=kind.why,
    )
    report.your_lines = user_lines(error.__traceback__)
    report.failing_lambda = lambda_body(error.__traceback__)
    report.traced_names = tracers_on_failing_line(error.__traceback__)
    report.traced_function = "" if context.function == "<unknown>" else context.function
    report.transformation = context.transformation
    report.depends_on = context.depends_on
    if context.created_on:  # where the tracer was made, not the function: the frame that held the tracers is
        innermost = innermost_user_frame(error.__traceback__)
        if innermost is not None:
            code = innermost.f_code
            report.traced_function = code.co_qualname.rsplit("<locals>.", 1)[-1]
            report.function_line = source_line(code.co_filename, code.co_firstlineno, code.co_name)
        del innermost
    elif context.file and is_user_file(context.file):
        report.function_line = source_line(context.file, context.line, context.function)
    if not report.transformation and report.traced_names:
        report.transformation = _transformation_on_failing_line(report, error.__traceback__)
    if not report.traced_function and report.traced_names and report.your_lines:
        report.traced_function = report.your_lines[-1].function  # the frame that held the tracers
    if kept is not None:
        _add_kept_facts(report, kept, disguised)
        report.fixes = fixes_for(kind, report)
        return report
    if kind_key == "leak":
        _add_leak_facts(report, error, namespace)
        report.fixes = fixes_for(kind, report)
        if report.stored_at is not None:
            function = report.stored_at.function or report.traced_function
            loop_body = report.transformation == "scan"
            stored = report.stored_at
            report.fixes = leak_fixes(
                report.fixes, stored.code, function, loop_body, stored.filename, stored.lineno, report.traced_function
            )
        return report
    _add_traced_origin(report, error.__traceback__)
    frames = stack_at_raise(error)
    try:
        inside = transformations(frames)
        report.provenance = _provenance_of(report, message, inside)
        if report.provenance.made_at is None:
            report.provenance = _made_on_failing_line(report, error.__traceback__) or report.provenance
        report.fixes = fixes_for(kind, report, resolver(error.__traceback__))
        fit_static_fixes(report, inside, frames, error.__traceback__)
    finally:
        del frames
    raised = library_raise(error.__traceback__)
    if raised is not None:  # the operation is the library's: no rewrite of the user's line is its fix
        report.raised_in = raised.line
        report.fixes, report.rejected_fixes = library_fixes(raised, error.__traceback__), []
    return report


def _transformation_on_failing_line(report: TracerErrorReport, tb: types.TracebackType | None) -> str:
    """The transformation whose trace made the first tracer on the failing line (``lax.scan``'s for a scan
    body's value, never "jit" for it because its tracer is of jit's class); from its class when the frame no
    longer holds it."""
    first = report.traced_names[0]
    frame = innermost_user_frame(tb)
    value = frame.f_locals.get(first.name) if frame is not None else None
    del frame
    if value is not None and type(value).__name__ == first.tracer_type:
        return tracer_origin.transformation_of(value)
    return text.TRANSFORMATION_OF_TRACER.get(first.tracer_type, "")


def _provenance_of(report: TracerErrorReport, message: str, inside: list[Transformation]) -> Provenance:
    """Where the traced value was made: the line JAX's message names ("This value became a tracer due
    to JAX operations on these lines: ... from line ..."), else why it cannot be told; the function and
    the transformations from the stack when the error was raised; the call that started it."""
    started = report.your_lines[0] if report.your_lines else None
    labels = [t.label for t in inside]
    named = attribution.of_message(message)
    if named is not None and named.made_at is not None:
        # Of a chain (n = jnp.add(x.size, 1); m = n * 2) the value became a tracer at the first
        # operation whose inputs were all static; of_message names the last line.
        origin = next(
            (op for op in text.traced_operations(message) if op.static_inputs and is_user_file(op.file)), None
        )
        made = source_line(origin.file, origin.line, origin.function) if origin is not None else named.made_at
        return dataclasses.replace(
            named, made_at=made, function=made.function, transforms=labels or named.transforms, started_by=started
        )
    function = inside[-1].function if inside else report.traced_function
    if not labels and report.transformation:
        labels = [f"jit({function})" if report.transformation == "jit" and function else report.transformation]
    if report.depends_on:
        noun = "argument" if len(report.depends_on) == 1 else "arguments"
        why = (
            f"it is (made from) the {noun} {text.english_list(report.depends_on)}"
            + (f" of `{function}`" if function else "")
            + ", an input of the trace; JAX's message names no line that computed it"
        )
    else:
        why = "JAX's message names no line of yours that made it"
    return Provenance(function=function, transforms=labels, started_by=started, unknown=why)


_MESSAGE_AVAL = re.compile(r"(?:Tracer\(|Traced<)~?(\w+\[[\d, ]*\])")


def _made_on_failing_line(report: TracerErrorReport, tb: types.TracebackType | None) -> Provenance | None:
    """Where a tracer on the failing line was computed, from the line JAX recorded on it
    (``n = jnp.sum(mask)`` for ``jnp.zeros(n)``); None when every tracer there is an input of the
    trace (bound to a parameter of a traced function of yours) or JAX recorded no line of yours."""
    core = getattr(sys.modules.get("jax"), "core", None)
    tracer_class = getattr(core, "Tracer", None)
    frame = innermost_user_frame(tb)
    if tracer_class is None or frame is None or report.provenance is None:
        return None
    inputs: set[int] = set()
    walk = tb
    while walk is not None:  # the values bound to parameters of your functions: inputs of a trace
        code = walk.tb_frame.f_code
        if is_user_file(code.co_filename):
            inputs.update(id(walk.tb_frame.f_locals.get(name)) for name in parameter_names(code))
        walk = walk.tb_next
    # JAX's message shows the type of the value it could not use ("got (JitTracer(~int32[]),)"): a
    # tracer of another type on the line (the array `y` beside the size `k`) is not the one.
    named = set(_MESSAGE_AVAL.findall(report.message or ""))
    found = None
    for traced in report.traced_names:
        value = frame.f_locals.get(traced.name)
        if not isinstance(value, tracer_class) or id(value) in inputs:
            continue
        if named and traced.aval not in named:
            continue
        outside = report.your_lines[:-1]
        made = tracer_origin.of_tracer(value, report.provenance.transforms, report.provenance.started_by, outside)
        if made.made_at is not None:
            found = dataclasses.replace(made, function=made.made_at.function)
            break
    del frame
    return found


def _add_kept_facts(report: TracerErrorReport, kept: UnexpectedTracer, disguised: str) -> None:
    """A tracer kept past its trace that JAX reported as another error: explained as the leak it is."""
    report.traced_function = kept.function
    report.transformation = kept.transformation
    report.leaked_from = kept.created_at
    report.held_by = kept.held_by
    report.stored_at = kept.stored_at
    report.disguised_as = disguised
    report.traced_names = []
    report.depends_on = []
    report.function_line = None
    provenance = kept.provenance or Provenance(unknown="the tracer was not found")
    if report.your_lines:
        provenance = dataclasses.replace(provenance, started_by=None)
    report.provenance = provenance
    report.why = (
        f"JAX raised {report.error_type}, not UnexpectedTracerError, but the value it got is a tracer of a trace "
        "that had ended: a traced function stored it outside itself (an attribute, a list, a global) and it was "
        "used after the trace. " + KINDS["leak"].why
    )


def _add_traced_origin(report: TracerErrorReport, tb: types.TracebackType | None) -> None:
    """The function of yours that was given to the transformation, and the argument each tracer on your line is.

    The failing frame may be a loop body or a branch (``step`` of a
    ``while_loop``) that reads a tracer from its closure: the fix belongs to
    the function that was jitted. The frames of the traceback hold their
    variables; a function of yours whose *parameter* is bound to a tracer is a
    traced function, the outermost one is the one the transformation was given,
    and a tracer on the failing line that is the very object bound to one of
    its parameters comes from that argument.
    """

    core = getattr(sys.modules.get("jax"), "core", None)
    tracer_class = getattr(core, "Tracer", None)
    if tracer_class is None:
        return
    frames = []
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    if not frames:
        return
    failing, lineno = frames[-1]
    failing_code = failing.f_code

    on_line = {}
    for name in text.names_in(linecache.getline(failing.f_code.co_filename, lineno)):
        value = failing.f_locals.get(name)
        if isinstance(value, tracer_class):
            on_line[name] = value
    traced = []
    for frame, _ in frames:
        parameters = {name: frame.f_locals.get(name) for name in parameter_names(frame.f_code)}
        tracers = {name: value for name, value in parameters.items() if isinstance(value, tracer_class)}
        if tracers:
            traced.append((frame, tracers))
    del failing, frames
    if not traced:
        return
    outer, parameters = traced[0]
    if outer.f_code is failing_code:
        del outer, traced
        own = [p for value in on_line.values() for p, bound in parameters.items() if bound is value]
        unnamed = not report.depends_on and report.transformation == "vmap"
        if own and (unnamed or _names_a_library_repacking(report.depends_on, parameter_names(failing_code))):
            # A library's jit wrapper (eqx.filter_jit, nnx.jit) gave jit its own repacking of the arguments, so
            # JAX's message names the library's ("dynamic_nodonate['first'][0]"); or it names none (vmap's
            # tracers carry no argument names: jax-ml/jax#5454, `jnp.arange(i)` inside a vmapped function): the
            # tracers on the failing line that are the user's parameters name them as the user wrote them.
            report.depends_on = list(dict.fromkeys(own))
        del parameters, on_line
        return  # the failing function is the one traced: JAX's own message names its arguments
    report.jitted_function = outer.f_code.co_name
    report.jitted_line = source_line(outer.f_code.co_filename, outer.f_code.co_firstlineno, outer.f_code.co_name)
    first = next(iter(parameters.values()))
    report.jitted_transformation = tracer_origin.transformation_of(first)
    for name, value in on_line.items():
        for parameter, bound in parameters.items():
            if bound is value:
                report.origin_arguments[name] = parameter
                break
    if report.origin_arguments:
        report.depends_on = list(dict.fromkeys(report.origin_arguments.values()))
    del outer, traced, parameters, first, on_line


def _names_a_library_repacking(depends_on: list[str], parameters: tuple[str, ...]) -> bool:
    """True when JAX's message names arguments (``dynamic_nodonate['first'][0]``) none of which is a parameter of
    the user's traced function: a library's jit wrapper repacked them."""
    roots = {re.split(r"[\[.]", name, maxsplit=1)[0] for name in depends_on}
    return bool(roots) and not roots & set(parameters)


def _jax_hint(message: str) -> str:
    """JAX's own extra sentence between the first line and the "while tracing" sentence, if any."""
    lines = [line.strip() for line in message.strip().splitlines()[1:]]
    for line in lines:
        if not line or line.startswith(("The error occurred while tracing", "See https://", "This ", "-----")):
            continue
        if line.startswith(
            (
                "If using `jit`",
                "The problem arose",
                "It arose",
                "The size argument",
                "This occurred",
                "To index an array",
            )
        ):
            return line
    return ""


def _add_leak_facts(report: TracerErrorReport, error: BaseException, namespace: dict[str, object] | None) -> None:

    facts = explain_unexpected_tracer(error, namespace)
    report.traced_function = facts.function if facts.function != "<unknown>" else ""
    report.transformation = facts.transformation
    report.leaked_from = facts.created_at
    report.held_by = facts.held_by
    report.stored_at = facts.stored_at
    report.provenance = facts.provenance
    report.traced_names = []


def explain_any(error: BaseException, namespace: dict[str, object] | None = None) -> Report | None:
    """A report for any error the explainer knows: tracer errors, JAX's "Leaked trace" errors, a value jit
    cannot take, and running out of memory (``probes.memory``)."""
    if is_out_of_memory(error):
        return explain_out_of_memory(error, namespace)
    if text.is_leak_message(message_of(error)):
        return explain_leak(error, namespace)
    if is_non_array_argument(error):
        return explain_non_array_argument(error)
    if is_unhashable_static(error):
        return explain_unhashable_static(error)
    if is_library_trace_error(error):  # a library's own trace-level error (Flax's TraceContextError)
        return explain_library_trace(error)
    return explain(error, namespace)


def explain_or_say_why(error: BaseException, namespace: dict[str, object] | None = None) -> Report:
    """``explain_any``'s report, or - for an error it does not explain - a report saying so and why."""
    try:
        report = explain_any(error, namespace)
    except Exception as failure:  # never fail on the user's error
        reason = f"jaxmagic's own analysis failed ({error_line(failure)})"
        report = None
    else:
        reason = ""
    if report is not None:
        return report
    message = message_of(error)
    if not reason:
        if text.mentions_tracer(message):
            reason = (
                "its message speaks of a tracer, but it was raised while a transformation was tracing your code "
                "(not a tracer kept past its trace) and it is none of the tracer errors jaxmagic knows"
            )
        else:
            on_line = [t.name for t in tracers_on_failing_line(error.__traceback__)]
            if on_line:
                reason = (
                    "it is none of the tracer errors jaxmagic knows (by type and message), though "
                    f"{text.english_list(on_line)} on the line that raised it "
                    f"{'is a tracer' if len(on_line) == 1 else 'are tracers'}: it was raised while tracing, "
                    "and jaxmagic could not tell how the traced values caused it"
                )
            else:
                reason = (
                    "it is not a tracer error: no JAX tracer error type, no tracer in its message or arguments, "
                    "and no tracer on the line that raised it"
                )
    return UnexplainedErrorReport(
        error_type=type(error).__name__,
        message=first_line(message),
        reason=reason,
        your_lines=user_lines(error.__traceback__),
    )
