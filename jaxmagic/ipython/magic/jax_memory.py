"""``%jax_memory`` / ``%%jax_memory``: what fills a jitted program's peak memory, by your line, and ways down tried by compiling."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxmagic.ipython.call_expression import EvaluatedCall
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option
from jaxmagic.report import Report


@magic_arguments()
@argument(
    "call",
    nargs="*",
    help="CALL (the line form): the jitted call to measure, e.g. step(params, batch); arguments may be "
    "jax.ShapeDtypeStruct. The cell form (%%%%jax_memory) takes none: it measures the cell's calls.",
)
@argument(
    "--no-trials",
    dest="trials",
    action="store_false",
    help="Measure only: do not compile the ways down (donation, jax.checkpoint, the batch gradient, a "
    "smaller input; each is one more compilation, some trace your function again).",
)
@output_option
def jax_memory(runner: MagicRunner, line: str, cell: str | None = None) -> None:
    """What fills a jitted program's peak memory, by your line, and ways down tried by compiling.

    %%jax_memory runs the cell as it is and measures every jitted program
    it ran; %jax_memory CALL measures one call without running it (its
    arguments may be jax.ShapeDtypeStruct: nothing is allocated). Each
    program is compiled once more with XLA's dumps on: the peak (from XLA's
    live ranges: the temporaries live when most are, with every argument
    and output, which XLA holds for the whole run), the largest buffers
    with their shape, the operation and your line that made them, and
    whether each is an argument, an output, a temporary or an activation
    saved for the backward pass; what the device can give
    (device.memory_stats(), or the host's available memory on CPU); the
    arrays already holding memory, with their holders. Ways down are
    compiled, never run, and shown with their new peak: donate_argnums,
    jax.checkpoint around the function whose activations fill the peak,
    the gradient of the mean instead of per-example gradients, and the
    largest input that fits. A cell that runs out of memory is explained
    (the explainer does this for any cell), and its error raised after.
    """
    __tracebackhide__ = True
    if cell is not None:

        def build(args: argparse.Namespace) -> AbstractContextManager[Report]:
            if args.call:
                raise UsageError("%%jax_memory measures the cell's calls: give it no call (%jax_memory CALL does).")
            return probes.memory(namespace=runner.user_ns, try_ways=args.trials)

        runner.run_cell_magic(jax_memory, line, cell, build)
        return None

    def run(call: EvaluatedCall, args: argparse.Namespace) -> tuple[Report, BaseException | None]:
        # the call's own exception (raised while traced) comes after the report, as %jax_hlo's does
        return probes.run_memory_call(call.function, call.args, call.kwargs, call=call.text, try_ways=args.trials)

    runner.run_call_magic(
        jax_memory,
        line,
        needs="a call, e.g. %jax_memory step(params, batch), or a cell: %%jax_memory",
        run=run,
    )
    return None
