"""The compilation report: what was compiled in a block and why, as data, and its verdict, headline and document.

Plain data filled in by ``collector.Collector`` while the block runs (each function and compilation:
``model.py``); the document is drawn by the section builders of ``sections.py``. Nothing here measures or
calls into JAX.
"""

from __future__ import annotations

import dataclasses

from jaxmagic._jax.compile_log import bare_name
from jaxmagic.probes._compiles.cache_misses import CacheMiss
from jaxmagic.probes._compiles.cost_sections import cost_concerns, cost_fix, cost_headline, cost_sections
from jaxmagic.probes._compiles.donations import UnusableDonation
from jaxmagic.probes._compiles.fixes import main_fix
from jaxmagic.probes._compiles.model import Compilation, CompileBudgetExceeded, FunctionCompiles
from jaxmagic.probes._compiles.program_size import ProgramSize
from jaxmagic.probes._compiles.sections import (
    LIBRARY_RECOMPILE_FIX,
    budget_section,
    compile_log_section,
    control_flow_section,
    each_compilation_section,
    library_section,
    library_sentence,
    notes_section,
    per_function_section,
    rebuilt_sentence,
    recompiled_section,
)
from jaxmagic.probes._compiles.stale_globals import StaleGlobal
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, act, failed
from jaxmagic.report.document import Document, Section
from jaxmagic.report.wording import counted, ended

_BODY_PRIMITIVES = ("scan", "while", "cond")  # eager control flow whose cache key holds its body function


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
                f"`{f.name}` ({f.count}x: {' + '.join(k.title for k in f.kinds_again[:2])})" for f in recompiled[:3]
            )
            more = f" and {len(recompiled) - 3} more" if len(recompiled) > 3 else ""
            return f"{len(recompiled)} functions compiled more than once: {parts}{more} (each below)."
        if self.rebuilt_loops:
            return rebuilt_sentence(self.rebuilt_loops[0])
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

    def document(self) -> Document:
        shown = [c for c in self.compilations if self.show_all or c.kind == "user"]
        listed = self.functions if self.show_all else self.user_functions
        sections: list[Section] = [
            *recompiled_section(self.recompiled_functions, self.compilations, self.first_fix),
            *control_flow_section(self.rebuilt_loops),
            *library_section(self.library_recompiles),
            *per_function_section(listed, self.eager_functions, self.show_all),
            *each_compilation_section(shown, sum(f.count for f in listed)),
            *cost_sections(self.sizes, self.donations, self.cache_misses, self.cache_hits, self.stale_globals),
            *budget_section(self.budget, self.budget_function, self.budget_message),
            *notes_section(
                self.other_thread_compilations, self.explanations_stopped, self.budget_function, self.functions
            ),
            *compile_log_section(shown, self.log_lines),
        ]
        return Document("%%jax_compiles", self.status, self.summary, sections, fix=self.first_fix)

    @property
    def first_fix(self) -> str:
        """The fix of the function the headline names first (over budget, else the first recompiled)."""
        named = self.over_budget or self.recompiled_functions
        if named:
            fix = main_fix(named[0])
            return f"`{named[0].name}`: {fix}" if fix else ""
        if self.library_recompiles and not self.rebuilt_loops:
            return LIBRARY_RECOMPILE_FIX
        return cost_fix(self.sizes, self.donations, self.cache_misses, self.stale_globals)


__all__ = [
    "LIBRARY_RECOMPILE_FIX",
    "Compilation",
    "CompileBudgetExceeded",
    "CompileReport",
    "FunctionCompiles",
    "library_sentence",
]
