"""``%jax_debug`` / ``%%jax_debug``: stop at your failing line of jitted code, with its values: %jax_debug after an error, %%jax_debug for breakpoints."""

from __future__ import annotations

import argparse

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxmagic.ipython import debugger
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option, variable_name


@magic_arguments()
@argument("error", nargs="?", help="%%jax_debug only: the exception to debug (default: the last one).")
@argument(
    "--no-stop",
    action="store_true",
    help="Do not open the debugger (or read commands at a breakpoint): only the report. "
    "Where no input can be read (nbclient) this is what happens anyway.",
)
@argument(
    "--eager",
    action="store_true",
    help="%%jax_debug only: run loops and vmaps op by op in full, not compiled up to the failing step.",
)
@argument(
    "--ns",
    type=variable_name,
    metavar="NAME",
    help="%%jax_debug only: bind the stopped frame's values (NumPy copies) as a namespace under NAME.",
)
@output_option
def jax_debug(runner: MagicRunner, line: str, cell: str | None = None) -> None:
    """Stop at your failing line of jitted code, with its values: %jax_debug after an error, %%jax_debug for breakpoints.

    %jax_debug after a cell failed in JAX code (a NaN under jax.debug_nans or
    %%jax_nans, a checkify error, an error raised in a jax.debug.callback, an
    index or shape error) re-runs only the failing call, op by op, so it stops
    at your line with concrete values. A lax.scan / fori_loop runs compiled up
    to the first iteration whose carry or outputs are not finite and only that
    iteration runs op by op; under jax.vmap only the failing batch element
    runs, unbatched. Then IPython's debugger opens in your frame (u and d move
    through your frames only; p, pp, l, c, q and Python statements work),
    after the report naming the line, the iteration and the batch element.
    Without input (nbclient, --no-stop) the report shows every value of that
    frame (shape, dtype, min/max/mean, NaN/inf counts, a few values) and your
    frames above it. The re-run runs your Python again, and says so.

    %%jax_debug runs the cell with a jax.debug.breakpoint() that works in a
    notebook: at each hit it reads commands (p, pp, l, u, d, w, c, q and
    Python statements) from the notebook; q ends the cell cleanly. Without
    input each hit is recorded (frame and values) instead.

    -o NAME binds the report; --ns NAME binds the stopped frame's values.
    """
    __tracebackhide__ = True
    args = runner.parse(jax_debug, line)
    interactive = not args.no_stop and debugger.stdin_available(runner.shell)
    if cell is not None:
        _at_breakpoints(runner, args, cell, interactive)
    else:
        _after_the_error(runner, args, interactive)


def _at_breakpoints(runner: MagicRunner, args: argparse.Namespace, cell: str, interactive: bool) -> None:
    """``%%jax_debug``: the cell with a ``jax.debug.breakpoint()`` that reads the notebook's input."""
    __tracebackhide__ = True
    if args.error or args.ns or args.eager:
        raise UsageError("%%jax_debug takes only --no-stop and -o; the error, --ns and --eager are %jax_debug's.")
    probe = probes.breakpoints(
        ask=debugger.reader() if interactive else None, namespace=runner.user_ns, say=debugger.writer()
    )
    try:
        runner.run_cell_in_probe(jax_debug, probe, args, cell)
    except Exception as error:
        if not probes.ended_by_quit(error):
            raise


def _after_the_error(runner: MagicRunner, args: argparse.Namespace, interactive: bool) -> None:
    """``%jax_debug``: the failing call re-run to the user's line, the report, then the debugger there."""
    __tracebackhide__ = True
    failure = runner.given_or_last_error(
        args.error or "",
        "jax_debug",
        "an exception",
        "There is no failed cell to debug; run the failing cell first, or pass an exception.",
    )
    session = probes.debug_after(failure, eager=args.eager)
    del failure
    try:
        if args.ns:
            runner.user_ns[args.ns] = session.namespace()
        stops = interactive and session.traceback is not None
        session.report.interactive = stops
        runner.publish(session.report, args)
        if stops:
            assert session.traceback is not None
            position = session.report.position
            debugger.post_mortem(session.traceback, "jaxmagic: in your frame" + (f", {position}" if position else ""))
    finally:
        session.release()
