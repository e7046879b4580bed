"""The explainer's reports: ``TracerErrorReport`` (a tracer-family error explained: what, where, the
fixes) and ``UnexplainedErrorReport`` (an error it does not explain, and why), with their wording."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._leaks.tracers import text
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks


@dataclasses.dataclass
class TracedName:
    """A name on your line whose value was a tracer when the error happened."""

    name: str
    aval: str  # "float32[]"
    tracer_type: str  # "JitTracer", "BatchTracer", ...
    weak_type: bool = False  # made from a Python scalar (1.0, 3): a candidate for a static argument


@dataclasses.dataclass
class TracerErrorReport(Report):
    """What the explainer says about one tracer-family error."""

    kind = "jax_explain"

    error_type: str = ""  # "TracerBoolConversionError"
    error_kind: str = ""  # key of KINDS: "bool", "int", ...
    title: str = ""  # KINDS[error_kind].title
    message: str = ""  # the error's first line
    jax_hint: str = ""  # JAX's extra sentence, e.g. "It arose in the jnp.arange argument 'stop'"
    jax_message_text: str = ""  # JAX's whole message (the operations it names)
    rejected_fixes: list[Fix] = dataclasses.field(default_factory=list)  # tried on your function: still fail
    traced_function: str = ""  # "clip_positive" ("" when JAX did not say)
    function_line: SourceLine | None = None  # where the traced function is defined
    transformation: str = ""  # "jit", "vmap", "scan", ...
    depends_on: list[str] = dataclasses.field(default_factory=list)  # argument names, from JAX's message
    traced_names: list[TracedName] = dataclasses.field(default_factory=list)  # tracers on your line
    your_lines: list[SourceLine] = dataclasses.field(default_factory=list)  # outermost first
    fixes: list[Fix] = dataclasses.field(default_factory=list)  # best first, with your names filled in
    why: str = ""
    jitted_function: str = ""  # the outermost function of yours being traced (the one you gave jax.jit)
    jitted_line: SourceLine | None = None  # where it is defined
    jitted_transformation: str = ""  # what traced it: "jit", "vmap", ...
    origin_arguments: dict[str, str] = dataclasses.field(default_factory=dict)  # name on your line -> its argument
    leaked_from: SourceLine | None = None  # UnexpectedTracerError: where the leaked value was made
    held_by: list[str] = dataclasses.field(default_factory=list)  # UnexpectedTracerError: who holds it
    stored_at: SourceLine | None = None  # a leak: the one line of the traced function storing into the holder
    disguised_as: str = ""  # a leak JAX raised as another error: the kind it looked like ("array", "" for none)
    provenance: Provenance | None = None  # where the offending value was made, in what, started by which call
    failing_lambda: str = ""  # the body of the lambda that raised, when the failing line is more than it
    raised_in: SourceLine | None = None  # a library's line that raised, below your innermost line

    def concerns(self) -> list[Concern]:
        return [act(f"{self.error_type} explained")]  # the error the user hit, and its cause

    @property
    def failing_line(self) -> SourceLine | None:
        """Your innermost line: the one that did the operation."""
        return self.your_lines[-1] if self.your_lines else None

    @property
    def depends_text(self) -> str:
        """ "x and limit" - the argument names as JAX lists them ("" if unknown)."""
        return text.english_list(self.depends_on, code=False)

    @property
    def summary(self) -> str:
        where = ""
        if self.traced_function:
            how = f" (traced for {self.transformation})" if self.transformation else ""
            where = f" in `{self.traced_function}`{how}"
        if self.error_kind == "leak":
            held = f"; `{self.held_by[0]}` still holds it" if self.held_by else ""
            raised_as = (
                " (raised as another error: the value is a tracer kept past its trace)"
                if self.error_type not in ("UnexpectedTracerError",)
                else ""
            )
            return f"{self.error_type}: {self.title}{where}{held}{raised_as}."
        if self.jitted_function and self.jitted_function != self.traced_function:
            where += f", inside `{self.jitted_function}`" + (
                f" ({self.jitted_transformation})" if self.jitted_transformation else ""
            )
        if self.origin_arguments:
            parts = [
                f"`{name}` is the argument `{argument}` of `{self.jitted_function}`"
                if name == argument
                else f"`{name}` comes from the argument `{argument}` of `{self.jitted_function}`"
                for name, argument in self.origin_arguments.items()
            ]
            cause = ": " + "; ".join(parts)
        elif self.depends_on:
            noun = "argument" if len(self.depends_on) == 1 else "arguments"
            cause = f": the value depends on the {noun} {text.english_list(self.depends_on)}"
        elif self.traced_names:
            names = [t.name for t in self.traced_names]
            cause = f": {text.english_list(names)} {'is a tracer' if len(names) == 1 else 'are tracers'} here"
        else:
            cause = ""
        made = self.provenance.made_at if self.provenance is not None else None
        if made is not None and made != self.failing_line:
            cause += f"{';' if cause else ':'} it was made by `{made.code}` ({made.where})"
        return f"{self.error_type}: {self.title}{where}{cause}."

    def document(self) -> Document:

        facts = [("error", self.error_type), ("kind", self.title.replace("`", ""))]
        if self.traced_function:
            where = self.function_line
            facts.append(
                (
                    "traced function",
                    self.traced_function
                    + (f", defined at {where.label or where.filename}, line {where.lineno}" if where else ""),
                )
            )
        if self.transformation:
            facts.append(("traced for", self.transformation))
        if self.jitted_function and self.jitted_function != self.traced_function:
            where = self.jitted_line
            facts.append(
                (
                    "inside",
                    f"{self.jitted_function} ({self.jitted_transformation or 'traced'})"
                    + (f", defined at {where.label or where.filename}, line {where.lineno}" if where else ""),
                )
            )
        if self.depends_on:
            facts.append(("depends on", self.depends_text))
        if self.traced_names:
            facts.append(
                (
                    "tracers on your line",
                    ", ".join(
                        f"{t.name}: {t.aval}" + (" (from a Python scalar)" if t.weak_type else "")
                        for t in self.traced_names
                    ),
                )
            )
        if self.held_by:
            facts.append(("still held by", ", ".join(self.held_by)))
        if self.jax_hint:
            facts.append(("JAX adds", self.jax_hint))
        sections = [Section("What", [Facts(facts)])]
        if self.provenance is not None:
            what = "the leaked value" if self.error_kind == "leak" else "the traced value"
            blocks = provenance_blocks(self.provenance, what)
            if self.stored_at is not None and self.held_by:
                blocks.insert(1, SourceLines([self.stored_at], f"The line that stored it in `{self.held_by[0]}`:"))
            sections.append(Section("Where it was made", blocks))
        if self.your_lines:
            caption = (
                "Your frames, outermost first; the last one did the operation:" if len(self.your_lines) > 1 else ""
            )
            if self.provenance is not None and self.provenance.made_at is not None:
                caption = "Where it was used (the line that raised), as context:"
            blocks = [SourceLines(self.your_lines[-4:], caption)]
            if self.raised_in is not None:
                blocks.append(SourceLines([self.raised_in], "Raised in a library's code that your line called:"))
            sections.append(Section("Your line", blocks))
        if self.leaked_from and (self.provenance is None or self.provenance.made_at != self.leaked_from):
            sections.append(
                Section(
                    "Leaked there",
                    [SourceLines([self.leaked_from], "The leaked value was computed here, during an earlier trace:")],
                )
            )
        rows = [[f"`{fix.use}`", fix.when, fix.checked] for fix in self.fixes]
        fix_blocks: list[Block] = [Table(["write", "when", "tried"], rows)] if rows else []
        if self.rejected_fixes:
            fix_blocks.append(
                Paragraph(
                    ("No fix of this kind works here as written. " if not rows else "")
                    + "Tried on your function and left out, because it does not work for this call: "
                    + "; ".join(f"`{f.use}` ({f.checked.removeprefix('checked: ')})" for f in self.rejected_fixes)
                )
            )
        sections.append(Section("Fixes", fix_blocks))
        sections.append(Section("Why", [Paragraph(self.why)]))
        # Where first: the first section is the one open in a long report, and "What" mostly repeats the
        # headline; the fix is the document's own line already (issue 45)
        first = [s for s in sections if s.title in ("Where it was made", "Your line")]
        sections = first + [s for s in sections if s not in first]
        return Document("%jax_explain", self.status, self.summary, sections, fix=self.first_fix)

    @property
    def first_fix(self) -> str:
        """The first fix, what it is for, and whether it was tried - read under the headline."""
        if not self.fixes:
            return ""
        fix = self.fixes[0]
        checked = f" ({fix.checked})" if fix.checked else ""
        return f"`{fix.use}` - {fix.when}{checked}"


@dataclasses.dataclass
class UnexplainedErrorReport(Report):
    """``%jax_explain`` on an error it does not explain: what the error is, and why it is not explained."""

    kind = "jax_explain"

    error_type: str = ""  # "ValueError"
    message: str = ""  # the error's first line
    reason: str = ""  # why jaxmagic could not explain it
    your_lines: list[SourceLine] = dataclasses.field(default_factory=list)  # outermost first

    def concerns(self) -> list[Concern]:
        return [failed(f"{self.error_type}: {self.reason}")]

    @property
    def summary(self) -> str:
        return f"jaxmagic could not explain this {self.error_type}: {self.reason}."

    def document(self) -> Document:
        sections = [Section("What", [Facts([("error", self.error_type), ("message", self.message)])])]
        if self.your_lines:
            sections.append(Section("Your line", [SourceLines(self.your_lines[-4:], "")]))
        sections.append(Section("Why not", [Paragraph(f"Could not explain it, because {self.reason}.")]))
        return Document("%jax_explain", self.status, self.summary, sections)
