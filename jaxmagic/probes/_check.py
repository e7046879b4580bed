"""checkify probe: run one call with checks compiled in and list every error.

Usage without IPython::

    report = jaxmagic.probes.check(risky, x, 5, errors="index")
    report.errors[0].kind  # "index"

``checkify`` compiles the checks into the program and returns an error value
instead of raising, so it is immune to the vmap problem of ``jax_debug_nans``
and also sees what JAX does silently: out-of-bounds indices are clamped,
integer division by zero gives a value (chapter section 3.2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
from jax.experimental import checkify

from jaxmagic._jax import checkify_errors, jittable
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._nans import NanProducer, NanReport, explain_call, nan_fix, offered_fix
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.calls.library_wrappers import library_tracing, traced_arguments_only
from jaxmagic.probes._support.report_base import Report
from jaxmagic.probes._support.rerun.failing_call import FailingCall
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Document, Paragraph, Section, SourceLines, Table
from jaxmagic.report.wording import error_line, message_of
from jaxmagic.usercode.source import is_user_file, source_line

ERROR_SET_NAMES = ("user", "nan", "div", "index", "float", "all")

# checkify's exception classes -> our short kind names
_KIND_OF_CLASS = {
    "FailedCheckError": "user",
    "NaNError": "nan",
    "DivisionByZeroError": "div",
    "OOBError": "index",
}

KIND_TITLES = {
    "user": "your check failed",
    "nan": "NaN produced",
    "div": "division by zero",
    "index": "out-of-bounds index (JAX clamps it silently)",
}


def error_set(names: str | list[str]) -> frozenset[checkify.ErrorCategory]:
    """checkify's error set for names like "nan,index" (see ERROR_SET_NAMES)."""
    sets = {
        "user": checkify.user_checks,
        "nan": checkify.nan_checks,
        "div": checkify.div_checks,
        "index": checkify.index_checks,
        "float": checkify.float_checks,
        "all": checkify.all_checks,
    }
    wanted = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    unknown = [n for n in wanted if n not in sets]
    if unknown or not wanted:
        raise ProbeArgumentError(
            "errors",
            f"names unknown error sets {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(ERROR_SET_NAMES)}, comma-separated",
        )
    combined: frozenset[checkify.ErrorCategory] = frozenset()
    for name in wanted:
        combined = combined | sets[name]
    return combined


@dataclasses.dataclass
class CheckError:
    """One error checkify found."""

    kind: str  # "user", "nan", "div", "index"
    message: str
    mapped_index: list[int] | None = None  # vmapped call: index of the failing sample
    line: SourceLine | None = None
    producer: NanProducer | None = None  # NanProducer of a "nan" error: the operation, its iteration and values
    fix: str = ""  # a "nan" error's fix, the NaN probe's (``nans.offered_fix``): what %%jax_nans offers for it


