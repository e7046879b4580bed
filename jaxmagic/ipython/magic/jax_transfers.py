"""``%%jax_transfers``: run the cell under jax.transfer_guard; list each implicit host-to-device transfer with your line."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@argument(
    "--mode",
    default="log",
    choices=["log", "disallow"],
    help="log (default): run the whole cell and list every implicit transfer; disallow: make each "
    "one an error (the cell stops at the first one your code does not catch).",
)
@output_option
def jax_transfers(runner: MagicRunner, line: str, cell: str) -> None:
    """Run the cell under jax.transfer_guard; list each implicit host-to-device transfer with your line.

    NumPy arrays, Python scalars and lists given to JAX are copied to the
    device implicitly, on every call (explicit jax.device_put is allowed).
    With --mode log the cell runs through and each transfer is listed with
    the line that made it and the value's type; with --mode disallow each
    becomes JAX's error. On the CPU backend device-to-host reads
    (float(x)) are not intercepted.
    """
    __tracebackhide__ = True
    runner.run_cell_magic(jax_transfers, line, cell, lambda args: probes.transfers(mode=args.mode))
