"""Tracer-leak probe: run code with ``jax.checking_leaks()`` and name who holds each leaked tracer.

Usage without IPython::

    with jaxmagic.probes.leaks(namespace=globals()) as report:
        jax.jit(leaky_fn)(x)          # raises JAX's "Leaked trace ..." Exception
    report.leaked[0].held_by            # ["leaked[0]"]

Two things make JAX's own leak checking hard to use (chapter section 4.6):

* it only checks when a trace ends, so a function whose trace is cached is
  not checked; the probe makes everything trace afresh (``_retrace``), without
  clearing caches;
* it says who holds a leaked tracer by object ids as the garbage collector sees
  them (``<list 4665787840>[0]``, then IPython's internals); the probe searches
  the user's namespace for the same objects and reports names such as
  ``leaked[0]``, ``cache.store['h']`` or ``m_leak.last_hidden``.

An ``UnexpectedTracerError`` in the block (a tracer leaked earlier and used
now) is explained too: where it was used, where it was created, which of your
variables still holds it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import types
from collections.abc import Iterator
from typing import Any

from jaxmagic._jax import compat
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic._jax.retrace import fresh_traces
from jaxmagic._jax.transform_stack import (
    Transformation,
    leak_error_stacks,
    of_traceback,
    stack_at_raise,
    trace_running_on,
    traced_for,
    transformations,
    unfiltered_traceback,
)
from jaxmagic.probes._support.fixes import line_fixes
from jaxmagic.probes._support.holders.library_records import held_in_library_records
from jaxmagic.probes._support.holders.search import KIND_NAME, find_held, user_roots
from jaxmagic.probes._support.report_base import Report
from jaxmagic.probes._support.tracers import origin as tracer_origin
from jaxmagic.probes._support.tracers import text
from jaxmagic.report import SourceLine, Status
from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.source import defining_code, is_user_file, source_line, user_lines
from jaxmagic.report.wording import error_line, message_of

CONFIG_NAMES = ("jax_check_tracer_leaks",)
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"

LEAK_FIX = (
    "A function that JAX traces must hand back every value it wants to keep: return it "
    "(`return out, h`, and `jax.grad(f, has_aux=True)` for extra outputs of a loss) instead of storing it "
    "in a list, a dict, an attribute or a closure. What was stored is a tracer of a finished trace: "
    "using it later raises UnexpectedTracerError, so empty the holder too."
)


def _fix_for_stored_line(stored: SourceLine | None, function: str, transformation: str) -> list[Paragraph]:
    """The fix written from the line that stored the tracer (``return out, h`` for ``self.h = h``)."""
    if stored is None:
        return []
    written = line_fixes.leak_fixes(
        [], stored.code, stored.function or function, transformation == "scan", stored.filename, stored.lineno, function
    )
    return [Paragraph(f"Here: `{fix.use}` - {fix.when}.") for fix in written[:1]]


@dataclasses.dataclass
class LeakedTracer:
    """One tracer that was still referenced when its trace ended."""

    number: int  # 1, 2, ... in JAX's order
    tracer_type: str  # "JitTracer"
    aval: str  # "float32[3]"
    function: str  # the function being traced ("Model.__call__" for a callable object)
    transformation: str  # "jit", "vmap", "scan", ...
    function_line: SourceLine | None = None  # where that function is defined
    created_at: SourceLine | None = None  # the line that computed the leaked value
    depends_on: list[str] = dataclasses.field(default_factory=list)  # it is (made from) these arguments
    held_by: list[str] = dataclasses.field(default_factory=list)  # your names for where it is stored
    kept_alive_by: int | None = None  # number of another leaked tracer whose computation refers to it
    jax_chain: list[str] = dataclasses.field(default_factory=list)  # JAX's reference chain, ids removed
    stored_at: SourceLine | None = None  # the one line of the traced function that stores into the holder
    provenance: Provenance | None = None  # made at, innermost function, transformations, started by

    @property
    def where(self) -> str:
        if self.held_by:
            return self.held_by[0]
        if self.kept_alive_by is not None:
            return f"(through tracer {self.kept_alive_by})"
        return "(not found in your variables)"


@dataclasses.dataclass
class UnexpectedTracer:
    """An UnexpectedTracerError: a tracer of a finished trace was used."""

    aval: str = ""
    tracer_type: str = ""
    function: str = ""  # the function being traced when it leaked
    transformation: str = ""
    used_at: SourceLine | None = None  # your line that used it (raised the error)
    created_at: SourceLine | None = None  # your line that computed it, inside the traced function
    held_by: list[str] = dataclasses.field(default_factory=list)
    stored_at: SourceLine | None = None  # the one line of the function that made it storing into the holder
    provenance: Provenance | None = None


@dataclasses.dataclass
class HeldTracer:
    """A tracer that one of your variables still holds (leaked at some earlier time)."""

    path: str
    aval: str
    tracer_type: str
    created_at: SourceLine | None = None
    stored_at: SourceLine | None = None  # the one line of the function that made it storing into ``path``
    provenance: Provenance | None = None


@dataclasses.dataclass
class LeakReport(Report):
    """What ``%%jax_leaks`` found."""

    kind = "jax_leaks"

    leaked: list[LeakedTracer] = dataclasses.field(default_factory=list)
    trace_kind: str = ""  # "DynamicJaxprTrace" (jit), "BatchTrace" (vmap), ...
    call_path: list[SourceLine] = dataclasses.field(default_factory=list)  # your frames of the leaking call
    unexpected: UnexpectedTracer | None = None
    held: list[HeldTracer] = dataclasses.field(default_factory=list)  # tracers your variables hold after the block
    traced: list[str] = dataclasses.field(default_factory=list)  # functions traced in the block
    eager_operations: int = 0  # eager primitives traced in the block (each is a tiny jit)
    retrace_method: str = ""  # "user_context" or "clear_caches"
    retrace_note: str = ""
    other_error: str = ""  # the block failed for another reason: "ValueError: ..."
    jax_message: str = ""  # JAX's error message, ids removed

    @property
    def status(self) -> Status:
        if self.leaked or self.unexpected:
            return Status.PROBLEM
        return Status.ERROR if self.other_error else Status.OK

    @property
    def primary(self) -> list[LeakedTracer]:
        """The leaked tracers stored somewhere by your code (not merely referenced by another leaked one)."""
        return [t for t in self.leaked if t.kept_alive_by is None]

    @property
    def held_by(self) -> list[str]:
        """Every name found holding a leaked tracer, in order."""
        return list(dict.fromkeys(p for t in self.leaked for p in t.held_by))

    @property
    def summary(self) -> str:
        if self.leaked:
            first = self.primary[0] if self.primary else self.leaked[0]
            how = first.transformation or "a transformation"
            if first.provenance is not None and len(first.provenance.transforms) > 1:
                how = first.provenance.path  # "jit(step) > grad"
            fn = (
                f"`{first.function}` (traced for {how})"
                if first.function
                else f"a function traced for {how} (JAX's message does not name it"
                + (f"; the trace was started at {_place(self.call_path[-1])})" if self.call_path else ")")
            )
            tracer = f"a {first.aval} tracer" if first.aval else "a tracer"
            where = f"`{first.held_by[0]}` holds {tracer}" if first.held_by else f"{tracer} is still referenced"
            more = len(self.leaked) - 1
            extra = f" ({more} more leaked tracer{'s' if more > 1 else ''} below)" if more else ""
            started = (
                f"; the trace was started at {_place(self.call_path[-1])}" if first.function and self.call_path else ""
            )
            return f"Tracer leaked from {fn}: {where}{started}{extra}."
        if self.unexpected:
            u = self.unexpected
            held = f"; `{u.held_by[0]}` holds it" if u.held_by else ""
            fn = u.created_at.function if u.created_at else (u.function or "a traced function")
            return (
                f"UnexpectedTracerError: a {u.aval or ''} tracer that leaked from `{fn}` earlier was used here{held}."
            ).replace("a  tracer", "a tracer")
        if self.other_error:
            return f"No tracer leaked before the cell failed with {self.other_error}."
        held = f" (but `{self.held[0].path}` still holds a tracer leaked earlier)" if self.held else ""
        return f"No tracer leaked{held}."

    def document(self):

        sections = []
        if self.leaked:
            rows = [
                [
                    str(t.number),
                    f"`{t.aval}`",
                    f"`{t.where}`" if t.held_by else t.where,
                    f"`{t.function}`" + (f" ({t.transformation})" if t.transformation else ""),
                    _origin(t),
                ]
                for t in self.leaked
            ]
            sections.append(
                Section("Leaked tracers", [Table(["#", "value", "held by", "traced function", "what it is"], rows)])
            )
            lines = [t.created_at for t in self.primary if t.created_at]
            first = self.primary[0] if self.primary else self.leaked[0]
            if first.provenance is not None:
                blocks = provenance_blocks(first.provenance, f"the leaked value (tracer {first.number})")
                if first.stored_at is not None:
                    blocks.insert(1, SourceLines([first.stored_at], f"The line that stored it in `{first.where}`:"))
                sections.append(Section("Where it was made", blocks))
                lines = [line for line in lines if line != first.created_at]
            if lines:
                sections.append(
                    Section(
                        "Your line",
                        [
                            SourceLines(
                                list({line.where: line for line in lines}.values()),
                                "The value that leaked was computed here:",
                            )
                        ],
                    )
                )
            if self.call_path:
                sections.append(
                    Section("During", [SourceLines(self.call_path, "The trace that leaked was started by:")])
                )
            secondary = [t for t in self.leaked if t.kept_alive_by is not None]
            why = [Paragraph(LEAK_FIX), *_fix_for_stored_line(first.stored_at, first.function, first.transformation)]
            if secondary:
                why.append(
                    Paragraph(
                        f"Tracer{'s' if len(secondary) > 1 else ''} {', '.join(str(t.number) for t in secondary)} "
                        "only leaked because a stored tracer keeps its computation, and with it its inputs, alive: "
                        "fix the stored one and they go too."
                    )
                )
            sections.append(Section("Fix", why))
        if self.unexpected:
            u = self.unexpected
            lines = []
            if u.created_at:
                lines.append(dataclasses.replace(u.created_at, code=u.created_at.code))
            facts = [
                ("value", f"{u.aval} ({u.tracer_type})"),
                ("leaked from", f"{u.function} traced for {u.transformation}" if u.function else "(not named)"),
            ]
            if u.held_by:
                facts.append(("still held by", ", ".join(u.held_by)))

            sections.append(Section("What", [Facts(facts)]))
            if u.provenance is not None:  # the producing line first, the use after it as context
                blocks = provenance_blocks(u.provenance, "the leaked value")
                if u.stored_at is not None:
                    blocks.insert(1, SourceLines([u.stored_at], f"The line that stored it in `{u.held_by[0]}`:"))
                sections.append(Section("Leaked there", blocks))
            elif u.created_at:
                sections.append(
                    Section(
                        "Leaked there",
                        [SourceLines([u.created_at], "It was computed here, while that function was being traced:")],
                    )
                )
            if u.used_at:
                sections.append(
                    Section("Used here", [SourceLines([u.used_at], "JAX raised where the old tracer was used:")])
                )
            sections.append(
                Section(
                    "Fix",
                    [
                        Paragraph(LEAK_FIX),
                        *_fix_for_stored_line(u.stored_at, u.function, u.transformation),
                        Paragraph(
                            "To catch the leak when it happens (not when the tracer is used), run the cell that calls the "
                            "traced function under %%jax_leaks."
                        ),
                    ],
                )
            )
        if self.held and not self.leaked:
            rows = [[f"`{h.path}`", f"`{h.aval}`", h.created_at.where if h.created_at else ""] for h in self.held]
            sections.append(
                Section(
                    "Tracers your variables hold",
                    [
                        Paragraph("These were leaked before; using one raises UnexpectedTracerError."),
                        Table(["variable", "value", "created at"], rows),
                    ],
                )
            )
        checked = [Paragraph(self.retrace_note)] if self.retrace_note else []
        traced = list(dict.fromkeys(self.traced + [t.function for t in self.leaked if t.function]))
        if traced or self.eager_operations or self.leaked:
            names = ", ".join(f"`{n}`" for n in traced) or (
                "a function of yours that JAX does not name" if self.leaked else "no jitted function of yours"
            )
            ops = (
                f", and {self.eager_operations} operation(s) of JAX's own (eager primitives, jax.numpy helpers)"
                if self.eager_operations
                else ""
            )
            checked.append(Paragraph(f"Traced with leak checking: {names}{ops}."))
            if not self.traced:
                checked.append(
                    Paragraph(
                        "JAX announces only jit traces; functions transformed by grad or vmap without jit are "
                        "checked as well, but only named here when they leak."
                    )
                )
        elif self.retrace_note:
            checked.append(Paragraph("Nothing was traced in the cell, so there was nothing to check."))
        if checked:
            sections.append(Section("How this was checked", checked))
        evidence = "\n".join(filter(None, [self.jax_message, self.other_error if not self.jax_message else ""]))
        if evidence:
            sections.append(
                Section(
                    "",
                    [
                        Evidence(
                            f"JAX's message ({len(evidence.splitlines())} lines, as in the traceback below)", evidence
                        )
                    ],
                )
            )
        return Document("%%jax_leaks", self.status, self.summary, sections)


def _place(line: SourceLine) -> str:
    """ "In [3], line 2 (`jax.grad(f)(x)`)": where, without the enclosing function's name (often `<module>`)."""
    return f"{line.label or line.filename}, line {line.lineno}" + (f" (`{line.code}`)" if line.code else "")


