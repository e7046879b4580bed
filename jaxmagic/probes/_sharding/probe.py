"""The sharding probe itself: ``sharding`` (a value's layout) and ``sharding_of_call`` / ``run_call`` (a jitted call's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax

from jaxmagic._jax import jit_internals, jittable
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._sharding.collective_fixes import try_collective_fixes
from jaxmagic.probes._sharding.collectives import chosen_around, list_collectives
from jaxmagic.probes._sharding.compiled import (
    constraint_checks,
    inputs_as_compiled,
    intermediate_shardings,
    outputs_as_compiled,
)
from jaxmagic.probes._sharding.layouts import layouts_of_tree
from jaxmagic.probes._sharding.report import CallShardings, ShardingReport
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.calls.library_wrappers import (
    copies_of_arrays,
    donates_arrays,
    is_library_jit,
    jitted_program,
    library_tracing,
)
from jaxmagic.report.wording import error_line

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced, Wrapped

    from jaxmagic.report import SourceLine


def sharding(
    value: Any, *, expression: str = "", dims: list[int] | None = None, check_replicas: bool = True
) -> ShardingReport:
    """Report how ``value`` (a jax.Array, a ShapeDtypeStruct with a sharding, or a
    pytree of them) is laid out over devices.

    ``dims`` picks the two dimensions drawn for arrays of rank > 2.
    ``check_replicas`` compares the copies of each replicated block (False skips
    it: then no array data is read at all).
    """
    report = ShardingReport(expression=expression, dims=list(dims) if dims else None, replicas_checked=check_replicas)
    with preserved_jax_state(()):
        report.arrays, report.other_leaves = layouts_of_tree(value, check_replicas)
    _check_dims(report)
    return report


def sharding_of_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    **options: Any,
) -> ShardingReport:
    """Run ``fn(*args, **kwargs)`` (jitted) and report the shardings it was compiled with.

    ``options`` are :func:`run_call`'s. Never raises for an error of the call
    itself: the report's ``failure`` says what happened (use ``run_call`` to
    also get the exception).
    """
    return run_call(fn, args, kwargs, **options)[0]


def run_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    *,
    call_text: str = "",
    intermediates: bool = False,
    collectives: bool = False,
    try_fixes: bool = True,
    dims: list[int] | None = None,
    check_replicas: bool = True,
) -> tuple[ShardingReport, BaseException | None]:
    """Like ``sharding_of_call``, also returning the call's exception (None if it ran).

    ``collectives`` lists every collective XLA inserted (its line, scope, mesh axes, bytes per
    device and the sharding that made it necessary) and, with ``try_fixes``, tries the input
    layouts or constraints that would remove them by compiling again (never running).

    The magic uses this to show the report and then raise the user's own error.
    The call runs first (so its result is real, and the replica check can read
    it); its compiled shardings come from ``jit(f).lower(...).compile()``, which
    JAX serves from the compilation it just made.
    """
    args, kwargs = tuple(args), dict(kwargs or {})
    name = getattr(fn, "__name__", None) or type(fn).__name__
    text = call_text or f"{name}(...)"
    library = is_library_jit(fn)  # nnx.jit, eqx.filter_jit: run as given, its own jax.jit read after
    was_jitted = jit_internals.is_jitted(fn) or library
    jitted = fn if was_jitted else jittable.jit(fn)  # the call as the user makes it (a library's jit too)
    report = ShardingReport(expression=text, dims=list(dims) if dims else None, replicas_checked=check_replicas)
    call = report.call = CallShardings(
        function=name, was_jitted=was_jitted, intermediates_asked=intermediates, collectives_asked=collectives
    )
    started = attribution.started_by() if collectives else None  # the line that made the call: context
    error: BaseException | None = None
    with preserved_jax_state(()):
        try:
            if donates_arrays(fn, args, kwargs):  # run on copies: the layouts are the same, the user's arrays stay
                call.ran_on_copies = True
                result = jitted(*copies_of_arrays(args), **copies_of_arrays(kwargs))
            else:
                result = jitted(*args, **kwargs)
            jax.block_until_ready(result)
        except Exception as failure:
            error = failure
            report.failure = error_line(failure)
            result = None
        if result is not None:
            report.arrays, report.other_leaves = layouts_of_tree(result, check_replicas, root="result")
        del result
        try:  # the jax.jit that ran (a library's jit opened), with the arguments it was given
            program, args, kwargs = jitted_program(fn if library else jitted, args, kwargs)
            with library_tracing(program):
                traced = program.trace(*args, **kwargs)
            compiled = traced.lower().compile()
        except Exception as failure:  # the call's own error, reported above
            if error is None:
                error = failure
                report.failure = error_line(failure)
            return report, error
        call.inputs = inputs_as_compiled(program, compiled, traced, args, kwargs, text)
        call.outputs = outputs_as_compiled(traced, compiled)
        try:
            call.constraints = constraint_checks(traced, call.outputs, report.arrays)
        except Exception:  # another jaxpr layout: no constraint checks, the rest of the report stands
            call.constraints = []
        if intermediates:
            try:
                call.intermediates, call.intermediates_dropped = intermediate_shardings(traced, compiled)
            except Exception as failure:
                call.intermediates_failure = error_line(failure)
        if collectives:
            _list_collectives(program, traced, compiled, call, started, try_fixes)
        del traced, compiled
    _check_dims(report)
    return report, error


def _list_collectives(
    jitted: Wrapped,
    traced: Traced,
    compiled: Compiled,
    call: CallShardings,
    started: SourceLine | None,
    try_fixes: bool,
) -> None:
    """``call.collectives`` from the compiled program, and the fixes tried for them (compiled, not run)."""
    try:
        call.collectives = list_collectives(compiled, call, started=started, traced=traced)
    except Exception as failure:  # a program text this reader does not know: say so, the rest stands
        call.collectives_failure = f"reading the compiled program failed ({error_line(failure)})"
        return
    for collective in call.collectives:
        collective.chosen_around = chosen_around(collective, call.intermediates)
    if try_fixes and call.collectives:
        call.collective_fixes = try_collective_fixes(jitted, traced, compiled, call, call.collectives)


def _check_dims(report: ShardingReport) -> None:
    if report.dims is None:
        return
    if len(report.dims) != 2 or report.dims[0] == report.dims[1]:
        raise ProbeArgumentError("dims", f"must be two different dimensions, such as 0,2; got {report.dims}")
    ranks = [len(a.shape) for a in report.arrays]
    if ranks and not any(max(report.dims) < r for r in ranks):
        raise ProbeArgumentError(
            "dims",
            f"{report.dims[0]},{report.dims[1]} does not fit arrays of rank {', '.join(map(str, sorted(set(ranks))))}",
        )
