"""The watch's log and its findings: plain data, as every report."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._compiles.why_again import RecompileCause
from jaxmagic.probes._nans.search.found import NanProducer
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, JsonDict, SourceLine, act
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.watch_areas import AREAS
from jaxmagic.report.wording import counted

NOT_WATCHED = (
    "Tracer leaks are not watched: finding one means tracing every function afresh with leak checking, at "
    "every cell (%%jax_leaks or %%jax_doctor on a cell checks them)."
)


@dataclasses.dataclass
class WatchFinding(Report):
    """One problem a watched cell caused, told once; ``count`` counts it again in later cells."""

    kind = "jax_watch"

    area: str  # one of AREAS
    cell: str  # "In [7]"
    headline: str
    function: str = ""
    line: SourceLine | None = None
    call: int | None = None  # NaN: the call number of the function in that cell
    debug_step: str = ""  # NaN: how to stop at its line with its values (%jax_debug)
    details: str = ""
    fix: str = ""
    next_magic: str = ""
    count: int = 1  # how many times it was seen (recompilations: compilations so far)
    provenance: Provenance | None = None  # NaN: where it was made; the call that started it as context
    cause: RecompileCause | None = None  # recompilation: the cause %%jax_compiles gives (compiles.why_again)
    producer: NanProducer | None = None  # NaN: the operation that made it, as %%jax_nans and the doctor name it

    def concerns(self) -> list[Concern]:
        return [act(self.headline)]  # a finding of the watch

    @property
    def summary(self) -> str:
        return self.headline

    @property
    def title(self) -> str:
        """The finding with its area in front, unless the headline already starts with it ("NaN made by ...")."""
        if self.headline.lower().startswith(self.area.lower()):
            return self.headline
        return f"{self.area}: {self.headline}"

    @property
    def what_to_do(self) -> str:
        """The finding's fix; without one, the magic that looks closer at the cell (it may find the fix)."""
        if self.fix:
            return self.fix
        closer = self.next_magic or "%%jax_doctor"  # the doctor looks at every area, closer than the watch
        return f"Run `{closer}` on {self.cell}: it looks closer than the watch does."

    def blocks(self, with_fix: bool = True) -> list[Block]:
        """The finding's details; ``with_fix=False`` when its fix is the document's own line already."""
        blocks: list[Block] = []
        if self.details:
            blocks.append(Facts([("evidence", self.details)]))
        if self.provenance is not None:
            blocks += provenance_blocks(self.provenance, "it")
        elif self.line is not None:
            blocks.append(SourceLines([self.line]))
        if self.fix and with_fix:
            blocks.append(Paragraph(self.fix))
        if self.next_magic:
            blocks.append(Paragraph(f"Next: `{self.next_magic}` on that cell shows the details."))
        if self.debug_step:
            blocks.append(Paragraph(self.debug_step))
        return blocks

    def document(self) -> Document:

        details = [Section(f"{self.area}: details", self.blocks(with_fix=False))]
        return Document("%jax_watch", self.status, self.headline, details, fix=self.what_to_do)


@dataclasses.dataclass
class CellFindings(Report):
    """What one watched cell showed: its new findings, one headline each, details folded."""

    kind = "jax_watch"

    cell: str
    findings: list[WatchFinding] = dataclasses.field(default_factory=list)
    jitted_calls: int | None = None  # calls of jitted functions of the user's the cell made (None: not counted)

    def concerns(self) -> list[Concern]:
        return [act(f.headline) for f in self.findings]

    @property
    def summary(self) -> str:
        if not self.findings and self.jitted_calls == 0:
            # nothing was looked at: an [OK] would claim what was not checked (a NaN of eager code)
            return (
                f"{self.cell}: nothing found, but no jitted function of yours ran in it; its eager operations "
                "(a library's update called without jit, too) are not watched - %%jax_nans checks them."
            )
        if not self.findings:
            return f"{self.cell}: nothing found."
        return f"{self.cell}: " + "; ".join(f.title for f in self.findings)

    @property
    def headline(self) -> str:
        """What was found, said (not counted): the first finding whole, the others by area."""
        if len(self.findings) < 2:
            return self.summary
        others = ", ".join(f.area for f in self.findings[1:])
        return f"{self.cell}: {self.findings[0].title}; also {others}."

    def document(self) -> Document:

        first = next((f for f in self.findings if f.fix), self.findings[0] if self.findings else None)
        sections = [Section(f.title, f.blocks(with_fix=f is not first)) for f in self.findings]
        fix = f"{first.area}: {first.what_to_do}" if first is not None and first.what_to_do else ""
        return Document("%jax_watch", self.status, self.headline, sections, fix=fix)


