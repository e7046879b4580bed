"""Tracer-error explainer: which kind of tracer error, which function, which argument, which fix.

Usage without IPython::

    try:
        jax.jit(clip_positive)(x, 1.0)
    except Exception as error:
        report = jaxmagic.probes.explain(error)   # None for errors it does not explain
    report.error_kind, report.traced_function, report.depends_on, report.fixes

Inside ``jit``/``vmap``/``scan`` a function's arguments are tracers that know
their shape and dtype but not their values; any Python operation that needs a
value fails (chapter section 4). The exception classes are not one family
(``TracerIntegerConversionError`` is no ``ConcretizationTypeError``; a shape or
slice problem is a plain ``TypeError``/``IndexError``), so the explainer
classifies by class *and* message. The facts come from JAX's message ("while
tracing the function clip_positive ... depends on the values of the arguments
x and limit"), from the traceback (your line) and from that frame's variables
(which names on your line are tracers); the fixes are the chapter's table.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import dataclasses
import inspect
import io
import keyword
import linecache
import re
import sys
import types

from jaxmagic._jax.transform_stack import Transformation, jit_call, jit_caller, stack_at_raise, transformations
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.fixes import line_fixes
from jaxmagic.probes._support.fixes import trial as fix_trial
from jaxmagic.probes._support.fixes.line_fixes import Fix
from jaxmagic.probes._support.report_base import Report
from jaxmagic.probes._support.tracers import origin as tracer_origin
from jaxmagic.probes._support.tracers import text
from jaxmagic.probes.leaks.probe import UnexpectedTracer, explain_kept_tracer, explain_leak, explain_unexpected_tracer
from jaxmagic.report import SourceLine, Status
from jaxmagic.report.document import Document, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.source import is_user_file, source_line, user_lines
from jaxmagic.report.source import is_user_file as user
from jaxmagic.report.wording import error_line, first_line, message_of


@dataclasses.dataclass(frozen=True)
class ErrorKind:
    key: str
    title: str  # what went wrong, in a few words
    triggers: str  # typical code that raises it
    why: str  # one paragraph
    fixes: tuple[Fix, ...]


# The chapter's table of the seven tracer error kinds (section 4), plus the two
# errors of the same family it treats elsewhere: a leaked tracer (4.6) and a
# reused PRNG key (9). Order: most specific class first.
KINDS: dict[str, ErrorKind] = {
    k.key: k
    for k in [
        ErrorKind(
            "bool",
            "Python `if`/`while`/`and`/`or` on a traced value",
            "if x > 0:, while x > 1:, a and b, bool(x)",
            "Python control flow needs a True/False while the function is traced, but a traced value has only "
            "a shape and a dtype. Under plain jax.grad (no jit) the same code works, because grad's tracers carry "
            "values: do not let an eager test fool you.",
            (
                Fix("jnp.where(cond, a, b)", "choose between two values elementwise (both are computed)"),
                Fix("lax.cond(pred, true_fn, false_fn, x)", "run only one branch; pred must be a scalar"),
                Fix("lax.while_loop(cond_fn, body_fn, init)", "a while loop whose condition depends on traced values"),
                Fix(
                    "static_argnames=('{arg}',)",
                    "the condition depends on a setting (a Python number or flag), "
                    "not on data: one compilation per value",
                ),
            ),
        ),
        ErrorKind(
            "int",
            "a traced value used as a Python int",
            "range(n), [a, b, c][i], operator.index(x)",
            "range() and list indexing call __index__, which needs a concrete integer; while tracing, the "
            "integer is a tracer.",
            (
                Fix(
                    "static_argnames=('{arg}',)",
                    "the number decides the program's structure (loop count, list position): one compilation per value",
                ),
                Fix("lax.fori_loop(0, {arg}, body, init)", "a loop whose trip count is data"),
                Fix("jnp.asarray(a_list)[{arg}]", "index a Python list with a traced index: make it an array first"),
            ),
        ),
        ErrorKind(
            "array",
            "a traced value converted to a NumPy array",
            "np.sin(x), np.asarray(x), a NumPy or SciPy function called on a tracer",
            "NumPy functions call __array__, which needs the values; a tracer has none until the compiled "
            "program runs.",
            (
                Fix("jnp.<name>(...) for np.<name>(...)", "most of NumPy exists in jax.numpy and traces"),
                Fix(
                    "jax.pure_callback(f, jax.ShapeDtypeStruct(shape, dtype), x)",
                    "you really need NumPy or another library: call it from the compiled program, declaring "
                    "the result's shape and dtype",
                ),
            ),
        ),
        ErrorKind(
            "concrete",
            "a concrete value needed from a traced value",
            "float(x), int(x), x.item(), jnp.arange(n), jnp.nonzero(x)",
            "The operation needs a Python number, or an output size, that depends on a value known only when "
            "the program runs; jit needs every shape while tracing.",
            (
                Fix(
                    "stay in JAX: {value} * 2 instead of float({value}) * 2, {value}.astype(float)",
                    "the Python number was only a means to compute",
                ),
                Fix("static_argnames=('{arg}',)", "a size or count that is a setting, such as n in jnp.arange(n)"),
                Fix("a fixed size and a mask", "the size depends on data: compute on the largest size and mask"),
                Fix(
                    "jnp.nonzero(x, size=k, fill_value=-1)",
                    "jnp.nonzero / jnp.where(cond) with one argument / jnp.unique: give the output size",
                ),
            ),
        ),
        ErrorKind(
            "bool_index",
            "boolean-mask indexing with a traced mask",
            "x[x > 0], x[mask]",
            "The result's length is the number of True entries, a value known only at run time; jit needs the "
            "shape while tracing. NonConcreteBooleanIndexError is an IndexError, not a ConcretizationTypeError.",
            (
                Fix(
                    "jnp.where(mask, x, 0)",
                    "keep the shape, zero the rest; then sum/mean with the mask "
                    "(jnp.sum(jnp.where(mask, x, 0)) / jnp.sum(mask))",
                ),
                Fix("jnp.nonzero(mask, size=k, fill_value=0)", "you need the indices: give their number"),
            ),
        ),
        ErrorKind(
            "shape",
            "an array shape that depends on a traced value",
            "jnp.zeros(n), x.reshape(n, -1), jnp.ones((n, 3))",
            "Shapes must be known while tracing; here a shape was computed from a traced value. JAX raises a "
            'plain TypeError ("Shapes must be 1D sequences of concrete values").',
            (
                Fix("static_argnames=('{arg}',)", "the shape argument is a setting: make it static"),
                Fix(
                    "<array>.shape[0], <array>.ndim, len(<array>)",
                    "derive sizes from the shapes of your arrays, which are static, not from values",
                ),
                Fix("a fixed size and a mask", "the size depends on data: compute on the largest size and mask"),
            ),
        ),
        ErrorKind(
            "slice",
            "slice bounds that depend on a traced value",
            "x[i:i + 2], x[:n]",
            "A slice with traced start or stop could have any length; jit needs the length while tracing. "
            'JAX raises a plain IndexError ("Array slice indices must have static start/stop/step").',
            (
                Fix("lax.dynamic_slice(x, ({arg},), (2,))", "the start is data, the length is fixed"),
                Fix("x[jax.ds({arg}, 2)]", "the same with indexing syntax"),
                Fix("lax.dynamic_update_slice(x, update, ({arg},))", "writing a window rather than reading it"),
                Fix("static_argnames=('{arg}',)", "the bound is a setting, not data"),
            ),
        ),
        ErrorKind(
            "leak",
            "a tracer used after its trace ended (a leak)",
            "storing an intermediate in a global list, an attribute (self.h = h) or a closure during jit/grad",
            "A traced function stored an intermediate value outside itself; after tracing, that value is a "
            "tracer of a finished trace. JAX raises where it is used, which may be far from where it leaked.",
            (
                Fix("return out, h", "return the value you need instead of storing it (has_aux=True with grad)"),
                Fix(
                    "%%jax_leaks (jax.checking_leaks())",
                    "find the leak where it happens: the function and the variable that holds the tracer",
                ),
            ),
        ),
        ErrorKind(
            "key_reuse",
            "a PRNG key used twice",
            "jax.random.normal(key) twice with the same key, with jax_debug_key_reuse on",
            "Drawing twice from one key gives correlated (identical) random numbers. jax_debug_key_reuse "
            "stops at the second use.",
            (
                Fix("key, sub = jax.random.split(key)", "split before every use; use sub, keep key for later"),
                Fix("jax.random.fold_in(key, step)", "one key per step or per index, derived from a base key"),
            ),
        ),
    ]
}


def classify(error: BaseException) -> str | None:
    """The key of ``KINDS`` for a tracer-family error, or None for any other error.

    Works without importing JAX: an error of a JAX class is only possible once
    JAX is imported, and the plain TypeError/IndexError kinds are told by
    JAX's message.
    """

    errors = getattr(sys.modules.get("jax"), "errors", None)
    message = message_of(error)
    if errors is not None:
        checks = [
            ("bool", "TracerBoolConversionError"),
            ("int", "TracerIntegerConversionError"),
            ("array", "TracerArrayConversionError"),
            ("bool_index", "NonConcreteBooleanIndexError"),
            ("leak", "UnexpectedTracerError"),
            ("key_reuse", "KeyReuseError"),
            ("concrete", "ConcretizationTypeError"),
        ]
        for key, name in checks:
            cls = getattr(errors, name, None)
            if cls is not None and isinstance(error, cls):
                return key
    if isinstance(error, TypeError) and message.startswith("Shapes must be 1D sequences of concrete values"):
        return "shape"
    if isinstance(error, IndexError) and message.startswith("Array slice indices must have static"):
        return "slice"
    if (
        isinstance(error, ValueError)
        and message.startswith("The truth value of an array with more than one element is ambiguous")
        and _tracers_on_failing_line(error.__traceback__)
    ):
        return "bool"  # `if x > 0:` on a traced vector: NumPy's error, raised before JAX's own
    if isinstance(error, TypeError) and "parameters to jaxpr equations must have __hash__" in message:
        # jnp.tile(x, k) with a traced k: a parameter of the operation (reps) got a tracer
        if text.mentions_tracer(message):
            return "concrete"
    return None


@dataclasses.dataclass
class TracedName:
    """A name on your line whose value was a tracer when the error happened."""

    name: str
    aval: str  # "float32[]"
    tracer_type: str  # "JitTracer", "BatchTracer", ...
    weak_type: bool = False  # made from a Python scalar (1.0, 3): a candidate for a static argument


@dataclasses.dataclass
class TracerErrorReport(Report):
    """What the explainer says about one tracer-family error."""

    kind = "jax_explain"

    error_type: str = ""  # "TracerBoolConversionError"
    error_kind: str = ""  # key of KINDS: "bool", "int", ...
    title: str = ""  # KINDS[error_kind].title
    message: str = ""  # the error's first line
    jax_hint: str = ""  # JAX's extra sentence, e.g. "It arose in the jnp.arange argument 'stop'"
    jax_message_text: str = ""  # JAX's whole message (the operations it names)
    rejected_fixes: list[Fix] = dataclasses.field(default_factory=list)  # tried on your function: still fail
    traced_function: str = ""  # "clip_positive" ("" when JAX did not say)
    function_line: SourceLine | None = None  # where the traced function is defined
    transformation: str = ""  # "jit", "vmap", "scan", ...
    depends_on: list[str] = dataclasses.field(default_factory=list)  # argument names, from JAX's message
    traced_names: list[TracedName] = dataclasses.field(default_factory=list)  # tracers on your line
    your_lines: list[SourceLine] = dataclasses.field(default_factory=list)  # outermost first
    fixes: list[Fix] = dataclasses.field(default_factory=list)  # best first, with your names filled in
    why: str = ""
    jitted_function: str = ""  # the outermost function of yours being traced (the one you gave jax.jit)
    jitted_line: SourceLine | None = None  # where it is defined
    jitted_transformation: str = ""  # what traced it: "jit", "vmap", ...
    origin_arguments: dict[str, str] = dataclasses.field(default_factory=dict)  # name on your line -> its argument
    leaked_from: SourceLine | None = None  # UnexpectedTracerError: where the leaked value was made
    held_by: list[str] = dataclasses.field(default_factory=list)  # UnexpectedTracerError: who holds it
    stored_at: SourceLine | None = None  # a leak: the one line of the traced function storing into the holder
    disguised_as: str = ""  # a leak JAX raised as another error: the kind it looked like ("array", "" for none)
    provenance: Provenance | None = None  # where the offending value was made, in what, started by which call
    failing_lambda: str = ""  # the body of the lambda that raised, when the failing line is more than it

    @property
    def status(self) -> Status:
        return Status.PROBLEM

    @property
    def failing_line(self) -> SourceLine | None:
        """Your innermost line: the one that did the operation."""
        return self.your_lines[-1] if self.your_lines else None

    @property
    def depends_text(self) -> str:
        """ "x and limit" - the argument names as JAX lists them ("" if unknown)."""
        return text.english_list(self.depends_on, code=False)

    @property
    def summary(self) -> str:
        where = ""
        if self.traced_function:
            how = f" (traced for {self.transformation})" if self.transformation else ""
            where = f" in `{self.traced_function}`{how}"
        if self.error_kind == "leak":
            held = f"; `{self.held_by[0]}` still holds it" if self.held_by else ""
            raised_as = (
                " (raised as another error: the value is a tracer kept past its trace)"
                if self.error_type not in ("UnexpectedTracerError",)
                else ""
            )
            return f"{self.error_type}: {self.title}{where}{held}{raised_as}."
        if self.jitted_function and self.jitted_function != self.traced_function:
            where += f", inside `{self.jitted_function}`" + (
                f" ({self.jitted_transformation})" if self.jitted_transformation else ""
            )
        if self.origin_arguments:
            parts = [
                f"`{name}` is the argument `{argument}` of `{self.jitted_function}`"
                if name == argument
                else f"`{name}` comes from the argument `{argument}` of `{self.jitted_function}`"
                for name, argument in self.origin_arguments.items()
            ]
            cause = ": " + "; ".join(parts)
        elif self.depends_on:
            noun = "argument" if len(self.depends_on) == 1 else "arguments"
            cause = f": the value depends on the {noun} {text.english_list(self.depends_on)}"
        elif self.traced_names:
            names = [t.name for t in self.traced_names]
            cause = f": {text.english_list(names)} {'is a tracer' if len(names) == 1 else 'are tracers'} here"
        else:
            cause = ""
        made = self.provenance.made_at if self.provenance is not None else None
        if made is not None and made != self.failing_line:
            cause += f"{';' if cause else ':'} it was made by `{made.code}` ({made.where})"
        return f"{self.error_type}: {self.title}{where}{cause}."

    def document(self):

        facts = [("error", self.error_type), ("kind", self.title.replace("`", ""))]
        if self.traced_function:
            where = self.function_line
            facts.append(
                (
                    "traced function",
                    self.traced_function
                    + (f", defined at {where.label or where.filename}, line {where.lineno}" if where else ""),
                )
            )
        if self.transformation:
            facts.append(("traced for", self.transformation))
        if self.jitted_function and self.jitted_function != self.traced_function:
            where = self.jitted_line
            facts.append(
                (
                    "inside",
                    f"{self.jitted_function} ({self.jitted_transformation or 'traced'})"
                    + (f", defined at {where.label or where.filename}, line {where.lineno}" if where else ""),
                )
            )
        if self.depends_on:
            facts.append(("depends on", self.depends_text))
        if self.traced_names:
            facts.append(
                (
                    "tracers on your line",
                    ", ".join(
                        f"{t.name}: {t.aval}" + (" (from a Python scalar)" if t.weak_type else "")
                        for t in self.traced_names
                    ),
                )
            )
        if self.held_by:
            facts.append(("still held by", ", ".join(self.held_by)))
        if self.jax_hint:
            facts.append(("JAX adds", self.jax_hint))
        sections = [Section("What", [Facts(facts)])]
        if self.provenance is not None:
            what = "the leaked value" if self.error_kind == "leak" else "the traced value"
            blocks = provenance_blocks(self.provenance, what)
            if self.stored_at is not None and self.held_by:
                blocks.insert(1, SourceLines([self.stored_at], f"The line that stored it in `{self.held_by[0]}`:"))
            sections.append(Section("Where it was made", blocks))
        if self.your_lines:
            caption = (
                "Your frames, outermost first; the last one did the operation:" if len(self.your_lines) > 1 else ""
            )
            if self.provenance is not None and self.provenance.made_at is not None:
                caption = "Where it was used (the line that raised), as context:"
            sections.append(Section("Your line", [SourceLines(self.your_lines[-4:], caption)]))
        if self.leaked_from and (self.provenance is None or self.provenance.made_at != self.leaked_from):
            sections.append(
                Section(
                    "Leaked there",
                    [SourceLines([self.leaked_from], "The leaked value was computed here, during an earlier trace:")],
                )
            )
        rows = [[f"`{fix.use}`", fix.when, fix.checked] for fix in self.fixes]
        fix_blocks: list = [Table(["write", "when", "tried"], rows)] if rows else []
        if self.rejected_fixes:
            fix_blocks.append(
                Paragraph(
                    ("No fix of this kind works here as written. " if not rows else "")
                    + "Tried on your function and left out, because it does not work for this call: "
                    + "; ".join(f"`{f.use}` ({f.checked.removeprefix('checked: ')})" for f in self.rejected_fixes)
                )
            )
        sections.append(Section("Fixes", fix_blocks))
        sections.append(Section("Why", [Paragraph(self.why)]))
        return Document("%jax_explain", self.status, self.summary, sections)


def explain(error: BaseException, namespace: dict | None = None) -> TracerErrorReport | None:
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
    report.failing_lambda = _lambda_body(error.__traceback__)
    report.traced_names = _tracers_on_failing_line(error.__traceback__)
    report.traced_function = "" if context.function == "<unknown>" else context.function
    report.transformation = context.transformation
    report.depends_on = context.depends_on
    if context.created_on:  # where the tracer was made, not the function: the frame that held the tracers is
        innermost = _innermost_user_frame(error.__traceback__)
        if innermost is not None:
            code = innermost.f_code
            report.traced_function = code.co_qualname.rsplit("<locals>.", 1)[-1]
            report.function_line = source_line(code.co_filename, code.co_firstlineno, code.co_name)
        del innermost
    elif context.file and is_user_file(context.file):
        report.function_line = source_line(context.file, context.line, context.function)
    if not report.transformation and report.traced_names:
        report.transformation = text.TRANSFORMATION_OF_TRACER.get(report.traced_names[0].tracer_type, "")
    if not report.traced_function and report.traced_names and report.your_lines:
        report.traced_function = report.your_lines[-1].function  # the frame that held the tracers
    if kept is not None:
        _add_kept_facts(report, kept, disguised)
        report.fixes = _fixes_for(kind, report)
        return report
    if kind_key == "leak":
        _add_leak_facts(report, error, namespace)
        report.fixes = _fixes_for(kind, report)
        if report.stored_at is not None:
            function = report.stored_at.function or report.traced_function
            loop_body = report.transformation == "scan"
            stored = report.stored_at
            report.fixes = line_fixes.leak_fixes(
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
        report.fixes = _fixes_for(kind, report, _resolver(error.__traceback__))
        _fit_static_fixes(report, inside, frames, error.__traceback__)
    finally:
        del frames
    return report


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


def _parameter_names(code) -> tuple[str, ...]:
    """The names a function's parameters bind, ``*args`` and ``**kwargs`` included."""
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return code.co_varnames[:count]


