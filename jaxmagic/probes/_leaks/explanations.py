"""Explaining leaked tracers: JAX's "Leaked trace" error (who holds each tracer, where it was made),
an UnexpectedTracerError, a tracer kept past its trace that reached an operation raising another
error, and the tracers the user's variables hold.

JAX says who holds a leaked tracer by object ids as the garbage collector sees them
(``<list 4665787840>[0]``, then IPython's internals); the user's namespace is searched for the
same objects and the report names them (``leaked[0]``, ``cache.store['h']``, ``m_leak.last_hidden``).
"""

from __future__ import annotations

import dataclasses
import re
import types
from typing import Any

from jax.core import Tracer

from jaxmagic._jax import recorded_sources
from jaxmagic._jax.transform_stack import (
    Transformation,
    of_traceback,
    stack_at_raise,
    trace_running_on,
    traced_below,
    traced_for,
    transformations,
    unfiltered_traceback,
)
from jaxmagic.probes._leaks.library_records import held_in_library_records
from jaxmagic.probes._leaks.report import HeldTracer, LeakedTracer, LeakReport, UnexpectedTracer
from jaxmagic.probes._leaks.tracers import origin as tracer_origin
from jaxmagic.probes._leaks.tracers import text
from jaxmagic.probes._live.holders.search import KIND_NAME, Held, find_held, user_roots
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import message_of
from jaxmagic.usercode.source import is_user_file, source_line, user_lines


def _is_tracer(value: Any) -> bool:
    return isinstance(value, Tracer)


def _creation_line(tracer: Any) -> SourceLine | None:
    """The user line where JAX recorded that the tracer was made, if it recorded one."""
    line_info = recorded_sources.tracer_line_info(tracer)  # a tracer may have none
    frame = recorded_sources.user_frame(getattr(line_info, "traceback", None))
    if frame is None:
        return None
    return source_line(frame.file_name, frame.start_line, text.short_qualname(frame.function_name))


def _aval(tracer: Any) -> str:
    try:
        return tracer.aval.str_short()
    except Exception:
        return str(getattr(tracer, "aval", ""))


def held_tracers(namespace: dict[str, object] | None) -> list[HeldTracer]:
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


def _find_tracers(namespace: dict[str, object]) -> tuple[dict[int, list[Held]], dict[int, Any]]:
    tracers: dict[int, Any] = {}

    def is_target(value: Any) -> bool:
        if _is_tracer(value):
            tracers[id(value)] = value
            return True
        return False

    return find_held(user_roots(namespace), is_target), tracers


def explain_leak(error: BaseException, namespace: dict[str, object] | None = None) -> LeakReport:
    """A report for JAX's "Leaked trace ..." error raised by leak checking switched on some other way."""
    report = LeakReport()
    fill_leak_report(report, error, namespace)
    report.retrace_note = (
        "Leak checking was on (jax_check_tracer_leaks); functions whose traces were cached "
        "were not checked. %%jax_leaks traces them afresh."
    )
    return report


def fill_leak_report(
    report: LeakReport,
    error: BaseException,
    namespace: dict[str, object] | None,
    stack: list[Transformation] | None = None,
) -> None:
    """Fill ``report`` from a leak error. ``stack``: the transformations on the stack when JAX raised it
    (recorded by the probe); without it they are read from the traceback when JAX kept its frames."""
    message = message_of(error)
    if stack is None:
        stack = transformations(stack_at_raise(error)) or of_traceback(unfiltered_traceback(error))
    report.trace_kind = text.leak_trace_kind(message)
    report.jax_message = text.without_ids(message.strip())
    report.call_path = user_lines(error.__traceback__)
    blocks = text.leak_blocks(message)
    trace = _LeakedTrace.of(blocks, stack, report.call_path, namespace)
    report.leaked += [_leaked_tracer(i + 1, block, trace) for i, block in enumerate(blocks)]
    trace.tracers.clear()  # the tracers themselves: kept no longer than the report's making


