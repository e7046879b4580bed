"""The candidate fixes of a NaN/inf, each named once: the key its trial (``FixTrial.key``), the rules' ``tries``
and the report's data call it by."""

from __future__ import annotations

import enum


class FixKey(enum.StrEnum):
    """One kind of candidate fix (a ``str``: the report's data holds its value)."""

    NONE = ""  # no candidate: trying failed before one was made
    CLAMP = "clamp"  # the input clamped into the domain: jnp.maximum(v, 0.0)
    EPS = "eps"  # an epsilon added: v + 1e-06, num / (den + 1e-08)
    CLAMP_EPS = "clamp_eps"  # both: jnp.maximum(v, 0.0) + 1e-06
    FLOOR = "floor"  # the input floored just inside the domain: jnp.maximum(v, jnp.finfo(v.dtype).tiny)
    CLIP = "clip"  # the input clipped to the domain: jnp.clip(v, -1.0, 1.0)
    CLIP_EPS = "clip_eps"  # clipped just inside it
    GUARD = "guard"  # a division guarded: jnp.where(den != 0, num / jnp.where(den != 0, den, 1.0), 0.0)
    FLOAT32 = "float32"  # the operation computed in float32: its result changes the dtype the program goes on in
    FINITE_FILL = "finite_fill"  # an infinite input replaced by the dtype's largest finite value: changed at its source
    CONSTANT = "constant"  # the constant written into the program replaced by one its dtype holds
    CLAMP_BEFORE = (
        "clamp_before"  # the value an epsilon is added to clamped at 0 before it: jnp.maximum(var, 0.0) + eps
    )
    LINE_IN_FLOAT32 = (
        "line_float32"  # the user's line computed in float32 (forward and derivative), cast back at its edge
    )
    WIDER = "wider_dtype"  # the overflowing integer operation computed in a wider dtype
    PRIMAL_CLAMP = "primal_clamp"  # the primal's input kept at or above a small epsilon: jnp.sqrt(jnp.maximum(v, eps))
    DOUBLE_WHERE = (
        "double_where"  # the primal's input made safe where it is not used: jnp.where(ok, f(where(ok, v, 1)), 0)
    )
    JITTER = "jitter"  # a matrix's diagonal lifted (K + jitter * eye), found by the search itself
    RULE = "rule"  # a fix a rule words without having tried it