def _innermost_user_entry(tb):
    """The traceback entry of your innermost frame (the one whose line raised), or None."""
    entry = None
    while tb is not None:
        if user(tb.tb_frame.f_code.co_filename):
            entry = tb
        tb = tb.tb_next
    return entry


def _innermost_user_frame(tb):
    entry = _innermost_user_entry(tb)
    return entry.tb_frame if entry is not None else None


def _lambda_body(tb) -> str:
    """The source of the innermost user frame's lambda body (``jnp.arange(n)`` of ``"case":
    lambda: jax.jit(lambda n: jnp.arange(n))(3),``), from the columns CPython keeps for its
    instructions; "" when that frame is no one-line lambda."""
    entry = _innermost_user_entry(tb)
    if entry is None or entry.tb_frame.f_code.co_name != "<lambda>":
        return ""
    code, lineno = entry.tb_frame.f_code, entry.tb_lineno
    # RETURN_VALUE carries the body expression's span (RESUME's is column 0: the whole line)
    spans = [
        (start, end)
        for line, end_line, start, end in code.co_positions()
        if line == lineno == end_line and start and end
    ]
    if not spans:
        return ""
    text = linecache.getline(code.co_filename, lineno).encode()
    return text[min(s for s, _ in spans) : max(e for _, e in spans)].decode(errors="replace")


