"""Reading JAX tracebacks: the filtering mode, and your frames of an exception.

Usage without IPython::

    report = jaxmagic.probes.traceback_view(error)            # error: any exception
    report.your_frames[-1].code                              # the line that failed
    jaxmagic.probes.set_traceback_filtering("off")           # every frame, for a bug report

A jit call passes through dozens of JAX functions. ``jax_traceback_filtering``
decides what a traceback shows of them (chapter section 6.1); it is read when
the exception is raised, so it can be switched at any time. Whatever the mode,
your own frames stay - in a traced function they appear twice: where the jitted
function was called and inside the function itself.
"""

from __future__ import annotations

import builtins
import dataclasses
import sys
import traceback
from types import TracebackType

import jax

from jaxmagic._jax import runtime
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import code_kind, user_lines

MODES: dict[str, str] = {
    "auto": "The default. Under IPython >= 7.17 (notebooks) it means tracebackhide; in a plain Python "
    "process it means quiet_remove_frames.",
    "tracebackhide": "Keeps every frame but marks JAX's own with __tracebackhide__; IPython and Jupyter fold "
    'them into "[... skipping hidden N frame]".',
    "remove_frames": "Removes JAX's frames; the full stack is attached as the exception's __cause__ "
    "(UnfilteredStackTrace).",
    "quiet_remove_frames": "Removes JAX's frames and adds one short note saying so (\"For simplicity, JAX has "
    'removed its internal frames ...").',
    "off": "No filtering: every frame. Use it when you suspect a bug in JAX and report it.",
}

READING_ORDER = [
    'Read from the bottom: the last line is the exception; for a tracer error look for "The error occurred '
    'while tracing the function ... argument ..." (%jax_explain says it in one line).',
    "Going up, the first frame of your own code is the line that failed. Under jit your frames appear twice: "
    "where the jitted function was called and inside the traced function.",
    'Frames in jax/_src are JAX\'s; "[... skipping hidden N frame]" is what tracebackhide folded.',
    "JaxRuntimeError / XlaRuntimeError come from the compiled program: the stack shows only the call, not "
    "the lines inside; narrow it down with checkify (%jax_check) or jax.debug.print.",
]


def resolved_mode(mode: str | None = None) -> str:
    """What ``auto`` (or ``mode``) means in this process: the mode JAX actually applies."""
    mode = mode or jax.config.jax_traceback_filtering
    if mode not in (None, "auto"):
        return mode
    if mode != jax.config.jax_traceback_filtering:
        return _auto()
    return runtime.traceback_filtering_mode() or _auto()  # private API moved: JAX's documented rule


def _auto() -> str:
    # JAX's own test: IPython puts get_ipython into builtins while it runs code.

    under_ipython = hasattr(builtins, "get_ipython")
    if under_ipython:
        version = getattr(sys.modules.get("IPython"), "version_info", (0, 0))
        under_ipython = tuple(version[:2]) >= (7, 17)
    return "tracebackhide" if under_ipython else "quiet_remove_frames"


def set_traceback_filtering(mode: str) -> str:
    """Switch ``jax_traceback_filtering`` for everything that follows; return the previous mode."""
    if mode not in MODES:
        raise ProbeArgumentError("mode", f"{mode!r} is not a traceback filtering mode; choose from {', '.join(MODES)}")
    previous = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", mode)
    return previous


