"""The leak probe's report: the leaked tracers (who holds each, where it was made), an
UnexpectedTracerError explained, the tracers your variables hold, and the fix in words."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._support.fixes.leak_fixes import leak_fixes
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Block, Document, Evidence, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.wording import counted

LEAK_FIX = (
    "A function that JAX traces must hand back every value it wants to keep: return it "
    "(`return out, h`, and `jax.grad(f, has_aux=True)` for extra outputs of a loss) instead of storing it "
    "in a list, a dict, an attribute or a closure. What was stored is a tracer of a finished trace: "
    "using it later raises UnexpectedTracerError, so empty the holder too."
)

EMPTY_THE_HOLDER = "What was stored is a tracer of a finished trace: empty the holder too."


def stored_line_fix(stored: SourceLine | None, function: str, transformation: str) -> str:
    """The fix written from the line that stored the tracer (``return out, h`` for ``self.h = h``); "" without one."""
    if stored is None:
        return ""
    written = leak_fixes(
        [], stored.code, stored.function or function, transformation == "scan", stored.filename, stored.lineno, function
    )
    return "".join(f"Here: `{fix.use}` - {fix.when}." for fix in written[:1])


@dataclasses.dataclass
class LeakedTracer:
    """One tracer that was still referenced when its trace ended."""

    number: int  # 1, 2, ... in JAX's order
    tracer_type: str  # "JitTracer"
    aval: str  # "float32[3]"
    function: str  # the function being traced ("Model.__call__" for a callable object)
    transformation: str  # "jit", "vmap", "scan", ...
    function_line: SourceLine | None = None  # where that function is defined
    created_at: SourceLine | None = None  # the line that computed the leaked value
    depends_on: list[str] = dataclasses.field(default_factory=list)  # it is (made from) these arguments
    held_by: list[str] = dataclasses.field(default_factory=list)  # your names for where it is stored
    kept_alive_by: int | None = None  # number of another leaked tracer whose computation refers to it
    jax_chain: list[str] = dataclasses.field(default_factory=list)  # JAX's reference chain, ids removed
    stored_at: SourceLine | None = None  # the one line of the traced function that stores into the holder
    provenance: Provenance | None = None  # made at, innermost function, transformations, started by

    @property
    def where(self) -> str:
        if self.held_by:
            return self.held_by[0]
        if self.kept_alive_by is not None:
            return f"(through tracer {self.kept_alive_by})"
        return "(not found in your variables)"


@dataclasses.dataclass
class UnexpectedTracer:
    """An UnexpectedTracerError: a tracer of a finished trace was used."""

    aval: str = ""
    tracer_type: str = ""
    function: str = ""  # the function being traced when it leaked
    transformation: str = ""
    used_at: SourceLine | None = None  # your line that used it (raised the error)
    created_at: SourceLine | None = None  # your line that computed it, inside the traced function
    held_by: list[str] = dataclasses.field(default_factory=list)
    stored_at: SourceLine | None = None  # the one line of the function that made it storing into the holder
    provenance: Provenance | None = None


@dataclasses.dataclass
class HeldTracer:
    """A tracer that one of your variables still holds (leaked at some earlier time)."""

    path: str
    aval: str
    tracer_type: str
    created_at: SourceLine | None = None
    stored_at: SourceLine | None = None  # the one line of the function that made it storing into ``path``
    provenance: Provenance | None = None


@dataclasses.dataclass
class LeakReport(Report):
    """What ``%%jax_leaks`` found."""

    kind = "jax_leaks"

    leaked: list[LeakedTracer] = dataclasses.field(default_factory=list)
    trace_kind: str = ""  # "DynamicJaxprTrace" (jit), "BatchTrace" (vmap), ...
    call_path: list[SourceLine] = dataclasses.field(default_factory=list)  # your frames of the leaking call
    unexpected: UnexpectedTracer | None = None
    held: list[HeldTracer] = dataclasses.field(default_factory=list)  # tracers your variables hold after the block
    traced: list[str] = dataclasses.field(default_factory=list)  # functions traced in the block
    eager_operations: int = 0  # eager primitives traced in the block (each is a tiny jit)
    retrace_method: str = ""  # "user_context" or "clear_caches"
    retrace_note: str = ""
    other_error: str = ""  # the block failed for another reason: "ValueError: ..."
    jax_message: str = ""  # JAX's error message, ids removed

    def concerns(self) -> list[Concern]:
        found = [act(f"a tracer leaked from {t.created_at.where if t.created_at else 'a trace'}") for t in self.leaked]
        found += [act("a tracer was used outside its trace")] if self.unexpected else []
        return found + ([failed(self.other_error)] if self.other_error else [])

    @property
    def line(self) -> SourceLine | None:
        """The user's line a finding of this report points at (``%%jax_doctor``'s too): where the leaked value was
        computed, else the line that stored it; for a tracer used after its trace, where it was computed, else
        where it was used."""
        if self.leaked:
            first = self.primary[0] if self.primary else self.leaked[0]
            return first.created_at or first.stored_at
        if self.unexpected is not None:
            return self.unexpected.created_at or self.unexpected.used_at
        return None

    @property
    def fix(self) -> str:
        """What the report's Fix section says first (``%%jax_doctor``'s fix too): the general fix, then the one
        written from the line that stored the tracer."""
        if self.leaked:
            first = self.primary[0] if self.primary else self.leaked[0]
            stored, function, transformation = first.stored_at, first.function, first.transformation
        elif self.unexpected is not None:
            u = self.unexpected
            stored, function, transformation = u.stored_at, u.function, u.transformation
        else:
            return ""
        here = stored_line_fix(stored, function, transformation)
        # the fix written for the line first; the general rule only when there is none (it is under "Why")
        return f"{here} {EMPTY_THE_HOLDER}" if here else LEAK_FIX

    @property
    def primary(self) -> list[LeakedTracer]:
        """The leaked tracers stored somewhere by your code (not merely referenced by another leaked one)."""
        return [t for t in self.leaked if t.kept_alive_by is None]

    @property
    def held_by(self) -> list[str]:
        """Every name found holding a leaked tracer, in order."""
        return list(dict.fromkeys(p for t in self.leaked for p in t.held_by))

    @property
    def summary(self) -> str:
        if self.leaked:
            first = self.primary[0] if self.primary else self.leaked[0]
            how = first.transformation or "a transformation"
            if first.provenance is not None and len(first.provenance.transforms) > 1:
                how = first.provenance.path  # "jit(step) > grad"
            fn = (
                f"`{first.function}` (traced for {how})"
                if first.function
                else f"a function traced for {how} (JAX's message does not name it"
                + (f"; the trace was started at {_place(self.call_path[-1])})" if self.call_path else ")")
            )
            tracer = f"a {first.aval} tracer" if first.aval else "a tracer"
            where = f"`{first.held_by[0]}` holds {tracer}" if first.held_by else f"{tracer} is still referenced"
            more = len(self.primary) - 1 if self.primary else len(self.leaked) - 1
            through = len(self.leaked) - len(self.primary) if self.primary else 0
            extra = ", ".join(
                [f"{more} more leaked tracer{'s' if more > 1 else ''} below"] * bool(more)
                + [f"{through} more kept alive only by {'it' if more == 0 else 'them'}"] * bool(through)
            )
            extra = f" ({extra})" if extra else ""
            started = (
                f"; the trace was started at {_place(self.call_path[-1])}" if first.function and self.call_path else ""
            )
            return f"Tracer leaked from {fn}: {where}{started}{extra}."
        if self.unexpected:
            u = self.unexpected
            held = f"; `{u.held_by[0]}` holds it" if u.held_by else ""
            fn = u.created_at.function if u.created_at else (u.function or "a traced function")
            return (
                f"UnexpectedTracerError: a {u.aval or ''} tracer that leaked from `{fn}` earlier was used here{held}."
            ).replace("a  tracer", "a tracer")
        if self.other_error:
            return f"No tracer leaked before the cell failed with {self.other_error}."
        held = f" (but `{self.held[0].path}` still holds a tracer leaked earlier)" if self.held else ""
        return f"No tracer leaked{held}."

    def document(self) -> Document:
        sections: list[Section] = []
        if self.leaked:
            sections += leaked_sections(self)
        if self.unexpected:
            sections += unexpected_sections(self.unexpected, show_rule=self.fix != LEAK_FIX)
        if self.held and not self.leaked:
            sections.append(held_section(self.held))
        checked = how_checked_section(self)
        if checked is not None:
            sections.append(checked)
        evidence = "\n".join(filter(None, [self.jax_message, self.other_error if not self.jax_message else ""]))
        if evidence:
            sections.append(Section("", [Evidence(_message_title(evidence), evidence)]))
        return Document(
            "%%jax_leaks", self.status, self.summary, sections, fix=self.fix, nothing_to_do=self.unexplained()
        )


def leaked_sections(report: LeakReport) -> list[Section]:
    """ "Leaked tracers", "Where it was made", "Your line", "During", "Why" and "The other tracers": what
    leaked from the block's traces, the first stored one followed back to its line."""
    rows = [
        [
            str(t.number),
            f"`{t.aval}`",
            f"`{t.where}`" if t.held_by else t.where,
            f"`{t.function}`" + (f" ({t.transformation})" if t.transformation else ""),
            _origin(t),
        ]
        for t in report.leaked
    ]
    sections = [Section("Leaked tracers", [Table(["#", "value", "held by", "traced function", "what it is"], rows)])]
    lines = [t.created_at for t in report.primary if t.created_at]
    first = report.primary[0] if report.primary else report.leaked[0]
    if first.provenance is not None:
        blocks = provenance_blocks(first.provenance, f"the leaked value (tracer {first.number})")
        if first.stored_at is not None:
            blocks.insert(1, SourceLines([first.stored_at], f"The line that stored it in `{first.where}`:"))
        sections.append(Section("Where it was made", blocks))
        lines = [line for line in lines if line != first.created_at]
    if lines:
        unique = list({line.where: line for line in lines}.values())
        sections.append(Section("Your line", [SourceLines(unique, "The value that leaked was computed here:")]))
    if report.call_path:
        sections.append(Section("During", [SourceLines(report.call_path, "The trace that leaked was started by:")]))
    if report.fix != LEAK_FIX:  # the fix line is written for the storing line: the rule behind it
        sections.append(Section("Why", [Paragraph(LEAK_FIX)]))
    secondary = [t for t in report.leaked if t.kept_alive_by is not None]
    if secondary:  # the fix itself is the document's own line (``fix``)
        paragraph = Paragraph(
            f"Tracer{'s' if len(secondary) > 1 else ''} {', '.join(str(t.number) for t in secondary)} "
            "only leaked because a stored tracer keeps its computation, and with it its inputs, alive: "
            "fix the stored one and they go too."
        )
        sections.append(Section("The other tracers", [paragraph]))
    return sections


