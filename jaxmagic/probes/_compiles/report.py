"""The compilation report: what was compiled and why, in words (causes, fixes, sentences) and as a document.

Plain data filled in by ``collector.Collector`` while the block runs; nothing
here measures or calls into JAX.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from jaxmagic._jax.compile_log import bare_name
from jaxmagic.probes._compiles import limits
from jaxmagic.probes._compiles.cache_misses import CacheMiss
from jaxmagic.probes._compiles.cause_words import CAUSE_TITLES, FIXES
from jaxmagic.probes._compiles.cost_sections import cost_concerns, cost_fix, cost_headline, cost_sections
from jaxmagic.probes._compiles.donations import UnusableDonation
from jaxmagic.probes._compiles.program_size import ProgramSize
from jaxmagic.probes._compiles.stale_globals import StaleGlobal
from jaxmagic.probes._compiles.static_fixes import STATIC_FIXES, number_fix_tried
from jaxmagic.probes._compiles.wording import cause_priority, line_text, stage_times, value_sequence
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.wording import counted, ended

_BODY_PRIMITIVES = ("scan", "while", "cond")  # eager control flow whose cache key holds its body function


class CompileBudgetExceeded(RuntimeError):
    """A function compiled more often than the budget allows; the message says which and why."""


@dataclasses.dataclass
class Compilation:
    """One backend compilation, kept in full (up to ``DETAILS_PER_FUNCTION`` per function)."""

    function: str  # bare name, e.g. "train_step"
    number: int  # 1 for the function's first compilation in the block
    kind: str  # "user", "eager" (a primitive run eagerly), "library" (a jitted JAX function)
    cause: str  # a key of CAUSE_TITLES: the main cause
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
        again = [cause for cause in self.causes if cause not in ("first", "jaxmagic")]
        return sorted(again, key=lambda cause: (-self.causes[cause], cause_priority(cause)))

    @property
    def main_cause(self) -> str:
        """The most frequent reason it compiled again ("first" if it compiled once)."""
        again = self.causes_again
        if again:
            return again[0]
        if "jaxmagic" in self.causes and "first" not in self.causes:
            return "jaxmagic"
        return "first" if self.causes else ""

    def cause_text(self, cause: str) -> str:
        """One cause with its evidence: "static argument value changed: `step` 0 -> 1 -> 2"."""
        title = CAUSE_TITLES.get(cause, cause)
        if cause == "static_identity" and self.static_ids:
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
        if cause in ("static", "static_identity") and self.static_values:  # else: a wrapper's, in the examples
            parts = [
                f"`{name}` {value_sequence(values, self.static_value_counts.get(name, 0))}"
                for name, values in self.static_values.items()
                if len(values) > 1 or cause == "static_identity"
            ]
            return f"{title}: {'; '.join(parts)}" if parts else title
        if cause == "baked_constant" and self.baked_values:
            return f"{title}: " + "; ".join(f"`{n}` {' -> '.join(v)}" for n, v in self.baked_values.items())
        examples = self.change_examples.get(cause, [])
        if examples:
            return f"{title}: {'; '.join(examples[:3])}" + ("; ..." if len(examples) > 3 else "")
        return title

    @property
    def reason(self) -> str:
        """Why it compiled again, with the evidence, in a few words (every cause, most frequent first)."""
        again = self.causes_again
        if not again:
            return CAUSE_TITLES.get(self.main_cause, self.main_cause)
        text = ", and ".join(self.cause_text(cause) for cause in again[:3])
        return text + (f", and {len(again) - 3} more cause(s)" if len(again) > 3 else "")

    @property
    def fix(self) -> str:
        """What to do about the main cause (for a static argument: what fits the kind of its values)."""
        return self.fix_for(self.main_cause)

    def fix_for(self, cause: str) -> str:
        named = self.field_fixes.get(cause, "")
        if named and (cause != "static_identity" or " is NaN, " in named):  # a NaN is no object to build once
            return named
        general = self._general_fix(cause)
        return f"{named} {general}" if named and general else named or general

    def _general_fix(self, cause: str) -> str:
        if cause in ("static", "static_identity"):
            kinds = [self.static_kinds.get(name, "") for name in self.static_values]
            kind = next((k for k in kinds if k in STATIC_FIXES and (k != "number" or cause == "static")), "")
            if kind and cause == "static_identity":
                return f"{FIXES[cause].split(': ', 1)[0]}. {STATIC_FIXES[kind]}"
            if kind == "number" and cause == "static":
                return number_fix_tried(self, FIXES["static"])
            if kind:
                return f"{FIXES[cause]} {STATIC_FIXES[kind]}"
        if cause == "types":
            scalars = [_scalar_kind_change(change) for change in self.change_examples.get("types", [])]
            if scalars and all(scalars):
                name = scalars[0]
                return (
                    f"`{name}` was an integer scalar in one call and a float one in another (a Python `1` and "
                    f"`1.5` are i32[] and f32[]): different argument types. Pass the same kind every time, e.g. "
                    f"`float({name})` (or `jnp.float32({name})`) where you call it."
                )
        return FIXES.get(cause, "")

    @property
    def evidence(self) -> str:
        """What changed between its compilations, as far as it is known."""
        parts = []
        for cause in self.causes_again[:3]:
            if cause == "new_function":
                parts.append("jit was given a newly built function (a new wrapper) at each call")
            elif cause == "no_retrace":
                parts.append("compiled again without tracing again")
            elif cause in ("static", "static_identity", "baked_constant") or self.change_examples.get(cause):
                parts.append(self.cause_text(cause).split(": ", 1)[-1])
        text = "; ".join(parts)
        if text and self.main_cause in ("static", "static_identity") and self.distinct_argument_types == 1:
            text += " - with the same argument types every time"
        return text

    @property
    def cause_breakdown(self) -> str:
        """Every cause with its count, most frequent first: "1 first compilation, 7 static argument value changed"."""
        ordered = sorted(self.causes.items(), key=lambda item: (item[0] != "first", -item[1]))
        return ", ".join(f"{n} {CAUSE_TITLES.get(cause, cause)}" for cause, n in ordered)


LIBRARY_RECOMPILE_FIX = (
    "jaxmagic cannot see into the library's cache key, so it could not tell which value changed, and tried no "
    "fix. If that line runs again and again (a loop, new data of the same shape), look in the library's "
    "documentation for its way to keep one compiled program across calls."
)


def library_sentence(f: FunctionCompiles) -> str:
    """A library's jitted function compiled again for argument types it had compiled for (``library_recompiles``)."""
    owner = f"{f.library}'s `{f.name}`" if f.library else f"`{f.name}` (a library's)"
    seconds = f.trace_seconds + f.lower_seconds + f.compile_seconds
    line = f.first_line
    called = f", called from your line {line.where} `{line.code.strip()}`" if line is not None and line.code else ""
    return (
        f"{owner} compiled {counted(f.count, 'time')} ({seconds:.1f} s) for argument types it had compiled for{called}: the library compiled it again itself - a function it builds anew at each call, or a value "
        "it keeps static that changed."
    )


