"""``%jax_traceback``: show (or switch) JAX's traceback filtering mode, and your frames of the last exception."""

from __future__ import annotations

import sys

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@argument(
    "mode",
    nargs="?",
    help="auto | tracebackhide | remove_frames | quiet_remove_frames | off: "
    "switch jax_traceback_filtering for the next cells.",
)
@output_option
def jax_traceback(runner: MagicRunner, line: str) -> None:
    """Show (or switch) JAX's traceback filtering mode, and your frames of the last exception.

    The five modes of jax_traceback_filtering decide how much of JAX's own
    code a traceback shows; the report explains each and what `auto` means
    here. With MODE, the mode is switched for the following cells (it is
    read when an exception is raised). The last exception's traceback is
    summarised: your frames only, with their lines, and how many frames
    were JAX's.
    """
    args = runner.parse(jax_traceback, line)
    previous = ""
    if args.mode is not None:
        with runner.options_checked(jax_traceback):
            previous = probes.set_traceback_filtering(args.mode)
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    report = probes.traceback_view(error, previous_mode=previous)
    del error
    runner.publish(report, args)
