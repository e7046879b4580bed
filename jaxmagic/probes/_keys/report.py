"""The key probe's report: what ``%%jax_keys`` found (the kinds of finding of ``findings.py``, legacy keys),
``key_findings`` in the order told, and the document drawn by one builder per section (``SECTIONS``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from jaxmagic.probes._keys.findings import (
    ConstantKeyDraw,
    KeyFinding,
    KeyFlow,
    KeyReuse,
    LegacyKeyUse,
    LoopKeyDraw,
    RepeatedDraw,
    RepeatedKeys,
    SameNumbersDraw,
    SharedKeyDraw,
)
from jaxmagic.probes._keys.wording import FIX, LEGACY_NOTE
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, act, failed
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table, split_headline
from jaxmagic.report.provenance import provenance_blocks
from jaxmagic.report.wording import ended


@dataclasses.dataclass
class KeyReport(Report):
    """What ``%%jax_keys`` found."""

    kind = "jax_keys"

    reuse: list[KeyReuse] = dataclasses.field(default_factory=list)
    # reuses JAX's checker flagged inside a library, of keys the library made itself: none of the user's
    # keys was consumed twice (numpyro's MCMC.run given one fresh key), so they are told, not counted
    library_reuse: list[KeyReuse] = dataclasses.field(default_factory=list)
    loop_draws: list[LoopKeyDraw] = dataclasses.field(default_factory=list)  # same key at every pass of a loop
    # a key made from constants inside a jitted function (or closed over): the same draw at every call
    constant_draws: list[ConstantKeyDraw] = dataclasses.field(default_factory=list)
    flows: list[KeyFlow] = dataclasses.field(default_factory=list)
    legacy: list[LegacyKeyUse] = dataclasses.field(default_factory=list)
    draws: list[RepeatedDraw] = dataclasses.field(default_factory=list)  # eager jax.random calls, per line
    shared: list[SharedKeyDraw] = dataclasses.field(default_factory=list)  # one key for a whole vmapped batch
    # key arguments a jitted function of yours carries without drawing from them ("`eval_step`'s `state['key']`"):
    # not counted (``idle_keys``), said so
    carried: list[str] = dataclasses.field(default_factory=list)
    recorded: bool = False  # reuse was recorded, not raised
    calls_checked: bool = True  # False: only traced functions were checked, not each call
    followed: bool = True  # False: this JAX gave no way to see calls (no key counts)
    other_error: str = ""
    legacy_keys_followed: int = 0  # legacy key data remembered to find one consumed on two lines
    legacy_keys_limit: int = 0  # > 0: the limit was reached, later keys were not remembered

    @property
    def new_loop_draws(self) -> list[LoopKeyDraw]:
        """Loop draws with an unchanging key that no reuse JAX's checker raised already names (a key drawn
        with as it is, in a loop body, is both)."""
        reused = {(r.reused_at.filename, r.reused_at.lineno) for r in self.reuse if r.reused_at is not None}
        return [d for d in self.loop_draws if d.line is None or (d.line.filename, d.line.lineno) not in reused]

    @property
    def repeated_constant_draws(self) -> list[ConstantKeyDraw]:
        """Draws with a key made of constants in a function called more than once here (called once, a
        fixed seed is just a seed), except on a line a reuse or loop finding names already."""
        named = {(r.reused_at.filename, r.reused_at.lineno) for r in self.reuse if r.reused_at is not None}
        named |= {(d.line.filename, d.line.lineno) for d in self.loop_draws if d.line is not None}
        return [
            d
            for d in self.constant_draws
            if d.calls > 1 and (d.line is None or (d.line.filename, d.line.lineno) not in named)
        ]

    @property
    def same_numbers_draws(self) -> list[SameNumbersDraw]:
        """Every draw that gives the same numbers where they should differ - in each element of a vmapped
        batch, at each pass of a loop, at each call: what the doctor and the watch report as findings."""
        return [*self.shared, *self.new_loop_draws, *self.repeated_constant_draws]

    def flow(self, function: str) -> KeyFlow | None:
        """The key flow of ``function`` (the first argument that carries keys)."""
        return next((f for f in self.flows if f.function == function), None)

    @property
    def repeated_flows(self) -> list[KeyFlow]:
        return [f for f in self.flows if f.repeated]

    @property
    def repeated_draws(self) -> list[RepeatedDraw]:
        """Eager draws with repeated key data, except those a recorded reuse already names (same line)."""
        named = {(r.reused_at.filename, r.reused_at.lineno) for r in self.reuse if r.reused_at}
        return [
            d
            for d in self.draws
            if d.repeated and not (d.line and (d.line.filename, d.line.lineno) in named and not d.legacy)
        ]

    def concerns(self) -> list[Concern]:
        kinds: list[KeyReuse | KeyFlow | RepeatedDraw | SameNumbersDraw] = [
            *self.reuse,
            *self.repeated_flows,
            *self.repeated_draws,
            *self.same_numbers_draws,
        ]
        found = [act(kind.concern) for kind in kinds]
        return found + ([failed(self.other_error)] if self.other_error else [])

    @property
    def summary(self) -> str:
        failed = f" The cell failed with {ended(self.other_error)}" if self.other_error and not self.reuse else ""
        return split_headline(self._summary_sentences())[0] + failed

    @property
    def also_found(self) -> list[str]:
        """The findings the headline had no room for (``split_headline``): said first below it."""
        return split_headline(self._summary_sentences())[1]

    def _summary_sentences(self) -> list[str]:
        """Each thing the summary tells, a sentence each, in the order told."""
        parts = []
        if self.reuse:
            parts.append(f"Key reused: {self.reuse[0].headline}.")
        for f in self.repeated_flows[:2]:
            parts.append(f"{f.headline}; {f.distinct} distinct key(s) in all.")
        for d in self.repeated_draws[:2]:
            parts.append(d.text + ": the same random numbers each time.")
        for shared in self.shared[:2]:
            parts.append(shared.text + ".")
        for loop_draw in self.new_loop_draws[:2]:
            parts.append(loop_draw.text + ".")
        for constant_draw in self.repeated_constant_draws[:2]:
            parts.append(constant_draw.text + ".")
        if self.legacy and not parts:
            n = sum(u.count for u in self.legacy)
            parts.append(
                f"No key was reused: {n} jax.random call(s) got a legacy uint32 PRNGKey, followed by their key data."
            )
        if not parts:
            flows = [f for f in self.flows if f.calls]
            if flows:
                f = flows[0]
                parts.append(
                    f"No key was reused; `{f.function}` received {f.distinct} distinct key(s) in {f.calls_compared}."
                )
            elif self.carried:
                parts.append(
                    f"No key was reused ({', '.join(self.carried[:3])}: carried through without a draw, not counted)."
                )
            else:
                parts.append("No key was reused (no typed key reached a jitted function of yours).")
            if self.library_reuse:
                inside = sorted({r.library or r.function or r.consumer for r in self.library_reuse})
                parts.append(
                    f"JAX's checker flagged {len(self.library_reuse)} reuse(s) inside "
                    f"{', '.join(f'`{name}`' for name in inside)} of keys the library made itself, not of a key "
                    "your code handed over twice."
                )
        return parts

    def document(self) -> Document:
        sections = [section for build in SECTIONS for section in build(self)]
        findings = key_findings(self)  # the fix of the first, as the doctor and the watch offer it
        fix = findings[0].fix if findings else ""
        return Document("%%jax_keys", self.status, self.summary, sections, fix=fix, nothing_to_do=self.unexplained())


def key_findings(report: KeyReport) -> list[KeyFinding]:
    """Every key problem ``report`` holds, in the order ``%%jax_keys`` tells them: each kind words its own
    (``findings.py``)."""
    found = [r.finding() for r in report.reuse]
    found += [f.finding() for f in report.repeated_flows]
    if not report.repeated_flows:  # the same bug seen from the eager side: told once, by the flow if there is one
        found += [d.finding() for d in report.repeated_draws]
    found += [draw.finding() for draw in report.same_numbers_draws]  # the same numbers in every element / pass / call
    return found


# -- the sections of the document, in the order drawn (``SECTIONS``): each takes the report ------------------


def also_found(report: KeyReport) -> list[Section]:
    """The headline's findings it had no room for, right below it."""
    also = report.also_found
    return [Section("Also found", [Paragraph(t) for t in also], pinned=True)] if also else []