@dataclasses.dataclass
class CheckReport(Report):
    """What ``%jax_check`` found for one call."""

    kind = "jax_check"

    call: str = ""
    error_sets: list[str] = dataclasses.field(default_factory=lambda: ["all"])
    vmap_axes: str = ""  # in_axes when each sample was checked separately (--vmap)
    vmapped_function: bool = False  # the function was already a jax.vmap: errors carry no sample index
    errors: list[CheckError] = dataclasses.field(default_factory=list)
    failure: str = ""  # the call could not be checked: "TypeError: ..."

    def concerns(self) -> list[Concern]:
        found = [act(f"checkify found {e.kind}") for e in self.errors]
        return found + ([failed(self.failure)] if self.failure else [])

    @property
    def how_run(self) -> str:
        """The transformation applied to the function, in JAX's own terms."""
        checked = f"checkify.checkify(f, errors={'|'.join(self.error_sets)})"
        if self.vmap_axes:
            checked = f"jax.vmap({checked}, in_axes={self.vmap_axes})"
        return f"jax.jit({checked})"

    @property
    def kinds(self) -> list[str]:
        """Kinds of error found, in order of first appearance, without repeats."""
        return list(dict.fromkeys(e.kind for e in self.errors))

    @property
    def summary(self) -> str:
        if self.failure:
            return f"{self.call} could not be checked: {self.failure}"
        if not self.errors:
            return f"{self.call}: no error found (checked: {', '.join(self.error_sets)})."
        kinds = ", ".join(KIND_TITLES[k].split(" (")[0] for k in self.kinds)
        return f"{self.call}: {len(self.errors)} error(s) - {kinds}."

    def document(self) -> Document:
        sections = []
        if self.errors:
            batched = any(e.mapped_index is not None for e in self.errors)
            columns = ["kind"] + (["sample"] if batched else []) + ["message", "line"]
            rows = [
                [e.kind]
                + ([str(e.mapped_index)] if batched else [])
                + [
                    e.message.replace("`", "'"),
                    f"{e.line.label or e.line.filename}:{e.line.lineno}" if e.line else "(not recorded)",
                ]
                for e in self.errors
            ]
            sections.append(Section("Errors", [Table(columns, rows)]))
            located = [e.producer for e in self.errors if e.producer is not None]
            if located:
                sections.append(
                    Section(
                        "Where the NaN was made",
                        [Paragraph(_producer_text(producer)) for producer in located],
                    )
                )
            lines = [e.line for e in self.errors if e.line]
            if lines:
                sections.append(
                    Section("Your lines", [SourceLines(list({line.where: line for line in lines}.values()))])
                )
        if self.vmapped_function and self.errors:
            sections.append(
                Section(
                    "Which sample?",
                    [
                        Paragraph(
                            "This function is a jax.vmap, so the check ran as checkify(vmap(f)): one error per kind, "
                            "without the sample it came from. Check the function before vmapping with "
                            "`--vmap AXES` (e.g. `%jax_check f(xs) --vmap 0`) to get each failing sample's index."
                        )
                    ],
                )
            )
        sections.append(Section("Checked", [Paragraph(f"`{self.call}`, run as `{self.how_run}`")]))
        return Document(
            "%jax_check", self.status, self.summary, sections, fix=self.fix, nothing_to_do=self.unexplained()
        )

    @property
    def fix(self) -> str:
        """What to do about each kind of error found, most telling first: a NaN's fix is the NaN probe's (the
        same as ``%%jax_nans`` offers for it), an index or a division guarded, your own check's condition."""
        by_kind = {}
        for kind in ("user", "nan", "index", "div"):  # the check you wrote first: it names what the input broke
            first = next((e for e in self.errors if e.kind == kind), None)
            if first is not None:
                by_kind[kind] = _kind_fix(first, [e for e in self.errors if e.kind == kind])
        if len(by_kind) == 1:
            return ("Your own " if "user" in by_kind else "") + next(iter(by_kind.values()))
        return " ".join(f"{_FIX_LABELS[k]}: {text}" for k, text in by_kind.items())


INDEX_FIX = (
    "Keep the index in range, or say what an out-of-range index gives: `jnp.take(x, i, mode='fill', "
    "fill_value=...)` or `x.at[i].get(mode='fill', fill_value=...)`. Without checks JAX clamps it to the last "
    "valid index and returns a value: a silent wrong result."
)
_FIX_LABELS = {"user": "Your own check", "nan": "NaN", "index": "Index", "div": "Division"}
DIV_FIX = (
    "Guard the divisor where it can be 0: `jnp.where(d != 0, n // jnp.where(d != 0, d, 1), 0)` (`d` the divisor); "
    "without checks an integer division by zero returns a value."
)


def _kind_fix(first: CheckError, errors: list[CheckError]) -> str:
    at = f" at {first.line.where}" if first.line is not None else ""
    if first.kind == "nan":
        if first.fix:
            return first.fix
        primitive = first.message.rstrip(".").rsplit(" ", 1)[-1]
        cause = nan_fix(NanReport(found=True, value="", primitive=primitive, phase="forward"))
        return (
            f"{cause[:1].upper()}{cause[1:]} Keep the input of `{primitive}`{at} inside its domain."
            if cause
            else f"Find what made the NaN{at}: the operation's inputs were outside its domain."
        )
    if first.kind == "index":
        return INDEX_FIX
    if first.kind == "div":
        return DIV_FIX
    samples = [str(e.mapped_index) for e in errors if e.mapped_index is not None]
    which = f" (samples {', '.join(samples)})" if samples else ""
    return (
        f"`checkify.check`{at} rejected the input{which}: correct the input it names, or the condition "
        "if the input is valid."
    )


def _producer_text(producer: NanProducer) -> str:
    inside = f" inside `{producer.library_function}`" if producer.library_function else ""
    text = f"{producer.description}{inside} ({producer.phase} pass)"
    if producer.nan_maker:
        text += f"; then `{producer.nan_maker}` made NaN of it ({producer.nan_maker_values})"
    return text + ". Found by evaluating the call's program operation by operation."


def check(
    fn: Callable[..., object],
    *args: Any,
    errors: str | list[str] = "all",
    call_text: str = "",
    vmap_axes: int | Sequence[object] | None = None,
    **kwargs: Any,
) -> CheckReport:
    """``check_of_call(fn, args, kwargs, ...)`` for people: the call's own keywords may not be
    named ``errors``, ``call_text`` or ``vmap_axes`` here (use :func:`check_of_call` then)."""
    return check_of_call(fn, args, kwargs, errors=errors, call_text=call_text, vmap_axes=vmap_axes)


