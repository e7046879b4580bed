"""The sections of the ``%%jax_compiles`` document, one builder each, named after the section it draws; and
the sentences for what compiled again outside the user's jitted functions (a loop's body, a library).

Each builder takes the parts of the report it draws (``model`` data) and returns its sections, none when
there is nothing to say; ``report.CompileReport.document`` puts them in order.
"""

from __future__ import annotations

from jaxmagic._jax.compile_log import bare_name
from jaxmagic.probes._compiles import model
from jaxmagic.probes._compiles.cause import CAUSE_TITLES, FIRST, CauseKind
from jaxmagic.probes._compiles.fixes import fix_for
from jaxmagic.probes._compiles.model import Compilation, FunctionCompiles, line_text
from jaxmagic.report.document import Block, Evidence, Facts, Paragraph, Section, Table
from jaxmagic.report.provenance import provenance_blocks
from jaxmagic.report.wording import counted

LIBRARY_RECOMPILE_FIX = (
    "jaxmagic cannot see into the library's cache key, so it could not tell which value changed, and tried no "
    "fix. If that line runs again and again (a loop, new data of the same shape), look in the library's "
    "documentation for its way to keep one compiled program across calls."
)

_STATIC_UNEXPLAINED = (
    "JAX's own explanation for a changed static argument is only 'cache miss explanation "
    "unavailable' (JAX 0.12): jaxmagic compares the static values of the calls to name it."
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


def rebuilt_sentence(f: FunctionCompiles) -> str:
    """Control flow outside jit compiled again for the same argument types: its body was built anew."""
    return (
        f"`{f.name}` outside jit compiled {counted(f.count, 'time')} for the same argument types ({f.last_argument_types}): "
        "what differed is not its arguments but its body or settings - usually a new function each time "
        "(a lambda or closure built in the loop), which JAX's cache never matches. Define the body once, "
        "outside the loop, or jit the function that runs it."
    )


def stage_times(*seconds: float | None) -> str:
    """``"1.4 / 1.3 / 27.3 ms"``: the three stage durations in one cell."""
    return " / ".join("-" if t is None else f"{t * 1e3:.1f}" for t in seconds) + " ms"


def recompiled_section(
    recompiled: list[FunctionCompiles], compilations: list[Compilation], told_fix: str
) -> list[Section]:
    """ "Recompiled": the user's functions that compiled again, what changed, what to do and the call.
    ``told_fix``: the document's own fix line, under the headline, not said again here."""
    if not recompiled:
        return []
    rows = [
        [
            f"`{f.name}`" + (f" ({f.defined_at})" if f.defined_at else ""),
            f"{f.count}: {f.cause_breakdown}",
            f.evidence or "-",
        ]
        for f in recompiled[:8]
    ]
    blocks: list[Block] = [Table(["function", "compilations", "what changed"], rows)]
    if any(f.main_kind is not None and f.main_kind.jax_unexplained for f in recompiled):
        blocks.append(Paragraph(_STATIC_UNEXPLAINED))
    blocks += _what_to_do(recompiled[:8], told_fix)
    for f in recompiled[:3]:
        again = next((c for c in compilations if c.function == f.name and c.cause_kind is not FIRST), None)
        if again is not None and again.provenance is not None:
            blocks += provenance_blocks(again.provenance, f"compilation {again.number} of `{f.name}` (the call)")
    return [Section("Recompiled", blocks)]


def _what_to_do(recompiled: list[FunctionCompiles], told_fix: str) -> list[Block]:
    """One "What to do" per fix, naming every function it is for (a fix told under the headline is not)."""
    by_fix: dict[tuple[CauseKind, str], list[str]] = {}
    for f in recompiled:
        for kind in f.kinds_again[:3]:
            fix = fix_for(f, kind)
            if fix:
                by_fix.setdefault((kind, fix), []).append(f"`{f.name}`")
    blocks: list[Block] = []
    for (kind, fix), names in by_fix.items():
        if told_fix.endswith(fix) and len(names) == 1 and told_fix.startswith(f"{names[0]}:"):
            continue
        blocks.append(Paragraph(f"What to do ({', '.join(names)}, {kind.title}): {fix}"))
    return blocks


def control_flow_section(rebuilt_loops: list[FunctionCompiles]) -> list[Section]:
    """ "Control flow outside jit": a lax loop or cond run eagerly whose body was built anew."""
    if not rebuilt_loops:
        return []
    return [Section("Control flow outside jit", [Paragraph(rebuilt_sentence(f)) for f in rebuilt_loops[:3]])]


def library_section(library_recompiles: list[FunctionCompiles]) -> list[Section]:
    """ "Compiled again inside a library": a library's own jitted function that compiled again."""
    if not library_recompiles:
        return []
    blocks: list[Block] = [Paragraph(library_sentence(f)) for f in library_recompiles[:3]]
    return [Section("Compiled again inside a library", [*blocks, Paragraph(f"What to do: {LIBRARY_RECOMPILE_FIX}")])]


def per_function_section(
    listed: list[FunctionCompiles], eager: list[FunctionCompiles], show_all: bool
) -> list[Section]:
    """ "Compilations per function": each function listed with its count, why and stage times; the eager
    operations not listed (unless ``--all``), counted."""
    blocks: list[Block] = []
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
        blocks.append(Table(["function (defined at)", "compiles", "why", "trace / lower / XLA compile, total"], rows))
    if eager and not show_all:
        names = ", ".join(f"{f.name} x{f.count}" for f in sorted(eager, key=lambda f: -f.count)[:6])
        more = ", ..." if len(eager) > 6 else ""
        blocks.append(
            Paragraph(
                f"Not listed: {sum(f.count for f in eager)} small compilation(s) of eager operations - JAX calls "
                f"outside jit such as jnp.ones, each compiled once per new shape ({names}{more}). "
                "`--all` lists them."
            )
        )
    return [Section("Compilations per function", blocks)] if blocks else []


def each_compilation_section(shown: list[Compilation], counted_above: int) -> list[Section]:
    """ "Each compilation": one row per compilation kept, what changed from the row above written out.
    ``counted_above``: the compilations of the functions listed above, kept or not."""
    if not shown:
        return []
    rows = [_compilation_row(c, shown[i - 1] if i else None) for i, c in enumerate(shown)]
    columns = ["#", "function", "your line", "cause: what changed", "argument types", "trace / lower / XLA compile"]
    functions = {c.function for c in shown}
    title = "Each compilation"
    if len(functions) == 1:  # one function: named in the title, not in a column of its own
        title += f" of `{next(iter(functions))}`"
        columns.pop(1)
        rows = [row[:1] + row[2:] for row in rows]
    blocks: list[Block] = [Table(columns, rows)]
    not_listed = counted_above - len(shown)
    if not_listed > 0:
        blocks.append(
            Paragraph(
                f"{not_listed} later compilation(s) are counted above but not listed one "
                f"by one (the first {model.DETAILS_PER_FUNCTION} of each function are)."
            )
        )
    return [Section(title, blocks)]


def _compilation_row(c: Compilation, previous: Compilation | None) -> list[str]:
    # Only what changed from the row above is written out: a loop's rows share the line.
    same = previous is not None and previous.function == c.function
    line = line_text(c.line)
    types = c.argument_types or "-"
    changed = "; ".join(c.changes)
    return [
        str(c.number),
        f"`{c.function}`",
        "same" if same and previous is not None and line == line_text(previous.line) else line,
        CAUSE_TITLES.get(c.cause, c.cause) + (f": {changed}" if changed else ""),
        "same" if same and previous is not None and types == (previous.argument_types or "-") else types,
        stage_times(c.trace_seconds, c.lower_seconds, c.compile_seconds),
    ]


def budget_section(budget: int | None, budget_function: str, message: str) -> list[Section]:
    """ "Budget": the budget asked for (``--budget``, ``--fn``) and whether it was kept."""
    if budget is None:
        return []
    scope = f"`{bare_name(budget_function)}`" if budget_function else "each of your functions"
    facts = [("budget", f"at most {budget} compilation(s)"), ("applies to", scope), ("result", message or "kept")]
    return [Section("Budget", [Facts(facts)])]


def notes_section(
    other_thread_compilations: int, explanations_stopped: str, budget_function: str, functions: list[FunctionCompiles]
) -> list[Section]:
    """ "Notes": what the tables leave out - other threads' compilations, explanations switched off, a --fn
    that named no function compiled."""
    notes: list[Block] = []
    if other_thread_compilations:
        notes.append(
            Paragraph(
                f"Other threads compiled {other_thread_compilations} time(s) while the cell ran; "
                "those compilations are not the cell's and are not listed."
            )
        )
    if explanations_stopped:
        notes.append(
            Paragraph(
                f"`{explanations_stopped}` compiled more than {model.EXPLAIN_LIMIT} times, so JAX's cache-miss "
                "explanations were switched off for the rest of the cell (their cost grows with every compilation); "
                "later causes are inferred from the argument types and static values."
            )
        )
    if budget_function and not any(f.name == bare_name(budget_function) for f in functions):
        notes.append(
            Paragraph(
                f"No function named `{bare_name(budget_function)}` compiled in this cell "
                "(check the name given to --fn)."
            )
        )
    return [Section("Notes", notes)] if notes else []


def compile_log_section(shown: list[Compilation], log_lines: int) -> list[Section]:
    """The compile log of the compilations listed, as evidence (an untitled section)."""
    log = [line for c in shown for line in c.log]
    if not log:
        return []
    kept = f", {len(log)} of {log_lines} kept" if log_lines > len(log) else ""
    title = f"JAX's compile log for the compilations listed ({len(log)} lines{kept})"
    return [Section("", [Evidence(title, "\n".join(log))])]