def unexpected_sections(u: UnexpectedTracer, show_rule: bool) -> list[Section]:
    """ "What", "Leaked there", "Used here" and "Catching it earlier": an UnexpectedTracerError explained;
    ``show_rule``: the general fix is not already the report's fix line, so say it here."""
    facts = [
        ("value", f"{u.aval} ({u.tracer_type})"),
        ("leaked from", f"{u.function} traced for {u.transformation}" if u.function else "(not named)"),
    ]
    if u.held_by:
        facts.append(("still held by", ", ".join(u.held_by)))
    sections = [Section("What", [Facts(facts)])]
    if u.provenance is not None:  # the producing line first, the use after it as context
        blocks = provenance_blocks(u.provenance, "the leaked value")
        if u.stored_at is not None:
            blocks.insert(1, SourceLines([u.stored_at], f"The line that stored it in `{u.held_by[0]}`:"))
        sections.append(Section("Leaked there", blocks))
    elif u.created_at:
        computed = SourceLines([u.created_at], "It was computed here, while that function was being traced:")
        sections.append(Section("Leaked there", [computed]))
    if u.used_at:
        sections.append(Section("Used here", [SourceLines([u.used_at], "JAX raised where the old tracer was used:")]))
    catch = Paragraph(
        "To catch the leak when it happens (not when the tracer is used), run the cell that calls the "
        "traced function under %%jax_leaks."
    )
    sections.append(Section("Catching it earlier", [*([Paragraph(LEAK_FIX)] if show_rule else []), catch]))
    return sections


