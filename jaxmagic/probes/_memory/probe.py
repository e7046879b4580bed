"""The memory probe: an out-of-memory error explained (``explain_out_of_memory``, for the explainer, the
doctor and the watch), one call measured (``memory_of_call``), a cell's jitted calls measured (``memory``).

Nothing of the user's program runs again: each call is traced (from JAX's cache when the user made it)
and compiled with XLA's dumps on; ways down are compiled too (``ways_down``), and a report says when one
of them traced the user's function again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import jax

from jaxmagic._jax import runtime
from jaxmagic._jax.jit_programs import CapturedCall, ProgramCapture
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._live import live
from jaxmagic.probes._memory.capacity import capacity, capacity_at_failure
from jaxmagic.probes._memory.failed_call import FailedCall, failed_call, out_of_memory_message
from jaxmagic.probes._memory.messages import OutOfMemoryMessage
from jaxmagic.probes._memory.program import CompiledCall, program_memory
from jaxmagic.probes._memory.records import Capacity, EagerAllocation, FreeHeld, HeldArrays, ProgramMemory
from jaxmagic.probes._memory.report import MemoryReport, OutOfMemoryReport
from jaxmagic.probes._memory.ways_down import FITS_SHARE, ways_down
from jaxmagic.probes._support import progress
from jaxmagic.probes._support.calls.library_wrappers import names_at_call
from jaxmagic.probes._support.explained import mark_explained
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import error_line, short_dtype
from jaxmagic.usercode.source import source_line

MAX_PROGRAMS = 8  # programs of a cell measured (largest arguments first)
WAYS_FOR = 3  # programs of a cell whose ways down are tried (largest peaks first): each trial compiles
HELD_MIN_BYTES = 1 << 20  # live arrays shown as holding memory from this size of their group on
HELD_GROUPS = 5
_KEPT = "_jaxmagic_out_of_memory"  # the attribute of an exception keeping its report (plain data)


def is_out_of_memory(error: BaseException) -> bool:
    return out_of_memory_message(error) is not None


def explain_out_of_memory(
    error: BaseException, namespace: dict[str, object] | None = None, *, try_ways: bool = True
) -> OutOfMemoryReport | None:
    """The explanation of an out-of-memory error; None for any other error. Never raises for the user's error.

    The report is kept on the exception: the explainer, the doctor and the watch may each be asked about one
    error, and measuring compiles the program again (trials more than once)."""
    message = out_of_memory_message(error)
    if message is None:
        return None
    kept = getattr(error, _KEPT, None)
    if isinstance(kept, OutOfMemoryReport) and (kept.program is None or kept.program.ways_down or not try_ways):
        return kept
    problem = ""
    try:
        call = failed_call(error, message.function)
    except Exception as failure:  # the explanation is a bonus: never fail on the user's error
        call, problem = None, f"reading the traceback failed ({error_line(failure)})"
    report = explain_failed_call(
        message, call, _capacity(message), held_arrays(namespace), try_ways=try_ways, error_type=type(error).__name__
    )
    report.problem = report.problem or problem
    try:
        setattr(error, _KEPT, report)
    except Exception:  # an exception that takes no attributes: measured again if asked again
        pass
    return report


def explain_failed_call(
    message: OutOfMemoryMessage,
    call: FailedCall | None,
    cap: Capacity | None,
    held: list[HeldArrays],
    *,
    try_ways: bool = True,
    error_type: str = "JaxRuntimeError",
) -> OutOfMemoryReport:
    """The report from what the error said, the call found, the device's figures and the arrays held: the
    live path's second half, which a recorded TPU error replays in CI with the same code."""
    report = OutOfMemoryReport(
        error_type=error_type, message=message.text, asked=message.asked, capacity=cap, facts=message, held=held
    )
    named = f" (XLA's module `{message.module}`)" if message.module else ""
    if call is None:
        report.problem = f"no line of yours calls a jitted function or JAX there{named}"
    elif not call.jitted:
        report.eager = _eager(call)
    elif call.args is None:
        report.problem = f"`{call.text}` at {call.line.where}: {call.problem}"
    else:
        report.surfaced_at, report.read = call.surfaced_at, call.read
        report.program = _measured(call.function, call.args, call.kwargs or {}, call.text, call.line, cap, try_ways)
        if report.program.problem:
            report.problem, report.program = report.program.problem, None
    program = report.program
    available = cap.available if cap is not None else None
    if program is None or program.compile_error is None:
        # what the program needs: measured by compiling it, else the runtime's own reservation for it
        needs = program.peak_bytes if program is not None else (message.asked if message.kind == "program" else None)
        report.free_held = _free_held(needs, cap, held)
    if program is not None and program.compile_error is None and available is not None and report.free_held is None:
        report.allocator = program.peak_bytes <= available * FITS_SHARE and not program.offered
    return report


