"""The ``nans()`` context manager: the block under JAX's NaN (and inf) checks, and the search after a catch.

The checks are on for the block only. When one raises, the traceback's user
frames give the call path and the expressions to search; the producer search
(``probes/_nans/search/producer.py``) names the operation that made the value,
and the count of the user's call sites names the loop's pass that failed.
With ``inside``, the first call of each jitted function is also evaluated op by
op before it runs (``probes/_nans/inside.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import traceback as traceback_module
from collections.abc import Iterator
from types import TracebackType

import jax

from jaxmagic._jax import jit_internals
from jaxmagic._jax.jax_prints import jax_prints_collected
from jaxmagic._jax.monitoring_tool import why_no_tool
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic._jax.types import Value
from jaxmagic.probes._nans.call_sites import CallSiteCounts, counting_call_sites
from jaxmagic.probes._nans.fixes.rules import nan_fixes
from jaxmagic.probes._nans.inside_calls import FirstCalls, evaluating_inside
from jaxmagic.probes._nans.nonfinite import (
    NonFiniteLeaf,
    bindings,
    nonfinite_leaves,
    nonfinite_rebound,
)
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.scope import Scope
from jaxmagic.probes._nans.search.found import ProducerSearch
from jaxmagic.probes._nans.search.producer import search
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.rerun.failing_call import FailingCall, enters_jax, failing_calls, failing_expressions
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import counted, error_line, first_line, message_of
from jaxmagic.usercode.source import code_kind, is_user_file, source_line, user_lines

CONFIG_NAMES = ("jax_debug_nans", "jax_debug_infs")

_JAX_WORDING = re.compile(
    r"\((nan|inf)\) encountered|Invalid (nan|inf) value"
)  # NumPy says "invalid value encountered"
_MESSAGE = re.compile(r"invalid value \((nan|inf)\) encountered in ([\w.\-]+)")


def _checks_on(infs: bool) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(jax.debug_nans(True))
    if infs:
        stack.enter_context(jax.debug_infs(True))
    return stack


def _checks_off() -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(jax.debug_nans(False))
    stack.enter_context(jax.debug_infs(False))
    return stack


@contextlib.contextmanager
def nans(
    *, infs: bool = False, namespace: dict[str, object] | None = None, inside: bool = False
) -> Iterator[NanReport]:
    """Check every JAX computation in the block for NaN (and inf with ``infs``).

    On a NaN the block's ``FloatingPointError`` propagates unchanged; the
    yielded report is filled in before it does. ``namespace`` (a dict of the
    user's variables) lets the probe also list NaN leaves of the variables the
    block bound. ``inside``: the first call of each jitted function the block
    calls is also evaluated op by op before it runs, and the first operation
    that made a NaN or inf is reported even when a later one masked it
    (``report.inside_searches``); every call then takes JAX's slower Python
    dispatch path.
    """
    with _checked(infs=infs, namespace=namespace, inside=inside) as report:
        yield report


@contextlib.contextmanager
def nans_of_call(call: FailingCall, *, infs: bool = False) -> Iterator[NanReport]:
    """The block (which makes ``call``) under the checks as ``nans()`` runs it, with the producer search
    trying ``call`` itself first: the outermost expression there is when the call is made by code that is
    not the user's (the doctor's and the watch's re-run of a jitted call), as the cell's own statement is
    for ``%%jax_nans`` - so the infinities its arguments held are given the same way on every path."""
    with _checked(infs=infs, namespace=None, inside=False, outermost=call) as report:
        yield report


@contextlib.contextmanager
def _checked(
    *, infs: bool, namespace: dict[str, object] | None, inside: bool, outermost: FailingCall | None = None
) -> Iterator[NanReport]:
    report = NanReport(checks=["nan", "inf"] if infs else ["nan"], inside=inside)
    before = bindings(namespace)
    counts = None
    observer: FirstCalls | None = None
    try:
        with (
            preserved_jax_state(CONFIG_NAMES),
            jax_prints_collected(report.jax_messages),
            counting_call_sites() as counts,
            evaluating_inside(report, counts) if inside else contextlib.nullcontext() as observer,
            _checks_on(infs),
        ):
            yield report
    except (ZeroDivisionError, OverflowError) as error:  # Python's own arithmetic: JAX arrays never raise these
        report.python_error = report.other_error = error_line(error)
        report.call_path = user_lines(error.__traceback__)
        raise
    except FloatingPointError as error:
        with preserved_jax_state(CONFIG_NAMES):
            try:
                _explain(report, error, infs, counts, outermost)
                conclude(report)
            except Exception as failure:  # never let our analysis hide the user's error
                report.notes.append(f"jaxmagic could not finish its analysis: {error_line(failure)}")
        raise
    except BaseException as error:
        report.other_error = error_line(error)
        raise
    finally:
        report.nonfinite += nonfinite_rebound(namespace, before)
        report.jit_calls = dict(counts.jitted) if counts is not None else {}
        _conclude_scope(report, counts is not None, observer)


def _conclude_scope(report: NanReport, counted: bool, observer: FirstCalls | None) -> None:
    """What the checks (and --inside) looked at, for the report's scope and its clean headline."""
    scope = Scope(report.jit_calls, counted=counted, uncounted="" if counted else why_no_tool(calls=True))
    if observer is not None:
        scope.inside, scope.evaluated, scope.unevaluated = True, observer.evaluated, dict(observer.unevaluated)
        if not report.inside_searches and not observer.unevaluated:
            report.notes.append("--inside evaluated nothing op by op: the cell ran no compiled computation.")
    report.checked_scope = scope.paragraph()
    report.checked_headline = scope.headline(report.checked)


def _explain(
    report: NanReport,
    error: BaseException,
    infs: bool,
    counts: CallSiteCounts | None = None,
    outermost: FailingCall | None = None,
) -> None:
    if not _JAX_WORDING.search(message_of(error)) and not _raised_by_jax(error):
        report.python_error = report.other_error = error_line(error)  # NumPy's np.seterr(all="raise"), ...
        report.call_path = user_lines(error.__traceback__)
        return
    report.found = True
    report.message = first_line(error)
    match = _MESSAGE.search(message_of(error))
    if match:
        report.value, report.primitive = match.group(1), match.group(2)
    else:
        report.value = "inf" if "inf" in report.message.split("(")[0] else "nan"
    report.compiled_only = "de-optimized function did not" in message_of(error)
    report.phase = "backward" if any("backward pass" in m for m in report.jax_messages) else "forward"
    report.call_path = user_lines(error.__traceback__)
    report.origin_lines, report.library_function = _origin(error, report.call_path)

    calls = failing_calls(error.__traceback__)
    infinite = []  # (call, its arguments' leaves holding inf and no NaN), when a NaN was caught
    passed_in = None  # the first call whose arguments held what was caught
    for call in calls:
        leaves = _argument_leaves(call)
        if leaves and not _made_from_infinities(report, leaves):
            passed_in = (call, leaves)
            break
        if leaves:
            infinite.append((call, leaves))
    _search_producer(report, error, counts, outermost)
    if passed_in is not None and report.producer is None:
        call, leaves = passed_in
        report.nonfinite += leaves
        report.notes.append(
            f"The arguments of {call.source} already held non-finite values when it was "
            "called: the value came in from an earlier step, not from this computation."
        )
        return
    if infinite and report.producer is None:
        call, leaves = infinite[0]
        report.nonfinite += leaves
        report.notes.append(
            f"The arguments of {call.source} held inf but no NaN when it was called (a log-probability "
            "of -inf, a mask): an operation inside turned an infinity into NaN (inf - inf, 0 * inf, "
            "inf / inf), which the search could not name."
        )
    if not calls:
        report.notes.append(
            "No call on your lines could be re-evaluated safely (only plain calls of names, "
            "attributes and literals are), so arguments and results were not examined."
        )
        return
    # Forward: the cell's own call says most; backward: the innermost one is the gradient call.
    report.failing_call = calls[-1].source if report.phase == "backward" else calls[0].source
    if report.phase == "backward":
        if not report.origin_lines:
            _locate_op_by_eager_rerun(report, calls[-1], infs)
        _scan_result_without_checks(report, calls[-1])


def conclude(report: NanReport, started: SourceLine | None = None) -> None:
    """Provenance, library function and fix, from what the search found (kept consistent with
    ``origin_lines`` and ``producer.line``)."""
    if not report.found:
        return
    p = report.producer
    if p is not None and (p.library_function or p.nan_maker_library):
        # The function the NaN was made in: the NaN maker's, when the producer made only an inf it turned into NaN.
        nan_made_there = p.value == "inf" and p.nan_maker and p.nan_maker_library
        report.library_function = p.nan_maker_library if nan_made_there else p.library_function
    report.provenance = nan_provenance(report, started)
    report.fix, report.fixes = nan_fixes(report)


def nan_provenance(report: NanReport, started: SourceLine | None = None) -> Provenance:
    """Where the NaN was made: the producer's line, function, transformations and iteration, else the
    line JAX attached; ``started`` (or the outermost user frame) is the call that started it."""
    started = started or report.call_line or (report.call_path[0] if report.call_path else None)
    p = report.producer
    if p is not None and p.value == "inf" and p.nan_maker_library and p.nan_maker_provenance is not None:
        # The inf was made on one line, the NaN of it inside a library function called on another
        # (a -inf mask fill, then logsumexp): the NaN is the value reported, made where that function ran.
        made = dataclasses.replace(p.nan_maker_provenance, started_by=started)
        made.transforms = list(made.transforms)
        return made
    if p is not None and p.provenance is not None:
        made = dataclasses.replace(p.provenance, started_by=started)
        made.transforms = list(made.transforms)
        return made
    if report.origin_lines:
        line = report.origin_lines[-1]
        return Provenance(
            made_at=line, function=line.function, started_by=started, library_function=report.library_function
        )
    why = "JAX named the primitive but no line inside the call"
    if report.search_stopped_at:
        why += f", and the producer search could not look inside `{'`, `'.join(report.search_stopped_at)}`"
    elif not report.found:
        why = "no NaN was caught"
    return Provenance(started_by=started, library_function=report.library_function, unknown=why)


def _raised_by_jax(error: BaseException) -> bool:
    tb = error.__traceback__
    while tb is not None:
        if code_kind(tb.tb_frame.f_code.co_filename) == "jax":
            return True
        tb = tb.tb_next
    return False


def _search_producer(
    report: NanReport, error: BaseException, counts: CallSiteCounts | None, outermost: FailingCall | None = None
) -> None:
    """Find the operation that made the value: evaluate the failing expression's program op by op.

    The user frames are tried outermost first (the cell's own statement gives
    the most context: the discarded ``where``, the call number of the loop;
    and the infinities its arguments held are the ones given - an inner frame's
    arguments may hold an inf an earlier line made); a frame whose expression
    cannot be traced again gives way to the next. ``outermost``: a call made from
    outside the user's frames (a re-run), tried before them.
    """
    tried = []
    for call in [*([outermost] if outermost is not None else []), *failing_expressions(error.__traceback__)]:
        values = [value for _, value in call.args]
        held = [leaf for value in values for leaf in nonfinite_leaves(value, "")]
        if held and not _made_from_infinities(report, held):
            # A NaN argument may play no part: JAX's error is then about an operation of finite inputs,
            # which the search finds with the primitive JAX named. Anything else came in through the
            # arguments, and the finding says so.
            found = _searched(call, want_nan=report.value == "nan")
            if found.producer is None or found.producer.primitive != report.primitive:
                return
            _put_found(report, found)
            _count_calls(report, error, counts)
            return
        found = apply_search(report, call, want_nan=report.value == "nan")
        tried.append(found)
        if report.producer is not None and found.given_inf and call is not outermost and call.frame > 0:
            report.notes.append(
                f"The infinities the arguments of {call.source} held were taken as given, but that is an inner "
                "frame: the code around it, which could not be evaluated again (only plain calls of names, "
                "attributes and literals are), may have made them - the operation that did is then not named."
            )
        if report.producer is not None:
            _count_calls(report, error, counts)
            return
    for found in tried:
        if found.put_back and found.put_back not in report.notes:
            report.notes.append(found.put_back)
        if found.failure:
            report.notes.append(f"The operation could not be located in {found.searched}: {found.failure}.")


def _into_library(user_tb: TracebackType) -> bool:
    """Whether this user frame's call went into a library's code (an ``eqx.filter_jit`` wrapper, an
    NNX or Haiku transform): the user frames below then run as often as the library runs them (to
    trace, to re-run), not once per pass of the user's loop. JAX's own frames are filtered out of
    tracebacks; ``enters_jax`` tells those calls from the call line."""
    following = user_tb.tb_next
    return following is not None and not is_user_file(following.tb_frame.f_code.co_filename)


def _count_calls(report: NanReport, error: BaseException, counts: CallSiteCounts | None) -> None:
    """The call number of the user's line that ran most often: the loop's pass that failed.

    Frames below a call of a JAX function do not count: there the user's
    functions run because JAX traces them (or re-runs them to locate a NaN),
    not once per call.
    """
    if counts is None:
        return
    best: tuple[int, SourceLine | None] = (0, None)
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            number = counts.number(tb)
            if number > best[0]:
                best = (number, source_line(code.co_filename, tb.tb_lineno, code.co_name))
            if enters_jax(tb) or _into_library(tb):
                break
        tb = tb.tb_next
    report.call_number, report.call_line = best


def apply_search(report: NanReport, call: FailingCall, *, want_nan: bool = True) -> ProducerSearch:
    """Run the producer search on ``call`` and put what it found into ``report``; return the search."""
    found = _searched(call, want_nan=want_nan)
    _put_found(report, found)
    return found


def _searched(call: FailingCall, *, want_nan: bool) -> ProducerSearch:
    args = [v for _, v in call.args]
    found = search(call.function, args, call.kwargs, source=call.source, want_nan=want_nan)
    _check_forward(found, call, args, want_nan)
    return found


def _check_forward(found: ProducerSearch, call: FailingCall, args: list[Value], want_nan: bool) -> None:
    """A producer traced under ``jvp`` (not transposed) is a value of the forward computation or one JAX
    computed only for the derivative; the name stack does not tell which. When the failing function is a
    JAX transformation of another (``jax.grad(loss)``), that function is evaluated alone on the same
    values: the same operation making the same value on the same line is a forward value."""
    p = found.producer
    transformed = jit_internals.transformed_function(call.function)
    wrapped = call.forward or transformed
    if p is None or not p.derivative or p.phase != "forward" or not callable(wrapped):
        return
    name = call.forward_of if call.forward is not None else str(getattr(transformed, "__name__", "it"))
    alone = search(wrapped, args, call.kwargs, source=f"{name}(...)", want_nan=want_nan, with_fixes=False)
    q = alone.producer
    if q is None or q.primitive != p.primitive or q.line is None or p.line is None:
        return
    if (q.line.filename, q.line.lineno) == (p.line.filename, p.line.lineno):
        p.derivative = False
        found.forward_check = (
            f"`{name}` alone was traced and evaluated on the same values (its Python ran once more): "
            f"`{q.primitive}` made the same {q.value} on the same line, so it is a value of the forward "
            "computation, not of the derivative."
        )


def _put_found(report: NanReport, found: ProducerSearch) -> None:
    report.search_stopped_at = list(dict.fromkeys(report.search_stopped_at + found.stopped_at))
    if found.put_back and found.put_back not in report.notes:
        report.notes.append(found.put_back)
    if found.producer is None:
        if found.stopped_at:
            report.notes.append(
                f"The producer search could not look inside `{'`, `'.join(found.stopped_at)}` in "
                f"{found.searched}; the primitive JAX named is shown instead."
            )
        return
    report.producer, report.searched_call = found.producer, found.searched
    report.notes.append(
        f"The program of {found.searched} was evaluated again on the same argument values, "
        f"operation by operation ({counted(found.equations, 'operation')}; a loop is run once more compiled to find "
        "its first bad iteration, and only that one is evaluated op by op) to find the first operation "
        + _rule_text(found)
    )
    if found.forward_check:
        report.notes.append(found.forward_check)
    if found.stopped_at:
        report.notes.append(f"It could not look inside `{'`, `'.join(found.stopped_at)}`.")
    if found.producer.phase == "backward":
        report.phase = "backward"


def _rule_text(found: ProducerSearch) -> str:
    """How the search told a made value from a given one (``_nans/search/given.py``), as the note ends."""
    given = [
        *(
            [
                f"written on line {found.written_inf.lineno}"
                + (f" (by `{found.written_inf_by}`'s own code)" if found.written_inf_by else "")
            ]
            if found.written_inf is not None
            else []
        ),
        *(["its arguments held"] if found.given_inf else []),
    ]
    if not given:
        return "whose inputs were finite and whose output was not."
    return (
        "that made a value its inputs did not give it: whose inputs held no NaN, nor an inf an operation had "
        f"made, and whose output held a NaN or an inf of its own (the infinities {' and '.join(given)} were "
        "taken as given, not made)."
    )


def _made_from_infinities(report: NanReport, leaves: list[NonFiniteLeaf]) -> bool:
    """A NaN was caught and the arguments held inf but no NaN: the NaN was made inside the call
    (``exp(-inf) = 0``, then ``0 / 0``; ``-inf - -inf``), not passed in - searched for, not blamed on them."""
    return report.value == "nan" and not any(leaf.nan_count for leaf in leaves)


def _argument_leaves(call: FailingCall) -> list[NonFiniteLeaf]:
    leaves = []
    for source, value in call.args:
        leaves += nonfinite_leaves(value, f"argument {source}")
    for name, value in call.kwargs.items():
        leaves += nonfinite_leaves(value, f"argument {name}=")
    return leaves


def _origin(error: BaseException, call_path: list[SourceLine]) -> tuple[list[SourceLine], str]:
    """User lines of the op that failed, from JAX's pre-transformation stack, if JAX attached one.

    That stack starts at the program's entry; we keep the frames below the
    failing call (the last frame it shares with ``call_path``).
    """
    cause = error.__cause__
    if cause is None or type(cause).__name__ != "JaxStackTraceBeforeTransformation":
        return [], ""
    lines = user_lines(cause.__traceback__)
    known = {(line.filename, line.lineno) for line in call_path}
    shared = [i for i, line in enumerate(lines) if (line.filename, line.lineno) in known]
    if shared:
        lines = lines[shared[-1] + 1 :]
    return lines, _library_called(cause.__traceback__)


def _library_called(tb: TracebackType | None) -> str:
    """The JAX function (public name: ``jnp.linalg.norm``) the innermost user frame of ``tb`` called;
    "" when it called none by a public name (never IPython's or jaxmagic's own frames)."""
    frames = traceback_module.extract_tb(tb) if tb is not None else []
    last_user = max((i for i, f in enumerate(frames) if is_user_file(f.filename)), default=None)
    if last_user is None:
        return ""
    for frame in frames[last_user + 1 :]:
        if code_kind(frame.filename) != "jax":
            return ""
        name = attribution.public_name(frame.name, frame.filename)
        if name:
            return name
    return ""


def _locate_op_by_eager_rerun(report: NanReport, call: FailingCall, infs: bool) -> None:
    # Under disable_jit every op runs eagerly with its source information, so
    # a backward-pass NaN comes with the forward line that made the op.

    try:
        with jax.disable_jit(), _checks_on(infs), contextlib.redirect_stdout(io.StringIO()):
            call()
    except (FloatingPointError, ZeroDivisionError) as rerun_error:
        lines, function = _origin(rerun_error, report.call_path)
        if not lines:
            lines = user_lines(rerun_error.__traceback__)[-1:]
        report.origin_lines, report.library_function = lines, function
        report.origin_by_rerun = bool(lines)
        report.notes.append(
            f"To find your line, {call.source} was called once more under jax.disable_jit(), "
            "op by op, with the same checks."
        )
    except Exception as other:
        report.notes.append(
            f"Re-running {call.source} op by op to find your line failed: {type(other).__name__}: {first_line(other)}"
        )
    else:
        report.notes.append(
            f"{call.source} did not produce the value when re-run op by op under "
            "jax.disable_jit(): the compiled program differs from the eager one."
        )


def _scan_result_without_checks(report: NanReport, call: FailingCall) -> None:
    try:
        with _checks_off(), contextlib.redirect_stdout(io.StringIO()):
            result = call()
    except Exception as other:
        report.notes.append(f"Re-running {call.source} without checks to see its result failed: " + error_line(other))
        return
    leaves = nonfinite_leaves(result, f"result of {call.source}")
    del result
    report.nonfinite += leaves
    report.notes.append(
        f"{call.source} was called once more with checking off, to list which leaves of its "
        f"result are non-finite ({len(leaves)} found)."
    )
