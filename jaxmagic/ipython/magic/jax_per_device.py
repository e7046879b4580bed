"""``%%jax_per_device``: run the cell; show what each device printed inside shard_map, grouped by device."""

from __future__ import annotations

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@output_option
def jax_per_device(runner: MagicRunner, line: str, cell: str) -> None:
    """Run the cell; show what each device printed inside shard_map, grouped by device.

    jax.debug.print inside a shard_map prints once per device, in no set
    order and without saying which device printed. For this cell every
    such print is tagged with the device's mesh position (lax.axis_index
    of each mesh axis) and the report shows the lines per device, on a
    drawing of the mesh. The printed text itself is unchanged.
    """
    __tracebackhide__ = True
    runner.run_cell_magic(jax_per_device, line, cell, lambda args: probes.per_device())