def _free_held(needs: int | None, cap: Capacity | None, held: list[HeldArrays]) -> FreeHeld | None:
    """Freeing what is held, when the program fits the device alone but not beside what is held."""
    if needs is None or cap is None or cap.total is None or cap.in_use is None or cap.available is None:
        return None
    named = [h for h in held if h.holders]
    held_bytes = sum(h.bytes for h in named)
    alone = needs <= cap.total * FITS_SHARE
    if not named or not alone or needs <= cap.available:
        return None
    found = FreeHeld(needs, cap.total, cap.in_use, held_bytes, [n for h in named for n in h.holders])
    return found if found.fits_after else None


def memory_of_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    *,
    call: str = "",
    try_ways: bool = True,
) -> MemoryReport:
    """``%jax_memory CALL``: the call's program measured (compiled, never run); arguments may be
    ``jax.ShapeDtypeStruct`` values. Never raises for the call's own exception: the report says it
    (``run_memory_call`` also hands it back)."""
    return run_memory_call(fn, args, kwargs, call=call, try_ways=try_ways)[0]


def run_memory_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    *,
    call: str = "",
    try_ways: bool = True,
) -> tuple[MemoryReport, Exception | None]:
    """``memory_of_call``, with the exception the user's function raised while traced (None if none): the
    magic shows the report, then raises it, as ``%jax_hlo`` and ``%jax_stages`` do."""
    error = None
    with preserved_jax_state(()):
        report = MemoryReport(capacity=capacity(), magic="%jax_memory")
        try:
            program, compiled = program_memory(fn, tuple(args), dict(kwargs or {}), call=call, raise_traced=True)
        except Exception as raised:  # the user's function raised while traced: told, then handed back
            error = raised
            report.other_error = error_line(raised)
            report.notes.append(f"`{call or _name_of_call(fn)}` raised while traced, so nothing was measured.")
            return report, error
        if try_ways and compiled is not None:
            _try(program, compiled, report.capacity)
        if program.problem:
            report.notes.append(f"`{program.function}` could not be measured: {program.problem}.")
        else:
            report.programs.append(program)
    return report, error


def _name_of_call(fn: Callable[..., object]) -> str:
    return f"{getattr(fn, '__name__', type(fn).__name__)}(...)"


@contextlib.contextmanager
def memory(*, namespace: dict[str, object] | None = None, try_ways: bool = True) -> Iterator[MemoryReport]:
    """``%%jax_memory``: run the block as it is and measure every jitted program it ran; explain an
    out-of-memory error it raised (the error is raised again unchanged)."""
    report = MemoryReport()
    capture = ProgramCapture(argument_names=names_at_call)  # a library's jit: the user's names
    error: BaseException | None = None
    with preserved_jax_state(()):
        try:
            with capture:
                progress.publish(lambda: ([("jitted programs seen", capture.seen)], []))
                yield report
        except BaseException as raised:
            error = raised
            raise
        finally:
            _finish(report, capture, error, namespace, try_ways)


