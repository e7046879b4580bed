"""The key probe's report: what ``%%jax_keys`` found (reused keys, key flows, repeated draws, legacy keys) and its wording."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._keys.findings import key_findings
from jaxmagic.probes._keys.wording import FIX, LEGACY_NOTE
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Document, Facts, Paragraph, Section, SourceLines, Table, split_headline
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.wording import ended


@dataclasses.dataclass
class KeyReuse:
    """One KeyReuseError: a typed key consumed a second time."""

    message: str  # JAX's first line
    consumer: str = ""  # what got the consumed key: "random_split", "train_step", "random_bits"
    index: int | None = None  # the argument index JAX gives
    argument: str = ""  # its name, when known ("key")
    where: str = "call"  # "call": at run time, between calls; "trace": inside one traced function
    function: str = ""  # for "trace": the function being traced
    reused_at: SourceLine | None = None
    first_used_at: SourceLine | None = None
    count: int = 1  # record mode: how many times this same reuse happened
    loop_call: SourceLine | None = None  # the lax.fori_loop/scan/while_loop call whose body reuses the key
    loop: str = ""  # "scan body", "while loop": the loop primitive JAX checked
    fix: str = ""  # the fix that applies to this code; FIX (the general one) when no specific one was found
    provenance: Provenance | None = None  # made_at: the line that draws with the reused key
    # A key a library consumed (numpyro's seed handler, haiku.next_rng_key): the library's public callable
    # and the user's line that handed the key over to it (the reuse is that line's; reused_at is context)
    library: str = ""
    handed_at: SourceLine | None = None
    library_own: bool = False  # a key the library made and consumed itself: no key of the user's reused

    @property
    def same_line(self) -> bool:
        return bool(
            self.reused_at
            and self.first_used_at
            and (self.reused_at.filename, self.reused_at.lineno)
            == (self.first_used_at.filename, self.first_used_at.lineno)
        )

    @property
    def headline(self) -> str:
        """The reuse in one sentence (without "Key reused: "): what every report that tells it says."""
        times = f" ({self.count} times)" if self.count > 1 else ""
        if self.library and self.handed_at is not None:
            at = self.reused_at.where if self.reused_at else "?"
            same = " (the same line each time: the same key every call)" if self.same_line else ""
            return (
                f"`{self.consumer}` inside `{self.library}` (at {at}) got a key already consumed{times}, "
                f"given again by your line {self.handed_at.where}{same}"
            )
        at = f" at {self.reused_at.where}" if self.reused_at else ""
        same = " (every pass of the loop uses the same key)" if self.same_line else ""
        return f"`{self.consumer}` got an already consumed key{times}{at}{same}"

    @property
    def explanation(self) -> str:
        what = f"`{self.consumer}`" + (
            f" (argument {self.index}" + (f", `{self.argument}`" if self.argument else "") + ")"
            if self.index is not None
            else ""
        )
        if self.loop_call is not None:
            inside = f" in the loop body `{self.function}`" if self.function else " in the loop body"
            return (
                f"{what}{inside} draws with a key that the loop uses again at its next pass "
                f"(the loop at line {self.loop_call.lineno}): every pass draws from the same random stream, so the "
                "passes get correlated (identical, for the same shape) random numbers."
            )
        if self.where == "trace":
            inside = f" inside `{self.function}`" if self.function else ""
            return (
                f"{what}{inside} is given a key that an earlier operation of the same function already "
                "consumed: both draw from the same random stream, so their random numbers are correlated "
                "(identical, for the same shape)."
            )
        text = f"{what} was given a key that had already been consumed"
        if self.same_line:
            return text + (
                " - on the same line, in an earlier pass of a loop: the loop uses the same key every "
                "time and never replaces it, so every step gets the same random numbers."
            )
        if self.first_used_at:
            return (
                text + f" by your line {self.first_used_at.label or self.first_used_at.filename}, line "
                f"{self.first_used_at.lineno}: the two uses get the same random numbers."
            )
        return text + ": the two uses get the same random numbers."


@dataclasses.dataclass
class KeyFlow:
    """The typed keys one argument of one of your jitted functions received."""

    function: str
    argument: str  # "key", or "argument 3"
    calls: int = 0
    distinct: int = 0
    first_call: SourceLine | None = None
    repeated_key: str = ""  # the data of the key seen most often, e.g. "[1797259609 2579123966]"
    repeated_times: int = 0
    legacy: bool = False  # a raw uint32 key (jax.random.PRNGKey), found as the program wraps it into a key
    provenance: Provenance | None = None  # made_at: the first call that passed the key; transforms: jit(function)
    # the arguments the program folds into this key (`fold_in(key, count)`): a key is the same draw only with them
    folded_with: list[str] = dataclasses.field(default_factory=list)
    fix: str = ""  # the fix for this key when the general one does not apply (a library's own key: its jit)

    @property
    def repeated(self) -> bool:
        return self.calls > 1 and self.distinct < self.calls

    @property
    def headline(self) -> str:
        """The repeated key in one sentence: what every report that tells it says."""
        kind = " legacy uint32" if self.legacy else ""
        return (
            f"`{self.function}` got the same{kind} key in {self.repeated_times} of its {self.calls} calls "
            f"(argument `{self.argument}`)"
        )


@dataclasses.dataclass
class RepeatedDraw:
    """One eager jax.random call of one line of yours, followed by the data of the keys it was given."""

    api: str  # "permutation", "normal", "split"
    line: SourceLine | None
    legacy: bool = False  # given raw uint32 keys (jax.random.PRNGKey)
    calls: int = 0
    distinct: int = 0  # distinct (key data, other arguments)
    repeated_key: str = ""
    repeated_times: int = 0
    provenance: Provenance | None = None  # made_at: the drawing line; started_by: the cell line
    # A key drawn from inside a library (numpyro's seed handler, a Flax module): the library's public
    # callable, and the innermost line of yours it was called from when ``line`` (the line of yours
    # that handed the key over) is another one.
    library: str = ""
    consumed_at: SourceLine | None = None

    @property
    def repeated(self) -> bool:
        return self.calls > 1 and self.distinct < self.calls

    @property
    def text(self) -> str:
        kind = "legacy uint32 key" if self.legacy else "key"
        inside = f" inside `{self.library}`" if self.library else ""
        if self.consumed_at is not None:  # the key came from an outer line of yours
            inside += f" (at {self.consumed_at.where})"
            where = f", given its key by your line {self.line.lineno} ({self.line.function})," if self.line else ""
        elif self.library:
            where = f" (at {self.line.where})" if self.line else ""
        else:
            where = f" at {self.line.where}" if self.line else ""
        return (
            f"`jax.random.{self.api}`{inside}{where} got the same {kind} data and other arguments "
            f"in {self.repeated_times} of its {self.calls} calls"
        )


@dataclasses.dataclass
class SharedKeyDraw:
    """A draw under ``vmap`` with one key for the whole batch: every element gets the same random numbers."""

    function: str  # the jitted function of yours whose program has it: "noisy"
    api: str  # "jax.random.normal"
    line: SourceLine | None = None
    key: str = ""  # the key's name on that line, as written ("key"); "" when it could not be read
    fix: str = ""
    calls: int = 0
    provenance: Provenance | None = None  # made_at: the draw; function; jit(noisy) > vmap; started_by

    @property
    def short(self) -> str:
        return f"`{self.api}` under vmap with one key for the whole batch"

    @property
    def text(self) -> str:
        where = f" at {self.line.where}" if self.line else ""
        with_key = f" with `{self.key}`" if self.key else ""
        return (
            f"`{self.api}`{where} draws{with_key}, one key for the whole vmapped batch "
            f"({self.provenance.path if self.provenance else 'vmap'}): every element gets the same random numbers"
        )


@dataclasses.dataclass
class LoopKeyDraw:
    """A draw in a loop body whose key does not change between passes: every pass, the same numbers."""

    function: str  # the jitted function of yours whose program has it
    api: str  # "jax.random.bernoulli", "flax.linen.Dropout.__call__"
    line: SourceLine | None = None
    loop: str = ""  # "scan", "while"
    calls: int = 0
    provenance: Provenance | None = None

    @property
    def short(self) -> str:
        return f"`{self.api}` with the same key at every pass of a `{self.loop}` loop"

    @property
    def text(self) -> str:
        where = f" at {self.line.where}" if self.line else ""
        return (
            f"`{self.api}`{where} draws in the body of a `{self.loop}` loop with a key that is the same at every "
            "pass (made only from values the loop closes over, not from its carry or the pass number): every "
            "pass gets the same random numbers"
        )

    @property
    def fix(self) -> str:
        return (
            "Give each pass its own key: carry the key through the loop and split it every pass "
            "(`key, sub = jax.random.split(key)`, draw with `sub`), or fold the pass number in "
            "(`jax.random.fold_in(key, i)`, `i` from the loop's counter or carry); for a library layer that "
            "draws (a Flax `Dropout`), pass it that per-pass key."
        )


@dataclasses.dataclass
class ConstantKeyDraw:
    """A draw whose key depends on none of the jitted function's arguments: every call, the same numbers."""

    function: str  # the jitted function of yours whose program has it
    api: str  # "jax.random.bernoulli"
    line: SourceLine | None = None
    key_line: SourceLine | None = None  # where the key was made inside the function (None: closed over)
    calls: int = 0
    provenance: Provenance | None = None

    @property
    def short(self) -> str:
        return f"`{self.api}` with the same key at every call of `{self.function}`"

    @property
    def text(self) -> str:
        where = f" at {self.line.where}" if self.line else ""
        if self.key_line is not None:
            made = f"a key made inside `{self.function}` from constants (`{self.key_line.code}`, {self.key_line.where})"
        else:
            made = f"a key `{self.function}` closes over (not one of its arguments)"
        return (
            f"`{self.api}`{where} draws with {made}: the compiled program draws the same numbers at every "
            f"call - {self.calls} calls here"
        )

    @property
    def fix(self) -> str:
        return (
            f"If the numbers should differ between calls (dropout, noise, sampling), give `{self.function}` the "
            "key as an argument and split it outside for each call (`key, sub = jax.random.split(key)`, then "
            f"`{self.function}(..., sub)`), or fold a step number given as an argument in "
            "(`jax.random.fold_in(key, step)`). If they are meant to be the same at every call (a fixed random "
            "projection), nothing is wrong."
        )


