"""Compilation probe: which functions compiled during a block, how often, and why.

Usage without IPython::

    with jaxmagic.probes.compiles(budget=1) as report:    # raises CompileBudgetExceeded on exit
        for step in range(8):
            params, loss = train_step(params, x, y, key, step)
    report.count("train_step"), report.function("train_step").main_cause

Sources, all switched on for the block only and put back afterwards:

* ``jax.monitoring``'s ``/jax/core/compile/backend_compile_duration`` event is
  the count: one event per real XLA compilation, with ``fun_name`` (``jit(f)``).
  Its trace and lowering siblings give the other two durations.
* ``jax.log_compiles()`` logs the argument types of each compilation and
  ``jax.explain_cache_misses()`` why the tracing cache missed. Both go to the
  ``jax`` loggers as WARNING records; a filter on those loggers takes them
  (and only them) out of the output and into the report.
* When a compilation happens, the Python stack is still that of the call: jit's
  ``cache_miss`` frame tells whether it is the user's function or an eager
  operation, where it is defined and which static arguments it was given, and
  the innermost frame of the user's code is the line that caused it.

Nothing here calls into JAX while the block runs (no ``jnp``, no jit): the
probe's bookkeeping is string work and compiles nothing itself. What is kept
per compilation is bounded (see ``DETAILS_PER_FUNCTION``), so a cell that
compiles a thousand shapes gives a summary, not a thousand log records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import re
import sys
import threading
import types
from typing import Any

from jaxmagic._jax import compat
from jaxmagic._jax.compile_log import (
    CacheMissExplanation,
    bare_name,
    context_differences,
    is_compile_log_message,
    keyword_passing_change,
    parse_cache_miss,
    parse_compile_log_line,
    pytree_changes,
    signature_text,
)
from jaxmagic._jax.own_settings import is_own_difference, users_values
from jaxmagic._jax.restore import jax_loggers, preserved_jax_state
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.report import Report, SourceLine, Status
from jaxmagic.report.source import cell_label, defining_code, is_user_file, source_line
from jaxmagic.report.wording import ended, error_line

CONFIG_NAMES = ("jax_log_compiles", "jax_explain_cache_misses")

EVENT_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
EVENT_TRACE = "/jax/core/compile/jaxpr_trace_duration"
EVENT_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"

DETAILS_PER_FUNCTION = 12  # compilations of one function kept in full; later ones are only counted
DETAILS_TOTAL = 120  # compilations kept in full over all functions
EXPLAIN_LIMIT = 16  # explained compilations of one function before explanations are switched off
STATIC_VALUES_KEPT = 6  # first values of each static argument kept for the report
CHANGES_KEPT = 8  # changed arguments listed per compilation
LOG_LINE_CHARS = 600

CAUSE_TITLES = {
    "first": "first compilation",
    "types": "argument types changed",
    "weak_type": "weakly typed vs typed argument (weak type)",
    "pytree": "argument structure changed",
    "passing": "argument passed by keyword vs positionally",
    "static": "static argument value changed",
    "static_identity": "static argument is a new object each call, hashed by identity",
    "new_function": "a new jit wrapper built at each call",
    "context": "JAX setting changed",
    "no_retrace": "compiled again without re-tracing",
    "unexplained": "JAX could not say",
    "eager": "eager operation",
}

FIXES = {
    "static": (
        "A static argument is part of the compiled program: every new value compiles it again. Keep "
        "arguments static only when they change the program's structure (a mode, a layer count), and "
        "then let them take few values; pass anything else as a traced argument."
    ),
    "static_identity": (
        "The static argument is hashed by identity: a new object each call is a new cache key, however "
        "alike the objects look. Build it once and pass the same object every time, or make it hashable "
        "by value (define __eq__ and __hash__ over its fields, e.g. a frozen dataclass)."
    ),
    "types": (
        "Each new shape or dtype compiles the function again. Keep dtypes consistent (.astype), and for "
        "varying sizes pad to a few bucket sizes (e.g. powers of two) and mask, instead of one shape per call."
    ),
    "weak_type": (
        "A weakly typed value - a Python scalar, or an array whose dtype came from one, such as "
        "jnp.full(4, 1.0) - and a typed value of the same shape and dtype are different argument types "
        "to jit, so the function compiles once for each. Pass the same kind every time: give it a dtype, "
        "e.g. always jnp.float32(x), jnp.int32(step) or jnp.full(4, 1.0, dtype=jnp.float32)."
    ),
    "pytree": (
        "The argument's structure (dict keys, list length, None vs array) is part of the cache key. Keep "
        "the same structure on every call, e.g. always the same keys, with zeros instead of a missing entry."
    ),
    "passing": (
        "The same argument was passed by keyword in one call and positionally in another; jit treats "
        "these as different calls. Pass it the same way every time."
    ),
    "new_function": (
        "jax.jit was applied to a newly built function each time (jax.jit(jax.grad(f)) inside a helper, "
        "a lambda or functools.partial made in a loop). Each new wrapper starts with an empty cache. Build "
        "the jitted function once, outside the helper or loop (e.g. grad_fn = jax.jit(jax.grad(loss)) at "
        "module level), and pass what changes as arguments."
    ),
    "context": (
        "A JAX setting that is part of the trace (a config value or a context manager such as "
        "jax.default_matmul_precision) differed between the calls. Keep it fixed around the calls."
    ),
    "no_retrace": (
        "The traced program was reused but compiled again: a different jit option (donate_argnums, "
        "shardings), another device, or an explicit .lower().compile()."
    ),
    "unexplained": (
        "JAX said only 'cache miss explanation unavailable'. In JAX 0.12 that is what a changed "
        "static argument value gives, and the static arguments jaxmagic could see did not change. "
        "Look at what else jit hashes into its cache key and is not a traced argument: static values "
        "hidden in a functools.partial or a callable object given to jax.jit, values a wrapper passes "
        "as static arguments, or a closure of a function that is created anew and jitted again."
    ),
    "eager": (
        "Operations outside jit run as small compiled programs, one per new shape and dtype. They are "
        "cheap and cached; a flood of them means eager code in a loop that could go inside a jitted function."
    ),
}


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


@dataclasses.dataclass
class FunctionCompiles:
    """Everything compiled under one function name (and definition) in the block, summarised."""

    name: str
    kind: str
    defined_at: str = ""  # "In [3], line 2" or "model.py:14"
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

    @property
    def jit_name(self) -> str:
        return f"jit({self.name})"

    @property
    def recompiled(self) -> bool:
        return self.count > 1

    @property
    def causes_again(self) -> list[str]:
        """Why it compiled again, most frequent first (ties: the more telling cause first)."""
        again = [cause for cause in self.causes if cause != "first"]
        return sorted(again, key=lambda cause: (-self.causes[cause], _priority(cause)))

    @property
    def main_cause(self) -> str:
        """The most frequent reason it compiled again ("first" if it compiled once)."""
        again = self.causes_again
        if again:
            return again[0]
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
        if cause in ("static", "static_identity"):
            parts = [
                f"`{name}` {_value_sequence(values, self.static_value_counts.get(name, 0))}"
                for name, values in self.static_values.items()
                if len(values) > 1 or cause == "static_identity"
            ]
            return f"{title}: {'; '.join(parts)}" if parts else title
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
        if cause in ("static", "static_identity"):
            kinds = [self.static_kinds.get(name, "") for name in self.static_values]
            kind = next((k for k in kinds if k in STATIC_FIXES and (k != "number" or cause == "static")), "")
            if kind and cause == "static_identity":
                return f"{FIXES[cause].split(': ', 1)[0]}. {STATIC_FIXES[kind]}"
            if kind:
                return f"{FIXES[cause]} {STATIC_FIXES[kind]}"
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
            elif cause in ("static", "static_identity") or self.change_examples.get(cause):
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


# The fix for a static argument, by the kind of its values (``StaticValue.kind``).
STATIC_FIXES = {
    "number": (
        "The static value only feeds arithmetic (a learning-rate schedule, a step counter): make it a traced "
        "argument - drop it from static_argnums/static_argnames and pass an array, e.g. jnp.int32(step)."
    ),
    "function": (
        "A function is hashed by identity, so a lambda or functools.partial built anew for each call is a new "
        "cache key. Build it once, before the loop, and pass that same object; put what changes into a "
        "traced argument."
    ),
    "functions": (
        "A tuple or NamedTuple holding functions (an optax GradientTransformation, a pair of init/apply "
        "functions) is hashed by its functions' identities, so one built by a factory at each call is always "
        "new. Build it once, before the loop, and pass that same object (or close over it); pass what "
        "changes, such as a learning rate, as a traced argument."
    ),
    "object": (
        "An object whose class has no __eq__/__hash__ of its own (a plain class, a dataclass(eq=False), a "
        "module object) is hashed by identity. Build it once and reuse it; or make it hashable by value "
        "(a frozen dataclass, or __eq__ and __hash__ over its fields); or, if it holds arrays, pass it as a "
        "traced pytree argument instead of a static one (jax.tree_util.register_dataclass, "
        "flax.struct.dataclass, equinox.Module)."
    ),
}


# Which cause to name first when two are equally frequent: the ones people find hardest first.
_CAUSE_PRIORITY = (
    "static",
    "static_identity",
    "new_function",
    "weak_type",
    "passing",
    "pytree",
    "types",
    "context",
    "no_retrace",
    "unexplained",
    "eager",
    "first",
)


def _priority(cause: str) -> int:
    return _CAUSE_PRIORITY.index(cause) if cause in _CAUSE_PRIORITY else len(_CAUSE_PRIORITY)


def _value_sequence(values: list[str], distinct: int) -> str:
    text = " -> ".join(values)
    if distinct > len(values):
        text += f" -> ... ({distinct} different values)"
    return text


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

    # -- queries -------------------------------------------------------------

    def function(self, name: str) -> FunctionCompiles | None:
        """The summary for ``name`` ("f" or "jit(f)"), the most compiled one if several share the name."""
        name = bare_name(name)
        matches = [f for f in self.functions if f.name == name]
        return max(matches, key=lambda f: f.count) if matches else None

    def count(self, name: str) -> int:
        """How many times functions named ``name`` ("f" or "jit(f)") compiled in the block."""
        name = bare_name(name)
        return sum(f.count for f in self.functions if f.name == name)

    def compilations_of(self, name: str) -> list[Compilation]:
        name = bare_name(name)
        return [c for c in self.compilations if c.function == name]

    @property
    def user_functions(self) -> list[FunctionCompiles]:
        return [f for f in self.functions if f.kind == "user"]

    @property
    def eager_functions(self) -> list[FunctionCompiles]:
        return [f for f in self.functions if f.kind != "user"]

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
        parts = [f"{f.jit_name} compiled {f.count} times ({f.reason})" for f in over]
        scope = f" for {bare_name(self.budget_function)}" if self.budget_function else " per function"
        return f"Compile budget exceeded: {'; '.join(parts)}; the budget is {self.budget}{scope}."

    def raise_if_over_budget(self) -> None:
        """Raise CompileBudgetExceeded if a function compiled more often than the budget allows."""
        __tracebackhide__ = True
        if self.over_budget:
            raise CompileBudgetExceeded(self.budget_message)

    # -- Report ----------------------------------------------------------------

    @property
    def status(self) -> Status:
        if self.over_budget or self.recompiled_functions:
            return Status.PROBLEM
        return Status.ERROR if self.other_error else Status.OK

    @property
    def summary(self) -> str:
        text = self._findings()
        if self.other_error:
            text = f"The cell failed with {ended(self.other_error)} Before that: {text[0].lower()}{text[1:]}"
        return text

    def _findings(self) -> str:
        eager = self.eager_compilations
        eager_note = f" (and {eager} small compilation{'s' if eager != 1 else ''} of eager operations)" if eager else ""
        if self.over_budget:
            over = self.over_budget
            first = over[0]
            text = f"Over budget: `{first.name}` compiled {first.count} times (budget {self.budget}): {ended(first.reason)}"
            return text + (f" {len(over) - 1} more function(s) over budget." if len(over) > 1 else "")
        recompiled = self.recompiled_functions
        if len(recompiled) == 1:
            f = recompiled[0]
            return f"`{f.name}` compiled {f.count} times: {ended(f.reason)}"
        if recompiled:
            parts = ", ".join(
                f"`{f.name}` ({f.count}x: {' + '.join(CAUSE_TITLES[c] for c in f.causes_again[:2])})"
                for f in recompiled[:4]
            )
            return f"{len(recompiled)} functions compiled more than once: {parts}."
        users = self.user_functions
        if users:
            names = ", ".join(f"`{f.name}`" for f in users[:4]) + (", ..." if len(users) > 4 else "")
            return f"{len(users)} function(s) compiled once each ({names}); nothing recompiled{eager_note}."
        if eager:
            return f"None of your jitted functions compiled; {eager} small compilation(s) of eager operations."
        return "Nothing was compiled: every call in this cell reused an already compiled program."

    def document(self):
        from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, Table

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
            for (cause, fix), names in by_fix.items():
                blocks.append(Paragraph(f"What to do ({', '.join(names)}, {CAUSE_TITLES[cause]}): {fix}"))
            sections.append(Section("Recompiled", blocks))

        listed = self.functions if self.show_all else self.user_functions
        if listed:
            rows = [
                [
                    f"`{f.jit_name}`",
                    f.defined_at or "-",
                    str(f.count),
                    str(f.distinct_argument_types),
                    f.reason if f.recompiled else CAUSE_TITLES.get(f.main_cause, f.main_cause),
                    _stage_times(f.trace_seconds, f.lower_seconds, f.compile_seconds),
                ]
                for f in listed
            ]
            blocks = [
                Table(
                    [
                        "function",
                        "defined at",
                        "compiles",
                        "distinct argument types",
                        "why",
                        "trace / lower / XLA compile, total",
                    ],
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
            rows = [
                [
                    str(c.number),
                    f"`{c.function}`",
                    _line_text(c.line),
                    CAUSE_TITLES.get(c.cause, c.cause),
                    "; ".join(c.changes) or "-",
                    c.argument_types or "-",
                    _stage_times(c.trace_seconds, c.lower_seconds, c.compile_seconds),
                ]
                for c in shown
            ]
            blocks = [
                Table(
                    [
                        "#",
                        "function",
                        "your line",
                        "cause",
                        "what changed",
                        "argument types",
                        "trace / lower / XLA compile",
                    ],
                    rows,
                )
            ]
            not_listed = sum(f.count for f in listed) - len(shown)
            if not_listed > 0:
                blocks.append(
                    Paragraph(
                        f"{not_listed} later compilation(s) are counted above but not listed one "
                        f"by one (the first {DETAILS_PER_FUNCTION} of each function are)."
                    )
                )
            sections.append(Section("Each compilation", blocks))

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
                    f"`{self.explanations_stopped}` compiled more than {EXPLAIN_LIMIT} times, so JAX's cache-miss "
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
        return Document("%%jax_compiles", self.status, self.summary, sections)


def _stage_times(*seconds: float | None) -> str:
    """``"1.4 / 1.3 / 27.3 ms"``: the three stage durations in one cell."""
    return " / ".join("-" if t is None else f"{t * 1e3:.1f}" for t in seconds) + " ms"


def _line_text(line: SourceLine | None) -> str:
    if line is None:
        return "-"
    return f"{line.label or line.filename}:{line.lineno} `{line.code}`" if line.code else f"{line.where}"


# -- the probe ------------------------------------------------------------------


class compiles:
    """Count and explain every backend compilation in a ``with`` block.

    ``budget``: at most this many compilations per user function (or only of
    ``fn`` when given); when exceeded and the block itself did not raise,
    leaving the block raises ``CompileBudgetExceeded`` (``raise_over_budget=False``
    leaves that to the caller: ``report.raise_if_over_budget()``). ``show_all``
    makes the report list eager-operation compilations as well.
    """

    def __init__(
        self,
        *,
        budget: int | None = None,
        fn: str | None = None,
        show_all: bool = False,
        raise_over_budget: bool = True,
    ):
        if budget is not None and budget < 0:
            raise ProbeArgumentError("budget", f"must be 0 or more, got {budget}")
        self.report = CompileReport(show_all=show_all, budget=budget, budget_function=fn or "")
        self.raise_over_budget = raise_over_budget
        self._collector: _Collector | None = None
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> CompileReport:
        import jax
        from jax import monitoring

        stack = contextlib.ExitStack()
        stack.enter_context(preserved_jax_state(CONFIG_NAMES))
        collector = _Collector(self.report, stack)
        try:
            stack.enter_context(_compile_logs_captured(collector.on_log))
            monitoring.register_event_duration_secs_listener(collector.on_duration)
            stack.callback(_unregister, collector.on_duration)
            stack.enter_context(jax.log_compiles(True))
            stack.enter_context(jax.explain_cache_misses(True))
        except BaseException:
            stack.close()
            raise
        self._collector, self._stack = collector, stack
        return self.report

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True
        try:
            self._stack.close()
        finally:
            self._collector.finish()
            if exc is not None:
                self.report.other_error = error_line(exc)
        if exc is None and self.raise_over_budget:
            self.report.raise_if_over_budget()
        return False


def _unregister(listener) -> None:
    compat.unregister_duration_listener(listener)  # restored by preserved_jax_state in any case


# The probes active now (nested ones included) and the one filter that feeds them all. A
# filter that drops a record stops the others from seeing it, so there is only ever one.
_LOG_SINKS: list = []
_LOG_FILTER: list = []  # [the filter, the loggers it is on], while any probe is active


@contextlib.contextmanager
def _compile_logs_captured(on_log):
    """Take the compile log records of every ``jax`` logger out of the output and hand them to ``on_log``.

    A filter on a logger sees the records created by that logger, so it goes on
    each ``jax.*`` logger. Other records pass as before. Loggers the user set
    above WARNING are lowered to WARNING so compile records are created at all;
    their other records below the user's level are still dropped, by the filter.
    """
    if not _LOG_SINKS:
        loggers = jax_loggers()
        user_levels = {name: logger.getEffectiveLevel() for name, logger in loggers.items()}

        class _CompileLogFilter(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                try:
                    message = record.getMessage()
                except Exception:  # a malformed record is not ours to judge
                    return True
                if is_compile_log_message(message):
                    for sink in list(_LOG_SINKS):
                        sink(message)
                    return False
                return record.levelno >= user_levels.get(record.name, logging.NOTSET)

        log_filter = _CompileLogFilter()
        for name, logger in loggers.items():
            logger.addFilter(log_filter)
            if user_levels[name] > logging.WARNING:
                logger.setLevel(logging.WARNING)  # put back by preserved_jax_state
        _LOG_FILTER[:] = [log_filter, list(loggers.values())]
    _LOG_SINKS.append(on_log)
    try:
        yield
    finally:
        _LOG_SINKS.remove(on_log)
        if not _LOG_SINKS and _LOG_FILTER:
            log_filter, loggers = _LOG_FILTER
            for logger in loggers:
                logger.removeFilter(log_filter)
            _LOG_FILTER.clear()


@dataclasses.dataclass
class _CallInfo:
    """What the stack says about one compilation; strings only."""

    kind: str = "user"
    defined_file: str = ""
    defined_line: int = 0
    parameter_names: list[str] = dataclasses.field(default_factory=list)
    static_argnames: list[str] = dataclasses.field(default_factory=list)
    static_values: dict[str, StaticValue] = dataclasses.field(default_factory=dict)
    call_site: tuple[str, int, str] | None = None
    wrapper: str = ""  # what jax.jit was given around the user's function: "functools.partial", ...


@dataclasses.dataclass
class _FunctionState:
    summary: FunctionCompiles
    signatures: set = dataclasses.field(default_factory=set)
    last_types: list[str] | None = None
    last_static: dict[str, StaticValue] | None = None
    static_seen: dict[str, set] = dataclasses.field(default_factory=dict)
    explained: int = 0
    detailed: int = 0


class _Collector:
    """Receives monitoring events and compile log lines; builds the report as compilations happen."""

    def __init__(self, report: CompileReport, stack: contextlib.ExitStack):
        self.report = report
        self._stack = stack
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._functions: dict[tuple, _FunctionState] = {}
        self._last_of_name: dict[tuple, _FunctionState] = {}
        # What arrived for a function since its last compilation, by bare name. Cleared at every
        # compilation: leftovers belong to functions traced inside another one (inlined, never compiled).
        self._pending_log: dict[str, list[str]] = {}
        self._pending_types: dict[str, list[str]] = {}
        self._pending_explanation: dict[str, CacheMissExplanation] = {}
        self._pending_trace: dict[str, float] = {}
        self._pending_lower: dict[str, float] = {}
        self._explaining = True
        self._user_values = users_values()  # the user's own values of the settings jaxmagic sets (own_settings)

    # -- inputs --------------------------------------------------------------

    def on_log(self, message: str) -> None:
        if threading.get_ident() != self._thread:  # logged while another thread compiled: not the block's
            return
        with self._lock:
            self.report.log_lines += 1
            line = parse_compile_log_line(message)
            explanation = None if line else parse_cache_miss(message)
            name = line.name if line else explanation.name if explanation else ""
            kept = self._pending_log.setdefault(name, [])
            if len(kept) < 8:
                kept.append(message[:LOG_LINE_CHARS])
            if line is not None and line.stage == "compiling":
                self._pending_types[name] = line.types
            if explanation is not None:
                self._pending_explanation[name] = explanation

    def on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if threading.get_ident() != self._thread:  # another thread's work (a data loader): not the block's
            if event == EVENT_BACKEND_COMPILE:
                with self._lock:
                    self.report.other_thread_compilations += 1
            return
        if event == EVENT_BACKEND_COMPILE:
            info = self._inspect_stack()  # before taking the lock: only reads this thread's frames
            with self._lock:
                self._compiled(bare_name(str(kwargs.get("fun_name", "?"))), duration, info)
        elif event == EVENT_TRACE:
            with self._lock:
                self._pending_trace[bare_name(str(kwargs.get("fun_name", "?")))] = duration
        elif event == EVENT_LOWER:
            with self._lock:
                self._pending_lower[bare_name(str(kwargs.get("fun_name", "?")))] = duration

    # -- the stack at a compilation -------------------------------------------

    def _inspect_stack(self) -> _CallInfo:
        info = _CallInfo()
        found_jit = False
        frame = sys._getframe(1)
        try:
            for _ in range(400):
                if frame is None:
                    break
                code = frame.f_code
                if not found_jit and code.co_name == "cache_miss" and code.co_filename.endswith("pjit.py"):
                    found_jit = True
                    with contextlib.suppress(Exception):  # private frame layout: use it only if it is there
                        _read_jit_frame(frame.f_locals, info, is_user_file)
                if info.call_site is None and is_user_file(code.co_filename):
                    info.call_site = (code.co_filename, frame.f_lineno, code.co_name)
                if found_jit and info.call_site is not None:
                    break
                frame = frame.f_back
        finally:
            del frame
        return info

    # -- one compilation -------------------------------------------------------

    def _compiled(self, name: str, seconds: float, info: _CallInfo) -> None:
        report = self.report
        report.total_compilations += 1
        explanation = self._pending_explanation.get(name)
        types = self._pending_types.get(name)
        trace_seconds = self._pending_trace.get(name)
        lower_seconds = self._pending_lower.get(name)
        log = self._pending_log.get(name, [])
        for pending in (
            self._pending_log,
            self._pending_types,
            self._pending_explanation,
            self._pending_trace,
            self._pending_lower,
        ):
            pending.clear()
        if explanation is not None and not info.defined_file and explanation.defined_at:
            info.defined_file, _, line = explanation.defined_at.rpartition(":")
            info.defined_line = int(line) if line.isdigit() else 0

        key = (name, info.kind, info.defined_file, info.defined_line)
        state = self._functions.get(key)
        if state is None and not info.defined_file:
            # No frame or explanation said where it is defined (an AOT .compile(), or explanations
            # switched off): it is the function of that name seen last.
            state = self._last_of_name.get((name, info.kind))
        if state is not None:
            self._last_of_name[(name, info.kind)] = state
        if state is None:
            label = cell_label(info.defined_file) if info.defined_file else ""
            defined_at = (
                f"{label}, line {info.defined_line}"
                if label
                else f"{info.defined_file}:{info.defined_line}"
                if info.defined_file
                else ""
            )
            state = self._functions[key] = _FunctionState(
                FunctionCompiles(
                    name=name, kind=info.kind, defined_at=defined_at, static_argnames=list(info.static_argnames)
                )
            )
            report.functions.append(state.summary)
            self._last_of_name[(name, info.kind)] = state
        summary = state.summary

        found = _classify(summary, state, explanation, types, info, trace_seconds is not None, self._user_values)
        cause, why, changes = found[0].cause, " ".join(c.why for c in found), [x for c in found for x in c.changes]
        summary.count += 1
        for each in found:
            summary.causes[each.cause] = summary.causes.get(each.cause, 0) + 1
            if each.cause != "first":
                _record_changes(summary, each.cause, each.changes)
        summary.trace_seconds += trace_seconds or 0.0
        summary.lower_seconds += lower_seconds or 0.0
        summary.compile_seconds += seconds
        if types is not None:
            if len(state.signatures) < 100_000:
                state.signatures.add(hash(tuple(types)))
            summary.distinct_argument_types = len(state.signatures)
            summary.last_argument_types = signature_text(types)
            state.last_types = types
        _record_static(summary, state, info.static_values)
        state.last_static = dict(info.static_values)
        line = source_line(*info.call_site) if info.call_site else None
        if summary.first_line is None:
            summary.first_line = line

        if state.detailed < DETAILS_PER_FUNCTION and len(report.compilations) < DETAILS_TOTAL:
            state.detailed += 1
            report.compilations.append(
                Compilation(
                    function=name,
                    number=summary.count,
                    kind=info.kind,
                    cause=cause,
                    why=why,
                    also=[c.cause for c in found[1:]],
                    changes=changes[:CHANGES_KEPT],
                    argument_types=signature_text(types) if types is not None else "",
                    static_arguments={k: v.text for k, v in info.static_values.items()},
                    trace_seconds=trace_seconds,
                    lower_seconds=lower_seconds,
                    compile_seconds=seconds,
                    line=line,
                    jax_explanation=explanation.text if explanation else "",
                    log=list(log),
                )
            )

        if explanation is not None:
            state.explained += 1
            if state.explained >= EXPLAIN_LIMIT and self._explaining:
                self._stop_explaining(name)

    def _stop_explaining(self, name: str) -> None:
        # JAX compares each cache miss with every key seen before, so explanations cost more with every
        # compilation (1,000 shapes: ~50 s instead of ~1 s). The first ones say what there is to say.
        if threading.get_ident() != self._thread:
            return  # the setting is thread-local; another thread's context is not ours to change
        import jax

        self._explaining = False
        self.report.explanations_stopped = name
        self._stack.enter_context(jax.explain_cache_misses(False))

    def finish(self) -> None:
        with self._lock:
            self.report.functions.sort(key=lambda f: (f.kind != "user", -f.count))


def _read_jit_frame(local_vars, info: _CallInfo, is_user) -> None:
    fun = local_vars.get("fun")
    jit_info = local_vars.get("jit_info")
    args = local_vars.get("args", ()) or ()
    kwargs = local_vars.get("kwargs", {}) or {}
    if getattr(fun, "_apply_primitive", False):
        info.kind = "eager"
        return
    code, info.wrapper = defining_code(fun, is_user)
    if code is not None:
        info.defined_file, info.defined_line = code.co_filename, code.co_firstlineno
        info.kind = "user" if is_user(code.co_filename) else "library"
    if jit_info is None:
        return
    signature = getattr(jit_info, "fun_signature", None)
    params = list(signature.parameters) if signature is not None else []
    info.parameter_names = params
    names = []
    for index in getattr(jit_info, "static_argnums", ()) or ():
        name = params[index] if index < len(params) else f"#{index}"
        names.append(name)
        if index < len(args):
            info.static_values[name] = _static_value(args[index])
    for name in getattr(jit_info, "static_argnames", ()) or ():
        if name not in names:
            names.append(name)
        if name in kwargs:
            info.static_values[name] = _static_value(kwargs[name])
    info.static_argnames = names


@dataclasses.dataclass(frozen=True)
class StaticValue:
    """What the report keeps of one static argument's value: text, hash, identity - never the value."""

    text: str  # a whole short repr, or "<type> object" when the repr is long or shows an address
    hashed: int | None
    ident: int
    type_name: str
    by_identity: bool  # its hash and == are (or contain) object identity: functions, plain objects
    kind: str  # "number", "function", "functions" (a tuple of them), "object", "value"
    look: int = 0  # hash of the whole repr without addresses: equal-looking objects share it


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_REPR_CHARS = 60


