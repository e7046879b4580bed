"""Is a run off the reference only because of the backend's default matrix-product precision?

A TPU multiplies float32 matrices in bfloat16 passes unless asked for more (a GPU may use TF32), so a
float32 matmul there misses a float64 reference by ~1e-2 relative, jitted and op by op alike - which
would read as "both wrong: the algorithm". Before saying that, the probe runs the off runs again under
``jax.default_matmul_precision("highest")``: if every one of them then meets the tolerance, the default
precision is the cause, observed, and the fix was tried. On a CPU the setting changes nothing, so the
check is skipped there; so it is for a program with no matrix product (read from the jit's trace, which
JAX keeps from the run: the user's Python does not run for it).
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from jaxmagic._jax.jaxpr_parts import closed_parts, sub_jaxprs
from jaxmagic._jax.types import Program
from jaxmagic.probes._bisect.report import PrecisionRetry
from jaxmagic.report.wording import error_line

# jax_default_matmul_precision values that already ask for full float32 products
FULL_FLOAT32 = ("highest", "float32")
# the primitives whose float32 precision jax_default_matmul_precision sets
PRODUCTS = ("dot_general", "conv_general_dilated", "ragged_dot", "ragged_dot_general")


def reduced_precision_platform(sample: object) -> str:
    """The platform of ``sample``'s arrays when float32 matmuls there default to less than float32 and no
    full precision was asked for; "" otherwise (a CPU computes them in full)."""
    if str(jax.config.jax_default_matmul_precision or "").lower() in FULL_FLOAT32:
        return ""
    for leaf in jax.tree.leaves(sample):
        devices = getattr(leaf, "devices", None)
        if callable(devices):
            try:
                platforms = {d.platform for d in devices()}
            except Exception:  # a deleted array: nothing to say where it lived
                continue
            return next((p for p in sorted(platforms) if p != "cpu"), "")
    return ""


def has_matrix_products(program: Program) -> bool:
    """Whether a (closed) jaxpr, or any program inside it, multiplies matrices."""
    jaxpr, _ = closed_parts(program)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in PRODUCTS or any(has_matrix_products(sub) for sub in sub_jaxprs(eqn)):
            return True
    return False


def retry_at_full_precision(
    platform: str,
    errors_before: dict[str, float],
    runs: dict[str, Callable[[], object]],
    error_of: Callable[[object], float],
    rtol: float,
) -> PrecisionRetry:
    """Run each of ``runs`` (the runs that were off) under ``FULL_PRECISION``; ``error_of`` its max relative error
    against the reference. Never raises: a failed run again is said, not explained."""
    retry = PrecisionRetry(platform=platform, errors_before=errors_before)
    try:
        with jax.default_matmul_precision("highest"):
            for name, run in runs.items():
                retry.errors_after[name] = error_of(run())
    except Exception as error:  # the user's function may fail differently here: the verdict stands
        retry.failure = f"it failed ({error_line(error)})"
        return retry
    retry.explains = all(error <= rtol for error in retry.errors_after.values())
    return retry
