"""The probe: trace, lower and compile one call (never run it) and fill an ``HloReport``."""

from __future__ import annotations

import contextlib
import difflib
import inspect
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from jax import monitoring

from jaxmagic._jax import jaxpr_parts, runtime
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._hlo.captured_values import NameEnvironment, baked_literals, captured_constants, fresh_trace_of
from jaxmagic.probes._hlo.hlo_text import parse_hlo_module
from jaxmagic.probes._hlo.jaxpr import jaxpr_ops, scope_names, signature, walk_eqns
from jaxmagic.probes._hlo.memory import Sweep, cost_figures, memory_figures, sweep_point
from jaxmagic.probes._hlo.name_paths import split_query
from jaxmagic.probes._hlo.optimized_hlo import hlo_kernels, hlo_ops
from jaxmagic.probes._hlo.records import STAGES
from jaxmagic.probes._hlo.report import HloReport
from jaxmagic.probes._hlo.scopes import ScopePaths, StageOp, collect_scope, every_scope_ops, scope_tree
from jaxmagic.probes._hlo.stablehlo import stablehlo_ops
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.calls.library_wrappers import (
    is_library_jit,
    jitted_program,
    library_tracing,
    user_argument_names,
)
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import is_user_file, source_line


def parse_stages(text: str | Iterable[str]) -> list[str]:
    """``"all"`` / ``"jaxpr,hlo"`` -> the stages in pipeline order."""
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    if "all" in names:
        return list(STAGES)
    unknown = [n for n in names if n not in STAGES]
    if unknown or not names:
        raise ProbeArgumentError(
            "stage",
            f"names unknown stages {', '.join(unknown) or '(none given)'}; choose from jaxpr, stablehlo, hlo, all",
        )
    return [s for s in STAGES if s in names]


def hlo(
    fn: Callable[..., object],
    *args: Any,
    scope: str | None = None,
    stage: str | Iterable[str] = "all",
    call_text: str = "",
    namespace: dict[str, object] | None = None,
    sweep: Sweep | None = None,
    **kwargs: Any,
) -> HloReport:
    """``hlo_of_call(fn, args, kwargs, ...)`` for people: the call's own keywords may not be
    named like this function's options here (use :func:`hlo_of_call` then)."""
    return hlo_of_call(
        fn, args, kwargs, scope=scope, stage=stage, call_text=call_text, namespace=namespace, sweep=sweep
    )


def hlo_of_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    **options: Any,
) -> HloReport:
    """Trace, lower and compile ``fn(*args, **kwargs)`` (never run it) and report on the program.

    ``options`` are :func:`run_call`'s. With ``scope`` (``"encoder"``,
    ``"encoder/attn"``): the operations of that ``jax.named_scope`` in each
    stage, side by side. Without: the tree of named scopes with counts per
    stage. Always: literals baked in from globals/closures and captured
    constant arrays; with the ``hlo`` stage,
    ``memory_analysis()``/``cost_analysis()`` of the compiled program.
    ``namespace`` (the user's globals) helps name baked globals. ``sweep``
    compiles the call once per value and tabulates the memory figures.
    Returns the report; errors while building a stage are reported, not raised
    (use :func:`run_call` to also get the exception).
    """
    return run_call(fn, args, kwargs, **options)[0]


