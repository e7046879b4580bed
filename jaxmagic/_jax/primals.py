"""The forward (primal) value inside a differentiation tracer.

Re-run op by op under ``jax.grad``, the user's frame holds JAX's ``JVPTracer`` /
``LinearizeTracer`` objects; each keeps the forward value it differentiates in its
``primal`` slot (a concrete array when nothing else traces around it). ``%jax_debug``
shows those values for a line whose derivative failed.
"""

from __future__ import annotations

from typing import Any

import jax


def primal_value(value: Any) -> Any | None:
    """The concrete forward value under the differentiation tracers around ``value``; None when there is none
    (``value`` is no tracer, or a trace other than differentiation's - vmap, jit - holds it)."""
    current = value
    for _ in range(16):  # nested grads: a tracer's primal may be a tracer of the outer grad
        if not isinstance(current, jax.core.Tracer):
            return current if current is not value else None
        if type(current).__name__ not in ("JVPTracer", "LinearizeTracer"):
            return None
        current = getattr(current, "primal", None)
    return None
