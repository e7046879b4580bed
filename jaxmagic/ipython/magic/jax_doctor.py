"""``%%jax_doctor``: run the cell once under every probe; one dashboard with the findings in the order to fix them."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import comma_list, output_option


@magic_arguments()
@argument(
    "--skip",
    type=comma_list,
    default=[],
    metavar="PROBES",
    help="Comma-separated probes not to run: nans, compiles, leaks, keys, transfers, live.",
)
@output_option
def jax_doctor(runner: MagicRunner, line: str, cell: str) -> None:
    """Run the cell once under every probe; one dashboard with the findings in the order to fix them.

    NaN (watched, not raised: the first call that made a NaN is re-run
    alone after the cell under jax.debug_nans to name the primitive and
    line), compilations (recompiled functions and why), tracer leaks,
    random keys (reused keys recorded; the same key reaching a jitted
    function every call), implicit transfers (logged) and arrays the cell
    left piling up. Ranked: NaN first, then errors, then speed and memory,
    then silent logic bugs; each finding names the magic that looks closer.
    The cell runs once; a tracer leak still stops it.
    """
    __tracebackhide__ = True
    runner.run_cell_magic(jax_doctor, line, cell, lambda args: probes.doctor(skip=args.skip, namespace=runner.user_ns))