_MESSAGE_AVAL = re.compile(r"(?:Tracer\(|Traced<)~?(\w+\[[\d, ]*\])")


def _made_on_failing_line(report: TracerErrorReport, tb) -> Provenance | None:
    """Where a tracer on the failing line was computed, from the line JAX recorded on it
    (``n = jnp.sum(mask)`` for ``jnp.zeros(n)``); None when every tracer there is an input of the
    trace (bound to a parameter of a traced function of yours) or JAX recorded no line of yours."""
    core = getattr(sys.modules.get("jax"), "core", None)
    tracer_class = getattr(core, "Tracer", None)
    frame = _innermost_user_frame(tb)
    if tracer_class is None or frame is None or report.provenance is None:
        return None
    inputs = set()
    walk = tb
    while walk is not None:  # the values bound to parameters of your functions: inputs of a trace
        code = walk.tb_frame.f_code
        if is_user_file(code.co_filename):
            inputs.update(id(walk.tb_frame.f_locals.get(name)) for name in _parameter_names(code))
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


def _resolver(tb):
    """``resolve(dotted name) -> (object, module name)`` in the failing frame's scope, or None.

    Only module attributes are followed, read from the module's ``__dict__`` (no ``__getattr__``,
    no property): ``np.linalg.norm`` -> (the function, "numpy.linalg").
    """
    frame = _innermost_user_frame(tb)
    scopes = (dict(frame.f_locals), frame.f_globals) if frame is not None else ()
    del frame

    def resolve(name: str):
        first, *rest = name.split(".")
        scope = next((s for s in (*scopes, vars(builtins)) if first in s), None)
        if scope is None:
            return None
        value = scope[first]
        module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "") or ""
        for part in rest:
            if not isinstance(value, types.ModuleType):
                return None
            value = vars(value).get(part)
            if value is None:
                return None
            if isinstance(value, types.ModuleType):
                module = value.__name__
        return value, module if isinstance(module, str) else ""

    return resolve


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