def _rebuilt_sentence(f: FunctionCompiles) -> str:
    return (
        f"`{f.name}` outside jit compiled {counted(f.count, 'time')} for the same argument types ({f.last_argument_types}): "
        "what differed is not its arguments but its body or settings - usually a new function each time "
        "(a lambda or closure built in the loop), which JAX's cache never matches. Define the body once, "
        "outside the loop, or jit the function that runs it."
    )


_SCALAR_CHANGE = re.compile(
    r"^(?P<name>[\w.\[\]']+): (?P<a>[if])\d+\[\](?: weak)? -> (?P<b>[if])\d+\[\](?: weak)?(?: \(dtype\))?$"
)


def _scalar_kind_change(change: str) -> str:
    """The argument's name when ``change`` is an int scalar becoming a float one or back ("s: i32[] -> f32[]")."""
    match = _SCALAR_CHANGE.match(change)
    return match["name"] if match and match["a"] != match["b"] else ""


@dataclasses.dataclass
class CompileReport(Report):
    """What ``%%jax_compiles`` found: compilations per function, their causes and costs."""

    kind = "jax_compiles"

    functions: list[FunctionCompiles] = dataclasses.field(default_factory=list)
    compilations: list[Compilation] = dataclasses.field(default_factory=list)  # the first ones, in order
    total_compilations: int = 0
    show_all: bool = False
    budget: int | None = None
    budget_function: str = ""  # --fn: the budget applies to this function only
    explanations_stopped: str = ""  # the function whose many compilations made us stop asking JAX why
    other_thread_compilations: int = 0  # compilations made by other threads during the block (not listed)
    log_lines: int = 0  # compile log lines captured (all of them, kept or not)
    other_error: str = ""  # the block failed: "ValueError: ..."
    sizes: list[ProgramSize] = dataclasses.field(default_factory=list)  # slow (or the slowest) compilations, examined
    donations: list[UnusableDonation] = dataclasses.field(default_factory=list)  # donated buffers JAX could not reuse
    cache_misses: list[CacheMiss] = dataclasses.field(default_factory=list)  # persistent-cache misses
    cache_hits: int = 0  # compilations read from the persistent cache
    # globals a function read when traced that changed since: its program still has the old value (stale_globals)
    stale_globals: list[StaleGlobal] = dataclasses.field(default_factory=list)

    # -- queries -------------------------------------------------------------

    def function(self, name: str) -> FunctionCompiles | None:
        """The summary for ``name`` ("f" or "jit(f)"; "vmap(f)" a transformed program), the most compiled
        one if several share the name."""
        matches = [f for f in self.functions if f.name == name] or [
            f for f in self.functions if f.name == bare_name(name)
        ]
        return max(matches, key=lambda f: f.count) if matches else None

    def count(self, name: str) -> int:
        """How many times functions named ``name`` ("f" or "jit(f)") compiled in the block."""
        matches = [f for f in self.functions if f.name == name] or [
            f for f in self.functions if f.name == bare_name(name)
        ]
        return sum(f.count for f in matches)

    def compilations_of(self, name: str) -> list[Compilation]:
        return [c for c in self.compilations if c.function == name] or [
            c for c in self.compilations if c.function == bare_name(name)
        ]

    @property
    def rebuilt_loops(self) -> list[FunctionCompiles]:
        """Control flow run outside jit (lax.scan, while_loop, cond) compiled again for argument types it
        compiled for before: what differed is its body, given anew (a lambda built in the loop)."""
        return [
            f
            for f in self.functions
            if f.kind != "user" and f.name in _BODY_PRIMITIVES and 1 <= f.distinct_argument_types < f.count
        ]

    @property
    def library_recompiles(self) -> list[FunctionCompiles]:
        """A library's own jitted function (numpyro's sampler loop) that compiled again in the block for argument
        types it had compiled for: no new shape asked for it, so it is no small eager compilation but the
        library building its function anew or changing a value it keeps static - at a call of the user's.
        JAX's own functions (jnp, lax, random) are not among them: they are compiled per shape and per JAX
        setting (jaxmagic's own probes change settings), as eager operations are."""
        return [
            f
            for f in self.functions
            if f.kind == "library"
            and f.library not in ("", "jax", "jaxlib")
            and f.name not in _BODY_PRIMITIVES
            and 1 <= f.distinct_argument_types < f.count
        ]

    @property
    def user_functions(self) -> list[FunctionCompiles]:
        return [f for f in self.functions if f.kind == "user"]

    @property
    def eager_functions(self) -> list[FunctionCompiles]:
        library = self.library_recompiles
        return [f for f in self.functions if f.kind != "user" and f not in library]

    @property
    def recompiled_functions(self) -> list[FunctionCompiles]:
        """The user's functions that compiled more than once, most compilations first."""
        return [f for f in self.user_functions if f.recompiled]

    @property
    def eager_compilations(self) -> int:
        return sum(f.count for f in self.eager_functions)

    @property
    def over_budget(self) -> list[FunctionCompiles]:
        if self.budget is None:
            return []
        if self.budget_function:
            name = bare_name(self.budget_function)
            return [f for f in self.functions if f.name == name and f.count > self.budget]
        return [f for f in self.user_functions if f.count > self.budget]

    @property
    def budget_message(self) -> str:
        over = self.over_budget
        if not over:
            return ""
        parts = [f"{f.jit_name} compiled {counted(f.count, 'time')} ({f.reason})" for f in over]
        scope = f" for {bare_name(self.budget_function)}" if self.budget_function else " per function"
        return f"Compile budget exceeded: {'; '.join(parts)}; the budget is {self.budget}{scope}."

    def raise_if_over_budget(self) -> None:
        """Raise CompileBudgetExceeded if a function compiled more often than the budget allows."""
        __tracebackhide__ = True
        if self.over_budget:
            raise CompileBudgetExceeded(self.budget_message)

    # -- Report ----------------------------------------------------------------

    def concerns(self) -> list[Concern]:
        found = [act("over the compilation budget")] if self.over_budget else []
        found += [act(f"`{f.name}` compiled {counted(f.count, 'time')}") for f in self.recompiled_functions]
        found += [act("a loop rebuilt at each call") for _ in self.rebuilt_loops]
        found += [act(f"a library's `{f.name}` compiled {counted(f.count, 'time')}") for f in self.library_recompiles]
        found += cost_concerns(self.sizes, self.donations, self.cache_misses, self.stale_globals)
        return found + ([failed(self.other_error)] if self.other_error else [])

    @property
    def summary(self) -> str:
        text = self._findings()
        if self.other_error:
            if not self.functions:  # no call got as far as compiling: nothing was "reused" either
                return f"The cell failed with {ended(self.other_error)} Nothing was compiled before it."
            text = f"The cell failed with {ended(self.other_error)} Before that: {text[0].lower()}{text[1:]}"
        return text

    def _findings(self) -> str:
        eager = self.eager_compilations
        eager_note = f" (and {eager} small compilation{'s' if eager != 1 else ''} of eager operations)" if eager else ""
        if self.over_budget:
            over = self.over_budget
            first = over[0]
            text = f"Over budget: `{first.name}` compiled {counted(first.count, 'time')} (budget {self.budget}): {ended(first.reason)}"
            return text + (f" {len(over) - 1} more function(s) over budget." if len(over) > 1 else "")
        recompiled = self.recompiled_functions
        if len(recompiled) == 1:
            f = recompiled[0]
            return f"`{f.name}` compiled {counted(f.count, 'time')}: {ended(f.reason)}"
        if recompiled:
            parts = ", ".join(
                f"`{f.name}` ({f.count}x: {' + '.join(CAUSE_TITLES[c] for c in f.causes_again[:2])})"
                for f in recompiled[:3]
            )
            more = f" and {len(recompiled) - 3} more" if len(recompiled) > 3 else ""
            return f"{len(recompiled)} functions compiled more than once: {parts}{more} (each below)."
        if self.rebuilt_loops:
            return _rebuilt_sentence(self.rebuilt_loops[0])
        if self.library_recompiles:
            return library_sentence(self.library_recompiles[0])
        cost = cost_headline(self.sizes, self.donations, self.cache_misses, self.stale_globals)
        if cost:
            return cost
        users = self.user_functions
        own = [f for f in users if "jaxmagic" in f.causes]
        if own:
            names = ", ".join(f"`{f.name}`" for f in own[:4]) + (", ..." if len(own) > 4 else "")
            compiles = sum(f.causes["jaxmagic"] for f in own)
            return (
                f"Nothing of yours recompiled; {compiles} compilation(s) of {names} came from jaxmagic's own "
                f"cache-key setting (once per function and argument types; see why){eager_note}."
            )
        if users:
            names = ", ".join(f"`{f.name}`" for f in users[:4]) + (", ..." if len(users) > 4 else "")
            return f"{len(users)} function(s) compiled once each ({names}); nothing recompiled{eager_note}."
        if eager:
            return f"None of your jitted functions compiled; {eager} small compilation(s) of eager operations."
        return "Nothing was compiled: every call in this cell reused an already compiled program."

    def document(self):
        sections = []
        recompiled = self.recompiled_functions
        if recompiled:
            rows = [
                [
                    f"`{f.name}`" + (f" ({f.defined_at})" if f.defined_at else ""),
                    f"{f.count}: {f.cause_breakdown}",
                    f.evidence or "-",
                ]
                for f in recompiled[:8]
            ]
            blocks = [Table(["function", "compilations", "what changed"], rows)]
            if any(f.main_cause in ("static", "unexplained", "static_identity") for f in recompiled):
                blocks.append(
                    Paragraph(
                        "JAX's own explanation for a changed static argument is only 'cache miss explanation "
                        "unavailable' (JAX 0.12): jaxmagic compares the static values of the calls to name it."
                    )
                )
            by_fix: dict[tuple[str, str], list[str]] = {}
            for f in recompiled[:8]:
                for cause in f.causes_again[:3]:
                    if f.fix_for(cause):
                        by_fix.setdefault((cause, f.fix_for(cause)), []).append(f"`{f.name}`")
            told = self.first_fix  # the document's own line, under the headline: not said again here
            for (cause, fix), names in by_fix.items():
                if told.endswith(fix) and len(names) == 1 and told.startswith(f"{names[0]}:"):
                    continue
                blocks.append(Paragraph(f"What to do ({', '.join(names)}, {CAUSE_TITLES[cause]}): {fix}"))
            for f in recompiled[:3]:
                again = next((c for c in self.compilations if c.function == f.name and c.cause != "first"), None)
                if again is not None and again.provenance is not None:
                    blocks += provenance_blocks(
                        again.provenance, f"compilation {again.number} of `{f.name}` (the call)"
                    )
            sections.append(Section("Recompiled", blocks))
        if self.rebuilt_loops:
            sections.append(
                Section("Control flow outside jit", [Paragraph(_rebuilt_sentence(f)) for f in self.rebuilt_loops[:3]])
            )
        if self.library_recompiles:
            sections.append(
                Section(
                    "Compiled again inside a library",
                    [Paragraph(library_sentence(f)) for f in self.library_recompiles[:3]]
                    + [Paragraph(f"What to do: {LIBRARY_RECOMPILE_FIX}")],
                )
            )

        listed = self.functions if self.show_all else self.user_functions
        if listed:
            # Four columns, so the table fits a narrow notebook: where a function is defined goes under its
            # name, the number of distinct argument types beside the number of compilations.
            rows = [
                [
                    f"`{f.jit_name}`" + (f" ({f.defined_at})" if f.defined_at else ""),
                    f"{f.count} ({f.distinct_argument_types} argument type(s))",
                    f.reason if f.recompiled else CAUSE_TITLES.get(f.main_cause, f.main_cause),
                    stage_times(f.trace_seconds, f.lower_seconds, f.compile_seconds),
                ]
                for f in listed
            ]
            blocks = [
                Table(
                    ["function (defined at)", "compiles", "why", "trace / lower / XLA compile, total"],
                    rows,
                )
            ]
        else:
            blocks = []
        eager = self.eager_functions
        if eager and not self.show_all:
            names = ", ".join(f"{f.name} x{f.count}" for f in sorted(eager, key=lambda f: -f.count)[:6])
            more = ", ..." if len(eager) > 6 else ""
            blocks.append(
                Paragraph(
                    f"Not listed: {self.eager_compilations} small compilation(s) of eager operations - JAX calls "
                    f"outside jit such as jnp.ones, each compiled once per new shape ({names}{more}). "
                    "`--all` lists them."
                )
            )
        if blocks:
            sections.append(Section("Compilations per function", blocks))

        shown = [c for c in self.compilations if self.show_all or c.kind == "user"]
        if shown:
            rows = []
            for i, c in enumerate(shown):
                previous = shown[i - 1] if i else None
                # Only what changed from the row above is written out: a loop's rows share the line.
                same = previous is not None and previous.function == c.function
                line = line_text(c.line)
                types = c.argument_types or "-"
                changed = "; ".join(c.changes)
                rows.append(
                    [
                        str(c.number),
                        f"`{c.function}`",
                        "same" if same and line == line_text(previous.line) else line,
                        CAUSE_TITLES.get(c.cause, c.cause) + (f": {changed}" if changed else ""),
                        "same" if same and types == (previous.argument_types or "-") else types,
                        stage_times(c.trace_seconds, c.lower_seconds, c.compile_seconds),
                    ]
                )
            columns = [
                "#",
                "function",
                "your line",
                "cause: what changed",
                "argument types",
                "trace / lower / XLA compile",
            ]
            functions = {c.function for c in shown}
            title = "Each compilation"
            if len(functions) == 1:  # one function: named in the title, not in a column of its own
                title += f" of `{next(iter(functions))}`"
                columns.pop(1)
                rows = [row[:1] + row[2:] for row in rows]
            blocks = [Table(columns, rows)]
            not_listed = sum(f.count for f in listed) - len(shown)
            if not_listed > 0:
                blocks.append(
                    Paragraph(
                        f"{not_listed} later compilation(s) are counted above but not listed one "
                        f"by one (the first {limits.DETAILS_PER_FUNCTION} of each function are)."
                    )
                )
            sections.append(Section(title, blocks))

        sections += cost_sections(self.sizes, self.donations, self.cache_misses, self.cache_hits, self.stale_globals)
        if self.budget is not None:
            scope = f"`{bare_name(self.budget_function)}`" if self.budget_function else "each of your functions"
            verdict = self.budget_message or "kept"
            sections.append(
                Section(
                    "Budget",
                    [
                        Facts(
                            [
                                ("budget", f"at most {self.budget} compilation(s)"),
                                ("applies to", scope),
                                ("result", verdict),
                            ]
                        )
                    ],
                )
            )
        notes = []
        if self.other_thread_compilations:
            notes.append(
                Paragraph(
                    f"Other threads compiled {self.other_thread_compilations} time(s) while the cell ran; "
                    "those compilations are not the cell's and are not listed."
                )
            )
        if self.explanations_stopped:
            notes.append(
                Paragraph(
                    f"`{self.explanations_stopped}` compiled more than {limits.EXPLAIN_LIMIT} times, so JAX's cache-miss "
                    "explanations were switched off for the rest of the cell (their cost grows with every compilation); "
                    "later causes are inferred from the argument types and static values."
                )
            )
        if self.budget_function and not any(f.name == bare_name(self.budget_function) for f in self.functions):
            notes.append(
                Paragraph(
                    f"No function named `{bare_name(self.budget_function)}` compiled in this cell "
                    "(check the name given to --fn)."
                )
            )
        if notes:
            sections.append(Section("Notes", notes))
        log = [line for c in shown for line in c.log]
        if log:
            kept = f", {len(log)} of {self.log_lines} kept" if self.log_lines > len(log) else ""
            sections.append(
                Section(
                    "",
                    [
                        Evidence(
                            f"JAX's compile log for the compilations listed ({len(log)} lines{kept})", "\n".join(log)
                        )
                    ],
                )
            )
        return Document("%%jax_compiles", self.status, self.summary, sections, fix=self.first_fix)

    @property
    def first_fix(self) -> str:
        """The fix of the function the headline names first (over budget, else the first recompiled)."""
        named = self.over_budget or self.recompiled_functions
        if named:
            return f"`{named[0].name}`: {named[0].fix}" if named[0].fix else ""
        if self.library_recompiles and not self.rebuilt_loops:
            return LIBRARY_RECOMPILE_FIX
        return cost_fix(self.sizes, self.donations, self.cache_misses, self.stale_globals)
