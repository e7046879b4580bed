"""``%%jax_nans``: run the cell with NaN checking on; say which primitive made the NaN, and where."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@argument("--infs", action="store_true", help="Also stop at the first inf (jax_debug_infs).")
@argument(
    "--inside",
    action="store_true",
    help="Also evaluate the first call of each jitted function op by op and report the first NaN/inf "
    "made inside it, even one a later operation masked (rsqrt(inf)=0, jnp.where, jnp.nan_to_num). "
    "Every call then takes JAX's slower Python dispatch path.",
)
@output_option
def jax_nans(runner: MagicRunner, line: str, cell: str) -> None:
    """Run the cell with NaN checking on; say which primitive made the NaN, and where.

    Checking is scoped to this cell (jax.debug_nans as a context manager),
    so it also catches NaNs that the global jax_debug_nans switch misses
    after a vmap has been traced. On a NaN the cell still fails with JAX's
    FloatingPointError; above it, the report names the operation that
    produced the value - inside scan/while/cond bodies, nested jit and
    library functions, with the loop iteration and the input values there -
    the forward or backward pass, your line, and the non-finite leaves (key
    paths such as [0]['b']) of the failing call's arguments or result.

    Under jit only the outputs of the compiled program are checked; a clean
    report says so. With --inside, an inf or NaN that a later operation
    masked (a float16 variance through rsqrt, jnp.where(jnp.isfinite(x), x, 0),
    jnp.nan_to_num) is found too, with your lines of both operations.
    """
    __tracebackhide__ = True
    runner.run_cell_magic(
        jax_nans,
        line,
        cell,
        lambda args: probes.nans(infs=args.infs, namespace=runner.user_ns, inside=args.inside),
    )