def _origin(tracer: LeakedTracer) -> str:
    """ "computed at In [4], line 8" or "the argument `x`": what the leaked tracer stands for."""
    if tracer.created_at is not None:
        return f"computed at {tracer.created_at.label or tracer.created_at.filename}, line {tracer.created_at.lineno}"
    if tracer.depends_on:
        noun = "argument" if len(tracer.depends_on) == 1 else "arguments"
        return f"the {noun} " + ", ".join(f"`{a}`" for a in tracer.depends_on) + " (an input of the trace)"
    return ""


def _is_tracer(value: Any) -> bool:
    from jax.core import Tracer

    return isinstance(value, Tracer)


def _creation_line(tracer: Any) -> SourceLine | None:
    """The user line where JAX recorded that the tracer was made, if it recorded one."""
    line_info = compat.tracer_line_info(tracer)  # a tracer may have none
    frame = compat.user_frame(getattr(line_info, "traceback", None))
    if frame is None:
        return None
    return source_line(frame.file_name, frame.start_line, text.short_qualname(frame.function_name))


def _aval(tracer: Any) -> str:
    try:
        return tracer.aval.str_short()
    except Exception:
        return str(getattr(tracer, "aval", ""))


def held_tracers(namespace: dict | None) -> list[HeldTracer]:
    """Tracers that the variables of ``namespace`` hold (every one of them is a leaked tracer)."""
    if not namespace:
        return []
    found, tracers = _find_tracers(namespace)
    held = []
    for tracer_id, places in found.items():
        tracer = tracers[tracer_id]
        provenance = tracer_origin.of_tracer(tracer)
        how, function = traced_for(tracer)
        function = function or provenance.function
        how = how or text.TRANSFORMATION_OF_TRACER.get(type(tracer).__name__, "")
        provenance.function = function
        provenance.transforms = [f"jit({function})" if how == "jit" and function else how] if how else []
        path = places[0].path
        held.append(
            HeldTracer(
                path,
                _aval(tracer),
                type(tracer).__name__,
                _creation_line(tracer),
                _stored_at(path, None, provenance),
                provenance,
            )
        )
    del tracers
    return held


