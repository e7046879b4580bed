"""``%jax_hlo``: find your named_scope in the jaxpr, StableHLO and optimized HLO of a call; memory before running."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxmagic.ipython.call_expression import EvaluatedCall, split_scope_and_call
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option, sweep
from jaxmagic.report import Report

if TYPE_CHECKING:
    from jaxmagic.probes._hlo import Sweep


@magic_arguments()
@argument(
    "words",
    nargs="*",
    help="[SCOPE] EXPR: an optional jax.named_scope name or path (encoder, "
    "encoder/attn), then the call, e.g. model(params, x); arguments may be jax.ShapeDtypeStruct.",
)
@argument(
    "--stage",
    default="all",
    metavar="STAGE",
    help="jaxpr, stablehlo, hlo or all (comma-separated; default all). Memory and cost need hlo.",
)
@argument(
    "--sweep",
    type=sweep,
    metavar="NAME=V1,V2,...",
    help="Compile once per value of NAME, a name the call "
    "uses (B in jax.ShapeDtypeStruct((B, 4096), jnp.float32)), and tabulate memory_analysis().",
)
@argument(
    "--explore",
    action="store_true",
    help="Also show an explorer (ipywidgets) after the report: the named_scope tree; a scope chosen "
    "shows its jaxpr, StableHLO and optimized-HLO lines side by side with your line of each. A saved "
    "notebook shows a line saying to run the cell instead.",
)
@output_option
def jax_hlo(runner: MagicRunner, line: str) -> None:
    """Find your named_scope in the jaxpr, StableHLO and optimized HLO of a call; memory before running.

    %jax_hlo [SCOPE] EXPR traces, lowers and compiles EXPR (e.g.
    model(params, x)) ahead of time - it never runs it. With SCOPE, the
    operations of that jax.named_scope in each stage side by side, with
    your lines, the kernels XLA runs them in, and operations that fusion
    files under another scope's name. Without SCOPE, the tree of named
    scopes with counts per stage. Always: globals or closure values baked
    into the program as literals, captured constant arrays, and the
    compiled program's memory_analysis() and cost_analysis(). --sweep
    B=64,256,1024 compiles once per value of B and tabulates the memory.
    --explore adds an explorer of every scope after the report.
    """
    __tracebackhide__ = True
    runner.run_call_magic(
        jax_hlo,
        line,
        needs=NEEDS,
        evaluate=lambda text, args: _scoped_call(runner, text, args),
        run=lambda inputs, args: _run(runner, inputs, args),
        explorer=lambda report, inputs, args: _explorer(runner, report, args),
    )


NEEDS = "a call, e.g. %jax_hlo model(params, x) or %jax_hlo encoder model(params, x)"
# the call, the sweep of one of its names (--sweep), the scope asked about and the stages
HloInputs = tuple[EvaluatedCall, "Sweep | None", str | None, list[str]]


def _scoped_call(runner: MagicRunner, text: str, args: argparse.Namespace) -> HloInputs:
    from jaxmagic.probes._hlo import Sweep, parse_stages  # deferred: imports JAX (see magic_runner.probes)

    try:
        scope, call_text = split_scope_and_call(text)
    except ValueError as error:
        raise UsageError(f"{error}.") from None
    with runner.options_checked(jax_hlo):
        stages = parse_stages(args.stage)
    if not call_text:
        raise UsageError(f"%jax_hlo needs {NEEDS}")
    sweep_name, sweep_values = args.sweep or ("", [])
    namespace = runner.user_ns

    def evaluated(value: object = None) -> EvaluatedCall:
        return runner.evaluate(call_text, namespace if not sweep_name else {**namespace, sweep_name: value})

    def build(value: object) -> tuple[Any, list[Any], dict[str, Any]]:
        built = evaluated(value)
        return built.function, built.args, built.kwargs

    call = evaluated(sweep_values[0] if sweep_values else None)
    return call, Sweep(sweep_name, sweep_values, build) if sweep_name else None, scope, stages


def _run(runner: MagicRunner, inputs: HloInputs, args: argparse.Namespace) -> tuple[Report, BaseException | None]:
    call, sweep, scope, stages = inputs
    return probes.run_hlo_call(
        call.function,
        call.args,
        call.kwargs,
        scope=scope,
        stage=stages,
        call_text=call.text,
        namespace=runner.user_ns,
        sweep=sweep,
        every_scope=args.explore,
    )


def _explorer(runner: MagicRunner, report: Report, args: argparse.Namespace) -> Callable[[], None] | None:
    if not args.explore:
        return None
    # deferred: ipywidgets is imported only when an explorer is asked for
    from jaxmagic.ipython.explorers.hlo import show_hlo_explorer
    from jaxmagic.probes import HloReport  # deferred: the probes, loaded already by the magic's run

    assert isinstance(report, HloReport)
    return lambda: show_hlo_explorer(report, in_kernel=runner.in_kernel)
