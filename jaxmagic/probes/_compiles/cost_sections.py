"""The compile report's findings beyond recompilation - a slow compilation's size, an unusable donation, a
persistent-cache miss - as concerns, a headline and document sections (wording only, no measuring)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxmagic.probes._compiles.cache_misses import CacheMiss
from jaxmagic.probes._compiles.donations import UnusableDonation
from jaxmagic.probes._compiles.program_size import CONSTANT_BYTES, ProgramSize
from jaxmagic.probes._compiles.stale_globals import StaleGlobal
from jaxmagic.report import Concern, SourceLine, act, note
from jaxmagic.report.document import Block, Facts, Paragraph, Section, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.wording import format_bytes

SLOW_SECONDS = 1.0  # a compilation this long (trace + lower + XLA) is slow, whatever the cell
SLOW_SHARE = 0.5  # ... and so is one of at least SLOW_FLOOR taking this share of the cell's time
SLOW_FLOOR = 0.2


def is_slow(seconds: float, block_seconds: float) -> bool:
    return seconds >= SLOW_SECONDS or (seconds >= SLOW_FLOOR and seconds >= SLOW_SHARE * block_seconds)


def is_big(size: ProgramSize) -> bool:
    """Something to fix in it: an unrolled loop of the user's or constants worth passing as arguments.
    A slow compilation with neither is a note (``ProgramSize.nothing_to_fix``), never a finding."""
    return not size.unknown and (size.unrolled is not None or size.constant_bytes >= CONSTANT_BYTES)


@dataclasses.dataclass
class CostFinding:
    """One of these findings as the doctor and the watch tell it (the same words as ``%%jax_compiles``)."""

    key: tuple[str, ...]  # what makes it the same finding in a later cell
    headline: str
    short: str
    fix: str
    line: SourceLine | None
    provenance: Provenance | None


def cost_findings(
    sizes: list[ProgramSize],
    donations: list[UnusableDonation],
    misses: list[CacheMiss],
    stale: Sequence[StaleGlobal] = (),
) -> list[CostFinding]:
    found = [
        CostFinding(("stale global", g.function, g.name), g.headline.rstrip("."), g.short, g.fix, g.line, None)
        for g in stale[:3]
    ]
    found += [
        CostFinding(
            ("compile size", s.function),
            s.headline.rstrip("."),
            f"`{s.function}` slow to compile",
            s.fix,
            s.provenance.made_at if s.provenance is not None else None,
            s.provenance,
        )
        for s in sizes
        if is_big(s) and s.slow  # the doctor and the watch tell slow ones only
    ]
    found += [
        CostFinding(
            ("donation", d.function, d.argument, d.type),
            d.headline.rstrip("."),
            d.short,
            d.fix,
            d.line,
            d.provenance,
        )
        for d in donations[:3]
    ]
    found += [
        CostFinding(
            ("persistent cache", m.function),
            m.headline.rstrip("."),
            f"`{m.function}` not in the persistent cache",
            m.fix,
            m.line,
            None,
        )
        for m in misses
        if m.written is False
    ][:1]
    return found


def cost_concerns(
    sizes: list[ProgramSize],
    donations: list[UnusableDonation],
    misses: list[CacheMiss],
    stale: Sequence[StaleGlobal] = (),
) -> list[Concern]:
    found = [act(g.short) for g in stale]
    found += [
        (act if s.slow else note)(
            f"a Python loop unrolled into `{s.function}`" if s.unrolled else f"constants baked into `{s.function}`"
        )
        for s in sizes
        if is_big(s)
    ]
    found += [note(s.nothing_to_fix) for s in sizes if s.slow and not s.unknown and not is_big(s)]
    found += [act(d.short) for d in donations]
    found += [
        act(f"`{m.function}` will miss the persistent cache again") if m.written is False else note(m.headline)
        for m in misses
    ]
    return found


def cost_headline(
    sizes: list[ProgramSize],
    donations: list[UnusableDonation],
    misses: list[CacheMiss],
    stale: Sequence[StaleGlobal] = (),
) -> str:
    """The first finding of these, for a report whose recompilations said nothing (a stale global first: the
    program computes with a value the user no longer has)."""
    if stale:
        return stale[0].headline + (f" ({len(stale) - 1} more)" if len(stale) > 1 else "")
    big = [s for s in sizes if is_big(s)]
    if big:
        return big[0].headline
    if donations:
        first = donations[0]
        more = f" ({len(donations) - 1} more)" if len(donations) > 1 else ""
        return first.headline + more
    again = [m for m in misses if m.written is False]
    if again:
        return again[0].headline
    return ""


def cost_fix(
    sizes: list[ProgramSize],
    donations: list[UnusableDonation],
    misses: list[CacheMiss],
    stale: Sequence[StaleGlobal] = (),
) -> str:
    if stale:
        return f"`{stale[0].function}`: {stale[0].fix}"
    big = [s for s in sizes if is_big(s) and s.fix]
    if big:
        return f"`{big[0].function}`: {big[0].fix}"
    if donations:
        return f"`{donations[0].function}`: {donations[0].fix}"
    fixed = [m for m in misses if m.fix]
    return f"`{fixed[0].function}`: {fixed[0].fix}" if fixed else ""


def cost_sections(
    sizes: list[ProgramSize],
    donations: list[UnusableDonation],
    misses: list[CacheMiss],
    hits: int,
    stale: Sequence[StaleGlobal] = (),
) -> list[Section]:
    """What compiling cost, as sections of a document: stale globals, slow or big programs (three at most),
    donations JAX could not use, persistent-cache misses."""
    examined = [s for s in sizes if s.slow or is_big(s) or s.unknown][:3]  # a quick, plain one: data only
    return [
        *stale_globals_section(stale),
        *[compile_cost_section(size) for size in examined],
        *donations_section(donations),
        *persistent_cache_section(misses, hits),
    ]


def stale_globals_section(stale: Sequence[StaleGlobal]) -> list[Section]:
    """ "Globals changed after tracing": a global a program holds an old value of."""
    if not stale:
        return []
    rows = [[f"`{g.function}`", f"`{g.name}`", g.traced, g.now] for g in stale]
    table = Table(["function", "global", "traced with", "now"], rows)
    return [Section("Globals changed after tracing", [table, Paragraph(stale[0].fix)])]


def compile_cost_section(size: ProgramSize) -> Section:
    """ "Compile cost of `f`": a program examined - its equations per user line, its constants, its stage times."""
    blocks: list[Block] = [Paragraph(size.headline)]
    if not size.unknown:
        blocks += _program_tables(size)
    times = [
        ("why examined", size.why_examined),
        ("trace", f"{size.trace_seconds:.3f} s" if size.trace_seconds is not None else "not measured"),
        ("lower", f"{size.lower_seconds:.3f} s" if size.lower_seconds is not None else "not measured"),
        ("XLA compile", f"{size.compile_seconds:.3f} s"),
    ]
    blocks.append(Facts(times))
    if size.fix:
        blocks.append(Paragraph(f"What to do: {size.fix}" + (f" {size.fix_trial}" if size.fix_trial else "")))
    if size.provenance is not None:
        blocks += provenance_blocks(size.provenance, f"the equations of `{size.function}`")
    return Section(f"Compile cost of `{size.function}` (compilation {size.number})", blocks)


def _program_tables(size: ProgramSize) -> list[Block]:
    """The program's equations per user line (with the loops that repeat them) and its largest constants."""
    rows = [
        [
            f"{line.line.label or line.line.filename}, line {line.line.lineno}: `{line.line.code}`"
            if line.line is not None
            else "JAX's or a library's own code (no line of yours inside the function)",
            str(line.equations),
            f"{line.per_iteration} x {line.iterations}" + (f" (`{line.loop}`)" if line.loop else "")
            if line.iterations
            else "-",
        ]
        for line in size.lines
    ]
    tables: list[Block] = [Table(["your line", "equations", "repeats (per iteration x times)"], rows)]
    if size.constants:
        constants = [
            [c.type, format_bytes(c.bytes), c.line.where if c.line is not None else "-"] for c in size.constants[:5]
        ]
        tables.append(Table(["constant baked in", "bytes", "used at"], constants))
    return tables


