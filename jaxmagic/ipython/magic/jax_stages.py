"""``%jax_stages``: time one jitted call stage by stage: trace, lower, compile, first run, steady run."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import bounded_int, output_option


@magic_arguments()
@argument("call", nargs="*", help="The call to time, e.g. deep(ws, x).")
@argument(
    "-n",
    "--runs",
    type=bounded_int(1),
    default=20,
    metavar="RUNS",
    help="Steady-state runs to time after the first one (default 20).",
)
@output_option
def jax_stages(runner: MagicRunner, line: str) -> None:
    """Time one jitted call stage by stage: trace, lower, compile, first run, steady run.

    The call (f(x, y); f is jitted here if it is not) is taken apart with
    jit(f).trace(...).lower().compile(), on a fresh copy of f so the
    figures are a cold first call even if f ran before. Runs are timed
    with block_until_ready. Also shows the compiled program's
    memory_analysis() and cost_analysis(). Arguments may be
    jax.ShapeDtypeStruct; then nothing is run.
    """
    __tracebackhide__ = True
    runner.run_call_magic(
        jax_stages,
        line,
        needs="a call to time, e.g. %jax_stages step(params, x)",
        run=lambda call, args: probes.run_stages_call(
            call.function, call.args, call.kwargs, runs=args.runs, call_text=call.text
        ),
    )
