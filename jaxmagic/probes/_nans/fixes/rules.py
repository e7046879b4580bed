"""The fix for a NaN, matched to the operation that produced it and the values it saw.

Each rule names only what is in the program (the line, the library function,
the dtype, the masked rows) and applies only to what was seen: a fix for
another bug is worse than none, so ``nan_fix`` returns "" when no rule fits.

The rules are declared once each (``fix_rule.FixRule``: key, when it applies, the candidates it tries,
its words) in ``fix_rules_domain.py`` and ``fix_rules_program.py``; ``RULES`` orders them.
"""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._nans.fixes import fix_rules_domain as domain
from jaxmagic.probes._nans.fixes import fix_rules_limits as limits
from jaxmagic.probes._nans.fixes import fix_rules_program as program
from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.fix_rule import (
    IN_FLOAT32,
    IN_FLOAT32_NOT_TRIED,
    NOT_TRIED,
    SUGGESTION,
    FixRule,
    as_called,
    code_of,
    library_owned,
)
from jaxmagic.probes._nans.fixes.tried_fixes import untried
from jaxmagic.probes._nans.fixes.value_fixes import FixTrial
from jaxmagic.probes._nans.primitives import primitive
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.search.found import NanProducer

__all__ = ["IN_FLOAT32", "IN_FLOAT32_NOT_TRIED", "NOT_TRIED", "RULES", "SUGGESTION", "nan_fix", "nan_fixes"]

# Tried in this order; the first rule that applies speaks (its "" is the answer: no fix known), unless its
# words are None (its trial showed it does not fit: the next rule speaks). Where the order matters:
# - an integer operation that wrapped around before the producer is the cause upstream of everything else: first;
# - the constant a low-precision dtype holds as 0 is the cause seen in the program: before the operation's own rule;
# - a backward-pass or half-precision overflow, before anything its primitive (an `exp`, a `sub`) would match;
# - a written inf before a fully masked row (a row that is all -inf is the masked-row rule's, even if written);
# - a discarded branch, `jnp.std`, and the derivatives at 0 before the operation's own domain rules, which
#   would offer a clamp where the double where is the fix;
# - the log of a probability before the log of a value out of its domain;
# - the usual cause last: it is no fix, only what usually makes the primitive produce NaN.
RULES: tuple[FixRule, ...] = (
    limits.INTEGER_OVERFLOW,
    domain.LOST_CONSTANT,
    program.DERIVATIVE_OVERFLOW,
    program.HALF_OVERFLOW,
    limits.NARROWED_OVERFLOW,
    program.WRITTEN_INF,
    program.MASKED_ROW,
    program.DISCARDED_BRANCH,
    program.STD_AT_ZERO,
    program.ARC_DERIVATIVE,
    program.ARCTAN2_DERIVATIVE,
    program.ROOT_DERIVATIVE,
    program.LOG_DERIVATIVE,
    program.CHOLESKY,
    domain.ROOT_OF_NEGATIVE,
    domain.NEGATIVE_POWER,
    domain.ZERO_DENOMINATOR,
    program.LOG_PROBABILITY,
    domain.LOG_OUT_OF_DOMAIN,
    domain.OUT_OF_DOMAIN,
    domain.PASSED_ON_INF,
    domain.FORWARD_CAUSE,
)


def rule_for(report: NanReport, p: NanProducer) -> tuple[FixRule | None, str]:
    """The rule that speaks for ``p`` and what it says; (None, "") when none applies."""
    for rule in RULES:
        if rule.applies(p):
            said = rule.words(report, p)
            if said is not None:
                return rule, said
    return None, ""


def nan_fixes(report: NanReport) -> tuple[str, list[FixTrial]]:
    """The fix for this NaN in words (see ``nan_fix``) and as data: every candidate tried on the values
    (``offered`` on the one the words offer; the others failed or were not chosen), and the rule's own fix
    when it could not be tried (``tried`` False, ``result`` "not tried: <why>")."""
    text = nan_fix(report)
    p = report.producer
    fixes = [dataclasses.replace(t) for t in p.fix_trials] if p is not None else []
    if p is not None and p.primitive == "cholesky" and p.jitter and "Tried on these values" in text:
        fixes.append(FixTrial(FixKey.JITTER, f"K + {p.jitter} * jnp.eye(K.shape[-1])", True, True, "finite", "", True))
    if SUGGESTION in text:  # a fix in words that rewrites the line (a cause alone is no fix)
        fixes.append(untried("", NOT_TRIED))
    if IN_FLOAT32_NOT_TRIED in text:
        fixes.append(untried(IN_FLOAT32, IN_FLOAT32_NOT_TRIED))
    return text, fixes


def nan_fix(report: NanReport) -> str:
    """The fix for this NaN: chosen by the producing operation and the input values it saw, naming only
    what is in the program; "" when no fix is known for what was seen (never a fix for another bug). A
    fix the producer search could try on the values is offered only when it made them finite. An
    operation inside a library's own code that no rule fixes is said to be the library's, with what the
    user's line gives it: never a rewrite of code the user cannot edit."""
    p = report.producer
    if p is None:  # JAX named the primitive, no search found the operation: the usual cause, when forward
        cause = primitive(report.primitive).forward_cause
        if cause and report.phase == "forward":
            return f"`{report.primitive}` produced {report.value or 'NaN'}: typically {cause}."
        return ""
    for trial in p.fix_trials:
        trial.offered = False
    return rule_for(report, p)[1] or _inside_library_fix(p)


def _inside_library_fix(p: NanProducer) -> str:
    """The last word when no rule fixed an operation in a library's own code: the library's, with what the
    user's line gives it."""
    library = p.library_function
    if not library_owned(library) or not p.operands:
        return ""
    values = ", ".join(op.value for op in p.operands if not op.constant) or p.operands[0].value
    at = f" at index {p.index}" if p.index else ""
    made = "for the gradient" if p.derivative or p.phase == "backward" else ""
    return (
        f"`{p.primitive}` inside `{library}`{code_of(p)} got {values}{at} and made {p.value} {made}. That operation "
        f"is {library.split('.')[0]}'s code, not yours: keep the values and settings your line gives "
        f"{as_called(library)} inside what it accepts there (not tried: only the library could change that line)."
    ).replace(" .", ".")