def _find_tracers(namespace: dict) -> tuple[dict, dict]:
    tracers: dict[int, Any] = {}

    def is_target(value):
        if _is_tracer(value):
            tracers[id(value)] = value
            return True
        return False

    return find_held(user_roots(namespace), is_target), tracers


def _whose_trace() -> str:
    """ "user" or "library": where the function jit is tracing now is defined; "" if the stack does not say."""
    fun = compat.function_being_traced()
    if fun is None:
        return ""
    if compat.is_eager_operation(fun):
        return "library"
    code, _ = defining_code(fun)
    if code is None:
        return ""
    return "user" if is_user_file(code.co_filename) else "library"


@contextlib.contextmanager
def _trace_names(report: LeakReport):
    import jax

    def on_event(event, duration, **kwargs):
        if event != _TRACE_EVENT:
            return
        name = str(kwargs.get("fun_name", "?"))
        # Eager primitives (jnp.ones runs broadcast_in_dim as a tiny jit) and jax.numpy's own jitted
        # helpers (_reduce_sum) are JAX's: told by where the traced function is defined.
        whose = _whose_trace()
        if whose == "library":
            report.eager_operations += 1
        elif name == "<unnamed function>":
            report.traced.append("(a callable object)")
        elif name not in report.traced:
            report.traced.append(name if whose == "user" else f"{name} (jaxmagic could not tell whose)")

    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)


