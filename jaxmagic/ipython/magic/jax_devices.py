"""``%jax_devices``: give this kernel N fake CPU devices (before the JAX backend starts), or list the devices."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@argument(
    "count", nargs="?", help="How many fake CPU devices (a number or an expression). Without it: list the devices."
)
@output_option
def jax_devices(runner: MagicRunner, line: str) -> None:
    """Give this kernel N fake CPU devices (before the JAX backend starts), or list the devices.

    Put it right after %load_ext jaxmagic: JAX fixes the device count when
    its backend starts (the first operation that needs a device). After
    that the report says plainly that the kernel must be restarted.
    Without N, lists the devices (starting the backend).
    """
    args = runner.parse(jax_devices, line)
    count = None
    if args.count is not None:
        count = runner.evaluate_value(args.count)
    with runner.options_checked(jax_devices):
        report = probes.devices(count)
    runner.publish(report, args)