def _add_traced_origin(report: TracerErrorReport, tb) -> None:
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
    for name in _names_in(linecache.getline(failing.f_code.co_filename, lineno)):
        value = failing.f_locals.get(name)
        if isinstance(value, tracer_class):
            on_line[name] = value
    traced = []
    for frame, _ in frames:
        parameters = {name: frame.f_locals.get(name) for name in _parameter_names(frame.f_code)}
        tracers = {name: value for name, value in parameters.items() if isinstance(value, tracer_class)}
        if tracers:
            traced.append((frame, tracers))
    del failing, frames
    if not traced:
        return
    outer, parameters = traced[0]
    if outer.f_code is failing_code:
        del outer, traced, parameters, on_line
        return  # the failing function is the one traced: JAX's own message names its arguments
    report.jitted_function = outer.f_code.co_name
    report.jitted_line = source_line(outer.f_code.co_filename, outer.f_code.co_firstlineno, outer.f_code.co_name)
    first = next(iter(parameters.values()))
    report.jitted_transformation = text.TRANSFORMATION_OF_TRACER.get(type(first).__name__, "")
    for name, value in on_line.items():
        for parameter, bound in parameters.items():
            if bound is value:
                report.origin_arguments[name] = parameter
                break
    if report.origin_arguments:
        report.depends_on = list(dict.fromkeys(report.origin_arguments.values()))
    del outer, traced, parameters, first, on_line


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