def _static_value(value) -> StaticValue:
    """The printed value (whole, or type only) and hash of a static argument; the value itself is not kept."""
    type_name = type(value).__name__
    try:
        text = repr(value)
    except Exception:
        text = ""
    text = _ADDRESS.sub("", text)  # the same kind of object built again prints the same
    look = hash(text)
    if not text or len(text) > _REPR_CHARS or "\n" in text:
        text = f"<{type_name} object>"
    try:
        hashed = hash(value)
    except Exception:
        hashed = None
    by_identity = _hashed_by_identity(value)
    return StaticValue(text, hashed, id(value), type_name, by_identity, _static_kind(value, by_identity), look)


def _hashed_by_identity(value, depth: int = 0) -> bool:
    if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)):
        return True
    if isinstance(value, (tuple, frozenset)) and depth < 3:
        return any(_hashed_by_identity(item, depth + 1) for item in list(value)[:64])
    cls = type(value)
    return getattr(cls, "__hash__", None) is object.__hash__ and getattr(cls, "__eq__", None) is object.__eq__


def _static_kind(value, by_identity: bool) -> str:
    if isinstance(value, (bool, int, float, complex)):
        return "number"
    if not by_identity:
        return "value"
    if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)):
        return "function"
    if isinstance(value, (tuple, frozenset)):
        return "functions"
    return "object"