@dataclasses.dataclass
class TracebackReport(Report):
    """What ``%jax_traceback`` shows: the filtering mode and your frames of the last exception."""

    kind = "jax_traceback"

    mode: str = ""  # jax_traceback_filtering now
    resolved: str = ""  # what it means here ("tracebackhide" for auto in IPython)
    previous_mode: str = ""  # set when this call switched the mode
    error: str = ""  # "TypeError: cannot reshape ..." ("" when there is no exception)
    frames_total: int = 0  # frames in the traceback as raised
    frames_jax: int = 0  # of them JAX's own (jax/_src, jaxlib)
    frames_hidden: int = 0  # of them marked __tracebackhide__ (folded by IPython)
    your_frames: list[SourceLine] = dataclasses.field(default_factory=list)
    cause: str = ""  # type of __cause__, e.g. "UnfilteredStackTrace"
    notes: int = 0  # number of __notes__ JAX added

    def concerns(self) -> list[Concern]:
        return []  # a setting switched, and the error it explains: nothing found in the program

    @property
    def summary(self) -> str:
        switched = (
            f"Traceback filtering switched from {self.previous_mode} to {self.mode} for the next cells"
            if self.previous_mode
            else f"Traceback filtering: {self.mode}"
        )
        if self.mode == "auto":
            switched += f" (= {self.resolved} here)"
        if not self.error:
            return switched + "."
        return (
            f"{switched}. Last error {self.error.split(':')[0]}: {len(self.your_frames)} of its "
            f"{self.frames_total} frames are yours."
        )

    def document(self) -> Document:

        sections = []
        if self.error:
            facts = [
                ("exception", self.error),
                (
                    "frames",
                    f"{self.frames_total}: {len(self.your_frames)} yours, {self.frames_jax} JAX's; "
                    f"{self.frames_hidden} marked __tracebackhide__ (IPython folds them)",
                ),
            ]
            if self.cause:
                facts.append(("__cause__", self.cause))
            if self.notes:
                facts.append(("notes", str(self.notes)))
            blocks: list[Block] = [Facts(facts)]
            if self.your_frames:
                blocks.append(SourceLines(self.your_frames, "Outermost first; the last one raised:"))
            sections.append(Section("Your frames of the last error", blocks))
        rows = [
            [
                f"`{mode}`",
                "set"
                if mode == self.mode
                else ("what auto means here" if mode == self.resolved and self.mode == "auto" else ""),
                text,
            ]
            for mode, text in MODES.items()
        ]
        sections.append(
            Section(
                "Modes",
                [
                    Table(["mode", "here", "what a traceback shows"], rows),
                    Paragraph(
                        "Switch with `%jax_traceback MODE` (the next cells), or `JAX_TRACEBACK_FILTERING=MODE` "
                        "before Python starts; an unknown value makes `import jax` fail with ValueError."
                    ),
                ],
            )
        )
        sections.append(Section("Reading a JAX traceback", [Paragraph(p) for p in READING_ORDER]))
        return Document("%jax_traceback", self.status, self.summary, sections)


def _is_jax_file(filename: str) -> bool:
    return code_kind(filename) == "jax"


def _skip_ipython_runner(tb: TracebackType | None) -> TracebackType | None:
    # A cell's traceback starts in IPython's run_code, which marks itself so;
    # IPython does not show it, and neither do we count it.
    while tb is not None and tb.tb_frame.f_locals.get("__tracebackhide__") == "__ipython_bottom__":
        tb = tb.tb_next
    return tb


def traceback_view(error: BaseException | None = None, *, previous_mode: str = "") -> TracebackReport:
    """The filtering mode, and - for ``error`` - your frames and how many frames JAX added."""
    mode = jax.config.jax_traceback_filtering
    report = TracebackReport(mode=mode, resolved=resolved_mode(), previous_mode=previous_mode)
    if error is None:
        return report
    report.error = error_line(error).rstrip(": ")
    tb: TracebackType | None = _skip_ipython_runner(error.__traceback__)
    frames = traceback.extract_tb(tb)
    report.frames_total = len(frames)
    report.frames_jax = sum(_is_jax_file(f.filename) for f in frames)
    report.frames_hidden = sum(bool(frame.f_locals.get("__tracebackhide__")) for frame, _ in traceback.walk_tb(tb))
    report.your_frames = user_lines(tb)
    report.cause = type(error.__cause__).__name__ if error.__cause__ is not None else ""
    report.notes = len(getattr(error, "__notes__", None) or [])
    return report
