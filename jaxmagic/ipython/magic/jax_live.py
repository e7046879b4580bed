"""``%jax_live`` / ``%%jax_live``: live JAX arrays grouped by shape, dtype and placement, and the names that hold them."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import bounded_int, output_option, profile_path
from jaxmagic.report import Report


@magic_arguments()
@argument(
    "--top",
    type=bounded_int(1),
    default=10,
    metavar="N",
    help="Show the N largest groups (default 10; the report keeps all).",
)
@argument(
    "--profile",
    type=profile_path,
    metavar="PATH",
    help="Also save jax.profiler.save_device_memory_profile(PATH) (pprof format; open with pprof -http=:8080 PATH).",
)
@argument(
    "--explore",
    action="store_true",
    help="Also show an explorer (ipywidgets) after the report: the groups sorted by bytes, count, shape "
    "or dtype and filtered by shape, dtype or holder; a group chosen lists its holders and the line "
    "that made them. A saved notebook shows a line saying to run the cell instead.",
)
@output_option
def jax_live(runner: MagicRunner, line: str, cell: str | None = None) -> None:
    """Live JAX arrays grouped by shape, dtype and placement, and the names that hold them.

    %jax_live lists every live array (jax.live_arrays()) in groups with
    count and bytes, and names their holders: your variables and what
    they contain a few levels deep (hist['acts'][3], trainer.history[0]),
    IPython's output cache (Out[12], _), the last error's traceback, and
    the jit cache, which keeps arrays a jitted function read from globals
    (jax.clear_caches() frees them). Device memory_stats() where the
    backend has them. %%jax_live runs the cell and reports the arrays it
    created that are still alive afterwards (its own result aside), with
    their holders. Keeps no array alive itself. --explore adds an
    explorer of the groups after the report.
    """

    __tracebackhide__ = True
    args = runner.parse(jax_live, line)
    options = dict(namespace=runner.user_ns, top=args.top, profile=args.profile)
    explorer = (lambda report: _live_explorer(runner, report)) if args.explore else None
    if cell is None:
        runner.publish(probes.live(**options), args, explorer=explorer)
        return None
    runner.run_cell_in_probe(jax_live, probes.live_diff(**options), args, cell, explorer=explorer)
    return None


def _live_explorer(runner: MagicRunner, report: Report) -> None:
    # deferred: ipywidgets is imported only when an explorer is asked for
    from jaxmagic.ipython.explorers.live import show_live_explorer
    from jaxmagic.probes import LiveReport  # deferred: the probes, loaded already by the magic's run

    assert isinstance(report, LiveReport)
    show_live_explorer(report, in_kernel=runner.in_kernel)
