"""``%%jax_print``: run the cell; show what jax.debug.print / log / callback produced, grouped by call site."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@argument(
    "--echo",
    action="store_true",
    help="Also print each line as it arrives (by default the lines are shown in the report only).",
)
@output_option
def jax_print(runner: MagicRunner, line: str, cell: str) -> None:
    """Run the cell; show what jax.debug.print / log / callback produced, grouped by call site.

    Every line is kept with the print that made it (format string, your
    line, the transformations around it: vmap prints one line per sample,
    a cond under vmap prints both branches, grad prints forward values)
    and with the call of a jitted function it arrived in. The magic waits
    for each call's prints (jax.effects_barrier), so no line spills into
    a later cell, and warns when unordered prints of one call came out of
    program order (the fix: jax.debug.print(ordered=True)). Your own
    print() output appears as usual.
    """
    __tracebackhide__ = True
    runner.run_cell_magic(jax_print, line, cell, lambda args: probes.prints(echo=args.echo))