@contextlib.contextmanager
def leaks(*, namespace: dict | None = None, retrace_token: str | None = None) -> Iterator[LeakReport]:
    """Check every trace in the block for leaked tracers, tracing cached functions afresh.

    On a leak JAX's ``Exception("Leaked trace ...")`` propagates unchanged; an
    ``UnexpectedTracerError`` too. The report is filled in before. With
    ``namespace`` (the user's variables) the report names the variables that
    hold leaked tracers. ``retrace_token`` (see ``_retrace.fresh_traces``):
    blocks with the same token share their traces, each checked when made.
    """
    import jax

    report = LeakReport()
    try:
        with (
            preserved_jax_state(CONFIG_NAMES),
            _trace_names(report),
            fresh_traces(retrace_token) as how,
            leak_error_stacks() as stacks,
            jax.checking_leaks(),
        ):
            report.retrace_method, report.retrace_note = how.method, how.description
            yield report
    except Exception as error:
        try:
            if text.is_leak_message(message_of(error)):
                _explain_leak(report, error, namespace, stacks[-1] if stacks else None)
            elif isinstance(error, jax.errors.UnexpectedTracerError):
                report.unexpected = explain_unexpected_tracer(error, namespace)
                report.jax_message = message_of(error).strip()
            else:
                report.other_error = error_line(error)
        except Exception as failure:  # never let our analysis hide the user's error
            report.other_error = report.other_error or error_line(error)
            report.retrace_note += f" (jaxmagic could not finish its analysis: {error_line(failure)})"
        mark_explained(error, report)
        raise
    except BaseException as error:
        report.other_error = error_line(error)
        raise
    finally:
        if not report.leaked and not report.unexpected:
            report.held = held_tracers(namespace)


