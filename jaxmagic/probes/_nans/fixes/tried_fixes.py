"""Which of a NaN's candidate fixes the report offers, and how it says they were tried.

The producer search tries each candidate fix of the operation that made the value on that
operation's recorded inputs, then on the whole failing program (``probes/_nans/fixes/value_fixes.py``). A rule
of ``nans.fixes`` names the candidates that fit what it saw, in the order it prefers them; the first
that made everything finite is offered, the ones before it that failed are said to have failed (with
what they left), and when none survived the report says what was tried and offers none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.value_fixes import FixTrial
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.search.found import NanProducer


def values_of(report: NanReport) -> str:
    """Whose values the trials used: "the values of call 35" (a cell that loops), else of the call searched."""
    if report.call_number > 1:
        return f"the values of call {report.call_number}"
    if report.searched_call:
        return f"the values of `{report.searched_call}`"
    return "the values the operation got"


def _outcome(trial: FixTrial, primitive: str) -> str:
    """ "`rsqrt` still inf at 4 of 4 elements", "`sqrt` finite, but the call's outputs still NaN at ..."."""
    if not trial.tried:
        return trial.result
    made = f"`{primitive}` {trial.result}"  # "finite", "finite (largest 1.63e+05, ...)", "still inf at ..."
    if trial.result.startswith("not observed") and trial.call_result:  # inside a loop: the call's outputs speak
        return f"{made}; the call's outputs {trial.call_result}"
    if not trial.result.startswith("finite"):
        return made
    if not trial.call_result or trial.call_result.startswith("not tried"):
        extra = f"; the whole call {trial.call_result}" if trial.call_result else ""
        return f"{made}{extra}"
    if trial.call_result == "finite":
        return f"{made}, and the call's outputs finite"
    return f"{made}, but the call's outputs {trial.call_result}"


@dataclasses.dataclass
class Choice:
    """What a rule's candidates gave: the fix offered (None when none survived) and the words."""

    offered: FixTrial | None
    tried_text: str  # "Tried on the values of call 35: `rsqrt` finite, and the call's outputs finite."
    failed_text: str  # "Not `jnp.maximum(v, 0.0)`: tried on the same values, `rsqrt` still inf at 4 of 4 elements."


def choose(
    report: NanReport,
    p: NanProducer,
    order: list[FixKey],
    why_failed: Mapping[FixKey, str] | None = None,
    naive: tuple[FixKey, ...] = (),
) -> Choice:
    """The first of the candidates ``order`` names (by key) that the trials found finite, in the words of
    the report. The candidates before it that failed, and the ``naive`` ones (never offered: the fix a
    user reaches for first, ``den + 1e-8``) that failed, are said to have failed (``why_failed``: a
    reason by key, "rsqrt(0) is inf"); the one offered is marked ``offered`` in ``p.fix_trials``."""
    by_key = {t.key: t for t in p.fix_trials}
    considered = [by_key[k] for k in order if k in by_key]
    offered = next((t for t in considered if t.finite), None)
    where = values_of(report)
    failed = []
    before = considered[: considered.index(offered)] if offered is not None else considered
    for trial in [by_key[k] for k in naive if k in by_key] + before:
        if trial.failed:
            reason = (why_failed or {}).get(trial.kind, "")
            failed.append(
                f"`{trial.code}` was tried too and is not offered: on the same values, {_outcome(trial, p.primitive)}"
                + (f" ({reason})" if reason else "")
                + "."
            )
    if offered is not None:
        offered.offered = True
        return Choice(offered, f"Tried on {where}: {_outcome(offered, p.primitive)}.", " ".join(failed))
    if not considered:
        return Choice(None, "", "")
    tried = "; ".join(f"`{t.code}`: {_outcome(t, p.primitive)}" for t in considered)
    return Choice(None, f"No fix is offered: tried on {where}, none made it finite - {tried}.", "")


def untried(code: str, why: str) -> FixTrial:
    """A fix the report offers without having tried it, and why it could not be tried."""
    return FixTrial(FixKey.RULE, code, tried=False, result=f"not tried: {why}", offered=True)