def _record_static(summary: FunctionCompiles, state: _FunctionState, values: dict[str, StaticValue]) -> None:
    for name, value in values.items():
        summary.static_kinds[name] = value.kind
        summary.static_types[name] = value.type_name
        ids = summary.static_ids.setdefault(name, [])
        if value.by_identity and len(ids) < STATIC_VALUES_KEPT and f"{value.ident:#x}" not in ids:
            ids.append(f"{value.ident:#x}")
        text = value.text
        seen = state.static_seen.setdefault(name, set())
        if text in seen or len(seen) >= 100_000:
            continue
        seen.add(text)
        summary.static_value_counts[name] = len(seen)
        kept = summary.static_values.setdefault(name, [])
        if len(kept) < STATIC_VALUES_KEPT:
            kept.append(text)


def _record_changes(summary: FunctionCompiles, cause: str, changes: list[str]) -> None:
    examples = summary.change_examples.setdefault(cause, [])
    for change in changes[:CHANGES_KEPT]:
        if len(examples) < 6 and change not in examples:
            examples.append(change)
    if cause in ("types", "weak_type"):
        for change in changes[:CHANGES_KEPT]:
            key = change.split(":", 1)[0]
            if key in summary.changed_arguments or len(summary.changed_arguments) < 50:
                summary.changed_arguments[key] = summary.changed_arguments.get(key, 0) + 1