def mark_explained(error: BaseException, report: Report) -> None:
    """Tell the tracer-error explainer that ``report`` already explained ``error`` (no second explanation)."""
    if report.status is Status.PROBLEM:
        try:
            error._jaxmagic_explained = report.kind
        except Exception:
            pass


def explain_leak(error: BaseException, namespace: dict | None = None) -> LeakReport:
    """A report for JAX's "Leaked trace ..." error raised by leak checking switched on some other way."""
    report = LeakReport()
    _explain_leak(report, error, namespace)
    report.retrace_note = (
        "Leak checking was on (jax_check_tracer_leaks); functions whose traces were cached "
        "were not checked. %%jax_leaks traces them afresh."
    )
    return report


def _explain_leak(
    report: LeakReport, error: BaseException, namespace: dict | None, stack: list[Transformation] | None = None
) -> None:
    """Fill ``report`` from a leak error. ``stack``: the transformations on the stack when JAX raised it
    (recorded by the probe); without it they are read from the traceback when JAX kept its frames."""
    message = message_of(error)
    if stack is None:
        stack = transformations(stack_at_raise(error)) or of_traceback(unfiltered_traceback(error))
    innermost = stack[-1] if stack else None
    labels = [t.label for t in stack]
    report.trace_kind = text.leak_trace_kind(message)
    report.jax_message = text.without_ids(message.strip())
    report.call_path = user_lines(error.__traceback__)
    blocks = text.leak_blocks(message)
    found, tracers = _find_tracers(namespace) if namespace else ({}, {})
    if namespace:  # kept in a library's record of your object (nnx.jit's graph definition): named as your attribute
        in_records, kept = held_in_library_records(
            [b for b in blocks if b.tracer_id not in found], user_roots(namespace)
        )
        found, tracers = {**in_records, **found}, {**kept, **tracers}
    ids = {block.tracer_id for block in blocks}
    number_of = {block.tracer_id: i + 1 for i, block in enumerate(blocks)}
    # All blocks come from one trace. JAX names a callable object's function
    # "<unknown>"; the line that made a stored tracer names it (Model.__call__).
    created_lines = {b.tracer_id: _creation_line(tracers[b.tracer_id]) for b in blocks if b.tracer_id in tracers}
    # An input tracer is "made" where the trace was started (the call of the jitted function, often
    # the cell itself): that line is on the call path, outside the traced function, and names nothing.
    started = {(line.filename, line.lineno) for line in report.call_path}
    created_lines = {
        k: line for k, line in created_lines.items() if line is not None and (line.filename, line.lineno) not in started
    }
    # A "created on line" in the <module> of a cell (vmap's input, made at the vmap call) names no traced function.
    on_path = {(line.filename, line.lineno) for line in report.call_path}
    named = [
        b.context.function
        for b in blocks
        if b.context.function not in ("", "<unknown>", "<module>") and (b.context.file, b.context.line) not in on_path
    ]
    named += [line.function for line in created_lines.values()]
    started = report.call_path[0] if report.call_path else None
    for i, block in enumerate(blocks):
        context = block.context
        created = created_lines.get(block.tracer_id)
        function = context.function
        from_message = function not in ("", "<unknown>", "<module>") and (context.file, context.line) not in on_path
        if not from_message:
            function = innermost.function if innermost is not None else named[0] if named else ""
        via = block.held_through_tracer(ids)
        held_by = [h.path for h in found.get(block.tracer_id, [])]
        if not held_by and via is None:
            fallback = _path_from_chain(block.chain)
            held_by = [fallback] if fallback else []
        if block.tracer_id in tracers:
            provenance = tracer_origin.of_tracer(tracers[block.tracer_id], labels, started, report.call_path)
        else:
            provenance = Provenance(
                transforms=labels,
                started_by=started,
                unknown="the tracer was not found in your variables, so its recorded line could not be read",
            )
        if created is not None and provenance.made_at is None:
            provenance = dataclasses.replace(provenance, made_at=created, unknown="")
        created = created or provenance.made_at
        provenance.function = function if innermost is not None or not provenance.function else provenance.function
        stored = _stored_at(held_by[0], innermost, provenance) if held_by else None
        report.leaked.append(
            LeakedTracer(
                number=i + 1,
                tracer_type=block.tracer_type,
                aval=block.aval,
                function=function,
                transformation=context.transformation or text.TRANSFORMATION_OF_TRACER.get(block.tracer_type, ""),
                function_line=innermost.defined_at
                if innermost is not None and innermost.function == function
                else source_line(context.file, context.line, context.function)
                if context.file and from_message
                else None,
                created_at=created,
                depends_on=context.depends_on,
                held_by=held_by,
                kept_alive_by=number_of.get(via) if via is not None and not held_by else None,
                jax_chain=[
                    text.without_ids(f"<{link.child_type} {link.child_id}> is referred to by {link.holder}")
                    for link in block.chain
                ],
                stored_at=stored,
                provenance=provenance,
            )
        )
    del tracers