def held_section(held: list[HeldTracer]) -> Section:
    """ "Tracers your variables hold": tracers leaked before the block, still reachable from your names."""
    rows = [[f"`{h.path}`", f"`{h.aval}`", h.created_at.where if h.created_at else ""] for h in held]
    return Section(
        "Tracers your variables hold",
        [
            Paragraph("These were leaked before; using one raises UnexpectedTracerError."),
            Table(["variable", "value", "created at"], rows),
        ],
    )


def how_checked_section(report: LeakReport) -> Section | None:
    """ "How this was checked": the re-trace and the functions traced with leak checking; None when there is
    nothing to say."""
    checked: list[Block] = [Paragraph(report.retrace_note)] if report.retrace_note else []
    traced = list(dict.fromkeys(report.traced + [t.function for t in report.leaked if t.function]))
    if traced or report.eager_operations or report.leaked:
        names = ", ".join(f"`{n}`" for n in traced) or (
            "a function of yours that JAX does not name" if report.leaked else "no jitted function of yours"
        )
        ops = (
            f", and {report.eager_operations} operation(s) of JAX's own (eager primitives, jax.numpy helpers)"
            if report.eager_operations
            else ""
        )
        checked.append(Paragraph(f"Traced with leak checking: {names}{ops}."))
        if not report.traced:
            checked.append(
                Paragraph(
                    "JAX announces only jit traces; functions transformed by grad or vmap without jit are "
                    "checked as well, but only named here when they leak."
                )
            )
    elif report.retrace_note:
        checked.append(Paragraph("Nothing was traced in the cell, so there was nothing to check."))
    return Section("How this was checked", checked) if checked else None


def _message_title(evidence: str) -> str:
    return f"JAX's message ({counted(len(evidence.splitlines()), 'line')}, as in the traceback below)"


def _place(line: SourceLine) -> str:
    """ "In [3], line 2 (`jax.grad(f)(x)`)": where, without the enclosing function's name (often `<module>`)."""
    return f"{line.label or line.filename}, line {line.lineno}" + (f" (`{line.code}`)" if line.code else "")


def _origin(tracer: LeakedTracer) -> str:
    """ "computed at In [4], line 8" or "the argument `x`": what the leaked tracer stands for."""
    if tracer.created_at is not None:
        return f"computed at {tracer.created_at.label or tracer.created_at.filename}, line {tracer.created_at.lineno}"
    if tracer.depends_on:
        noun = "argument" if len(tracer.depends_on) == 1 else "arguments"
        return f"the {noun} " + ", ".join(f"`{a}`" for a in tracer.depends_on) + " (an input of the trace)"
    return ""