@dataclasses.dataclass
class _Cause:
    cause: str  # a key of CAUSE_TITLES
    why: str
    changes: list[str] = dataclasses.field(default_factory=list)


def _classify(
    summary: FunctionCompiles,
    state: _FunctionState,
    explanation: CacheMissExplanation | None,
    types: list[str] | None,
    info: _CallInfo,
    traced: bool,
    user_values: dict[str, str],
) -> list[_Cause]:
    """Why one compilation happened: every cause seen, the main one first."""
    if info.kind != "user":
        shapes = signature_text(types) if types is not None else "these arguments"
        return [_Cause("eager", f"An eager operation compiled for {shapes}.")]
    static = _static_cause(summary, state, info)
    explanation = _without_own_context(explanation, user_values)
    if explanation is not None:
        explained = _explained_cause(summary, state, explanation, types, info)
        if explained is not None:
            if explained.cause in ("first", "new_function"):
                return [explained]
            same_types = types is not None and state.last_types is not None and types == state.last_types
            if static is not None and explained.cause in ("types", "weak_type") and same_types:
                # JAX compares with the closest earlier key, which may be one with other types; against
                # the previous compilation only the static argument changed.
                return [static]
            return [explained] + ([static] if static is not None else [])
        # "unavailable", "debug_info", "other": JAX could not name it; static values can.
    elif traced and summary.count == 0 and state.last_types is None and static is None:
        return [_Cause("first", f"First compilation of `{summary.name}` in this cell.")]
    elif not traced and summary.count > 0:
        return [
            _Cause(
                "no_retrace",
                f"`{summary.name}` compiled again from its cached trace: different jit options, device, "
                "or an explicit .lower().compile().",
            )
        ]
    return [_unexplained_cause(summary, state, explanation, types, info, static)]


