"""Small wording helpers of the compilation report: the order causes are named in, a sequence of values,
stage durations, a user's line."""

from __future__ import annotations

from jaxmagic.report import SourceLine

# Which cause to name first when two are equally frequent: the ones people find hardest first.
CAUSE_PRIORITY = (
    "static",
    "static_identity",
    "baked_constant",
    "new_function",
    "cache_cleared",
    "weak_type",
    "passing",
    "pytree",
    "types",
    "context",
    "no_retrace",
    "unexplained",
    "library",
    "eager",
    "jaxmagic",
    "first",
)


def cause_priority(cause: str) -> int:
    return CAUSE_PRIORITY.index(cause) if cause in CAUSE_PRIORITY else len(CAUSE_PRIORITY)


def value_sequence(values: list[str], distinct: int) -> str:
    text = " -> ".join(values)
    if distinct > len(values):
        text += f" -> ... ({distinct} different values)"
    return text


def stage_times(*seconds: float | None) -> str:
    """``"1.4 / 1.3 / 27.3 ms"``: the three stage durations in one cell."""
    return " / ".join("-" if t is None else f"{t * 1e3:.1f}" for t in seconds) + " ms"


def line_text(line: SourceLine | None) -> str:
    if line is None:
        return "-"
    return f"{line.label or line.filename}:{line.lineno} `{line.code}`" if line.code else f"{line.where}"