@dataclasses.dataclass
class _LeakedTrace:
    """What every leaked tracer of one "Leaked trace" error shares: the trace that leaked them, the places
    the user's names hold them, the tracers themselves (by id) and the lines that made them."""

    innermost: Transformation | None  # the transformation tracing when JAX raised
    labels: list[str]  # "jit(step)", "grad", ... outermost first
    call_path: list[SourceLine]  # the user's frames of the leaking call
    found: dict[int, list[Held]]  # tracer id -> the user's names holding it
    tracers: dict[int, Any]  # tracer id -> the tracer
    number_of: dict[int, int]  # tracer id -> its number (1, 2, ... in JAX's order)
    created_lines: dict[int, SourceLine]  # tracer id -> the line inside the traced function that made it
    named: list[str]  # the traced functions the message or the made lines name

    @classmethod
    def of(
        cls,
        blocks: list[text.LeakBlock],
        stack: list[Transformation],
        call_path: list[SourceLine],
        namespace: dict[str, object] | None,
    ) -> _LeakedTrace:
        found, tracers = _find_tracers(namespace) if namespace else ({}, {})
        if namespace:  # kept in a library's record of your object (nnx.jit's graph definition): named as your attribute
            called_with = [name for line in call_path for name in text.names_in(line.code)]
            in_records, kept = held_in_library_records(
                [b for b in blocks if b.tracer_id not in found], user_roots(namespace), called_with
            )
            found, tracers = {**in_records, **found}, {**kept, **tracers}
        # All blocks come from one trace. JAX names a callable object's function
        # "<unknown>"; the line that made a stored tracer names it (Model.__call__).
        made_lines = {b.tracer_id: _creation_line(tracers[b.tracer_id]) for b in blocks if b.tracer_id in tracers}
        # An input tracer is "made" where the trace was started (the call of the jitted function, often
        # the cell itself): that line is on the call path, outside the traced function, and names nothing.
        on_path = {(line.filename, line.lineno) for line in call_path}
        created_lines = {
            k: line
            for k, line in made_lines.items()
            if line is not None and (line.filename, line.lineno) not in on_path
        }
        # A "created on line" in the <module> of a cell (vmap's input, made at the vmap call) names no traced function.
        named = [b.context.function for b in blocks if _names_traced_function(b.context, on_path)]
        named += [line.function for line in created_lines.values()]
        return cls(
            innermost=stack[-1] if stack else None,
            labels=[t.label for t in stack],
            call_path=call_path,
            found=found,
            tracers=tracers,
            number_of={block.tracer_id: i + 1 for i, block in enumerate(blocks)},
            created_lines=created_lines,
            named=named,
        )

    @property
    def on_path(self) -> set[tuple[str, int]]:
        return {(line.filename, line.lineno) for line in self.call_path}


def _names_traced_function(context: text.TracingContext, on_path: set[tuple[str, int]]) -> bool:
    """Whether JAX's message names the traced function (not "<unknown>", nor the cell's module at the call)."""
    return context.function not in ("", "<unknown>", "<module>") and (context.file, context.line) not in on_path


def _leaked_tracer(number: int, block: text.LeakBlock, trace: _LeakedTrace) -> LeakedTracer:
    """One block of JAX's message as a leaked tracer: its function, holders, provenance and storing line."""
    context, innermost = block.context, trace.innermost
    from_message = _names_traced_function(context, trace.on_path)
    function = context.function
    if not from_message:
        function = innermost.function if innermost is not None else trace.named[0] if trace.named else ""
    via = block.held_through_tracer(set(trace.number_of))
    held_by = [h.path for h in trace.found.get(block.tracer_id, [])]
    if not held_by and via is None:
        fallback = _path_from_chain(block.chain)
        held_by = [fallback] if fallback else []
    started = trace.call_path[0] if trace.call_path else None
    if block.tracer_id in trace.tracers:
        provenance = tracer_origin.of_tracer(trace.tracers[block.tracer_id], trace.labels, started, trace.call_path)
    else:
        provenance = Provenance(
            transforms=trace.labels,
            started_by=started,
            unknown="the tracer was not found in your variables, so its recorded line could not be read",
        )
    created = trace.created_lines.get(block.tracer_id)
    if created is not None and provenance.made_at is None:
        provenance = dataclasses.replace(provenance, made_at=created, unknown="")
    created = created or provenance.made_at
    provenance.function = function if innermost is not None or not provenance.function else provenance.function
    if innermost is not None and innermost.function == function:
        function_line = innermost.defined_at
    elif context.file and from_message:
        function_line = source_line(context.file, context.line, context.function)
    else:
        function_line = None
    return LeakedTracer(
        number=number,
        tracer_type=block.tracer_type,
        aval=block.aval,
        function=function,
        transformation=context.transformation or text.TRANSFORMATION_OF_TRACER.get(block.tracer_type, ""),
        function_line=function_line,
        created_at=created,
        depends_on=context.depends_on,
        held_by=held_by,
        kept_alive_by=trace.number_of.get(via) if via is not None and not held_by else None,
        jax_chain=[
            text.without_ids(f"<{link.child_type} {link.child_id}> is referred to by {link.holder}")
            for link in block.chain
        ],
        stored_at=_stored_at(held_by[0], innermost, provenance) if held_by else None,
        provenance=provenance,
    )


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