def _without_own_context(
    explanation: CacheMissExplanation | None, user_values: dict[str, str]
) -> CacheMissExplanation | None:
    """The explanation without the context differences jaxmagic's own settings made; None if nothing is left.

    JAX ranks a context difference above any argument difference, so after a
    probe ran a function under its own settings, every later miss of that
    function is "explained" by them. Those say nothing about the user's calls:
    the cause is then found as if JAX had said nothing.
    """
    if explanation is None or explanation.kind != "context":
        return explanation
    differences = context_differences(explanation.details)
    kept = [d for d in differences if not is_own_difference(d.name, d.now, d.before, user_values)]
    if differences and not kept:
        return None
    if len(kept) == len(differences):
        return explanation
    return dataclasses.replace(explanation, details=[d.detail for d in kept])


def _explained_cause(summary, state, explanation, types, info) -> _Cause | None:
    name = f"`{summary.name}`"
    kind = explanation.kind
    if kind == "never_seen":
        if summary.count > 0:
            return _new_function_cause(summary, info)
        return _Cause("first", f"First compilation of {name}.")
    if kind == "types":
        changes = [
            c.text + ("" if c.what in ("type", "weak type") else f" ({c.what})") for c in explanation.type_changes
        ]
        changes = changes or explanation.details
        if explanation.type_changes and all(c.what == "weak type" for c in explanation.type_changes):
            return _Cause(
                "weak_type",
                "A weakly typed value (a Python scalar, or an array whose dtype came from one) and a "
                "typed one are different argument types (weak typing): " + "; ".join(changes) + ".",
                changes,
            )
        return _Cause(
            "types", "Argument types changed from the closest earlier call: " + "; ".join(changes) + ".", changes
        )
    if kind == "pytree":
        passed = keyword_passing_change(explanation.details)
        if passed:
            changes = [f"{n}: passed by keyword in one call, positionally in the other" for n in passed]
            return _Cause("passing", "The same argument was passed in two ways: " + "; ".join(changes) + ".", changes)
        changes = pytree_changes(explanation.details, info.parameter_names)
        return _Cause("pytree", "The structure of an argument changed: " + "; ".join(changes) + ".", changes)
    if kind == "context":
        changes = [d.text for d in context_differences(explanation.details)] or explanation.details
        return _Cause(
            "context", "A JAX setting that is part of the trace changed: " + "; ".join(changes) + ".", changes
        )
    return None


