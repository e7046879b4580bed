"""The compilation report's data: each compilation kept, each function's summary, and how much is kept.

Plain data filled in by ``collector.Collector`` (and ``causes.classify``) while the block runs, and what the
data says in a few words (a function's causes with their evidence); nothing here measures, tries a fix or
calls into JAX. The fixes are worded in ``fixes.py``, the document in ``sections.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxmagic.probes._compiles.cause import (
    BAKED_CONSTANT,
    CAUSE_TITLES,
    FIRST,
    JAXMAGIC,
    KINDS,
    STATIC_IDENTITY,
    CauseKind,
    cause_priority,
)
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance

# How much is kept: the bounds that keep a cell with a thousand compilations a summary. Read as
# ``model.NAME`` by the collector, the causes and the sections, so one value (or a test's monkeypatch of
# this module) holds for all.
DETAILS_PER_FUNCTION = 12  # compilations of one function kept in full; later ones are only counted
DETAILS_TOTAL = 120  # compilations kept in full over all functions
EXPLAIN_LIMIT = 16  # explained compilations of one function before explanations are switched off
STATIC_VALUES_KEPT = 6  # first values of each static argument kept for the report
CHANGES_KEPT = 8  # changed arguments listed per compilation
LOG_LINE_CHARS = 600
PROGRAMS_KEPT = 8  # programs of one function digested for %jax_gather (program_prints), in compile order


class CompileBudgetExceeded(RuntimeError):
    """A function compiled more often than the budget allows; the message says which and why."""


@dataclasses.dataclass
class Compilation:
    """One backend compilation, kept in full (up to ``DETAILS_PER_FUNCTION`` per function)."""

    function: str  # bare name, e.g. "train_step"
    number: int  # 1 for the function's first compilation in the block
    kind: str  # "user", "eager" (a primitive run eagerly), "library" (a jitted JAX function)
    cause: str  # a key of cause.KINDS: the main cause
    why: str  # every cause in plain words
    also: list[str] = dataclasses.field(default_factory=list)  # further causes of the same compilation
    changes: list[str] = dataclasses.field(default_factory=list)  # "w: f32[3] -> i32[3]", "step: 0 -> 1"
    argument_types: str = ""  # "f32[64,64], f32[8,64]" (the arguments kept by jit, flattened)
    static_arguments: dict[str, str] = dataclasses.field(default_factory=dict)
    trace_seconds: float | None = None
    lower_seconds: float | None = None
    compile_seconds: float = 0.0
    line: SourceLine | None = None  # the user's line that made the call
    jax_explanation: str = ""  # what jax_explain_cache_misses said
    log: list[str] = dataclasses.field(default_factory=list)
    fix: str = ""  # the fix for this compilation's cause, naming the argument or field, when there is one
    provenance: Provenance | None = None  # made_at: the call that compiled; started_by: the cell line

    @property
    def cause_kind(self) -> CauseKind:
        """The kind of its main cause."""
        return KINDS[self.cause]


@dataclasses.dataclass
class FunctionCompiles:
    """Everything compiled under one function name (and definition) in the block, summarised."""

    name: str
    kind: str
    defined_at: str = ""  # "In [3], line 2" or "model.py:14"
    library: str = ""  # the package a "library" function is defined in ("numpyro"); "" for others
    count: int = 0
    causes: dict[str, int] = dataclasses.field(default_factory=dict)
    distinct_argument_types: int = 0
    last_argument_types: str = ""
    static_argnames: list[str] = dataclasses.field(default_factory=list)
    static_values: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # first distinct values, in order
    static_value_counts: dict[str, int] = dataclasses.field(default_factory=dict)  # distinct values seen
    static_kinds: dict[str, str] = dataclasses.field(default_factory=dict)  # "number", "function", "object", ...
    static_types: dict[str, str] = dataclasses.field(default_factory=dict)  # type name of each static argument
    static_ids: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # first ids, of identity-hashed ones
    changed_arguments: dict[str, int] = dataclasses.field(default_factory=dict)  # "w (dtype)" -> times
    change_examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # by cause, first few
    trace_seconds: float = 0.0
    lower_seconds: float = 0.0
    compile_seconds: float = 0.0
    first_line: SourceLine | None = None
    field_fixes: dict[str, str] = dataclasses.field(default_factory=dict)  # cause -> the fix naming the field
    baked_values: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # closed-over value -> texts seen
    again: Any = None  # why_again.RecompileCause: why it compiled again, set when the block ends
    # "pass the static number traced", tried by tracing the function with it traced (compiles/static_trial.py):
    # how and what happened ("tried by tracing `f` with `n` traced (as jnp.int32(n)): it fails at ..."), "" when
    # there was nothing to try; whether it works (None: not tried); whether jaxmagic ran the function again
    # (traced it once more, after the block, with its output not shown) to find out
    static_fix_trial: str = ""
    static_fix_works: bool | None = None
    static_fix_error: str = ""  # JAX's own error when the trial failed (the trial's sentence words it plainly)
    static_fix_chooses_code: bool = False  # it failed on Python deciding on the value (a flag): keep it static
    traced_again_to_try: bool = False
    # "make the static field an array", tried by tracing the function with that field an array (field_trial.py)
    field_fix_trial: str = ""
    field_fix_works: bool | None = None
    field_fix_error: str = ""  # JAX's own error when that trial failed
    # "pass the baked value traced", tried for a value a functools.partial binds (baked_trial.py)
    baked_fix_trial: str = ""
    baked_fix_works: bool | None = None
    baked_fix_error: str = ""
    # In a multi-process job: the first programs compiled, digested (program_prints.ProgramPrint.to_dict()), in
    # compile order, for %jax_gather to tell which process compiled a different one
    programs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def jit_name(self) -> str:
        """``jit(step)``; a program made by a transformation outside jit keeps its own name (``vmap(f)``)."""
        return self.name if "(" in self.name else f"jit({self.name})"

    @property
    def recompiled(self) -> bool:
        """Compiled again for a reason of the user's code (not only jaxmagic's own setting)."""
        return bool(self.causes_again)

    @property
    def causes_again(self) -> list[str]:
        """Why it compiled again, most frequent first (ties: the more telling cause first)."""
        again = [cause for cause in self.causes if KINDS[cause].again]
        return sorted(again, key=lambda cause: (-self.causes[cause], cause_priority(cause)))

    @property
    def kinds_again(self) -> list[CauseKind]:
        """The kinds of ``causes_again``, in its order."""
        return [KINDS[cause] for cause in self.causes_again]

    @property
    def main_cause(self) -> str:
        """The most frequent reason it compiled again ("first" if it compiled once)."""
        again = self.causes_again
        if again:
            return again[0]
        if JAXMAGIC.key in self.causes and FIRST.key not in self.causes:
            return JAXMAGIC.key
        return FIRST.key if self.causes else ""

    @property
    def main_kind(self) -> CauseKind | None:
        """The kind of ``main_cause`` (None when it compiled nothing)."""
        return KINDS.get(self.main_cause)

    def cause_text(self, kind: CauseKind) -> str:
        """One cause with its evidence: "static argument value changed: `step` 0 -> 1 -> 2"."""
        title = kind.title
        if kind is STATIC_IDENTITY and self.static_ids:
            parts = []
            for name, ids in self.static_ids.items():
                if len(ids) < 2:
                    continue
                shown = " -> ".join(f"id {i}" for i in ids) + (" -> ..." if self.count > len(ids) else "")
                text = self.static_values.get(name, ["?"])[0]
                parts.append(
                    f"`{name}` is a new {self.static_types.get(name, 'object')} at each call ({shown}), looking like {text}"
                )
            if parts:
                return f"{title}: {'; '.join(parts)}"
        if kind.static_values and self.static_values:  # else: a wrapper's, in the examples
            parts = [
                f"`{name}` {value_sequence(values, self.static_value_counts.get(name, 0))}"
                for name, values in self.static_values.items()
                if len(values) > 1 or kind is STATIC_IDENTITY
            ]
            return f"{title}: {'; '.join(parts)}" if parts else title
        if kind is BAKED_CONSTANT and self.baked_values:
            return f"{title}: " + "; ".join(f"`{n}` {' -> '.join(v)}" for n, v in self.baked_values.items())
        examples = self.change_examples.get(kind.key, [])
        if examples:
            return f"{title}: {'; '.join(examples[:3])}" + ("; ..." if len(examples) > 3 else "")
        return title

    @property
    def reason(self) -> str:
        """Why it compiled again, with the evidence, in a few words (every cause, most frequent first)."""
        again = self.kinds_again
        if not again:
            return CAUSE_TITLES.get(self.main_cause, self.main_cause)
        text = ", and ".join(self.cause_text(kind) for kind in again[:3])
        return text + (f", and {len(again) - 3} more cause(s)" if len(again) > 3 else "")

    @property
    def evidence(self) -> str:
        """What changed between its compilations, as far as it is known."""
        parts = []
        for kind in self.kinds_again[:3]:
            if kind.evidence:
                parts.append(kind.evidence)
            elif kind.values_are_evidence or self.change_examples.get(kind.key):
                parts.append(self.cause_text(kind).split(": ", 1)[-1])
        text = "; ".join(parts)
        main = self.main_kind
        if text and main is not None and main.static_values and self.distinct_argument_types == 1:
            text += " - with the same argument types every time"
        return text

    @property
    def cause_breakdown(self) -> str:
        """Every cause with its count, most frequent first: "1 first compilation, 7 static argument value changed"."""
        ordered = sorted(self.causes.items(), key=lambda item: (item[0] != FIRST.key, -item[1]))
        return ", ".join(f"{n} {CAUSE_TITLES.get(cause, cause)}" for cause, n in ordered)


def value_sequence(values: list[str], distinct: int) -> str:
    """``"0 -> 1 -> 2 -> ... (9 different values)"``: the first values kept, and how many there were."""
    text = " -> ".join(values)
    if distinct > len(values):
        text += f" -> ... ({distinct} different values)"
    return text


def line_text(line: SourceLine | None) -> str:
    """A user's line in a table cell: ``In [3]:2 `y = f(x)```."""
    if line is None:
        return "-"
    return f"{line.label or line.filename}:{line.lineno} `{line.code}`" if line.code else f"{line.where}"