def _finish(
    report: MemoryReport,
    capture: ProgramCapture,
    error: BaseException | None,
    namespace: dict[str, object] | None,
    try_ways: bool,
) -> None:
    if not capture.available:
        report.notes.append(f"The cell's jitted calls could not be seen: {capture.unavailable}.")
    calls = capture.captured_calls()
    if capture.overflow:
        report.notes.append(f"{capture.overflow} more jitted calls were not measured (at most 64 are seen).")
    if error is not None and is_out_of_memory(error):
        report.out_of_memory = explain_out_of_memory(error, namespace, try_ways=try_ways)
        if report.out_of_memory is not None:
            mark_explained(error, report.out_of_memory)  # the explainer hook shows it no second time
    elif error is not None and not isinstance(error, KeyboardInterrupt):
        report.other_error = error_line(error)
    report.capacity = report.out_of_memory.capacity if report.out_of_memory is not None else None
    if report.capacity is None and (calls or error is None):
        report.capacity = capacity()
    failed = report.out_of_memory.program if report.out_of_memory is not None else None
    measured: list[tuple[ProgramMemory, CompiledCall | None]] = [(failed, None)] if failed is not None else []
    for call in sorted(calls, key=_argument_bytes, reverse=True)[:MAX_PROGRAMS]:
        if failed is not None and _same(call, failed):
            continue
        program, compiled = program_memory(
            call.function, call.args, call.kwargs, called_at=_site(call), renamed=call.argument_names
        )
        if program.problem:
            report.notes.append(f"`{program.function}` could not be measured: {program.problem}.")
            continue
        measured.append((program, compiled))
    measured.sort(key=lambda pair: -pair[0].peak_bytes)
    if try_ways:
        for program, compiled in measured[:WAYS_FOR]:
            if compiled is not None:
                _try(program, compiled, report.capacity)
    report.programs = [program for program, _ in measured]
    if report.out_of_memory is None:
        report.held = held_arrays(namespace)


def _measured(
    fn: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    text: str,
    line: SourceLine | None,
    cap: Capacity | None,
    try_ways: bool,
) -> ProgramMemory:
    program, compiled = program_memory(fn, args, kwargs, call=text, called_at=line)
    if try_ways and compiled is not None:
        _try(program, compiled, cap)
    return program


def _try(program: ProgramMemory, compiled: CompiledCall, cap: Capacity | None) -> None:
    try:
        program.ways_down = ways_down(compiled, program, cap)
    except Exception as problem:  # a way down we cannot try is one fewer, never a lost report
        program.buffers_problem = program.buffers_problem or f"ways down not tried: {error_line(problem)}"


def _capacity(message: OutOfMemoryMessage) -> Capacity:
    return capacity_at_failure(message, capacity())


def _eager(call: FailedCall) -> EagerAllocation:
    """What an eager operation or a copy on the user's line makes: its result's shape, traced (not run)."""
    found = EagerAllocation(call.text)
    args, kwargs = call.args, call.kwargs or {}
    if args is None:
        return found
    try:
        shapes = jax.eval_shape(lambda: call.function(*args, **kwargs))
    except Exception:
        return found
    leaves = jax.tree.leaves(shapes)
    if leaves:
        largest = max(leaves, key=lambda leaf: leaf.size * leaf.dtype.itemsize)
        found.shape = f"{short_dtype(str(largest.dtype))}[{','.join(map(str, largest.shape))}]"
        found.bytes = int(largest.size * largest.dtype.itemsize)
    return found


def held_arrays(namespace: dict[str, object] | None) -> list[HeldArrays]:
    """The live arrays holding memory already, by group, with their holders (``%jax_live``'s search)."""
    if not runtime.backend_started():
        return []
    try:
        snapshot = live(namespace=namespace)
    except Exception:  # the holders are a bonus: never lose the report for them
        return []
    groups = sorted(snapshot.groups, key=lambda g: -g.total_bytes)
    return [
        HeldArrays(f"{g.count} x {g.type_text}" if g.count > 1 else g.type_text, g.total_bytes, list(g.holders))
        for g in groups[:HELD_GROUPS]
        if g.total_bytes >= HELD_MIN_BYTES
    ]


def _argument_bytes(call: CapturedCall) -> int:
    return sum(
        int(getattr(leaf, "size", 0)) * getattr(getattr(leaf, "dtype", None), "itemsize", 0)
        for leaf in jax.tree.leaves((call.args, call.kwargs))
    )


def _same(call: CapturedCall, program: ProgramMemory) -> bool:
    site = _site(call)
    return (
        program.called_at is not None
        and site is not None
        and site.lineno == program.called_at.lineno
        and site.filename == program.called_at.filename
    )


def _site(call: CapturedCall) -> SourceLine | None:
    if call.call_site is None:
        return None
    filename, line, function = call.call_site
    return source_line(filename, line, function)
