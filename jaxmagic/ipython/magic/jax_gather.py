"""``%jax_gather``: merge one magic's report from every engine of an ipyparallel view: a row per process, the differences."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option, positive_float


@magic_arguments()
@argument(
    "name",
    nargs="?",
    default="",
    help="The name each engine bound its report to (-o NAME of the magic run under %%px); optional with --values.",
)
@argument(
    "--values",
    metavar="EXPR",
    default="",
    help="A pytree that should be the same on every engine (replicated parameters, a step counter), "
    "evaluated once on each: the leaves that differ, where, and by how much.",
)
@argument(
    "--view",
    metavar="VIEW",
    help="The ipyparallel view (a name in this namespace); default: the one DirectView here.",
)
@argument(
    "--timeout",
    type=positive_float,
    default=30.0,
    metavar="S",
    help="Seconds to wait for all engines (default 30); engines that did not answer are named, with "
    "where each one is (its Python stack, asked for with a signal: at most 1 s more).",
)
@output_option
def jax_gather(runner: MagicRunner, line: str) -> None:
    """Merge one magic's report from every engine of an ipyparallel view: a row per process, the differences.

    Run a magic on every engine with `%%px`, binding its report (`%%jax_doctor -o rep`),
    then `%jax_gather rep`. The merged report names what differs between processes: a
    NaN on some only (with each one's line and call), a function compiled differently
    on some (the processes run different programs: collectives can hang), memory
    growing on some, the same random key on every process, and engines that failed or
    did not answer within --timeout (where a hang is): a busy engine's Python stack says
    which process runs Python code (a loop, at its line) and which wait in a JAX call.
    In a multi-process job each process digests the programs it compiles: a process that
    compiled another program is named with the first operation that differs and its line.

    `%jax_gather --values params` (with or without NAME) compares a pytree that should
    be the same everywhere: each engine digests every leaf, then only the leaves that
    differ are fetched; each is named (`params['w']`) with its processes and largest
    difference.
    """
    args = runner.parse(jax_gather, line)
    if not args.name and not args.values:
        raise UsageError("%jax_gather: name a report (-o NAME of the magic run on every engine) or --values EXPR.")
    if args.name and not args.name.isidentifier():
        raise UsageError(
            f"%jax_gather: {args.name!r} is not a name: give the NAME the magic bound with -o NAME on every engine."
        )
    if args.values:
        try:
            compile(args.values, "<--values>", "eval")
        except SyntaxError as error:
            raise UsageError(f"%jax_gather --values: {args.values!r} is not an expression ({error.msg}).") from None
    view = _ipyparallel_view(runner, args.view)
    report = probes.gather_from_engines(view, args.name, args.timeout, values=args.values)
    runner.publish(report, args)


def _ipyparallel_view(
    runner: MagicRunner, name: str | None
) -> Any:  # an ipyparallel view (an optional, untyped library)
    """The view named ``name``, or the one DirectView of the namespace; a UsageError otherwise."""
    ipp = sys.modules.get("ipyparallel")
    if name is not None:
        view = runner.user_ns.get(name)
        if view is None or not hasattr(view, "apply_async") or not hasattr(view, "client"):
            raise UsageError(f"--view {name!r} is not an ipyparallel view in this namespace.")
        return view
    direct = getattr(ipp, "DirectView", None) if ipp is not None else None
    views = [v for k, v in runner.user_ns.items() if not k.startswith("_") and direct and isinstance(v, direct)]
    views = list({id(v): v for v in views}.values())
    if len(views) != 1:
        found = "no ipyparallel DirectView" if not views else f"{len(views)} DirectViews"
        raise UsageError(
            f"%jax_gather: there is {found} in this namespace; start engines "
            "(`rc = ipp.Cluster(n=2).start_and_connect_sync(); dv = rc[:]`) or name one with --view."
        )
    return views[0]
