"""The merged report of one magic run on many processes: a row per process, the differences as findings."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxmagic.probes._gather.ranges import process_ranges
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, act
from jaxmagic.report.document import Block, Document, Paragraph, Section, Table, quoted_headline

NO_REPORT = "no report"  # the process answered, with nothing to merge: the name is unbound there, or the
# --values expression failed there (never a hang)
STOPPED = "stopped"  # the engine's process ended: stopped by a signal, killed, exited


@dataclasses.dataclass
class ProcessEntry:
    """What one process (an ipyparallel engine, or a script's process) sent back."""

    process: int | None  # jax.process_index(); None when jax.distributed was not initialised there
    engine: int | None = None  # the ipyparallel engine id (None in the script path)
    host: str = ""
    headline: str = ""  # the report's summary, or why there is none
    status: str = ""  # the report's status ("ok", "problem", "error"), "missing" (late), "failed", NO_REPORT, STOPPED
    kind: str = ""  # the report's magic ("jax_doctor")
    report: dict[str, Any] = dataclasses.field(default_factory=dict)  # the report's to_dict()
    error: str = ""  # the engine failed or did not answer: why
    stack: dict[str, Any] = dataclasses.field(default_factory=dict)  # where a late one is (gather.stacks)

    @property
    def name(self) -> str:
        if self.process is not None:
            return f"process {self.process}"
        return f"engine {self.engine}" if self.engine is not None else "a process"


@dataclasses.dataclass
class GatherFinding:
    """A difference between processes, with the processes it concerns."""

    area: str  # "NaN", "divergence", "memory", "random keys", "not finished"
    processes: list[int | None]
    summary: str
    function: str = ""
    line: str = ""  # the user's line, "In [3], line 4: code"
    details: list[str] = dataclasses.field(default_factory=list)  # one per process where they differ
    fix: str = ""


@dataclasses.dataclass
class GatherReport(Report):
    """What ``%jax_gather NAME`` (or ``jaxmagic.gather``) brought together."""

    kind = "jax_gather"

    name: str = ""  # the report variable gathered ("rep"), or the report kind in the script path
    processes: list[ProcessEntry] = dataclasses.field(default_factory=list)
    findings: list[GatherFinding] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def concerns(self) -> list[Concern]:
        found = [act(f.summary) for f in self.findings]
        found += [act(f"process {e.process}: {e.headline}") for e in self.processes if e.status == "problem"]
        return found

    @property
    def summary(self) -> str:
        n = len(self.processes)
        if self.findings:
            first = self.findings[0]
            more = f" (and {len(self.findings) - 1} more difference(s))" if len(self.findings) > 1 else ""
            return f"{first.summary}{more}"
        problems = [e for e in self.processes if e.status == "problem"]
        if problems:
            return quoted_headline(f"Every one of the {n} processes found the same: ", problems[0].headline)
        return (
            quoted_headline(f"The {n} processes agree: ", self.processes[0].headline) if n else "No process answered."
        )

    def document(self) -> Document:
        sections = []
        if self.findings:
            rows = [
                [f.area, process_ranges(f.processes) or "?", f.function and f"`{f.function}`", f.summary]
                for f in self.findings
            ]
            blocks: list[Block] = [Table(["area", "processes", "function", "what differs"], rows)]
            for finding in self.findings:
                per_process = "; ".join(finding.details)
                text = " ".join(part for part in (f"{per_process}." if per_process else "", finding.fix) if part)
                if text:
                    blocks.append(Paragraph(f"{finding.area[:1].upper()}{finding.area[1:]}: {text}"))
            sections.append(Section("Differences between processes", blocks))
        sections.append(Section("Processes", [Table(["process", "engine", "host", "status", "report"], self._rows())]))
        if self.notes:
            sections.append(Section("How this was gathered", [Paragraph(n) for n in self.notes]))
        return Document("%jax_gather", self.status, self.summary, sections, fix=self.first_fix)

    @property
    def first_fix(self) -> str:
        """The headline's finding's fix, shown under the headline (a hang's: make every process take the same path)."""
        return self.findings[0].fix if self.findings else ""

    def _rows(self) -> list[list[str]]:
        """A row per process; in a job of more than ``_ROWS_EACH`` processes, a row per group of processes that
        sent the same (status, headline), their indices as ranges and their hosts counted."""
        if len(self.processes) <= _ROWS_EACH:
            return [
                [_process_text(e.process), "" if e.engine is None else str(e.engine), e.host, e.status, e.headline]
                for e in self.processes
            ]
        groups: dict[tuple[str, str], list[ProcessEntry]] = {}
        for entry in self.processes:
            groups.setdefault((entry.status, entry.headline), []).append(entry)
        rows = []
        for (status, headline), members in groups.items():
            hosts = {e.host for e in members}
            engines = [e.engine for e in members if e.engine is not None]
            rows.append(
                [
                    process_ranges(e.process for e in members) or "?",
                    process_ranges(engines),
                    next(iter(hosts)) if len(hosts) == 1 else f"{len(hosts)} hosts",
                    status,
                    headline,
                ]
            )
        return rows


_ROWS_EACH = 16  # up to this many processes, a row each; beyond, a row per group that sent the same


def _process_text(process: int | None) -> str:
    return "?" if process is None else str(process)
