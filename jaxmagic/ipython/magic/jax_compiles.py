"""``%%jax_compiles``: count every compilation in the cell per function, and say why each function compiled again."""

from __future__ import annotations

import argparse
import re
import textwrap
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import bounded_int, output_option
from jaxmagic.ipython.user_traceback import raise_users_error

if TYPE_CHECKING:
    from jaxmagic.probes._compiles.probe import compiles as CompilesProbe


@magic_arguments(filled=lambda doc: with_causes(doc))
@argument(
    "--budget",
    type=bounded_int(0),
    metavar="N",
    help="After the report, fail the cell if a function of yours "
    "compiled more than N times (only the one named by --fn, if given).",
)
@argument("--fn", metavar="NAME", help="The function --budget applies to, e.g. train_step.")
@argument(
    "--all",
    action="store_true",
    dest="show_all",
    help="Also list the small compilations of eager operations (jnp calls outside jit).",
)
@output_option
def jax_compiles(runner: MagicRunner, line: str, cell: str) -> None:
    """Count every compilation in the cell per function, and say why each function compiled again.

    For each compilation: the argument types, trace / lower / XLA compile
    times, your line that caused it, and the cause in plain words. Eager
    operations' small compilations are counted apart (listed with --all).
    --budget N makes the cell fail after the report if a function compiled
    more than N times. Also: where the slowest compilation's size comes
    from (equations per line, a Python loop unrolled, constants baked in),
    donated buffers JAX could not reuse (which argument, why) and
    persistent compilation cache misses (why).

    {causes}
    """
    __tracebackhide__ = True

    def build_probe(args: argparse.Namespace) -> CompilesProbe:
        if args.fn is not None and args.budget is None:
            raise UsageError("--fn names the function that --budget applies to; give --budget N as well.")
        return probes.compiles(budget=args.budget, fn=args.fn, show_all=args.show_all, raise_over_budget=False)

    probe = runner.run_cell_magic(jax_compiles, line, cell, build_probe)
    try:
        probe.report.raise_if_over_budget()
    except probes.CompileBudgetExceeded as over:  # raised on purpose, for the cell to fail: from no frame of ours
        raise_users_error(over)


def with_causes(doc: str) -> str:
    """The help with ``{causes}`` written in: every kind of cause ``_compiles/cause.py`` declares, by its title, in
    its order (the order equally frequent causes are named in)."""
    from jaxmagic.probes._compiles.cause import CAUSE_KINDS  # deferred: the probes load when the help is first built

    # a static argument's kinds: JAX does not explain them, jaxmagic compares the static values
    titles = [kind.title + (UNEXPLAINED if kind.jax_unexplained and kind.static_values else "") for kind in CAUSE_KINDS]
    paragraph = textwrap.fill(f"The causes, as the report names them: {'; '.join(titles)}.", width=72)
    placeholder = re.search(r"^([ \t]*)\{causes\}", doc, re.M)
    indent = placeholder.group(1) if placeholder else ""  # Python 3.13 strips a docstring's indentation itself
    return doc.replace("{causes}", paragraph.replace("\n", "\n" + indent))


UNEXPLAINED = ' (JAX itself only says "explanation unavailable" there)'