def key_reused(report: KeyReport) -> list[Section]:
    """A section per reuse JAX's checker stopped at (the first four)."""
    return [Section("Key reused", _reuse_blocks(r)) for r in report.reuse[:4]]


def _reuse_blocks(r: KeyReuse) -> list[Block]:
    facts = [("consumer", f"`{r.consumer}`")]
    if r.index is not None:
        facts.append(("argument", f"{r.index}" + (f" (`{r.argument}`)" if r.argument else "")))
    facts.append(("found", "when the function was traced" if r.where == "trace" else "when it was called"))
    if r.count > 1:
        facts.append(("times", str(r.count)))
    blocks: list[Block] = [Facts(facts), Paragraph(r.explanation)]
    if r.provenance is not None and r.loop_call is not None:
        blocks += provenance_blocks(r.provenance, "the draw with the reused key")
        blocks.append(SourceLines([r.loop_call], "In the body of the loop:"))
    else:
        blocks += _reuse_lines(r)
    blocks.append(Paragraph(r.fix or FIX))
    return blocks


def _reuse_lines(r: KeyReuse) -> list[Block]:
    """Where the key was first consumed and used again, then the reuse's provenance (its lines not twice)."""
    blocks: list[Block] = []
    lines = [line for line in (r.first_used_at, None if r.same_line else r.reused_at) if line]
    if lines:
        caption = (
            "First consumed here, then again on the same line:"
            if r.same_line
            else "First consumed, then used again:"
            if len(lines) > 1
            else "Used here:"
        )
        blocks.append(SourceLines(lines, caption))
    elif r.reused_at:
        blocks.append(SourceLines([r.reused_at], "Used again here:"))
    if r.provenance is not None:
        blocks += [
            b
            for b in provenance_blocks(r.provenance, "the reused key's use")
            if not isinstance(b, SourceLines) or b.lines != [r.reused_at]
        ]
    return blocks


