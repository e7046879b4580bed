"""``%jax_env``: jax.print_environment_info(), ready to paste into an issue: host name hidden unless --show-host."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@argument("--show-host", action="store_true", help="Keep the host name (hidden by default).")
@output_option
def jax_env(runner: MagicRunner, line: str) -> None:
    """jax.print_environment_info(), ready to paste into an issue: host name hidden unless --show-host.

    Also lists the JAX_* / XLA_* environment variables of this process.
    Asks for the devices, so it starts the JAX backend if none is running.
    """
    args = runner.parse(jax_env, line)
    runner.publish(probes.environment(show_host=args.show_host), args)