def check_of_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    **options: Any,
) -> CheckReport:
    """Run ``fn(*args, **kwargs)`` under ``jit(checkify(fn, errors))`` and report every error.

    ``options`` are :func:`run_call`'s. With ``vmap_axes`` the call is
    ``jit(vmap(checkify(fn), in_axes=vmap_axes))``: each sample is checked on
    its own and errors carry the sample's ``mapped_index``.
    (``checkify(vmap(f))`` would keep a single error without saying which sample.)
    Never raises for the call's own exception: the report's ``failure`` says what
    happened (use :func:`run_call` to also get the exception).
    """
    return run_call(fn, args, kwargs, **options)[0]


def run_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    *,
    errors: str | list[str] = "all",
    call_text: str = "",
    vmap_axes: int | Sequence[object] | None = None,
) -> tuple[CheckReport, Exception | None]:
    """Like :func:`check_of_call`, also returning the call's own exception (None if it ran).

    The errors checkify found are findings, not exceptions: only a call that
    raises (a Python error, a tracer error) gives an exception here. The magic
    shows the report, then raises it.
    """
    args, kwargs = tuple(args), dict(kwargs or {})
    names = [n.strip() for n in errors.split(",")] if isinstance(errors, str) else list(errors)
    report = CheckReport(call=call_text or f"{getattr(fn, '__name__', 'fn')}(...)", error_sets=names)
    # jax.vmap's wrapper announces itself in its docstring; nothing else marks it.
    report.vmapped_function = (getattr(fn, "__doc__", None) or "").startswith("Vectorized version of")
    try:  # a library's jit (nnx.jit, eqx.filter_jit): its jax.jit, checked on what it traces
        target, given, given_kw = traced_arguments_only(fn, args, kwargs)
    except Exception as failure:  # the wrapper's own repacking of the arguments failed, as the call would
        report.failure = error_line(failure)
        return report, failure
    checked = checkify.checkify(jittable.jittable(target), errors=error_set(names))
    if vmap_axes is not None:
        checked = jax.vmap(checked, in_axes=vmap_axes)
        report.vmap_axes = str(vmap_axes)
    checked = jax.jit(checked)
    with preserved_jax_state(()), library_tracing(getattr(target, "__jit__", None)):
        try:
            err, _ = checked(*given, **given_kw)
        except Exception as failure:  # a bug in the call itself: reported, and handed back
            report.failure = error_line(failure)
            return report, failure
    report.errors = _errors_of(err)
    if any(e.kind == "nan" for e in report.errors):
        _locate_nans(
            report,
            checked_fn=jax.vmap(fn, in_axes=vmap_axes) if vmap_axes is not None else fn,
            args=args,
            kwargs=kwargs,
        )
    return report, None


def _locate_nans(
    report: CheckReport, checked_fn: Callable[..., object], args: Sequence[object], kwargs: Mapping[str, object]
) -> None:
    """checkify names the primitive, and a line only when the user's code made it: the NaN probe's own
    explanation of the call (``nans.explain_call``: its producer search, as ``%%jax_nans``'s) adds the line
    inside a library function, the loop iteration, the values and the tried fix."""
    call = FailingCall(report.call, checked_fn, [(f"args[{i}]", a) for i, a in enumerate(args)], dict(kwargs))
    nan = explain_call(call)
    del call
    producer = nan.producer if nan is not None else None
    if producer is None:
        return
    for error in report.errors:
        if error.kind != "nan" or error.producer is not None:
            continue
        named = error.message.rstrip(".").rsplit(" ", 1)[-1]
        if named in (producer.primitive, producer.nan_maker) or error.line is None:
            error.producer = producer
            error.fix = offered_fix(nan)
            if error.line is None:
                error.line = producer.line
            return


def _errors_of(err: checkify.Error) -> list[CheckError]:
    """Every error an ``Error`` value holds, not just the first one ``err.get()`` shows."""
    found = [_error_from(exc, mapped_index) for exc, mapped_index in checkify_errors.every_error(err)]
    found.sort(key=lambda e: (e.mapped_index or [], list(KIND_TITLES).index(e.kind) if e.kind in KIND_TITLES else 9))
    return found


def _error_from(exc: BaseException, mapped_index: list[int] | None) -> CheckError:
    kind = _KIND_OF_CLASS.get(type(exc).__name__, type(exc).__name__)
    message = message_of(exc).strip()
    return CheckError(kind, message, mapped_index, _user_line(checkify_errors.error_frames(exc)))


def _user_line(frames: list[tuple[str, int, str]]) -> SourceLine | None:
    for file_name, line_num, function_name in frames:  # innermost first
        if is_user_file(file_name):
            return source_line(file_name, line_num, function_name)
    return None
