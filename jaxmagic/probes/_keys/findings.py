"""The kinds of key finding: each declared once, with what it is about and what every report says of it.

A kind (a reused key, a key flow, a repeated eager draw, a draw with the same numbers in every element,
pass or call) is one dataclass holding what was seen and wording it: its ``headline``, ``short`` words for
a list, its ``evidence`` and ``fix``, and the ``KeyFinding`` it makes (``finding()``). ``%%jax_keys`` says
them in its summary, ``%%jax_doctor`` ranks them and ``%jax_watch`` tells each once; all three take them
from ``report.key_findings``, so the same bug reads the same on every path (the same headline, line,
provenance and fix), instead of three wordings kept apart.
"""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._keys.wording import FIX
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance

LEGACY = " (a legacy uint32 key, followed by its data)"


@dataclasses.dataclass
class KeyFinding:
    """One key problem: what a report says about it, in the same words on every path."""

    identity: tuple[object, ...]  # what it is about, the same from cell to cell (the watch tells it once, then counts)
    function: str  # the function that got the key, or the jax.random function that drew with it
    headline: str  # the whole sentence
    short: str  # a few words for a list of findings
    evidence: str = ""
    line: SourceLine | None = None
    fix: str = FIX
    provenance: Provenance | None = None


@dataclasses.dataclass(kw_only=True)
class RepeatedKeys:
    """The keys one place received, counted by their data: what a key flow and an eager draw share."""

    calls: int = 0
    # of them, the calls whose key data was read and compared (the watch compares a share of a place's eager draws;
    # a key that could not be read - deleted since - is not compared): what ``distinct`` and the repeats count in.
    # The probes count it from 0; None (a finding made whole, as a report read back) is every call.
    compared: int | None = None
    distinct: int = 0  # distinct key data (an eager draw: distinct (key data, other arguments))
    repeated_key: str = ""  # the data of the key seen most often, e.g. "[1797259609 2579123966]"
    repeated_times: int = 0
    legacy: bool = False  # a raw uint32 key (jax.random.PRNGKey), followed by its data
    provenance: Provenance | None = None

    @property
    def compared_calls(self) -> int:
        """The calls whose key data was compared (``compared``, every call where not counted)."""
        return self.calls if self.compared is None else min(self.compared, self.calls)

    @property
    def repeated(self) -> bool:
        return self.compared_calls > 1 and self.distinct < self.compared_calls

    @property
    def all_compared(self) -> bool:
        return self.compared_calls >= self.calls

    @property
    def calls_compared(self) -> str:
        """The calls the counts are of: "300 calls", or "the 52 calls compared (of 300)" where not all were."""
        if self.all_compared:
            return f"{self.calls} call{'' if self.calls == 1 else 's'}"
        compared = self.compared_calls
        return f"the {compared} call{'' if compared == 1 else 's'} compared (of {self.calls})"

    @property
    def evidence(self) -> str:
        return (
            f"{self.distinct} distinct key(s) in {self.calls_compared}; the repeated key's data is {self.repeated_key}: "
            "the same random numbers (e.g. the same dropout mask) every call" + (LEGACY if self.legacy else "")
        )


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

    @property
    def concern(self) -> str:
        return f"key reused by `{self.consumer}`"

    def finding(self) -> KeyFinding:
        return KeyFinding(
            identity=("reuse", self.consumer, self.reused_at.lineno if self.reused_at else 0),
            function=self.function or self.consumer,
            headline=self.headline,
            short=f"`{self.consumer}` got an already consumed key",
            evidence=self.explanation,
            line=self.reused_at,
            fix=self.fix or FIX,
            provenance=self.provenance,
        )