def flagged_inside_a_library(report: KeyReport) -> list[Section]:
    """Reuses JAX's checker flagged inside a library, of keys the library made itself."""
    if not report.library_reuse:
        return []
    rows = [
        [f"`{r.consumer}`", f"`{r.library or r.function}`", r.reused_at.where if r.reused_at else "-", str(r.count)]
        for r in report.library_reuse[:8]
    ]
    blocks: list[Block] = [
        Paragraph(
            "JAX's key-reuse checker stopped at these inside a library: each key was made by the library "
            "(split off inside it), and no variable of your frames holds it, so no key of yours was used "
            "twice. A reuse there is the library's own key handling; your line is shown as context."
        ),
        Table(["consumer", "inside", "your line", "times"], rows),
    ]
    return [Section("Flagged inside a library", blocks)]


def _same_numbers(draws: Sequence[SameNumbersDraw], title: str) -> list[Section]:
    """A section per draw (the first four): what it does, where, and its fix."""
    sections = []
    for draw in draws[:4]:
        blocks: list[Block] = [Paragraph(draw.text + ".")]
        if draw.provenance is not None:
            blocks += provenance_blocks(draw.provenance, "the draw")
        blocks.append(Paragraph(draw.fix))
        sections.append(Section(title, blocks))
    return sections


def the_same_key_at_every_pass_of_a_loop(report: KeyReport) -> list[Section]:
    return _same_numbers(report.new_loop_draws, "The same key at every pass of a loop")


def the_same_key_at_every_call(report: KeyReport) -> list[Section]:
    return _same_numbers(report.repeated_constant_draws, "The same key at every call")


def one_key_for_a_whole_batch(report: KeyReport) -> list[Section]:
    return _same_numbers(report.shared, "One key for a whole batch")


def keys_per_jitted_function(report: KeyReport) -> list[Section]:
    """The table of key flows, with what a repeated flow means and how keys were counted."""
    if not report.flows:
        return []
    rows = [
        [
            f"`{f.function}`",
            f"`{f.argument}`",
            calls_cell(f),
            str(f.distinct),
            (f"{f.repeated_times} x {f.repeated_key}" if f.repeated else "-"),
            f"{f.first_call.label or f.first_call.filename}:{f.first_call.lineno}" if f.first_call else "-",
        ]
        for f in report.flows
    ]
    blocks: list[Block] = [
        Table(["function", "key argument", "calls", "distinct keys", "repeated key", "called from"], rows)
    ]
    if any(f.legacy for f in report.flows):
        blocks.append(
            Paragraph(
                "Legacy uint32 keys are counted where your function's program wraps the argument as "
                "a key (jax.random functions do so with a raw key)."
            )
        )
    first = next((f for f in report.repeated_flows if f.provenance is not None), None)
    if first is not None and first.provenance is not None:
        blocks += provenance_blocks(first.provenance, f"the first call of `{first.function}` with that key")
    if report.repeated_flows:
        blocks.append(
            Paragraph(
                "A function that gets the same key in several calls draws the same random "
                "numbers every time (the same dropout mask every step). " + (report.repeated_flows[0].fix or FIX)
            )
        )
    if any(f.folded_with for f in report.flows):
        blocks.append(
            Paragraph(
                "A key the program only folds other arguments into (`jax.random.fold_in(key, count)`) is "
                "counted with them: the same key with a new count is a new draw, not a reuse."
            )
        )
    blocks.append(
        Paragraph(
            "Counted from the raw data of each typed key passed to a jitted function of "
            "yours (jax.random.key_data, read without consuming the key)."
        )
    )
    return [Section("Keys per jitted function", blocks)]