def run_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    *,
    scope: str | None = None,
    stage: str | Iterable[str] = "all",
    call_text: str = "",
    namespace: dict[str, object] | None = None,
    sweep: Sweep | None = None,
    every_scope: bool = False,
) -> tuple[HloReport, Exception | None]:
    """Like :func:`hlo_of_call`, also returning the exception of the stage that failed (None if none).

    The magic shows the report, then raises it. ``every_scope`` also records every operation of every
    stage with its scope path, line and text (``report.scope_ops``: what ``%jax_hlo --explore`` browses).
    """

    args, kwargs = tuple(args), dict(kwargs or {})
    failed: list[Exception] = []  # the exception of the stage that failed, for the magic to raise
    stages = parse_stages(stage)
    opened = is_library_jit(fn)  # nnx.jit, eqx.filter_jit: the jax.jit inside, with the arguments it is given

    renamed: list[str] = []  # a library's jit: the user's names for the arguments it repacked

    def trace() -> Any:
        program = jitted_program(fn, args, kwargs)
        if opened:
            renamed.extend(user_argument_names(fn, args, kwargs, program))
        jitted, given, given_kw = program
        with library_tracing(jitted):
            return jitted.trace(*given, **given_kw)

    report = HloReport(
        call=call_text or f"{getattr(fn, '__name__', 'fn')}(...)",
        scope=scope or "",
        stages=stages,
        function=f"jit({_function_name(fn)})",
    )
    with preserved_jax_state(()), _work_events() as done:
        traced = _timed(report, "trace", trace, failed)
        if traced is None:
            return report, failed[0]
        _note_cached(report, "trace", done)
        closed = traced.jaxpr
        report.function = f"jit({_traced_name(closed, fn)})"
        report.inputs, report.outputs = signature(traced, renamed)
        walked = list(walk_eqns(closed))
        printer = jaxpr_parts.jaxpr_equation_printer(closed)  # equations named as str(traced.jaxpr) names them
        traced_ops = jaxpr_ops(walked, report.function, printer)
        known = scope_names(walked)
        query = split_query(scope) if scope else ()
        known |= set(query)
        env = NameEnvironment(fn, namespace)
        report.literals = baked_literals(walked, env, printer)
        fresh = None if opened else fresh_trace_of(fn, args, kwargs)  # a wrapper's arguments are not fn's
        report.constants = captured_constants(closed, walked, env, fresh_trace=fresh)
        per_stage: dict[str, list[StageOp]] = {"jaxpr": traced_ops}
        module = None
        if "stablehlo" in stages or "hlo" in stages:
            lowered = _timed(report, "lower", traced.lower, failed)
            if lowered is None:
                report.failure_stage = "stablehlo"
                return report, failed[0]
            _note_cached(report, "lower", done)
            if "stablehlo" in stages:
                per_stage["stablehlo"] = stablehlo_ops(lowered)
            if "hlo" in stages:
                compiled = _timed(report, "compile", lowered.compile, failed)
                if compiled is None:
                    report.failure_stage = "hlo"
                    return report, failed[0]
                _note_cached(report, "compile", done)
                module = parse_hlo_module(compiled.as_text())
                per_stage["hlo"] = hlo_ops(module)
                per_stage["kernels"] = hlo_kernels(module)
                report.memory = memory_figures(compiled)
                report.cost = cost_figures(compiled)
        scopes = ScopePaths(known)
        if scope:
            collect_scope(report, per_stage, scopes, query, module)
        report.tree, report.unscoped = scope_tree(per_stage, scopes, stages)
        if every_scope:
            report.scope_ops = every_scope_ops(per_stage, scopes, stages, module)
        if scope and not report.ops:
            report.suggestions = difflib.get_close_matches(scope, report.scope_paths, n=3, cutoff=0.5)
        if sweep is not None:
            report.sweep_name = sweep.name
            report.sweep = [sweep_point(sweep, value) for value in sweep.values]
    return report, None


def _function_name(fn: object) -> str:
    target = inspect.unwrap(fn) if callable(fn) else fn
    return getattr(target, "__name__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _traced_name(closed: object, fn: object) -> str:
    info = getattr(closed, "debug_info", None)
    name = getattr(info, "func_name", None) if info is not None else None
    return name or _function_name(fn)


# The jax.monitoring event each step emits when it really does its work (none on a cache hit).
_WORK_EVENTS = {
    "trace": "/jax/core/compile/jaxpr_trace_duration",
    "lower": "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "compile": "/jax/core/compile/backend_compile_duration",
}


@contextlib.contextmanager
def _work_events() -> Iterator[set[str]]:
    """The names of the compile events JAX reported in the block (a set, emptied by ``_note_cached``)."""
    seen: set[str] = set()

    def listener(event: str, duration_secs: float, **kwargs: str | int) -> None:
        seen.add(event)

    monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seen
    finally:
        runtime.unregister_duration_listener(listener)


_PERSISTENT_CACHE_READ = "/jax/compilation_cache/cache_retrieval_time_sec"


def _note_cached(report: HloReport, step: str, seen: set[str]) -> None:
    """Record ``step`` as served from JAX's caches if its work event did not fire since the last step
    (a compile read from the persistent compilation cache fires it too: that is told apart)."""
    if _WORK_EVENTS[step] not in seen:
        report.cached.append(step)
    elif step == "compile" and _PERSISTENT_CACHE_READ in seen:
        report.compile_from_disk = True
    seen.clear()


T = TypeVar("T")  # a TypeVar, not def _timed[T]: Python 3.11 is supported


def _timed(report: HloReport, step: str, build: Callable[[], T], failed: list[Exception]) -> T | None:
    start = time.perf_counter()
    try:
        result = build()
    except Exception as error:  # the user's program failed to trace/lower/compile: report it, hand it back
        failed.append(error)
        report.failure = error_line(error)
        report.failure_stage = {"trace": "jaxpr", "lower": "stablehlo", "compile": "hlo"}[step]
        report.failure_line = _innermost_user_line(error.__traceback__)
        return None
    report.seconds[step] = time.perf_counter() - start
    return result


def _innermost_user_line(tb: TracebackType | None) -> SourceLine | None:
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            found = source_line(code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return found
