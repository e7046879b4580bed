"""``%%jax_profile``: run the cell under jax.profiler.trace; say where the time went, by your source line and named_scope."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument
from IPython.utils.capture import capture_output

from jaxmagic.ipython.cell_runner import run_cell_body, shown_if_unrunnable
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import bounded_int, output_option


@magic_arguments()
@argument(
    "--warmup",
    type=bounded_int(0),
    default=0,
    metavar="N",
    help="Run the cell N times first, unprofiled (its output hidden), so compilation and first "
    "calls are left out; then profile one more run.",
)
@argument(
    "--save",
    metavar="DIR",
    help="Keep the trace in DIR (Perfetto JSON and xprof's .xplane.pb); the report says how to open it.",
)
@output_option
def jax_profile(runner: MagicRunner, line: str, cell: str) -> None:
    """Run the cell under jax.profiler.trace; say where the time went, by your source line and named_scope.

    Device time of every kernel, summed per line of your code and per
    jax.named_scope (read from each program's optimized HLO), the top
    kernels with their HLO instruction, and the cell's wall time split
    into compilation, host dispatch, device execution and waiting - so
    it shows at once whether the cell is compile-, host- or compute-bound,
    and what to look at next. With each program's memory_analysis().
    """
    __tracebackhide__ = True
    from jaxmagic.probes._profile import PROFILER_BUSY, trace_running  # deferred: imports JAX (see magic_runner.probes)

    args = runner.parse(jax_profile, line)
    with runner.options_checked(jax_profile):
        probe = probes.profile(save=args.save, warmup_runs=args.warmup)
    if trace_running():
        raise UsageError(f"%%jax_profile {PROFILER_BUSY}.")
    if shown_if_unrunnable(runner.ipython, cell):
        return None
    for run in range(1, args.warmup + 1):
        with capture_output():
            outcome = run_cell_body(runner.ipython, cell)
        if outcome.exception is not None:
            runner.publish(probes.ProfileReport.warmup_failed(run, args.warmup, outcome.exception), args)
            outcome.reraise()
    runner.run_cell_in_probe(jax_profile, probe, args, cell)
    return None