def _stored_at(holder: str, traced: Transformation | None, provenance: Provenance) -> SourceLine | None:
    """The one line of the traced function (or of the function that made the value) storing into ``holder``."""
    if traced is not None and traced.defined_at is not None:
        where = traced.defined_at
        return tracer_origin.stored_line(holder, where.filename, where.lineno, traced.function, provenance.made_at)
    made = provenance.made_at
    if made is None:
        return None
    start = tracer_origin.enclosing_function_start(made.filename, made.lineno)
    return tracer_origin.stored_line(holder, made.filename, start, made.function) if start else None


def _path_from_chain(chain: list[text.ChainLink]) -> str:
    """JAX's chain as one path when the search of the namespace found nothing: ``<Cache>.store['h']``.

    The chain runs from the tracer up to a root; the root's text (a module
    variable such as ``__main__.leaked``) followed by each link's own step.
    """
    if not chain:
        return ""

    ref = re.compile(r"^<[\w.]+ \d+>")
    root = chain[-1].holder
    if ref.match(root):
        root = text.without_ids(root)
    path = root.removeprefix("__main__.")
    for link in reversed(chain[:-1]):
        match = ref.match(link.holder)
        path += link.holder[match.end() :] if match else f" <- {text.without_ids(link.holder)}"
    return path