def _tracers_on_failing_line(tb) -> list[TracedName]:
    """Names on your innermost line that were bound to tracers, read from that frame's variables."""

    entry = _innermost_user_entry(tb)
    if entry is None:
        return []
    frame, lineno = entry.tb_frame, entry.tb_lineno

    core = getattr(sys.modules.get("jax"), "core", None)
    tracer_class = getattr(core, "Tracer", None)
    if tracer_class is None:
        return []
    code = linecache.getline(frame.f_code.co_filename, lineno)
    names = []
    for name in _names_in(code):
        value = frame.f_locals.get(name)
        if isinstance(value, tracer_class) and name not in [t.name for t in names]:
            aval = getattr(value, "aval", None)
            names.append(
                TracedName(
                    name,
                    aval.str_short() if hasattr(aval, "str_short") else str(aval),
                    type(value).__name__,
                    bool(getattr(aval, "weak_type", False)),
                )
            )
    del frame
    return names


def _names_in(code: str) -> list[str]:
    return text.names_in(code)


def _add_leak_facts(report: TracerErrorReport, error: BaseException, namespace: dict | None) -> None:

    facts = explain_unexpected_tracer(error, namespace)
    report.traced_function = facts.function if facts.function != "<unknown>" else ""
    report.transformation = facts.transformation
    report.leaked_from = facts.created_at
    report.held_by = facts.held_by
    report.stored_at = facts.stored_at
    report.provenance = facts.provenance
    report.traced_names = []


def _fixes_for(kind: ErrorKind, report: TracerErrorReport, resolve=lambda name: None) -> list[Fix]:
    """The kind's fixes that fit your line, with your names filled in, the best one first.

    ``resolve`` gives the object a dotted name on the failing line stands for (see ``_resolver``).
    """
    # The argument to name in a fix: one the value depends on; for static_argnames
    # preferably the ones that arrived as Python scalars (weakly typed tracers), as
    # settings such as a limit or a count usually do - all of them: a value computed from
    # two settings (int(T / dt)) needs both static.
    candidates = report.depends_on or [t.name for t in report.traced_names]
    weak = {report.origin_arguments.get(t.name, t.name) for t in report.traced_names if t.weak_type}
    settings = [c for c in candidates if c in weak]
    arg = settings[0] if settings else (candidates[0] if candidates else "n")
    static = ", ".join(repr(name) for name in settings or [arg]) + ("," if len(settings) < 2 else "")
    fixes = [Fix(f.use.replace("('{arg}',)", f"({static})").replace("{arg}", arg), f.when) for f in kind.fixes]
    packed = [name for name in settings or [arg] if not name.isidentifier()]
    if packed:  # args[1] of a def f(*args): static_argnames takes parameter names only (JAX rejects others)
        fixes = [
            Fix(
                f"static_argnums=(<position of {packed[0]}>,)",
                f"`{packed[0]}` is an element of a *args parameter: make it static by its position among the "
                "call's arguments (static_argnames takes parameter names only)",
            )
            if f.use.startswith("static_argnames")
            else f
            for f in fixes
        ]
    # {value}: the traced name on your failing line (x in x.item()); a fix never shows a name your code lacks.
    value = report.traced_names[0].name if report.traced_names else ""
    fixes = [
        Fix(f.use.replace("{value}", value), f.when)
        if value or "{value}" not in f.use
        else Fix("stay in JAX: compute with the array itself instead of a Python number (.astype for a dtype)", f.when)
        for f in fixes
    ]
    # static_argnames belongs to the function given to jax.jit (not a loop body it calls), and only
    # names one of its arguments: without such an argument the fix is left as a pattern.
    jitted = report.jitted_function if report.jitted_transformation == "jit" else ""
    function = jitted or report.traced_function
    if jitted and jitted != report.traced_function and not report.origin_arguments:
        fixes = [f for f in fixes if not f.use.startswith("static_argnames")] + [
            Fix(
                f"jax.jit({jitted}, static_argnames=(...))",
                f"the value comes from an argument of {jitted} that is a setting; jaxmagic could not tell which "
                "argument it comes from",
            )
        ]
        function = ""
    if function.isidentifier() and not keyword.iskeyword(function):
        fixes = [
            Fix(f"jax.jit({function}, {f.use})" if f.use.startswith("static_arg") else f.use, f.when) for f in fixes
        ]
    line = report.failing_line.code if report.failing_line else ""
    failing = report.failing_line
    code = line_fixes.read_line(line, failing.filename, failing.lineno) if failing else None
    code = code or line_fixes.read_line(report.failing_lambda)
    fixes = line_fixes.fit(kind.key, fixes, code, report.traced_names, resolve)
    # a line read as code was fitted above; one that was not (part of a longer statement) is matched as text
    preferred = _preferred_fix(kind.key, line) if code is None else ""
    if preferred:
        fixes.sort(key=lambda f: 0 if preferred in f.use else 1)
    return fixes


