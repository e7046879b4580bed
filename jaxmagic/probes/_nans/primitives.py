"""What is known about each primitive that makes NaN or inf: one row per primitive, read by the causes the
report names (``_nans/causes.py``), the candidate fixes the search tries (``value_fixes.candidates``), the
integer overflow search and the fix rules (``_nans/fixes/fix_rules_domain.py``).

To teach jaxmagic a primitive: give it a row here - its usual cause, whether it overflows, the candidate
fixes of its input (in the order they are offered, naive ones first) and, for a rule to speak of it, its
domain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp

from jaxmagic.probes._nans.fixes.fix_keys import FixKey


@dataclasses.dataclass(frozen=True)
class InputFix:
    """A candidate fix of an operation's first input: kept in the domain where the operation is finite."""

    key: FixKey
    code: str  # with `v` the value given to the operation; "{eps:g}": the epsilon its dtype holds
    fixed: Callable[[Any, float], Any]  # the input fixed, from the input and that epsilon


@dataclasses.dataclass(frozen=True)
class Primitive:
    """What is known about one primitive making NaN or inf."""

    name: str
    forward_cause: str = ""  # what usually makes it produce NaN/inf in a forward computation
    overflows: bool = False  # floating arithmetic whose result can overflow its dtype from finite values
    widened: bool = False  # that overflow tried in float32 (no dtype in its parameters says otherwise)
    wraps: bool = False  # integer arithmetic whose result can wrap around
    divides: str = ""  # a division: its symbol ("/", "%"); its fixes are the denominator's
    input_fixes: tuple[InputFix, ...] = ()  # the candidate fixes of its first input, naive ones first
    domain: str = ""  # where the out-of-domain rule says it is finite: "[-1, 1]"
    fails: Mapping[FixKey, str] = dataclasses.field(default_factory=dict)  # why a candidate fails at the edge


_CLAMP_0 = InputFix(FixKey.CLAMP, "jnp.maximum(v, 0.0)", lambda v, eps: jnp.maximum(v, 0.0))
_EPS = InputFix(FixKey.EPS, "v + {eps:g}", lambda v, eps: v + eps)
_CLIPS = (
    InputFix(FixKey.CLIP, "jnp.clip(v, -1.0, 1.0)", lambda v, eps: jnp.clip(v, -1.0, 1.0)),
    InputFix(
        FixKey.CLIP_EPS,
        "jnp.clip(v, -1.0 + jnp.finfo(v.dtype).eps, 1.0 - jnp.finfo(v.dtype).eps)",
        lambda v, eps: jnp.clip(v, -1.0 + jnp.finfo(v.dtype).eps, 1.0 - jnp.finfo(v.dtype).eps),
    ),
)
_ROOT_FIXES = (
    _CLAMP_0,
    _EPS,
    InputFix(FixKey.CLAMP_EPS, "jnp.maximum(v, 0.0) + {eps:g}", lambda v, eps: jnp.maximum(v, 0.0) + eps),
)

_ROWS = (
    Primitive("sqrt", forward_cause="square root of a negative number", input_fixes=_ROOT_FIXES),
    Primitive(
        "rsqrt",
        forward_cause="1/sqrt of a negative number (or of 0: inf)",
        input_fixes=_ROOT_FIXES,
        fails={FixKey.CLAMP: "rsqrt(0) is inf"},
    ),
    Primitive(
        "log",
        forward_cause="log of a negative number gives NaN, log(0) gives -inf",
        input_fixes=(
            _CLAMP_0,
            _EPS,
            InputFix(
                FixKey.FLOOR,
                "jnp.maximum(v, jnp.finfo(v.dtype).tiny)",
                lambda v, eps: jnp.maximum(v, jnp.finfo(v.dtype).tiny),
            ),
        ),
        fails={FixKey.CLAMP: "log(0) is -inf"},
    ),
    Primitive(
        "log1p",
        forward_cause="log1p of a number below -1 gives NaN",
        input_fixes=(
            InputFix(FixKey.CLAMP, "jnp.maximum(v, -1.0)", lambda v, eps: jnp.maximum(v, -1.0)),
            InputFix(
                FixKey.FLOOR,
                "jnp.maximum(v, -1.0 + jnp.finfo(v.dtype).eps)",
                lambda v, eps: jnp.maximum(v, -1.0 + jnp.finfo(v.dtype).eps),
            ),
        ),
        domain="(-1, inf)",
        fails={FixKey.CLAMP: "log1p(-1) is -inf"},
    ),
    Primitive("asin", forward_cause="asin of a value outside [-1, 1]", input_fixes=_CLIPS, domain="[-1, 1]"),
    Primitive("acos", forward_cause="acos of a value outside [-1, 1]", input_fixes=_CLIPS, domain="[-1, 1]"),
    Primitive(
        "atanh",
        forward_cause="atanh of a value outside (-1, 1)",
        input_fixes=_CLIPS,
        domain="(-1, 1)",
        fails={FixKey.CLIP: "atanh(1) is inf"},
    ),
    Primitive(
        "acosh",
        forward_cause="acosh of a value below 1",
        input_fixes=(InputFix(FixKey.FLOOR, "jnp.maximum(v, 1.0)", lambda v, eps: jnp.maximum(v, 1.0)),),
        domain="[1, inf)",
    ),
    Primitive("div", forward_cause="0/0 gives NaN, x/0 gives inf", divides="/"),
    Primitive("rem", forward_cause="remainder by zero", divides="%"),
    Primitive(
        "pow",
        forward_cause="a negative base with a non-integer exponent, or 0 to a negative power",
        overflows=True,
        widened=True,
        wraps=True,
        input_fixes=(_CLAMP_0,),  # a negative base to a non-integer power (jax-ml/jax#7440)
    ),
    Primitive("sub", forward_cause="inf - inf", overflows=True, widened=True, wraps=True),
    Primitive("add", forward_cause="inf + (-inf)", overflows=True, widened=True, wraps=True),
    Primitive("mul", forward_cause="0 * inf", overflows=True, widened=True, wraps=True),
    Primitive(
        "exp",
        forward_cause="exp overflowing float range gives inf (and inf - inf later gives NaN)",
        overflows=True,
        widened=True,
    ),
    Primitive("exp2", overflows=True, widened=True),
    Primitive("dot_general", forward_cause="a NaN/inf entering a matrix product, or overflow", overflows=True),
    Primitive(
        "reduce_sum",
        forward_cause="a sum that overflows, or that adds up values already infinite",
        overflows=True,
        widened=True,
        wraps=True,
    ),
    Primitive("integer_pow", overflows=True, widened=True, wraps=True),
    Primitive("square", overflows=True, widened=True, wraps=True),
    Primitive("neg", wraps=True),
    Primitive("reduce_prod", wraps=True),
)

PRIMITIVES: dict[str, Primitive] = {row.name: row for row in _ROWS}


def primitive(name: str) -> Primitive:
    """The row of the primitive ``name``; one that knows nothing for a primitive without a row."""
    return PRIMITIVES.get(name) or Primitive(name)