@dataclasses.dataclass
class LegacyKeyUse:
    api: str  # the jax.random function given a raw key: "normal"
    line: SourceLine | None = None
    count: int = 0
    provenance: Provenance | None = None


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
    def same_numbers_draws(self) -> list[SharedKeyDraw | LoopKeyDraw | ConstantKeyDraw]:
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
        found = [act(f"key reused by `{r.consumer}`") for r in self.reuse]
        found += [act(f"`{f.function}` got the same key") for f in self.repeated_flows]
        found += [act(f"`jax.random.{d.api}` got the same key") for d in self.repeated_draws]
        found += [act(draw.short) for draw in self.same_numbers_draws]
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
                    f"No key was reused; `{f.function}` received {f.distinct} distinct key(s) in {f.calls} call(s)."
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

    def document(self):

        also = self.also_found  # the headline's findings it had no room for, right below it
        sections = [Section("Also found", [Paragraph(t) for t in also], pinned=True)] if also else []
        for r in self.reuse[:4]:
            facts = [("consumer", f"`{r.consumer}`")]
            if r.index is not None:
                facts.append(("argument", f"{r.index}" + (f" (`{r.argument}`)" if r.argument else "")))
            facts.append(("found", "when the function was traced" if r.where == "trace" else "when it was called"))
            if r.count > 1:
                facts.append(("times", str(r.count)))
            blocks = [Facts(facts), Paragraph(r.explanation)]
            if r.provenance is not None and r.loop_call is not None:
                blocks += provenance_blocks(r.provenance, "the draw with the reused key")
                blocks.append(SourceLines([r.loop_call], "In the body of the loop:"))
            else:
                lines = []
                if r.first_used_at:
                    lines.append(r.first_used_at)
                if r.reused_at and not r.same_line:
                    lines.append(r.reused_at)
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
            blocks.append(Paragraph(r.fix or FIX))
            sections.append(Section("Key reused", blocks))
        if self.library_reuse:
            rows = [
                [
                    f"`{r.consumer}`",
                    f"`{r.library or r.function}`",
                    r.reused_at.where if r.reused_at else "-",
                    str(r.count),
                ]
                for r in self.library_reuse[:8]
            ]
            blocks = [
                Paragraph(
                    "JAX's key-reuse checker stopped at these inside a library: each key was made by the library "
                    "(split off inside it), and no variable of your frames holds it, so no key of yours was used "
                    "twice. A reuse there is the library's own key handling; your line is shown as context."
                ),
                Table(["consumer", "inside", "your line", "times"], rows),
            ]
            sections.append(Section("Flagged inside a library", blocks))
        for loop_draw in self.new_loop_draws[:4]:
            blocks = [Paragraph(loop_draw.text + ".")]
            if loop_draw.provenance is not None:
                blocks += provenance_blocks(loop_draw.provenance, "the draw")
            blocks.append(Paragraph(loop_draw.fix))
            sections.append(Section("The same key at every pass of a loop", blocks))
        for constant_draw in self.repeated_constant_draws[:4]:
            blocks = [Paragraph(constant_draw.text + ".")]
            if constant_draw.provenance is not None:
                blocks += provenance_blocks(constant_draw.provenance, "the draw")
            blocks.append(Paragraph(constant_draw.fix))
            sections.append(Section("The same key at every call", blocks))
        for shared in self.shared[:4]:
            blocks = [Paragraph(shared.text + ".")]
            if shared.provenance is not None:
                blocks += provenance_blocks(shared.provenance, "the draw")
            blocks.append(Paragraph(shared.fix))
            sections.append(Section("One key for a whole batch", blocks))
        if self.flows:
            rows = [
                [
                    f"`{f.function}`",
                    f"`{f.argument}`",
                    str(f.calls),
                    str(f.distinct),
                    (f"{f.repeated_times} x {f.repeated_key}" if f.repeated else "-"),
                    f"{f.first_call.label or f.first_call.filename}:{f.first_call.lineno}" if f.first_call else "-",
                ]
                for f in self.flows
            ]
            blocks = [
                Table(["function", "key argument", "calls", "distinct keys", "repeated key", "called from"], rows)
            ]
            if any(f.legacy for f in self.flows):
                blocks.append(
                    Paragraph(
                        "Legacy uint32 keys are counted where your function's program wraps the argument as "
                        "a key (jax.random functions do so with a raw key)."
                    )
                )
            first = next((f for f in self.repeated_flows if f.provenance is not None), None)
            if first is not None and first.provenance is not None:
                blocks += provenance_blocks(first.provenance, f"the first call of `{first.function}` with that key")
            if self.repeated_flows:
                blocks.append(
                    Paragraph(
                        "A function that gets the same key in several calls draws the same random "
                        "numbers every time (the same dropout mask every step). " + (self.repeated_flows[0].fix or FIX)
                    )
                )
            if any(f.folded_with for f in self.flows):
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
            sections.append(Section("Keys per jitted function", blocks))
        if self.draws:
            shown = [d for d in self.draws if d.repeated] or self.draws[:8]
            rows = [
                [
                    f"`jax.random.{d.api}`" + (f" in `{d.library}`" if d.library else ""),
                    "legacy uint32" if d.legacy else "typed",
                    str(d.calls),
                    str(d.distinct),
                    (f"{d.repeated_times} x {d.repeated_key}" if d.repeated else "-"),
                    d.line.where if d.line else "-",
                ]
                for d in shown[:12]
            ]
            blocks = [Table(["function", "key", "calls", "distinct", "repeated key", "your line"], rows)]
            first_draw = next((d for d in self.repeated_draws if d.provenance is not None), None)
            if first_draw is not None and first_draw.provenance is not None:
                blocks += provenance_blocks(first_draw.provenance, "the same random numbers again")
            if self.repeated_draws:
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
            sections.append(Section("Eager random calls per line", blocks))
        if self.legacy:
            rows = [
                [
                    f"`jax.random.{u.api}`",
                    str(u.count),
                    u.line.where if u.line else "-",
                    f"`{u.line.code}`" if u.line and u.line.code else "-",
                ]
                for u in self.legacy
            ]
            sections.append(
                Section(
                    "Legacy uint32 keys",
                    [Table(["function", "calls", "your line", "code"], rows), Paragraph(LEGACY_NOTE)],
                )
            )
        how = [
            "Checked with jax.debug_key_reuse(True) for this cell only"
            + (
                ": reuses were recorded and the cell ran on as it would without the checker."
                if self.recorded
                else ": the first reuse stops the cell with JAX's KeyReuseError."
            )
        ]
        if not self.calls_checked:
            how.append(
                "Each traced function was checked for a key used twice inside it; keys consumed twice "
                "between calls were not checked call by call (%%jax_keys does), only counted per function."
            )
        if not self.followed:
            how.append("This JAX gives no way to follow single calls, so keys per function were not counted.")
        if self.legacy_keys_followed:
            how.append(
                f"Legacy uint32 keys were followed by their data: {self.legacy_keys_followed:,} consumed key(s) "
                "remembered, to find one consumed again on another line"
                + (
                    f" - the first {self.legacy_keys_limit:,} only (the limit): a reuse of a later one is not seen."
                    if self.legacy_keys_limit
                    else "."
                )
            )
        sections.append(Section("How this was checked", [Paragraph(t) for t in how]))
        findings = key_findings(self)  # the fix of the first, as the doctor and the watch offer it
        fix = findings[0].fix if findings else ""
        return Document("%%jax_keys", self.status, self.summary, sections, fix=fix, nothing_to_do=self.unexplained())


# -- explaining a KeyReuseError ---------------------------------------------------