def _preferred_fix(kind: str, line: str) -> str:
    """The fix that matches what your line does, as a substring of Fix.use ("" to keep the table's order)."""
    stripped = line.strip()
    if kind == "bool" and stripped.startswith("while "):
        return "lax.while_loop"
    if kind == "int":
        if "range(" in stripped:
            return "fori_loop"
        if "[" in stripped:
            return "jnp.asarray"
    if kind == "concrete":
        if "nonzero" in stripped or "unique" in stripped or "argwhere" in stripped:
            return "size=k"
        if "arange" in stripped or "zeros" in stripped or "ones" in stripped:
            return "static_argnames"
        if "float(" in stripped or "int(" in stripped or ".item()" in stripped:
            return "stay in JAX"
    return ""


def explain_any(error: BaseException, namespace: dict | None = None) -> Report | None:
    """A report for any error the explainer knows: tracer errors, and JAX's "Leaked trace" errors."""
    if text.is_leak_message(message_of(error)):
        return explain_leak(error, namespace)
    return explain(error, namespace)


def already_explained(error: BaseException) -> bool:
    """True when a jaxmagic report shown for this very error already explained it."""
    return bool(getattr(error, "_jaxmagic_explained", ""))


# -- fixes that apply to the program: a parameter for static_argnames, a static expression, tried ----

_BINARY = {
    "add": "+",
    "subtract": "-",
    "multiply": "*",
    "divide": "/",
    "true_divide": "/",
    "floor_divide": "//",
    "power": "**",
    "mod": "%",
    "remainder": "%",
}
_PYTHON = {
    "ceil": "math.ceil",
    "floor": "math.floor",
    "sqrt": "math.sqrt",
    "log": "math.log",
    "log2": "math.log2",
    "exp": "math.exp",
    "prod": "math.prod",
    "sum": "sum",
    "maximum": "max",
    "minimum": "min",
    "abs": "abs",
    "round": "round",
    "int32": "int",
    "int64": "int",
    "asarray": "",
    "array": "",
}


def _jnp_call(node) -> str:
    """ "add" for a call of ``jnp.add`` / ``jax.numpy.add``, else ""."""
    func = getattr(node, "func", None)
    if not isinstance(func, ast.Attribute):
        return ""
    owner = func.value
    if isinstance(owner, ast.Name) and owner.id == "jnp":
        return func.attr
    if isinstance(owner, ast.Attribute) and owner.attr == "numpy" and getattr(owner.value, "id", "") == "jax":
        return func.attr
    return ""


def static_expression(code: str) -> tuple[str, str] | None:
    """(the jax.numpy call on a line, the Python/NumPy expression computing the same from static values):
    ``n = jnp.add(x.size, 1)`` -> ("jnp.add(x.size, 1)", "x.size + 1"); None when the line has no such call."""
    source = code.strip()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        op = _jnp_call(node)
        if not op or node.keywords:
            continue
        original = ast.get_source_segment(source, node) or ast.unparse(node)
        args = [ast.get_source_segment(source, a) or ast.unparse(a) for a in node.args]
        if op in _BINARY and len(args) == 2:
            return original, f"{args[0]} {_BINARY[op]} {args[1]}"
        if op in _PYTHON and len(args) >= 1:
            name = _PYTHON[op]
            return original, f"{name}({', '.join(args)})" if name else args[0]
        return original, f"np.{op}({', '.join(args)})"
    return None


def _static_names(use: str) -> list[str]:
    """The names of a ``static_argnames=('n',)`` fix; [] for none or a pattern ``(...)``."""
    match = re.search(r"static_argnames=\(([^)]*)\)", use)
    if match is None:
        return []
    return re.findall(r"'(\w+)'", match.group(1))


def _fit_static_fixes(report: TracerErrorReport, inside: list[Transformation], frames: list, tb=None) -> None:
    """Make the fixes apply to this program: static_argnames only for a parameter of the jitted function
    (from its code); for a value a jax.numpy call computed from static values, the expression that keeps
    it static; a static_argnames fix tried on the user's own function with the same arguments."""
    jits = {t.function.rsplit(".", 1)[-1]: t for t in inside if t.name == "jit"}  # innermost wins

    def jit_of(fix: Fix) -> Transformation | None:
        return jits.get(_jitted_name(fix.use).rsplit(".", 1)[-1]) if _static_names(fix.use) else None

    parameters = _parameters_of_frames(frames)  # for a function no jit on the stack traced

    def applies(fix: Fix) -> bool:
        names = set(_static_names(fix.use))
        if not names:
            return True
        if not jits and report.transformation != "jit":
            return False  # vmap, scan, grad alone: no jit to give static arguments to
        jitted = jit_of(fix)
        if jitted is not None:
            return names <= set(jitted.parameters)
        known = parameters.get(_jitted_name(fix.use).rsplit(".", 1)[-1])
        return known is None or names <= known

    fixes = [f for f in report.fixes if applies(f)]
    made = report.provenance.made_at if report.provenance is not None else None
    # only for a value JAX says it made from static inputs alone (literals in its operation)
    static_made = made is not None and any(
        op.static_inputs and (op.file, op.line) == (made.filename, made.lineno)
        for op in text.traced_operations(report.jax_message_text)
    )
    expression = static_expression(made.code) if made is not None and static_made else None
    if expression is not None:
        original, static = expression
        fixes.insert(
            0,
            Fix(
                static,
                f"instead of `{original}` in `{made.code}` ({made.where}): a jax.numpy operation makes a traced "
                "value under jit even when its inputs are static (shapes, sizes, Python numbers); Python, `math` "
                "or NumPy arithmetic on them stays a concrete number",
                "suggestion: not tried (it changes your code)",
            ),
        )
    tried = []
    line_trial = _line_trial(report, fixes, jits, frames, tb)
    for fix in fixes:
        names = _static_names(fix.use)
        jitted = jit_of(fix)
        if names and jitted is not None and not fix.checked:
            fix = _try_static(fix, jitted, names, frames)
        elif not fix.checked:
            fix = line_trial(fix)
        tried.append(fix)
    _add_static_expression_with_static_arguments(report, tried, expression is not None, line_trial)
    # a fix tried on the user's function that still fails does not apply: it is reported apart
    tried.sort(key=lambda f: f.checked.startswith("checked: not enough"))
    report.fixes = [f for f in tried if not f.checked.startswith("checked: still fails")]
    report.rejected_fixes = [f for f in tried if f.checked.startswith("checked: still fails")]