def donations_section(donations: list[UnusableDonation]) -> list[Section]:
    """ "Donated buffers not usable": each donated argument JAX could not reuse, named, and how it was found."""
    if not donations:
        return []
    rows = [
        [f"`{d.function}`", f"`{d.argument}`" if d.argument else "-", d.type, d.why, d.line.where if d.line else "-"]
        for d in donations
    ]
    blocks: list[Block] = [Table(["function", "donated argument", "type", "why not reused", "your call"], rows)]
    blocks += [Paragraph(f"What to do (`{d.argument or d.type}`): {d.fix}") for d in donations[:3]]
    how = []
    if any(not d.unread for d in donations):
        how.append(
            "JAX's warning 'Some donated buffers were not usable' names only types; the arguments it means are "
            "read from its lowering."
        )
    if any(d.unread for d in donations):
        how.append(
            "An argument the program never reads is pruned from the compiled program, and its donation with "
            "it, without a warning: read from the compiled program's kept inputs."
        )
    how.append(
        "JAX 0.12 donates on CPU as on GPU and TPU: a donated argument an output reuses is deleted by the call; "
        "the ones above are kept alive, so donating them saves nothing."
    )
    blocks.append(Paragraph(" ".join(how)))
    return [Section("Donated buffers not usable", blocks)]


def persistent_cache_section(misses: list[CacheMiss], hits: int) -> list[Section]:
    """ "Persistent compilation cache": compilations that missed it, and why."""
    if not misses:
        return []
    rows = [[f"`{m.function}`", m.why, m.line.where if m.line else "-"] for m in misses[:8]]
    blocks: list[Block] = [Table(["function", "why it missed", "your call"], rows)]
    blocks += [Paragraph(f"What to do (`{m.function}`): {m.fix}") for m in misses[:3] if m.fix]
    if hits:
        blocks.append(Paragraph(f"{hits} compilation(s) were read from the persistent cache instead."))
    return [Section("Persistent compilation cache", blocks)]
