"""What ``%jax_debug`` found: the frame the re-run stopped in, its values, and how it got there (data only)."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed, note
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table


@dataclasses.dataclass
class ValueSummary:
    """One local or argument of a frame, described without keeping it."""

    name: str
    # "array", "primal" (the forward value inside grad's tracer), "number", "tracer", "deleted" (a donated
    # buffer), "pytree", "other"
    kind: str
    type: str  # the Python type's name
    shape: list[int] | None = None
    dtype: str = ""
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    nan_count: int = 0
    inf_count: int = 0
    values: str = ""  # a few values, as NumPy prints them
    leaves: int = 0  # for a pytree: how many array leaves

    @property
    def non_finite(self) -> bool:
        return self.nan_count > 0 or self.inf_count > 0


@dataclasses.dataclass
class FrameView:
    """One of the user's frames of the re-run: its line and its values."""

    line: SourceLine
    values: list[ValueSummary]
    is_argument: list[str] = dataclasses.field(default_factory=list)  # which of the values are its arguments


@dataclasses.dataclass
class StepView:
    kind: str  # "scan" or "vmap"
    index: int
    size: int
    line: SourceLine | None
    text: str


@dataclasses.dataclass
class DebugReport(Report):
    """``%jax_debug`` after a failed cell: where the failing call stops with concrete values."""

    error: str  # "FloatingPointError: invalid value (nan) encountered in log" - the error debugged
    call: str = ""  # the call re-run, as the user wrote it ("run(c0, xs)"); "" when none could be
    call_line: SourceLine | None = None  # the user's line that made that call
    stopped: FrameView | None = None  # the user's frame the re-run stopped in
    callers: list[FrameView] = dataclasses.field(default_factory=list)  # the user's frames above it, outermost first
    rerun_error: str = ""  # what the re-run raised ("" when it finished)
    steps: list[StepView] = dataclasses.field(
        default_factory=list
    )  # the loop iterations / batch elements, outermost first
    compiled_runs: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)  # what ran compiled or op by op, and why
    unavailable: str = ""  # why the call could not be re-run or stopped, when it could not
    forward_stop_failure: str = ""  # under grad: why stopping before the forward line of the NaN failed
    reran_user_code: bool = False  # the user's Python ran again (side effects included)
    interactive: bool = False  # the debugger was opened in the stopped frame
    fix: str = ""  # a NaN's fix, the NaN probe's (``nans.offered_fix``): what %%jax_nans offers for it

    kind = "jax_debug"

    def concerns(self) -> list[Concern]:
        # The failing line found, with its values: what to act on. Not found: the debugging failed, and says why.
        found = [act(self.summary)] if self.stopped is not None else [failed(self.unavailable or self.summary)]
        rerun = ["your Python code ran again (its side effects happened once more)"] if self.reran_user_code else []
        return found + [note(text) for text in rerun + self.notes]

    @property
    def position(self) -> str:
        return ", ".join(step.text for step in self.steps)

    @property
    def summary(self) -> str:
        if self.stopped is None:
            return f"Could not stop at the failing line of {self.error}: {self.unavailable}"
        where = f" in {self.position}" if self.steps else ""
        return f"Stopped at `{self.stopped.line.code}` ({self.stopped.line.where}){where}: {self.rerun_error}"

    def document(self) -> Document:
        sections = []
        if self.stopped is not None:
            facts = [("line", self.stopped.line.code), ("where", self.stopped.line.where)]
            facts += [
                (step.kind, f"{step.text}" + (f" at `{step.line.code}`" if step.line else "")) for step in self.steps
            ]
            facts.append(("raised", self.rerun_error))
            sections.append(Section("Stopped at", [Facts(facts)]))
            sections.append(
                Section(
                    "Values in the stopped frame",
                    [
                        Paragraph(
                            "Each name's value when it stopped: an argument reassigned above that line shows "
                            "its new value, not the one passed in."
                        ),
                        values_table(self.stopped),
                    ],
                    pinned=True,  # what the stop is for: open in every report, long or short
                )
            )
        if self.callers:
            blocks: list[Block] = [SourceLines([frame.line for frame in self.callers], caption="outermost first")]
            for frame in self.callers:
                if frame.values:
                    blocks += [Paragraph(f"In `{frame.line.function}`:"), values_table(frame)]
            sections.append(Section("Your frames above it", blocks))
        how: list[Block] = [Paragraph(f"Debugged: {self.error}")]
        if self.call:
            how.append(
                Paragraph(
                    f"Re-ran `{self.call}`"
                    + (f" ({self.call_line.where})" if self.call_line else "")
                    + " op by op under jax.disable_jit()."
                )
            )
        if self.reran_user_code:
            how.append(
                Paragraph(
                    "The re-run ran your Python code again: its side effects (prints, appends, "
                    "counters) happened once more."
                )
            )
        if self.compiled_runs:
            how.append(Paragraph(f"{self.compiled_runs} compiled run(s) found the failing iteration or element."))
        how += [Paragraph(note[:1].upper() + note[1:] + ".") for note in self.notes]
        if self.unavailable:
            how.append(Paragraph(self.unavailable))
        sections.append(Section("How it was found", how))
        return Document(
            title="%jax_debug",
            status=self.status,
            headline=self.summary,
            sections=sections,
            fix=self.fix,
            nothing_to_do=self.why_no_fix,
        )

    @property
    def why_no_fix(self) -> str:
        """Why a stop offers no fix: a NaN's fix comes from the NaN probe, and any other error is the user's own
        code failing - the stop shows where and with what values, which is what ``%jax_debug`` is for."""
        if self.stopped is None:
            return (
                "nothing could be re-run to stop at; the error itself, in the traceback above, says what failed."
                if not self.fix
                else ""
            )
        if self.fix:
            return ""
        return (
            "the stopped line raised your program's own error; the values below are what reached it (in the "
            "debugger: `p name`; `u`/`d` for the callers) - change the line or what it was given."
        )


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def values_table(frame: FrameView) -> Table:
    rows = []
    for value in frame.values:
        shape = "" if value.shape is None else "[" + ",".join(map(str, value.shape)) + "]"
        name = value.name + (" (argument)" if value.name in frame.is_argument else "")
        name += " (primal)" if value.kind == "primal" else ""
        rows.append(
            [
                name,
                f"{value.dtype}{shape}" if value.dtype else value.type,
                _number(value.minimum),
                _number(value.maximum),
                _number(value.mean),
                str(value.nan_count),
                str(value.inf_count),
                value.values,
            ]
        )
    return Table(["name", "type", "min", "max", "mean", "NaN", "inf", "values"], rows)