def explain_unexpected_tracer(error: BaseException, namespace: dict[str, object] | None) -> UnexpectedTracer:
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


def explain_kept_tracer(error: BaseException, namespace: dict[str, object] | None = None) -> UnexpectedTracer | None:
    """A tracer kept past its trace that reached an operation raising another kind of error (JAX 0.12:
    ``jax.device_put`` says "Argument of type <class '...DynamicJaxprTracer'> is not a valid JAX type";
    ``np.asarray`` raises TracerArrayConversionError). Told by the tracer it carries - a tracer in the
    exception's arguments, bound on the failing line, or named in the message - at a line that no
    transformation was tracing (so its trace had ended). None when that is not the case."""
    failing, lineno = _failing_user_frame(error)
    if failing is None:
        return None
    frames = stack_at_raise(error)
    index = next((i for i, (f, _) in enumerate(frames) if f is failing), None)
    upto = frames[: index + 1] if index is not None else []
    # a transformation the failing line applied to a function not the user's (``jax.jit(opt.init)(params)``)
    # was tracing it when the error came: the tracer is that trace's own, running - no leak
    below = index is not None and traced_below(frames, index)
    del frames  # the frames inside the failing line's call may hold a leaked tracer's trace: only callers count
    inside = transformations(upto)
    if inside or below:  # the failing line ran while a transformation traced it: a tracer there is no leak
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

    def is_target(value: Any) -> bool:
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
    if not candidates and _traced_other_code(message_of(error)):
        del upto
        return None
    if any(trace_running_on(value, upto) for value in candidates.values()):
        candidates.clear()  # traced by a transformation no API frame names (make_jaxpr, lax.cond): no leak
        del upto
        return None
    del upto
    in_namespace, _ = _find_tracers(namespace) if namespace and candidates else ({}, {})
    tracer = next(iter(candidates.values()), None)
    if tracer is None:
        facts = UnexpectedTracer(tracer_type=mentioned, used_at=code)
        facts.provenance = Provenance(
            unknown=f"the {mentioned} the message names was not found on your line or in the error's arguments"
        )
    else:
        holders = in_namespace.get(id(tracer), []) + on_line.get(id(tracer), [])
        facts = _kept_tracer_facts(tracer, code, list(dict.fromkeys(h.path for h in holders)))
    candidates.clear()
    del tracer, in_namespace
    return facts


def _traced_other_code(message: str) -> bool:
    """No tracer was found, and JAX's message says it was tracing a function that is not the user's - one of
    a library or NumPy given to a transformation on the user's line (``jax.jit(np.asarray)(xs)``: "while
    tracing the function asarray for jit"), whose frames JAX's traceback filtering may have removed. A
    leaked tracer is one a function of the user's made and stored: its message names that function."""
    context = text.tracing_context(message)
    if context.function in ("", "<unknown>") or context.created_on:
        return False
    return not (context.file and is_user_file(context.file))


def _failing_user_frame(error: BaseException) -> tuple[types.FrameType | None, int]:
    """The innermost frame of the user's code in ``error``'s traceback and its line; (None, 0) without one."""
    tb, failing, lineno = error.__traceback__, None, 0
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            failing, lineno = tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next
    return failing, lineno


def _kept_tracer_facts(tracer: Any, used_at: SourceLine, held_by: list[str]) -> UnexpectedTracer:
    """The facts of a tracer kept past its trace, read from the tracer itself: what it is, which
    transformation of which function made it, where, and the line that stored it in ``held_by[0]``."""
    how, function = traced_for(tracer)
    how = how or text.TRANSFORMATION_OF_TRACER.get(type(tracer).__name__, "")
    provenance = tracer_origin.of_tracer(tracer, (), started=None)
    function = function or provenance.function
    if how:
        provenance.transforms = [f"{how}({function})" if how == "jit" and function else how]
    provenance.function = function
    return UnexpectedTracer(
        aval=_aval(tracer),
        tracer_type=type(tracer).__name__,
        function=function,
        transformation=how,
        used_at=used_at,
        created_at=provenance.made_at,
        held_by=held_by,
        stored_at=_stored_at(held_by[0], None, provenance) if held_by else None,
        provenance=provenance,
    )