def _add_static_expression_with_static_arguments(report: TracerErrorReport, tried: list[Fix], added: bool, trial):
    """With the arguments static the line still fails because a jax.numpy call on them makes a traced
    value (``int(jnp.ceil(T / dt))``): both together - the arguments static and the Python/``math``
    expression for the call - go first, tried on the values the call passed."""
    static = next((f for f in tried if _static_names(f.use) and f.checked.startswith("checked: not enough")), None)
    line = report.failing_line.code if report.failing_line else ""
    expression = static_expression(line) if static is not None and not added else None
    if expression is None:
        return
    original, replacement = expression
    on_line = {report.origin_arguments.get(t.name, t.name) for t in report.traced_names}
    if not on_line or not on_line <= set(_static_names(static.use)):
        return
    fix = Fix(
        replacement,
        from_line=True,
        when=f"instead of `{original}`, together with `{static.use}`: a jax.numpy operation makes a traced value "
        "under jit even from static inputs; Python or `math` keeps the number concrete",
    )
    tried.insert(0, trial(fix))


def _line_trial(report: TracerErrorReport, fixes: list[Fix], jits: dict, frames: list, tb):
    """``trial(fix) -> fix``: a fix written as a line of JAX code, traced on the shapes of the failing
    frame's values (``fix_trial``), the names the report's static_argnames fix makes static given the
    values this call passed; any other fix is marked as a suggestion."""
    untried = dataclasses.replace
    core = getattr(sys.modules.get("jax"), "core", None)
    frame = _innermost_user_frame(tb)
    if frame is None or core is None:
        return lambda fix: untried(fix, checked="suggestion: not tried")
    scope = {**frame.f_globals, **frame.f_locals}
    del frame
    concrete = {}
    static_fix = next((f for f in fixes if _static_names(f.use)), None)
    jitted = jits.get(_jitted_name(static_fix.use).rsplit(".", 1)[-1]) if static_fix is not None else None
    call = jit_call(frames, jitted.function) if jitted is not None else None
    if call is not None:
        fun, args, kwargs, _ = call
        try:
            passed = inspect.signature(fun).bind(*args, **kwargs).arguments
        except (TypeError, ValueError):
            passed = {}
        parameters = {report.origin_arguments.get(t.name, t.name): t.name for t in report.traced_names}
        for name in _static_names(static_fix.use):
            if name in passed and name in parameters:
                concrete[parameters[name]] = passed[name]
        del call, fun, args, kwargs, passed

    def trial(fix: Fix) -> Fix:
        if not fix.from_line or fix_trial.expression_of(fix.use) is None:
            return untried(fix, checked="suggestion: not tried")

        def attempt(given: dict) -> tuple[str, str]:
            is_tracer_error = lambda failure: classify(failure) is not None  # noqa: E731
            return fix_trial.try_on_shapes(fix.use, scope, core.Tracer, given, is_tracer_error)

        # As written first; then, if that fails, with the names the static_argnames fix makes static
        # given the values this call passed (a slice length, the inputs of a math expression).
        outcome, detail = attempt({})
        given = ""
        if outcome != "ok" and outcome != "not tried" and concrete:
            again, detail_again = attempt(concrete)
            if again != "not tried":  # static, the names may leave the fix untriable: the first result stands
                outcome, detail = again, detail_again
                given = ", ".join(f"{n} = {v!r}" for n, v in concrete.items())
        how = " (jaxmagic traced it with jax.eval_shape on the shapes of your values; nothing ran)"
        static = f" once {given} {'is' if len(concrete) == 1 else 'are'} static" if given else ""
        if outcome == "ok" and not detail:
            return untried(fix, checked=f"checked: gives a concrete value{static}")
        if outcome == "ok":
            return untried(fix, checked=f"checked: traces with {detail}{static}{how}")
        static = f" even with {given} static" if given else ""
        if outcome == "traced-error":
            return untried(fix, checked=f"checked: not enough on its own - it still raises {detail}{static}{how}")
        if outcome == "error":
            return untried(fix, checked=f"checked: still fails - it raised {detail}{static}{how}")
        return untried(fix, checked="suggestion: not tried")

    return trial


