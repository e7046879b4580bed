"""Why a primitive makes NaN or inf: the causes the report's explanation and the fixes both name."""

from __future__ import annotations

from jaxmagic.probes._support.nan.producer import NanProducer

# What usually makes each primitive produce NaN/inf in a forward computation.
FORWARD_CAUSES = {
    "log": "log of a negative number gives NaN, log(0) gives -inf",
    "log1p": "log1p of a number below -1 gives NaN",
    "sqrt": "square root of a negative number",
    "rsqrt": "1/sqrt of a negative number (or of 0: inf)",
    "div": "0/0 gives NaN, x/0 gives inf",
    "rem": "remainder by zero",
    "pow": "a negative base with a non-integer exponent, or 0 to a negative power",
    "asin": "asin of a value outside [-1, 1]",
    "acos": "acos of a value outside [-1, 1]",
    "atanh": "atanh of a value outside (-1, 1)",
    "acosh": "acosh of a value below 1",
    "sub": "inf - inf",
    "add": "inf + (-inf)",
    "mul": "0 * inf",
    "exp": "exp overflowing float range gives inf (and inf - inf later gives NaN)",
    "dot_general": "a NaN/inf entering a matrix product, or overflow",
    "reduce_sum": "a sum that overflows, or that adds up values already infinite",
}


_ARITHMETIC = ("mul", "add", "sub", "dot_general", "reduce_sum", "integer_pow", "square", "pow", "exp", "exp2")


def overflowed(p: NanProducer) -> str:
    """Why an arithmetic operation made inf from finite values: its result is above its dtype's largest
    value (float16's is 65504) - not 0 * inf, which needs an inf to begin with; "" for anything else."""
    import jax.numpy as jnp  # deferred: importing jaxmagic.probes imports no JAX

    dtype = next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "")
    if p.value != "inf" or p.primitive not in _ARITHMETIC or not dtype:
        return ""
    try:
        largest = f"{float(jnp.finfo(dtype).max):.6g}"  # bfloat16's too
    except (TypeError, ValueError):
        return ""
    return f"the result is above the largest {dtype} value ({largest}): it overflowed to inf"


def is_a_fix(text: str) -> bool:
    """Whether a NaN probe's fix text says what to do, not only the usual cause (``nans.fixes`` words a
    cause alone as "`exp`: typically ...", which must not be shown as the report's fix)."""
    head = text.split(":", 1)
    return bool(text) and not (len(head) == 2 and head[1].lstrip().startswith("typically "))