def _new_function_cause(summary: FunctionCompiles, info: _CallInfo) -> _Cause:
    where = f" (defined {summary.defined_at})" if summary.defined_at else ""
    around = f", {info.wrapper}," if info.wrapper else ""
    site = ""
    if info.call_site is not None:
        line = source_line(*info.call_site)
        site = f" at {_line_text(line)}"
    return _Cause(
        "new_function",
        f"`{summary.name}`{where} is jitted anew at each call{site}: jax.jit{around} builds a new wrapper "
        "every time, and a new wrapper starts with an empty cache.",
        [f"jax.jit applied to a newly built function{site}"],
    )


def _static_cause(summary: FunctionCompiles, state: _FunctionState, info: _CallInfo) -> _Cause | None:
    static_changes, identity_changes = _static_changes(state.last_static, info.static_values)
    if identity_changes:
        return _Cause(
            "static_identity",
            f"Static argument {'; '.join(identity_changes)}: each call passes a new object, and jit "
            "hashes it by identity, so none matches an earlier call.",
            identity_changes,
        )
    if static_changes:
        return _Cause(
            "static",
            f"Static argument value changed: {'; '.join(static_changes)}. A static argument is "
            "part of the compiled program, so each new value compiles again.",
            static_changes,
        )
    return None


def _unexplained_cause(summary, state, explanation, types, info, static: _Cause | None) -> _Cause:
    name = f"`{summary.name}`"
    if static is not None:
        return static
    if explanation is None and types is not None and state.last_types is not None and types != state.last_types:
        array_parameters = [p for p in info.parameter_names if p not in info.static_argnames]
        changes = _leaf_changes(state.last_types, types, array_parameters)
        if _only_weak_type_differs(state.last_types, types):
            return _Cause(
                "weak_type",
                "A Python scalar (or an array made from one, such as jnp.full(4, 1.0)) and a typed JAX value are "
                "different argument types (weak typing; from the compile log): " + "; ".join(changes) + ".",
                changes,
            )
        return _Cause("types", "Argument types changed (from the compile log): " + "; ".join(changes) + ".", changes)
    if summary.count == 0 and (explanation is None or explanation.kind != "unavailable" or not info.static_values):
        return _Cause("first", f"First compilation of {name} in this cell.")
    if info.static_values and state.last_static is None:
        values = "; ".join(f"{k} = {v.text}" for k, v in info.static_values.items())
        return _Cause(
            "static",
            f"JAX could not say what differed; {name} has static arguments ({values}), and a new "
            "static value is the usual cause.",
        )
    if info.static_argnames:
        return _Cause(
            "unexplained",
            "JAX could not say what differed ('cache miss explanation unavailable'), and the "
            f"static arguments of {name} ({', '.join(info.static_argnames)}) kept their values.",
        )
    return _Cause(
        "unexplained",
        f"JAX could not say what differed ('cache miss explanation unavailable'); {name} has "
        "no static arguments, so a hashed value outside its argument list changed (a partial's or a "
        "wrapper's static value, or a closure of a function jitted anew).",
    )


