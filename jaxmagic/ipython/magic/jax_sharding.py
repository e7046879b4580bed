"""``%jax_sharding``: show which device holds which block of an array: typeof, mesh, PartitionSpec, a drawing."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.call_expression import EvaluatedCall
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, expression_checked, probes
from jaxmagic.ipython.option_types import dimension_pair, output_option
from jaxmagic.report import Report

if TYPE_CHECKING:
    from jaxmagic.probes._sharding.report import ArrayLayout


@magic_arguments()
@argument(
    "expression",
    nargs="*",
    help="An array or pytree of arrays, e.g. x or params['w']; or a call "
    "f(x) of a jitted function, which is run and shown with its compiled shardings.",
)
@argument(
    "--dims",
    type=dimension_pair,
    metavar="I,J",
    help="For arrays of rank > 2: the two dimensions to draw; "
    "the others' blocks become facets. Default: the split dimensions.",
)
@argument(
    "--intermediates",
    action="store_true",
    help="For a call: also the sharding the compiler chose for "
    "every value inside it (jax.debug.inspect_array_sharding in an instrumented copy, compiled not run).",
)
@argument(
    "--collectives",
    action="store_true",
    help="For a call: list every collective XLA inserted (all-gather, all-reduce, reduce-scatter, "
    "all-to-all, collective-permute) with the line and named_scope it came from, the mesh axes, the bytes "
    "per device and the sharding that made it necessary; input layouts that remove one are tried by "
    "compiling again (never run).",
)
@argument(
    "--no-check",
    action="store_true",
    help="Do not compare the copies of replicated blocks (then no array data is read at all).",
)
@argument(
    "--explore",
    action="store_true",
    help="Also show an explorer (ipywidgets) after the report: choose the two dimensions drawn, "
    "slice the others, click a device to highlight its blocks and replicas, switch between a "
    "call's inputs, outputs and (--intermediates) values inside it. A saved notebook shows a line "
    "saying to run the cell instead.",
)
@output_option
def jax_sharding(runner: MagicRunner, line: str) -> None:
    """Show which device holds which block of an array: typeof, mesh, PartitionSpec, a drawing.

    Works for 0-D to N-D arrays (pick the drawn dimensions with --dims),
    any number of devices, and arrays spread over several processes
    (blocks of other processes are drawn hatched). Copies of replicated
    blocks are compared bit for bit. For a call of a jitted function, the
    call is run and its compiled input and output shardings are listed;
    --intermediates adds the shardings chosen for values inside it;
    --collectives lists the collectives XLA inserted, by source line.
    --explore adds an explorer after the report (see the option).
    """
    __tracebackhide__ = True
    runner.run_call_magic(
        jax_sharding,
        line,
        needs="an array expression or a call, e.g. %jax_sharding x",
        evaluate=lambda text, args: _call_or_value(runner, text, args),
        run=_run,
        explorer=lambda report, inputs, args: _explorer(runner, report, inputs, args),
    )


# the call (when the arrays are its results), else the array's value; and the expression's text
ShardingInputs = tuple[EvaluatedCall | None, Any, str]


def _call_or_value(runner: MagicRunner, text: str, args: argparse.Namespace) -> ShardingInputs:
    """A call of a jitted function (or any call, asked for its intermediates or collectives), else a value."""
    from jaxmagic.ipython.expression import callee_is_jitted, parse_expression  # deferred: reads JAX's jit type

    with expression_checked():
        parse_expression(text)
        as_call = args.intermediates or args.collectives or callee_is_jitted(text, runner.user_ns)
    return (runner.evaluate(text), None, text) if as_call else (None, runner.evaluate_value(text), text)


def _run(inputs: ShardingInputs, args: argparse.Namespace) -> tuple[Report, BaseException | None]:
    call, value, text = inputs
    if call is None:
        report = probes.sharding(value, expression=text.strip(), dims=args.dims, check_replicas=not args.no_check)
        return report, None
    return probes.run_sharding_call(
        call.function,
        tuple(call.args),
        call.kwargs,
        call_text=call.text,
        intermediates=args.intermediates,
        collectives=args.collectives,
        dims=args.dims,
        check_replicas=not args.no_check,
    )


def _explorer(
    runner: MagicRunner, report: Report, inputs: ShardingInputs, args: argparse.Namespace
) -> Callable[[], None] | None:
    """--explore: the call's input layouts are read now, before its inputs are dropped; the explorer is shown
    after the report."""
    if not args.explore:
        return None
    # deferred: ipywidgets is imported only when an explorer is asked for
    from jaxmagic.ipython.explorers.sharding import input_layouts, intermediate_layouts, show_sharding_explorer
    from jaxmagic.probes import ShardingReport  # deferred: the probes, loaded already by the magic's run

    assert isinstance(report, ShardingReport)
    call = inputs[0]
    given: list[ArrayLayout] = []
    inside: list[ArrayLayout] = []
    if call is not None:
        try:
            given = input_layouts(tuple(call.args), call.kwargs)
            inside = intermediate_layouts(report, tuple(call.args), call.kwargs)
        except Exception:  # the inputs' layouts are extra: the outputs are still explored
            pass
    return lambda: show_sharding_explorer(report, given, inside, in_kernel=runner.in_kernel)
