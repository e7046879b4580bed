"""``%jax_check``: run one call under jit(checkify.checkify(f, errors=...)) and list every error found."""

from __future__ import annotations

import argparse

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.call_expression import EvaluatedCall
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option, vmap_axes


@magic_arguments()
@argument("call", nargs="*", help="The call to check, e.g. risky(x, i).")
@argument(
    "--errors",
    default="all",
    metavar="SETS",
    help="Comma-separated checks: user, nan, div, index, float (nan+div), all. Default: all.",
)
@argument(
    "--vmap",
    type=vmap_axes,
    metavar="AXES",
    help="Check each sample: vmap the checked function with these "
    "in_axes (0, or 0,None, ...); errors then name the failing samples' indices.",
)
@output_option
def jax_check(runner: MagicRunner, line: str) -> None:
    """Run one call under jit(checkify.checkify(f, errors=...)) and list every error found.

    Finds your checkify.check failures, NaNs (with the primitive),
    divisions by zero and out-of-bounds indices (which JAX otherwise clamps
    silently). For a vmapped function, the failing samples' indices.
    """
    __tracebackhide__ = True
    from jaxmagic.probes._check import error_set  # deferred: a probe imports JAX, which %load_ext must not

    def checked_call(text: str, args: argparse.Namespace) -> EvaluatedCall:
        with runner.options_checked(jax_check):
            error_set(args.errors)  # a wrong --errors is said before the call is evaluated
        return runner.evaluate(text)

    runner.run_call_magic(
        jax_check,
        line,
        needs="a call to check, e.g. %jax_check risky(x, i)",
        evaluate=checked_call,
        run=lambda call, args: probes.run_check_call(
            call.function, call.args, call.kwargs, errors=args.errors, call_text=call.text, vmap_axes=args.vmap
        ),
        flag_of={"vmap_axes": "--vmap"},
    )