def calls_cell(keys: RepeatedKeys) -> str:
    """A table's calls cell: "300", or "300 (52 compared)" where not every call's key was compared."""
    return str(keys.calls) if keys.all_compared else f"{keys.calls} ({keys.compared_calls} compared)"


def eager_random_calls_per_line(report: KeyReport) -> list[Section]:
    """The table of eager jax.random calls, the repeated ones first."""
    if not report.draws:
        return []
    shown = [d for d in report.draws if d.repeated] or report.draws[:8]
    rows = [
        [
            f"`jax.random.{d.api}`" + (f" in `{d.library}`" if d.library else ""),
            "legacy uint32" if d.legacy else "typed",
            calls_cell(d),
            str(d.distinct),
            (f"{d.repeated_times} x {d.repeated_key}" if d.repeated else "-"),
            d.line.where if d.line else "-",
        ]
        for d in shown[:12]
    ]
    blocks: list[Block] = [Table(["function", "key", "calls", "distinct", "repeated key", "your line"], rows)]
    first_draw = next((d for d in report.repeated_draws if d.provenance is not None), None)
    if first_draw is not None and first_draw.provenance is not None:
        blocks += provenance_blocks(first_draw.provenance, "the same random numbers again")
    if report.repeated_draws:
        blocks.append(
            Paragraph(
                "The same key data with the same other arguments draws the same random numbers: "
                "a loop that reuses a key it never advances (e.g. the same permutation every epoch). " + FIX
            )
        )
    blocks.append(
        Paragraph(
            "Eager jax.random calls outside jit, followed by the data of the key each call was given "
            "(read without consuming it) and its other arguments."
        )
    )
    return [Section("Eager random calls per line", blocks)]


def legacy_uint32_keys(report: KeyReport) -> list[Section]:
    if not report.legacy:
        return []
    rows = [
        [
            f"`jax.random.{u.api}`",
            str(u.count),
            u.line.where if u.line else "-",
            f"`{u.line.code}`" if u.line and u.line.code else "-",
        ]
        for u in report.legacy
    ]
    return [
        Section("Legacy uint32 keys", [Table(["function", "calls", "your line", "code"], rows), Paragraph(LEGACY_NOTE)])
    ]


def how_this_was_checked(report: KeyReport) -> list[Section]:
    how = [
        "Checked with jax.debug_key_reuse(True) for this cell only"
        + (
            ": reuses were recorded and the cell ran on as it would without the checker."
            if report.recorded
            else ": the first reuse stops the cell with JAX's KeyReuseError."
        )
    ]
    if not report.calls_checked:
        how.append(
            "Each traced function was checked for a key used twice inside it; keys consumed twice "
            "between calls were not checked call by call (%%jax_keys does), only counted per function."
        )
    if not report.followed:
        how.append("This JAX gives no way to follow single calls, so keys per function were not counted.")
    if report.legacy_keys_followed:
        how.append(
            f"Legacy uint32 keys were followed by their data: {report.legacy_keys_followed:,} consumed key(s) "
            "remembered, to find one consumed again on another line"
            + (
                f" - the first {report.legacy_keys_limit:,} only (the limit): a reuse of a later one is not seen."
                if report.legacy_keys_limit
                else "."
            )
        )
    return [Section("How this was checked", [Paragraph(t) for t in how])]


# The document's sections, in the order drawn
SECTIONS: tuple[Callable[[KeyReport], list[Section]], ...] = (
    also_found,
    key_reused,
    flagged_inside_a_library,
    the_same_key_at_every_pass_of_a_loop,
    the_same_key_at_every_call,
    one_key_for_a_whole_batch,
    keys_per_jitted_function,
    eager_random_calls_per_line,
    legacy_uint32_keys,
    how_this_was_checked,
)