def explain_unexpected_tracer(error: BaseException, namespace: dict | None) -> UnexpectedTracer:
    """The facts of an UnexpectedTracerError: used where, created where, held by which variable."""
    facts = text.escaped_tracer(message_of(error))
    lines = user_lines(error.__traceback__)
    created = (
        source_line(facts.created_file, facts.created_line, facts.created_function) if facts.created_file else None
    )
    held = held_tracers(namespace)
    if created is not None:  # prefer the holders of this very tracer, matched by where it was made
        same = [
            h
            for h in held
            if h.created_at and (h.created_at.filename, h.created_at.lineno) == (created.filename, created.lineno)
        ]
        held = same or held
    function = facts.function
    if function in ("", "<unknown>") and facts.created_function:
        function = facts.created_function
    how = facts.transformation
    provenance = Provenance(
        made_at=created,
        function=function,
        transforms=[f"{how}({function})" if how == "jit" and function else how] if how else [],
        unknown="" if created is not None else "JAX's message names no line of yours that made the value",
    )
    paths = [h.path for h in held]
    return UnexpectedTracer(
        aval=facts.aval,
        tracer_type=facts.tracer_type,
        function=function,
        transformation=facts.transformation,
        used_at=lines[-1] if lines else None,
        created_at=created,
        held_by=paths,
        stored_at=_stored_at(paths[0], None, provenance) if paths else None,
        provenance=provenance,
    )


def explain_kept_tracer(error: BaseException, namespace: dict | None = None) -> UnexpectedTracer | None:
    """A tracer kept past its trace that reached an operation raising another kind of error (JAX 0.12:
    ``jax.device_put`` says "Argument of type <class '...DynamicJaxprTracer'> is not a valid JAX type";
    ``np.asarray`` raises TracerArrayConversionError). Told by the tracer it carries - a tracer in the
    exception's arguments, bound on the failing line, or named in the message - at a line that no
    transformation was tracing (so its trace had ended). None when that is not the case."""
    frames = stack_at_raise(error)
    tb, failing, lineno = error.__traceback__, None, 0
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            failing, lineno = tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next
    if failing is None:
        del frames
        return None
    upto = (
        [entry for entry in frames[: [f for f, _ in frames].index(failing) + 1]]
        if any(f is failing for f, _ in frames)
        else []
    )
    del frames  # the frames inside the failing line's call may hold a leaked tracer's trace: only callers count
    inside = transformations(upto)
    if inside:  # the failing line ran while a transformation traced it: a tracer there is no leak
        del failing, upto
        return None
    code = source_line(failing.f_code.co_filename, lineno, failing.f_code.co_name)
    candidates: dict[int, Any] = {}
    for value in error.args:
        if _is_tracer(value):
            candidates[id(value)] = value
    scopes = (failing.f_locals, failing.f_globals)
    roots = []
    for name in text.names_in(code.code):
        scope = next((scope for scope in scopes if name in scope), None)
        if scope is not None and not isinstance(scope[name], types.ModuleType):
            roots.append((name, scope[name], KIND_NAME))
    del failing, scopes

    def is_target(value):
        if _is_tracer(value):
            candidates[id(value)] = value
            return True
        return False

    on_line = find_held(roots, is_target, max_depth=4) if roots else {}
    del roots
    mentioned = text.mentioned_tracer(message_of(error)) or (
        "tracer" if text.mentions_tracer(message_of(error)) else ""
    )
    if not candidates and not mentioned:
        return None
    if any(trace_running_on(value, upto) for value in candidates.values()):
        candidates.clear()  # traced by a transformation no API frame names (make_jaxpr, lax.cond): no leak
        del upto
        return None
    del upto
    in_namespace, _ = _find_tracers(namespace) if namespace and candidates else ({}, {})
    tracer = next(iter(candidates.values()), None)
    facts = UnexpectedTracer(tracer_type=mentioned, used_at=code)
    if tracer is not None:
        facts.aval, facts.tracer_type = _aval(tracer), type(tracer).__name__
        paths = [h.path for h in in_namespace.get(id(tracer), [])] + [h.path for h in on_line.get(id(tracer), [])]
        facts.held_by = list(dict.fromkeys(paths))
        how, function = traced_for(tracer)
        how = how or text.TRANSFORMATION_OF_TRACER.get(type(tracer).__name__, "")
        provenance = tracer_origin.of_tracer(tracer, (), started=None)
        function = function or provenance.function
        facts.function, facts.transformation = function, how
        if how:
            provenance.transforms = [f"{how}({function})" if how == "jit" and function else how]
        provenance.function = function
        facts.created_at = provenance.made_at
        facts.provenance = provenance
        if facts.held_by:
            facts.stored_at = _stored_at(facts.held_by[0], None, provenance)
    else:
        facts.provenance = Provenance(
            unknown=f"the {mentioned} the message names was not found on your line or in the error's arguments"
        )
    candidates.clear()
    del tracer, in_namespace
    return facts