@dataclasses.dataclass
class KeyFlow(RepeatedKeys):
    """The typed keys one argument of one of your jitted functions received (``provenance``: made_at the
    first call that passed the key; transforms: jit(function))."""

    function: str
    argument: str  # "key", or "argument 3"
    first_call: SourceLine | None = None
    # the arguments the program folds into this key (`fold_in(key, count)`): a key is the same draw only with them
    folded_with: list[str] = dataclasses.field(default_factory=list)
    fix: str = ""  # the fix for this key when the general one does not apply (a library's own key: its jit)

    @property
    def headline(self) -> str:
        """The repeated key in one sentence: what every report that tells it says."""
        kind = " legacy uint32" if self.legacy else ""
        return (
            f"`{self.function}` got the same{kind} key in {self.repeated_times} of "
            f"{'its ' if self.all_compared else ''}{self.calls_compared} "
            f"(argument `{self.argument}`)"
        )

    @property
    def concern(self) -> str:
        return f"`{self.function}` got the same key"

    def finding(self) -> KeyFinding:
        return KeyFinding(
            identity=("flow", self.function, self.argument),
            function=self.function,
            headline=self.headline,
            short=f"`{self.function}` got the same key {self.repeated_times} times",
            evidence=self.evidence,
            line=self.first_call,
            fix=self.fix or FIX,
            provenance=self.provenance,
        )


@dataclasses.dataclass
class RepeatedDraw(RepeatedKeys):
    """One eager jax.random call of one line of yours, followed by the data of the keys it was given
    (``provenance``: made_at the drawing line; started_by the cell line)."""

    api: str  # "permutation", "normal", "split"
    line: SourceLine | None
    # A key drawn from inside a library (numpyro's seed handler, a Flax module): the library's public
    # callable, and the innermost line of yours it was called from when ``line`` (the line of yours
    # that handed the key over) is another one.
    library: str = ""
    consumed_at: SourceLine | None = None

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
            f"in {self.repeated_times} of {'its ' if self.all_compared else ''}{self.calls_compared}"
        )

    @property
    def concern(self) -> str:
        return f"`jax.random.{self.api}` got the same key"

    def finding(self) -> KeyFinding:
        return KeyFinding(
            identity=("draw", f"jax.random.{self.api}", self.line.lineno if self.line else 0),
            function=f"jax.random.{self.api}",
            headline=self.text,
            short=f"`jax.random.{self.api}` got the same key {self.repeated_times} times",
            evidence=self.evidence,
            line=self.line,
            provenance=self.provenance,
        )


@dataclasses.dataclass
class SameNumbersDraw:
    """A draw inside a jitted function of yours that gives the same numbers where they should differ:
    what the three kinds below share. Each says its ``short`` words, its ``text`` and its ``fix``."""

    function: str  # the jitted function of yours whose program has it: "noisy"
    api: str  # "jax.random.bernoulli", "flax.linen.Dropout.__call__"
    line: SourceLine | None = None
    calls: int = dataclasses.field(default=0, kw_only=True)
    provenance: Provenance | None = dataclasses.field(default=None, kw_only=True)

    @property
    def short(self) -> str:
        raise NotImplementedError

    @property
    def text(self) -> str:
        raise NotImplementedError

    @property
    def fix(self) -> str:
        raise NotImplementedError

    @property
    def concern(self) -> str:
        return self.short

    def finding(self) -> KeyFinding:
        return KeyFinding(
            identity=("same numbers", self.function, self.api, self.line.lineno if self.line else 0),
            function=self.function,
            headline=self.text,
            short=self.short,
            line=self.line,
            fix=self.fix or FIX,
            provenance=self.provenance,
        )


@dataclasses.dataclass
class SharedKeyDraw(SameNumbersDraw):
    """A draw under ``vmap`` with one key for the whole batch: every element gets the same random numbers
    (``provenance``: made_at the draw; function; jit(noisy) > vmap; started_by)."""

    key: str = ""  # the key's name on that line, as written ("key"); "" when it could not be read
    fix: str = ""  # worded where it was found (``flows.shared_key_fix``)

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
class LoopKeyDraw(SameNumbersDraw):
    """A draw in a loop body whose key does not change between passes: every pass, the same numbers."""

    loop: str = ""  # "scan", "while"

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
class ConstantKeyDraw(SameNumbersDraw):
    """A draw whose key depends on none of the jitted function's arguments: every call, the same numbers."""

    key_line: SourceLine | None = None  # where the key was made inside the function (None: closed over)

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
    """A jax.random call given a raw uint32 key (no finding: told in the report's table and its note)."""

    api: str  # the jax.random function given a raw key: "normal"
    line: SourceLine | None = None
    count: int = 0
    provenance: Provenance | None = None
