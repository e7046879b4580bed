"""``%jax_watch``: watch every later cell for NaN, recompilation, transfers, growing memory and reused keys."""

from __future__ import annotations

import argparse

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxmagic.ipython import watch_hook
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import bounded_int, comma_list, variable_name
from jaxmagic.report.watch_areas import UnknownArea, areas_named


@magic_arguments()
@argument("what", nargs="?", default="on", choices=("on", "off", "status"), help="on (default) | off | status")
@argument("--only", type=comma_list, default=None, metavar="AREAS", help="Watch only these areas, e.g. NaN,memory.")
@argument("--budget", type=bounded_int(0), default=2, help="Compilations per function before it is told (2).")
@argument(
    "--panel",
    action="store_true",
    help="Also show one panel for the session (an ipywidgets explorer), updated as cells run: every "
    "finding so far with its cell, area, line, count and the magic to run next. A saved notebook "
    "shows a line saying to run the cell instead.",
)
@argument(
    "-o",
    "--output",
    type=variable_name,
    metavar="NAME",
    help="Bind the watch's log (it keeps growing while the watch is on).",
)
def jax_watch(runner: MagicRunner, line: str) -> None:
    """Watch every later cell for NaN, recompilation, transfers, growing memory and reused keys.

    `%jax_watch` (= on) watches each later cell on JAX's fast path until
    `%jax_watch off`; a watched cell runs exactly as unwatched, and a new
    problem is shown once, under the cell that caused it. `status` shows
    what is watched and found so far; -o NAME binds the log. --panel (with
    on or status) shows a panel of every finding so far, updated after
    each watched cell.
    """
    args = runner.parse(jax_watch, line)
    if args.panel and args.what == "off":
        raise UsageError("--panel shows the running watch's findings; `%jax_watch off` stops the watch.")
    if args.what == "on":
        _switch_watch_on(runner, args)
        # -o and --panel hold the watch's log: they start the watch now (its probes import JAX)
        watch = watch_hook.current(runner.ipython) if args.output or args.panel else None
    else:  # status and off show the log: a watch turned on before JAX is imported starts now
        watch = watch_hook.current(runner.ipython)
        if args.what == "off":
            watch = watch_hook.uninstall(runner.ipython) or watch
            if watch is None:
                print("jaxmagic watch: off (unchanged)")
    if args.what != "on" and watch is not None:
        runner.publish(watch.log, args)
    elif args.output:
        runner.user_ns[args.output] = watch.log if watch is not None else None
    if args.what == "status" and watch is None:
        print("jaxmagic watch: off")
    if args.panel and watch is not None:
        # deferred: ipywidgets is imported only when an explorer is asked for
        from jaxmagic.ipython.explorers.watch_panel import show_watch_panel

        watch_hook.set_panel(runner.ipython, show_watch_panel(watch.log, in_kernel=runner.in_kernel))


def _switch_watch_on(runner: MagicRunner, args: argparse.Namespace) -> None:
    """``%jax_watch on``: install the watch's hook, checking the options without importing the probes
    (they import JAX, and the watch starts at the first cell that begins with JAX imported)."""
    try:
        areas = areas_named(args.only)
    except UnknownArea as error:
        raise UsageError(f"--only {error}.") from None
    hook = watch_hook.running(runner.ipython)
    if hook is None:
        watch_hook.install(
            runner.ipython, lambda: probes.Watch(only=areas, budget=args.budget), areas=areas, budget=args.budget
        )
        print(f"jaxmagic watch: on ({', '.join(areas)}; budget {args.budget})")
        return
    # already on: its session and findings are kept, never replaced silently
    running = f"{', '.join(hook.areas)}; budget {hook.budget}"
    cells, findings = hook.so_far()
    if (hook.areas, hook.budget) != (areas, args.budget):
        raise UsageError(
            f"%jax_watch is already on ({running}; {cells} cell(s) watched, {findings} finding(s)): "
            "`%jax_watch off` ends it and shows its findings, then `%jax_watch on` with the new options "
            "starts a new session."
        )
    print(
        f"jaxmagic watch: already on ({running}), unchanged: {cells} cell(s) watched, "
        f"{findings} finding(s) kept (`%jax_watch status` shows them)"
    )