def _static_changes(before: dict | None, now: dict[str, StaticValue]) -> tuple[list[str], list[str]]:
    """Static arguments whose value changed since the last compilation: (by value, same print but unequal)."""
    if not before:
        return [], []
    changed, identity = [], []
    for name, value in now.items():
        old = before.get(name)
        if old is None:
            continue
        if value.by_identity and (value.hashed != old.hashed or value.hashed is None):
            looks = f"equal-looking ({value.text})" if value.look == old.look else f"{old.text} -> {value.text}"
            identity.append(
                f"{name}: a new {value.type_name} (id {old.ident:#x} -> id {value.ident:#x}), {looks}, "
                "hashed by identity"
            )
        elif value.look != old.look:
            text = f"{old.text} -> {value.text}" if value.text != old.text else f"{value.text}, printed differently"
            changed.append(f"{name}: {text}")
        elif value.hashed != old.hashed or value.hashed is None:
            identity.append(
                f"{name}: a new {value.type_name} (id {old.ident:#x} -> id {value.ident:#x}), equal-looking "
                f"({value.text}) but unequal: its __eq__/__hash__ do not compare by value"
            )
    return changed, identity


def _only_weak_type_differs(before: list[str], now: list[str]) -> bool:
    """True when the compile log's types differ only in being weakly typed ("f32[4] weak" vs "f32[4]")."""
    if len(before) != len(now) or before == now:
        return False
    return all(a.removesuffix(" weak") == b.removesuffix(" weak") for a, b in zip(before, now))


def _leaf_changes(before: list[str], now: list[str], parameter_names: list[str]) -> list[str]:
    if len(before) != len(now):
        return [f"{len(before)} -> {len(now)} array arguments"]
    if len(now) == len(parameter_names):  # one array per parameter: the leaves are the arguments
        names = parameter_names
    else:
        names = [f"argument leaf {i}" for i in range(len(now))]
    return [f"{n}: {a} -> {b}" for n, a, b in zip(names, before, now) if a != b][:CHANGES_KEPT]
