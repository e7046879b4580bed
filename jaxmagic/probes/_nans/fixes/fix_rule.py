"""What a NaN fix rule is (``FixRule``), and the words and facts every rule shares.

A rule is declared once, beside the function that words its fix (``fix_rules_program.py``,
``fix_rules_domain.py``): its key, when it applies, the candidate fixes it offers from (tried on the
values by the producer search) and a phrase its words always hold. ``fixes.RULES`` lists them in the
order they are tried; the first that applies speaks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.library_parameters import library_object, parameters_of
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.search.found import NanProducer

# A fix that rewrites the user's line (a double where, a log-probability from logits, a dtype): trying it
# would mean running the user's Python again, which a trial never does.
NOT_TRIED = "it rewrites your line, and trying it would run your Python again"
SUGGESTION = f" (Not tried on the values: {NOT_TRIED}.)"
# The other fix of a constant a low-precision dtype cannot hold: the computation in float32. Trying it would
# trace the user's function again on float32 values, which runs their Python again.
IN_FLOAT32 = "the values in float32"
IN_FLOAT32_NOT_TRIED = "it changes the dtype your code gives the program, and trying it would run your Python again"

HALF = ("float16", "bfloat16")
_JAX_NAMES = ("jnp.", "jax.", "lax.")  # a JAX function's call is the user's to guard: its arguments are written there

# The words of a rule for a NaN it applies to: "" when it knows no fix for what was seen (no later rule is
# asked then), None when a trial showed the rule does not fit after all (the next rule speaks).
Words = Callable[[NanReport, NanProducer], "str | None"]


@dataclasses.dataclass(frozen=True)
class FixRule:
    """One NaN fix rule: the one place its key, its condition, its candidates and its words are named."""

    key: str  # "masked_row", "root_of_negative": names the rule in tests and in DESIGN.md
    applies: Callable[[NanProducer], bool]  # when it speaks, read from the producer alone
    words: Words  # the fix in words (and which tried candidate it offers: ``tried_fixes.choose``)
    says: str  # a phrase every fix it words holds, so a test ties the key to its words
    tries: tuple[FixKey, ...] = ()  # the candidate fixes (``FixTrial.key``) it offers from, in its order; () none

    def __post_init__(self) -> None:
        if not (self.key and self.says):
            raise ValueError("a NaN fix rule needs a key and a phrase its words hold")


def code_of(p: NanProducer) -> str:
    """ " (`jnp.log(x)`)": the expression (or the line) that made the value, as the fixes quote it."""
    return f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""


def float_dtype(p: NanProducer) -> str:
    """The first floating dtype among the producer's operands ("float32" when none is)."""
    return next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "float32")


def zero_operand(p: NanProducer) -> bool:
    return any(op.value in ("0.0", "-0.0", "0") for op in p.operands)


def operand_float(p: NanProducer) -> float | None:
    try:
        return float(p.operands[0].value) if p.operands else None
    except (TypeError, ValueError):
        return None


def library_owned(library: str) -> bool:
    """Whether the operation ran in a library's own code (Optax, NumPyro, ...), which the user cannot edit;
    a JAX function's (``jnp.linalg.norm``) is guarded where the user calls it."""
    return bool(library) and not library.startswith(_JAX_NAMES)


def as_called(library: str) -> str:
    """How the user calls a library's callable, with its parameters: ``optax.clip_by_global_norm(max_norm)``,
    ``numpyro.distributions.Gamma(concentration, rate, validate_args).log_prob(value)``."""
    own = ("self", "args", "kwargs")
    function = library_object(library, stop_at_class=False)
    owner = library_object(library, stop_at_class=True)
    if isinstance(owner, type) and owner is not function:  # a method: the class built, then the method called
        built = ", ".join(name for name in parameters_of(owner) if name not in own)
        method = library.rsplit(".", 1)
        given = ", ".join(name for name in parameters_of(function) if name not in own)
        return f"`{method[0]}({built}).{method[1]}({given})`"
    names = ", ".join(name for name in parameters_of(function) if name not in own)
    return f"`{library}({names})`"
