"""``%jax_config``: list the JAX flags that differ from a fresh process's defaults, with both values."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@argument("pattern", nargs="?", default="", help="List the flags whose name contains PATTERN.")
@argument("--all", action="store_true", dest="all_flags", help="List every flag with its value.")
@output_option
def jax_config(runner: MagicRunner, line: str) -> None:
    """List the JAX flags that differ from a fresh process's defaults, with both values.

    A debugging switch left on (jax_debug_nans, jax_check_tracer_leaks,
    jax_log_compiles, ...) makes code slow for no visible reason; this
    shows it, and whether an environment variable set it. Defaults are read
    once from a fresh subprocess and cached. --all lists every flag;
    PATTERN lists the flags whose name contains it.
    """
    args = runner.parse(jax_config, line)
    try:
        report = probes.config_diff(all_flags=args.all_flags, pattern=args.pattern)
    except RuntimeError as error:
        raise UsageError(str(error)) from None
    runner.publish(report, args)
