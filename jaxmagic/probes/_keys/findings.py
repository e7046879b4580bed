"""One answer to "what is wrong with the random keys": the findings of a ``KeyReport``, worded once.

``%%jax_keys`` says them in its summary, ``%%jax_doctor`` ranks them and ``%jax_watch`` tells each once;
all three take them from ``key_findings``, so the same bug reads the same on every path (the same
headline, line, provenance and fix), instead of three wordings kept apart.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from jaxmagic.probes._keys.wording import FIX
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance

if TYPE_CHECKING:  # the report imports this module: its types only for annotations
    from jaxmagic.probes._keys.report import KeyFlow, KeyReport, RepeatedDraw

LEGACY = " (a legacy uint32 key, followed by its data)"


@dataclasses.dataclass
class KeyFinding:
    """One key problem: what a report says about it, in the same words on every path."""

    identity: tuple  # what it is about, the same from cell to cell (the watch tells it once, then counts)
    function: str  # the function that got the key, or the jax.random function that drew with it
    headline: str  # the whole sentence
    short: str  # a few words for a list of findings
    evidence: str = ""
    line: SourceLine | None = None
    fix: str = FIX
    provenance: Provenance | None = None


def draw_evidence(d: KeyFlow | RepeatedDraw) -> str:
    return (
        f"{d.distinct} distinct key(s) in {d.calls} calls; the repeated key's data is {d.repeated_key}: the same "
        "random numbers (e.g. the same dropout mask) every call" + (LEGACY if d.legacy else "")
    )


def key_findings(report: KeyReport) -> list[KeyFinding]:
    """Every key problem ``report`` holds, in the order ``%%jax_keys`` tells them."""
    found = [
        KeyFinding(
            identity=("reuse", r.consumer, r.reused_at.lineno if r.reused_at else 0),
            function=r.function or r.consumer,
            headline=r.headline,
            short=f"`{r.consumer}` got an already consumed key",
            evidence=r.explanation,
            line=r.reused_at,
            fix=r.fix or FIX,
            provenance=r.provenance,
        )
        for r in report.reuse
    ]
    found += [
        KeyFinding(
            identity=("flow", f.function, f.argument),
            function=f.function,
            headline=f.headline,
            short=f"`{f.function}` got the same key {f.repeated_times} times",
            evidence=draw_evidence(f),
            line=f.first_call,
            fix=f.fix or FIX,
            provenance=f.provenance,
        )
        for f in report.repeated_flows
    ]
    if not report.repeated_flows:  # the same bug seen from the eager side: told once, by the flow if there is one
        found += [
            KeyFinding(
                identity=("draw", f"jax.random.{d.api}", d.line.lineno if d.line else 0),
                function=f"jax.random.{d.api}",
                headline=d.text,
                short=f"`jax.random.{d.api}` got the same key {d.repeated_times} times",
                evidence=draw_evidence(d),
                line=d.line,
                provenance=d.provenance,
            )
            for d in report.repeated_draws
        ]
    found += [  # the same numbers in every element / pass / call
        KeyFinding(
            identity=("same numbers", draw.function, draw.api, draw.line.lineno if draw.line else 0),
            function=draw.function,
            headline=draw.text,
            short=draw.short,
            line=draw.line,
            fix=draw.fix or FIX,
            provenance=draw.provenance,
        )
        for draw in report.same_numbers_draws
    ]
    return found