@dataclasses.dataclass
class WatchLog(Report):
    """Everything the watch found since ``%jax_watch on``; keeps growing while the watch is on."""

    kind = "jax_watch"

    on: bool = False
    areas: list[str] = dataclasses.field(default_factory=lambda: list(AREAS))
    budget: int = 2
    cells_watched: int = 0
    calls_counted: int = 0  # calls of the user's jitted functions in watched cells
    calls_looked_at: int = 0  # of them, those whose results, keys and arguments were looked at
    draws_counted: int = 0  # eager jax.random calls of the user's lines in watched cells
    draws_compared: int = 0  # of them, those whose key data was compared with the line's other draws
    findings: list[WatchFinding] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> JsonDict:
        data = super().to_dict()
        data["findings"] = [f.to_dict() for f in self.findings]
        return data

    @property
    def coverage(self) -> str:
        """Which calls were looked at, and whose eager draws' keys compared: all, or a share, said in numbers."""
        if self.calls_looked_at == self.calls_counted:
            said = f"Every one of the {counted(self.calls_counted, 'call')} of your jitted functions was looked at."
        else:
            said = (
                f"{self.calls_looked_at:,} of the {self.calls_counted:,} calls of your jitted functions were looked "
                "at (results read for NaN, keys and NumPy arguments noted); the others were counted only: on loops "
                "of short steps the watch looks at a share of the calls, to cost a few percent. A NaN made by a call "
                "not looked at is seen at the next call looked at, if it is still there; %%jax_nans or %%jax_doctor "
                "on a cell looks at every call."
            )
        if self.draws_compared < self.draws_counted:
            said += (
                f" The keys of {self.draws_compared:,} of the {self.draws_counted:,} eager jax.random calls on your "
                "lines were compared with the others of their line (the first 40 at each line, then a share: a "
                "dropout key split per step would cost a read a step); a key repeated at every call is seen in any "
                "two, a key repeated once may not be - %%jax_keys compares every call's."
            )
        return said

    def concerns(self) -> list[Concern]:
        return [act(f.headline) for f in self.findings]

    @property
    def summary(self) -> str:
        state = "on" if self.on else "off"
        watched = f"{', '.join(self.areas)}; {counted(self.cells_watched, 'cell')} watched"
        if not self.findings:
            return f"Watch {state} ({watched}): nothing found."
        named = ", ".join(f"{f.area} in {f.cell}" for f in self.findings[:3])
        more = f" and {len(self.findings) - 3} more" if len(self.findings) > 3 else ""
        return f"Watch {state} ({watched}): {counted(len(self.findings), 'finding')} - {named}{more}."

    def document(self) -> Document:

        sections = []
        if self.findings:
            rows = [[f.cell, f.area, f.headline, str(f.count), f"`{f.next_magic}`"] for f in self.findings]
            sections.append(Section("Found so far", [Table(["cell", "area", "finding", "seen", "look closer"], rows)]))
        first = next((f for f in self.findings if f.fix), self.findings[0] if self.findings else None)
        if self.findings:
            sections += [Section(f"{f.cell} {f.title}", f.blocks(with_fix=f is not first)) for f in self.findings]
        how: list[Block] = [Paragraph(n) for n in self.notes]
        how.append(
            Paragraph(
                f"Watched: {', '.join(self.areas)}; recompilation budget {counted(self.budget, 'compilation')} per function. "
                "The calls of your own jitted functions are watched on JAX's fast path, after each call; "
                "cells of jaxmagic's own magics are not watched (their reports cover them). " + NOT_WATCHED
            )
        )
        how.append(Paragraph(self.coverage))
        sections.append(Section("What is watched", how))
        fix = f"{first.cell} {first.area}: {first.what_to_do}" if first is not None and first.what_to_do else ""
        return Document("%jax_watch", self.status, self.summary, sections, fix=fix)
