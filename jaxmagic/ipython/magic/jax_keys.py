"""``%%jax_keys``: run the cell with jax.debug_key_reuse(True); explain a reused key; count the keys each jitted function got."""

from __future__ import annotations

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@output_option
def jax_keys(runner: MagicRunner, line: str, cell: str) -> None:
    """Run the cell with jax.debug_key_reuse(True); explain a reused key; count the keys each jitted function got.

    A typed key (jax.random.key) consumed twice stops the cell with JAX's
    KeyReuseError; above it the report names what got the key (e.g.
    random_split), the argument, your line of the second use and of the
    first, and the fix: key, sub = jax.random.split(key) every step.
    Also counts the distinct keys that reached each of your jitted
    functions (the same key every step shows even when nothing raises)
    and lists jax.random calls given a legacy uint32 PRNGKey, which the
    checker cannot follow.
    """
    __tracebackhide__ = True
    runner.run_cell_magic(jax_keys, line, cell, lambda args: probes.keys())