def _try_static(fix: Fix, jitted: Transformation, names: list[str], frames: list) -> Fix:
    """Trace the user's jitted function again with ``names`` static and the same arguments (no compile)."""
    call = jit_call(frames, jitted.function)
    if call is None:
        return dataclasses.replace(fix, checked="suggestion: not tried (the call's arguments were not found)")
    shown = ", ".join(f"`{n}`" for n in names)
    output = io.StringIO()  # the function's own prints while it is traced again are not the user's output
    names_now = tuple(names)
    try:
        import jax  # deferred: JAX is imported only once a tracer error is explained

        fun, args, kwargs, static = call
        names_now = tuple(dict.fromkeys(static["static_argnames"] + tuple(names)))
        # Given both, jit takes each list as written: the new names' positions are added to the numbers.
        positional = [
            p.name
            for p in inspect.signature(fun).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        numbers = set(static["static_argnums"]) | {positional.index(n) for n in names if n in positional}
        options = {"static_argnames": names_now, "static_argnums": tuple(sorted(numbers)) or None}
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            jax.jit(fun, **options).trace(*args, **kwargs)
    except Exception as failure:
        if classify(failure) is not None:  # valid, but other traced values still need a fix of their own
            result = (
                f"checked: not enough on its own - tracing `{jitted.function}` with {shown} static still raises "
                f"{error_line(failure)}"
            )
        else:  # the static argument itself cannot work (an array is not hashable, ...)
            result = (
                f"checked: still fails - tracing `{jitted.function}` with {shown} static raised {error_line(failure)}"
            )
    else:
        result = f"checked: tracing `{jitted.function}` with {shown} static succeeds with this call's arguments"
    finally:
        del call
    use = fix.use
    if len(names_now) > len(names) and use.startswith(f"jax.jit({jitted.function}, static_argnames="):
        use = f"jax.jit({jitted.function}, static_argnames={names_now!r})"  # keep what was static already
    given = _jit_as_given(frames, jitted.function, f"static_argnames={names_now!r}")
    if given is not None:
        use, where = given
        result += where
    return dataclasses.replace(fix, use=use, checked=result + " (jaxmagic traced your function once more to try it)")


def _jit_as_given(frames: list, function: str, option: str) -> tuple[str, str] | None:
    """A static fix written for what the user gave jax.jit, when that is not ``function`` by its name:
    the call line's ``jax.jit(jax.vmap(f, ...))`` (jitting bare ``f`` drops the vmap), or a function
    decorated with ``@jax.jit`` (jitting the jitted function again still traces the argument).
    ``(fix, where)``; None when ``jax.jit(function, option)`` is what the user would write."""
    found = jit_caller(frames, function)
    if found is None:
        return None
    frame, lineno = found
    scope = {**frame.f_globals, **frame.f_locals}
    line = source_line(frame.f_code.co_filename, lineno, "").code.strip()
    del frame, found
    tree = None
    for candidate in (line, line.split(":", 1)[-1].strip()):  # `try: step(x)` holds the call after its colon
        try:
            tree = ast.parse(candidate.rstrip(":") or "0")
            break
        except SyntaxError:
            continue
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        inner = node.func
        if isinstance(inner, ast.Call) and _is_jax_jit(inner.func) and inner.args:
            given = ast.unparse(inner.args[0])
            if given == function:
                return None
            return f"jax.jit({given}, {option})", f", as your line gives it to jax.jit (`{given}`)"
        if isinstance(inner, ast.Name) and inner.id in scope:
            underlying = getattr(scope[inner.id], "__wrapped__", None)
            code = getattr(underlying, "__code__", None)
            if code is None or not hasattr(scope[inner.id], "lower"):
                continue  # not a jitted function
            above = linecache.getline(code.co_filename, code.co_firstlineno).strip()
            if above.startswith("@") and "jit" in above:
                return (
                    f"@functools.partial(jax.jit, {option})",
                    f"; `{inner.id}` is decorated with `{above}`: put this decorator there instead (wrapping "
                    "the jitted function in another jax.jit would still trace the argument)",
                )
    return None


def _is_jax_jit(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "jit") or (isinstance(node, ast.Name) and node.id == "jit")


# -- every error gets a report: one the explainer cannot explain says so and why -------------------


@dataclasses.dataclass
class UnexplainedErrorReport(Report):
    """``%jax_explain`` on an error it does not explain: what the error is, and why it is not explained."""

    kind = "jax_explain"

    error_type: str = ""  # "ValueError"
    message: str = ""  # the error's first line
    reason: str = ""  # why jaxmagic could not explain it
    your_lines: list[SourceLine] = dataclasses.field(default_factory=list)  # outermost first

    @property
    def status(self) -> Status:
        return Status.ERROR

    @property
    def summary(self) -> str:
        return f"jaxmagic could not explain this {self.error_type}: {self.reason}."

    def document(self):
        sections = [Section("What", [Facts([("error", self.error_type), ("message", self.message)])])]
        if self.your_lines:
            sections.append(Section("Your line", [SourceLines(self.your_lines[-4:], "")]))
        sections.append(Section("Why not", [Paragraph(f"Could not explain it, because {self.reason}.")]))
        return Document("%jax_explain", self.status, self.summary, sections)


def explain_or_say_why(error: BaseException, namespace: dict | None = None) -> Report:
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
            on_line = [t.name for t in _tracers_on_failing_line(error.__traceback__)]
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


def _jitted_name(use: str) -> str:
    """ "count_up" of ``jax.jit(count_up, static_argnames=('n',))``; "" for a fix without one."""
    match = re.match(r"jax\.jit\(([\w.]+),", use)
    return match.group(1) if match else ""


def _parameters_of_frames(frames: list) -> dict[str, set[str]]:
    """The parameter names of each user function running in ``frames``, by its name."""
    found: dict[str, set[str]] = {}
    for frame, _ in frames:
        code = frame.f_code
        if is_user_file(code.co_filename):
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            found.setdefault(code.co_name, set()).update(n for n in names if n != "self")
    return found
