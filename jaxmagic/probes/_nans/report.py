"""What ``%%jax_nans`` found (``NanReport``), in words: its summary, explanation, sections and scope."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp

from jaxmagic.probes._nans.causes import is_a_fix, lost_constant_cause, overflowed, written_inf
from jaxmagic.probes._nans.fixes.value_fixes import FixTrial
from jaxmagic.probes._nans.inside import InsideSearch
from jaxmagic.probes._nans.nonfinite import NonFiniteLeaf
from jaxmagic.probes._nans.primitives import primitive
from jaxmagic.probes._nans.scope import Scope
from jaxmagic.probes._nans.search.found import NanProducer
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed
from jaxmagic.report.document import Block, Document, Evidence, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.wording import counted

BACKWARD_EXPLANATION = (
    "In a backward pass JAX's error message names only the primitive of the gradient code JAX generated. "
    "Where the gradient was taken outside jax.jit, JAX 0.12 chains the forward line whose derivative failed "
    "as the error's __cause__ (JaxStackTraceBeforeTransformation, printed above the error as \"the preceding "
    'stack trace"), with traceback filtering on or off; inside a jitted function it chains none, and the '
    "traceback ends at the line that took the gradient. The usual cause is a function whose "
    "derivative is undefined at the point where it is evaluated, or the jnp.where trap, where the branch that "
    "is not selected still gets a NaN gradient. Which fix applies depends on the operation and the values it "
    "got: %%jax_nans on the cell names them."
)


# JAX functions whose derivative divides by differences of the values they compute (two equal ones: inf)
REPEATED_SPECTRUM = {
    "jnp.linalg.eigh": "eigenvalues",
    "jax.scipy.linalg.eigh": "eigenvalues",
    "jnp.linalg.svd": "singular values",
    "jax.scipy.linalg.svd": "singular values",
}


def _gradient_clause(p: NanProducer) -> str:
    """What a discarded NaN means for gradients: said of this cell when it computed one (its result, the
    gradient, is finite), else as the condition under which one would be NaN - never as a certainty."""
    if p.phase == "backward" or p.derivative:
        return "(the gradient this cell computed is finite too)"
    return "(a gradient through that branch is NaN where its derivative is inf or NaN: 0 * inf = NaN)"


DISCARDED_EXPLANATION = (
    "The value was made in a branch that `{by}` then discarded: the result is finite, and under jax.jit "
    "nothing is raised. jax.debug_nans checks every operation's output, so it raises anyway. It matters "
    "for gradients: the gradient of the discarded branch is still computed and multiplied by zero, and "
    "0 * NaN (or 0 * inf) is NaN - the jnp.where trap."
)


# what JAX prints (api_util.maybe_recursive_nan_check, pjit's backward pass) before it re-runs a jitted
# function whose output held a NaN/inf under its checks
_JAX_CHECK_FIRED = "Invalid nan value encountered in the"


@dataclasses.dataclass
class NanReport(Report):
    """What ``%%jax_nans`` found. ``found`` is True when a NaN/inf was caught."""

    kind = "jax_nans"

    checks: list[str] = dataclasses.field(default_factory=lambda: ["nan"])
    found: bool = False
    value: str = ""  # "nan" or "inf"
    primitive: str = ""  # "log", "mul", ... ("" if JAX did not name one)
    phase: str = ""  # "forward" or "backward"
    message: str = ""  # JAX's error message, first line
    call_path: list[SourceLine] = dataclasses.field(default_factory=list)  # user frames of the traceback
    origin_lines: list[SourceLine] = dataclasses.field(default_factory=list)  # user line of the op itself
    library_function: str = ""  # the JAX function that line called, e.g. "norm"
    failing_call: str = ""  # the call that raised, e.g. "jax.grad(reg_loss)(p_reg, x_reg)"
    nonfinite: list[NonFiniteLeaf] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    # a search after the cell (the doctor's, the watch's): the user's functions whose Python ran again to
    # get the program ([]: none, it came from JAX's cache; None: no such search, or it could not be told)
    traced_again: list[str] | None = None
    jax_messages: list[str] = dataclasses.field(default_factory=list)
    other_error: str = ""  # the cell failed for another reason: "ValueError: ..."
    compiled_only: bool = False  # NaN in the compiled program that the de-optimized run did not reproduce
    origin_by_rerun: bool = False  # origin_lines were found by re-running the call op by op
    producer: NanProducer | None = None  # the operation that made the value (the producer search)
    searched_call: str = ""  # the expression whose program the producer search evaluated
    search_stopped_at: list[str] = dataclasses.field(default_factory=list)  # primitives it could not open
    call_number: int = 0  # which call of call_line failed (0: not counted), for cells that loop
    call_line: SourceLine | None = None  # the user's line whose call count is call_number
    python_error: str = ""  # Python's own ZeroDivisionError/OverflowError: no JAX NaN/inf at all
    provenance: Provenance | None = None  # made_at (the producing line), function, transformations, started_by
    fix: str = ""  # the fix that matches the producing operation and the values it saw ("" when none is known)
    # the fixes considered, as data: each tried on the values (`tried`, `result`, `call_result`) or why not;
    # `offered` marks the one `fix` offers (nans/fixes.py, probes/_nans/fixes/value_fixes.py)
    fixes: list[FixTrial] = dataclasses.field(default_factory=list)
    jit_calls: dict[str, int] = dataclasses.field(default_factory=dict)  # jitted function -> calls the cell made
    checked_scope: str = ""  # what the checks covered: "the outputs of 2 call(s) of `f` ..." (set after the cell)
    checked_headline: str = ""  # a clean report's headline: what was checked and what not (``scope.Scope``)
    inside: bool = False  # --inside: the first call of each jitted function was evaluated op by op
    inside_searches: list[InsideSearch] = dataclasses.field(default_factory=list)  # one per call evaluated

    @property
    def inside_findings(self) -> list[InsideSearch]:
        """The evaluated calls in which an operation made a non-finite value (masked later or not)."""
        return [s for s in self.inside_searches if s.producer is not None]

    def concerns(self) -> list[Concern]:
        found = []
        if self.found:
            found.append(act(f"a non-finite value was made ({self.primitive or 'an operation'})"))
        found += [act(f"non-finite leaf {leaf.name}") for leaf in self.nonfinite]
        found += [act("an operation made a non-finite value inside an evaluated call") for _ in self.inside_findings]
        if self.check_fired_and_caught:
            found.append(act("JAX's NaN check stopped a call, and the cell caught the error itself"))
        return found + ([failed(self.other_error)] if self.other_error else [])

    @property
    def check_fired_and_caught(self) -> bool:
        """JAX printed that its check found a NaN in a jitted call's output, and no error reached the probe:
        the cell's own ``try``/``except`` caught the FloatingPointError (a loop that skips bad batches)."""
        return not self.found and not self.other_error and any(_JAX_CHECK_FIRED in m for m in self.jax_messages)

    @property
    def checked(self) -> str:
        return "/".join(c.upper() if c == "nan" else c for c in self.checks).replace("NAN", "NaN")

    @property
    def where_line(self) -> SourceLine | None:
        """The user line to blame: the producer's line, else the op's own line if known, else the innermost call."""
        if self.producer is not None and self.producer.line is not None:
            return self.producer.line
        if self.origin_lines:
            return self.origin_lines[-1]
        return self.call_path[-1] if self.call_path else None

    @property
    def summary(self) -> str:
        what = "NaN" if self.value == "nan" else "inf"
        # JAX's own op-by-op re-run can miss what the producer search's evaluation sees (inside
        # `custom_linear_solve`): a producer observed outranks JAX's guess that compiling made the value
        if self.found and self.compiled_only and self.producer is None:
            return (
                f"{what} in the output of a compiled function, but not when JAX re-ran it op by op: "
                "the compiled program (an XLA optimisation or a nan/inf literal) made it."
            )
        if self.python_error:
            return (
                f"{self.python_error} - raised by Python (or NumPy) arithmetic, not by JAX: "
                "No NaN or inf was produced by JAX in this cell."
            )
        if self.found and self.producer is not None:
            return self._producer_summary(self.producer, what)
        passed_in = [leaf for leaf in self.nonfinite if leaf.name.startswith("argument ") and leaf.nan_count]
        if self.found and what == "NaN" and passed_in:  # JAX names the first operation it reached
            names = ", ".join(f"`{leaf.name.removeprefix('argument ')}`" for leaf in passed_in[:3])
            prim = f" (`{self.primitive}`, the first operation it reached, is only where JAX noticed it)"
            return (
                f"The NaN came in with the argument{'s' if len(passed_in) > 1 else ''} {names}: no operation "
                f"of the call made it{prim if self.primitive else ''}. It came from outside JAX (NumPy data, a "
                "literal, a loaded value) or from an earlier step."
            )
        if self.found:
            phase = "a backward pass (gradient)" if self.phase == "backward" else "the forward computation"
            prim = f"`{self.primitive}`" if self.primitive else "a primitive JAX did not name"
            line = self.where_line
            at = f", in {line.function} ({line.label or line.filename}, line {line.lineno})" if line else ""
            return f"{what} produced by {prim} in {phase}{at}."
        if self.nonfinite:
            names = ", ".join(leaf.name for leaf in self.nonfinite[:3])
            only_inf = not any(leaf.nan_count for leaf in self.nonfinite)
            if only_inf and "inf" not in self.checks:
                return (
                    f"No NaN appeared, but {names} holds inf, and inf checks were off: "
                    "run the cell with %%jax_nans --infs to find where it is made."
                )
            value = "inf" if only_inf else "NaN"
            return (
                f"No JAX computation produced a {value}, but {names} holds one: it came from "
                "outside JAX (NumPy, a literal, a loaded value) or from before the cell."
            )
        if self.inside_findings:
            return inside_summary(self.inside_findings[0], len(self.inside_findings))
        if self.other_error:
            return f"The cell failed with {self.other_error} before any {self.checked} appeared."
        if self.check_fired_and_caught:
            return (
                "JAX's NaN check stopped a jitted call in this cell, but the cell caught the FloatingPointError "
                "itself (a try/except), so it never reached %%jax_nans: could not tell which operation made the "
                "NaN. Run the failing call without the try/except under %%jax_nans to find it."
            )
        # what was looked at and, in the same paragraph, what was not (inside compiled code) and --inside
        return self.checked_headline or Scope(self.jit_calls).headline(self.checked)

    def _producer_summary(self, p: NanProducer, what: str) -> str:
        inside = f" inside `{p.library_function}`" if p.library_function else ""
        line = p.line
        at = f" at {line.function} ({line.label or line.filename}, line {line.lineno})" if line else ""
        if p.expression:  # the part of the line that made it: which of two `log`s
            at = f" in `{p.expression}`{at}"
        loops = f", {p.where_in_loops}" if p.loops else ""
        call = f", call {self.call_number}" if self.call_number > 1 else ""
        if p.opaque:
            return (
                f"{what} produced inside `{p.primitive}`{at}{loops}{call}; the search could not look inside "
                f"`{p.primitive}`, so the operation itself is not named."
            )
        if p.written_nan and not p.discarded_by:
            return (
                f"NaN written into the program, not computed: a NaN constant {written_nan_writer(p)}, passed "
                f"on by `{p.primitive}`{at}{loops}{call} ({p.description})."
            )
        if p.discarded_by:
            if p.nan_maker and p.value == "inf":
                inside = f" inside `{p.nan_maker_library}`" if p.nan_maker_library else ""
                return (
                    f"NaN made by `{p.nan_maker}`{inside} ({p.nan_maker_values}) of an inf `{p.primitive}` "
                    f"made{at}{loops}, in a branch that `{p.discarded_by}` discarded: the result is finite, but "
                    f"jax.debug_nans raises on it {_gradient_clause(p)}."
                )
            return (
                f"{what} made by `{p.primitive}`{inside}{at}{loops} in a branch that `{p.discarded_by}` "
                f"discarded: the result is finite, but jax.debug_nans raises on it {_gradient_clause(p)}."
            )
        phase = "a backward pass (gradient)" if p.phase == "backward" else "the forward computation"
        if p.phase == "forward" and p.derivative:  # jax.jvp, jacfwd, hessian: JAX's derivative, not a forward value
            phase = "a derivative JAX computed in forward mode (jvp)"
        limit = _limit_crossed(p)
        if limit:  # the dtype whose limit was crossed is the cause: said first (issue 63.7)
            return f"{what} from an overflow: {limit}{_at(p.line)}{loops}{call}."
        if p.nan_maker and p.value == "inf":
            return (
                f"NaN in {phase}: `{p.primitive}`{inside} made inf{at}{loops}{call}, and `{p.nan_maker}` "
                f"made NaN of it ({p.nan_maker_values})."
            )
        return f"{what} produced by `{p.primitive}`{inside} in {phase}{at}{loops}{call}."

    def document(self) -> Document:
        sections = [section for build in SECTIONS for section in build(self)]
        return Document(
            "%%jax_nans", self.status, self.summary, sections, fix=self.fix_line, nothing_to_do=self.unexplained()
        )

    @property
    def fix_line(self) -> str:
        """What the report says to do under its headline: the tried fix (``fix``, from ``nans.fixes``); without
        one, the next step that shows the values at the line (``%jax_debug`` after the error), where the value
        came from when no operation made it, or how to find the operation a caught check hid."""
        if self.found and is_a_fix(self.fix):
            return self.fix
        inside = next((s.fix for s in self.inside_findings if is_a_fix(s.fix)), "")
        if inside:
            return inside
        cause = f"{self.fix.rstrip('.')}. " if self.found and self.fix else ""
        if self.found and self.producer is None and any(leaf.name.startswith("argument ") for leaf in self.nonfinite):
            return "Find where the argument got it: check the data before the call (`jnp.isnan(x).any()`), or run the cell that made it under %%jax_nans."
        if self.found:
            tried = sum(1 for fix in self.fixes if fix.tried)
            none_worked = (
                "No fix was tried for what was found"
                if not tried
                else "The fix tried on the values did not make it finite (below)"
                if tried == 1
                else f"None of the {tried} fixes tried on the values made it finite (below)"
            )
            return f"{cause}{none_worked}; `%jax_debug` in the next cell stops at the line with the values that reached it."
        if self.check_fired_and_caught:
            return "Run the failing call without the try/except under %%jax_nans: it then names the operation and the line."
        if self.nonfinite:
            return "Look where the value came from before this cell (NumPy data, a literal, a loaded file), or run the cell that made it under %%jax_nans."
        return ""

    def _explanation(self) -> str:
        p = self.producer
        # the fix is not repeated here: it is the document's own line, under the headline (``Document.fix``)
        if p is not None and p.written_nan and not p.discarded_by:
            return (
                f"No operation made this NaN: it is a constant {written_nan_writer(p)}, and `{p.primitive}` "
                f"chose it ({p.description}). If it marks values that do not count, reduce with the NaN-aware "
                "functions (jnp.nanmean, jnp.nansum) or write a finite fill; if it is a function's answer for an "
                "input outside its domain, keep that input inside the domain."
            )
        if p is not None and p.discarded_by:
            return DISCARDED_EXPLANATION.format(by=p.discarded_by)
        if p is not None and p.value == "inf" and (inf := written_inf(p)) is not None:
            return (
                f"{p.description}, and its {inf.role} operand is {inf.value} written into the program (a "
                f"`jnp.inf` in the code): no value overflowed, `{p.primitive}` passed that inf on and it reached "
                "what was checked."
            )
        if p is not None and p.phase == "forward" and not p.derivative and overflowed(p):
            return f"{p.description}: {overflowed(p)}."
        if p is not None and p.phase == "forward" and not p.derivative:
            cause = primitive(p.primitive).forward_cause
            text = f"{p.description}" + (f": {cause}." if cause else ".")
            lost = lost_constant_cause(p)
            if lost:
                text = f"{p.description}: {lost}." + (f" {cause[0].upper()}{cause[1:]}." if cause else "")

            return text
        if p is not None and p.user_rule:
            line = f" (`{p.line.code.strip()}`)" if p.line is not None and p.line.code else ""
            return f"{p.description}, in your own derivative rule{line}, run for the gradient." + (
                "" if self.fix else " Could not tell which fix applies to these values."
            )
        if p is not None:
            line = f" of `{p.line.code}`" if p.line is not None and p.line.code else ""
            then = f" `{p.nan_maker}` then made NaN of it ({p.nan_maker_values})." if p.nan_maker else ""
            spectrum = REPEATED_SPECTRUM.get(p.library_function)
            if spectrum and not self.fix and any(op.value in ("0.0", "-0.0") for op in p.operands):
                # jax-ml/jax#4646, #8732: the rule's 1/(w_i - w_j) at two equal values; a double where on the
                # user's line cannot reach inside it, so none is suggested
                return (
                    f"{p.description}, in the derivative{line} JAX computed for the gradient.{then} JAX's "
                    f"derivative of `{p.library_function}` divides by differences of its {spectrum}: a 0 there "
                    f"means two of them are equal, where that derivative is undefined (jax-ml/jax#669, #2311). "
                    "Could not tell a fix that keeps the gradient right: the matrix's repeated values are the cause."
                )
            return f"{p.description}, in the derivative{line} JAX computed for the gradient.{then}" + (
                ""
                if self.fix
                else " Could not tell which fix applies to these values: make the derivative finite where "
                "it is evaluated (the double where guards the input of the operation)."
            )
        if self.compiled_only:
            return (
                "JAX found the value in the compiled function's output, re-ran the function without "
                "jit to locate it, and the re-run produced none. Compare eager and jit results "
                "(jax.disable_jit()) and look for nan/inf constants."
            )
        if self.phase == "backward":
            return BACKWARD_EXPLANATION
        cause = primitive(self.primitive).forward_cause
        text = f"`{self.primitive}` produced {self.value}" + (f": typically {cause}." if cause else ".")
        if self.nonfinite:
            return text + " The inputs were already non-finite: see the table of non-finite values."
        return text + " Look at the values reaching that line (jax.debug.print, or %jax_check on the call)."


def _limit_crossed(p: NanProducer) -> str:
    """ "`256 ** k` overflowed int32 (4294967296 > 2147483647, its largest) and wrapped to 0, then `div` made
    inf of it"; "`jnp.sum(x)` overflowed float16 (78000.0 > 65504, its largest)"; "" when no limit was."""
    wrapped = p.integer_overflow
    if wrapped is not None:
        what = wrapped.expression or wrapped.operation
        return (
            f"`{what}` overflowed {wrapped.dtype} ({wrapped.exact} > {wrapped.limit}, its largest) and wrapped "
            f"to {wrapped.wrapped}, then `{p.primitive}` made {p.value} of it"
        )
    if p.primitive == "convert_element_type" and p.operands and overflowed(p):
        what = f"`{p.expression}`" if p.expression else f"a {p.operands[0].dtype} value"
        largest = f"{float(jnp.finfo(p.output_dtype).max):.6g}"
        return f"{what} overflowed {p.output_dtype} ({p.operands[0].value} > {largest}, its largest)"
    return ""


def _at(line: SourceLine | None) -> str:
    return f" at {line.function} ({line.label or line.filename}, line {line.lineno})" if line is not None else ""


def inside_summary(found: InsideSearch, count: int = 1) -> str:
    """The headline of a call ``--inside`` evaluated in which an operation made a non-finite value."""
    p = found.producer
    assert p is not None, "only a call with a finding (NanReport.inside_findings) is summarised"
    inside = f" inside `{p.library_function}`" if p.library_function else ""
    made = f"`{p.primitive}`{inside} made {p.value}{_at(p.line)}, in call {found.call} of `{found.function}`"
    more = f" ({count - 1} more compiled computation{'s' if count > 2 else ''} made one too)" if count > 1 else ""
    if found.unchecked:
        return (
            f"`{p.primitive}`{inside} made {p.value}{_at(p.line)} in an operation JAX ran eagerly with its checks "
            f"off (it does so for the branches of a `cond` under `vmap`): no check saw it{more}."
        )
    if found.masked_by:
        return (
            f"{made}, and `{found.masked_by}`{_at(found.masked_line)} masked it: the output is finite, so "
            f"jax.debug_nans/debug_infs did not see it, and the result may be silently wrong{more}."
        )
    if found.reached_output:
        return f"{made}, and it reached the output{more}."
    return f"{made}; it did not reach the output, and no single operation that masked it was found{more}."


def _inside_section(found: InsideSearch) -> Section:
    p = found.producer
    assert p is not None, "only a call with a finding (NanReport.inside_findings) has a section"
    facts = [("operation", f"`{p.primitive}` made {p.value}"), ("values", p.description)]
    if p.library_function:
        facts.append(("inside", f"`{p.library_function}`, called from your line"))
    facts.append(("call", f"{found.call} of `{found.function}`"))
    if found.masked_by:
        facts.append(("masked by", f"`{found.masked_by}` (`{found.masked_primitive}`): its output is finite"))
    elif found.reached_output:
        facts.append(("reached", "the output of the call"))
    blocks: list[Block] = [Facts(facts)]
    if p.provenance is not None:
        blocks += provenance_blocks(p.provenance, f"the {p.value}")
    if found.masked_line is not None:
        blocks.append(SourceLines([found.masked_line], f"The line that masked it (`{found.masked_by}`):"))
    elif p.line is not None and p.provenance is None:
        blocks.append(SourceLines([p.line], "The line that made it:"))
    if found.masked_by:
        dtypes = {op.dtype for op in p.operands}
        limit = {"float16": " (float16 overflows above 65504)", "bfloat16": " (bfloat16 overflows above 3.4e38)"}
        hint = "".join(limit[d] for d in sorted(dtypes) if d in limit)
        blocks.append(
            Paragraph(
                f"The {p.value} never reached an output of the compiled program, which is all jax.debug_nans and "
                f"jax.debug_infs check under jit. What `{found.masked_by}` returned there stands for a value "
                f"that could not be computed: look at the dtype and range of the values on the first line{hint}."
            )
        )
    if is_a_fix(found.fix):
        blocks.append(Paragraph(f"Fix: {found.fix}"))
    return Section(f"Inside `{found.function}`", blocks)


def written_nan_writer(p: NanProducer) -> str:
    """Who wrote the NaN constant a producer passed on (``NanProducer.written_nan``): the user's line when
    its code writes a NaN (``jnp.where(mask, x, jnp.nan)``), else the library function it called
    (``jax.scipy.special.loggamma``'s NaN for x <= 0), else a library's own code."""
    code = p.line.code if p.line is not None else ""
    if "nan" in code.lower() and not p.written_nan_by:
        return "your line writes"
    writer = p.written_nan_by or p.library_function
    return f"written by `{writer}`'s own code" if writer else "written into the program"


# -- the sections of the document, in the order drawn (``SECTIONS``): each takes the report -------------------


def what(report: NanReport) -> list[Section]:
    """What was caught: the operation the producer search found and the values it got, or what JAX named."""
    if not report.found:
        return []
    p = report.producer
    if p is None:
        facts = [("value", report.value), ("primitive", report.primitive or "(not named)"), ("phase", report.phase)]
        if report.library_function:
            facts.append(("inside", report.library_function))
        if report.failing_call:
            facts.append(("failing call", report.failing_call))
        return [Section("What", [Facts(facts)])]
    facts = [("value", report.value), ("operation", f"`{p.primitive}` made {p.value}")]
    if p.expression:
        facts.append(("in", f"`{p.expression}`"))
    facts.append(("values", p.description))
    if p.library_function:
        facts.append(("inside", f"`{p.library_function}`, called from your line"))
    phase = p.phase + (" (computed for the gradient)" if p.derivative and p.phase == "backward" else "")
    facts.append(("pass", phase))
    for loop in p.loops:
        where = f" ({loop.line.label or loop.line.filename}, line {loop.line.lineno})" if loop.line else ""
        facts.append((f"`{loop.primitive}`", loop.text + where))
    return [Section("What", [Facts(facts + _producer_context(report, p))])]


def _producer_context(report: NanReport, p: NanProducer) -> list[tuple[str, str]]:
    """The producer's facts after its values: where it ran, which call, what became of its value."""
    facts = []
    if p.calls:
        facts.append(("in jitted", " > ".join(f"`{c}`" for c in p.calls)))
    if report.call_number > 1 and report.call_line is not None:
        facts.append(("call", f"{report.call_number} of line {report.call_line.lineno}: `{report.call_line.code}`"))
    if p.nan_maker:
        facts.append(("then", f"`{p.nan_maker}` turned it into NaN: {p.nan_maker_values}"))
    if p.discarded_by:
        facts.append(("discarded by", f"`{p.discarded_by}`: the result is finite"))
    if report.primitive and report.primitive != p.primitive:
        facts.append(("JAX named", f"`{report.primitive}` (the outermost operation the value left)"))
    if report.failing_call or report.searched_call:
        facts.append(("failing call", report.searched_call or report.failing_call))
    return facts


def where_it_was_made(report: NanReport) -> list[Section]:
    if not report.found or report.provenance is None:
        return []
    return [Section("Where it was made", provenance_blocks(report.provenance, f"the {report.value}"))]


def your_line(report: NanReport) -> list[Section]:
    """The user's line(s) of the operation: the producer's (and the NaN maker's, the discarding where's)."""
    if not report.found:
        return []
    p = report.producer
    if p is None:
        if not report.origin_lines:
            return []
        caption = (
            "The operation whose gradient produced it"
            if report.phase == "backward"
            else "The operation that produced it"
        )
        caption += " (found by re-running the call op by op):" if report.origin_by_rerun else ":"
        return [Section("Your line", [SourceLines(report.origin_lines[-3:], caption)])]
    lines = [line for line in (p.line, p.nan_maker_line, p.discarded_line) if line is not None]
    lines = list({(line.filename, line.lineno): line for line in lines}.values())
    if not lines:
        return []
    if p.phase == "backward" or p.derivative:
        caption = "The forward line whose derivative produced it"
    else:
        caption = "The line that produced it"
    caption += f" (found by evaluating {report.searched_call} operation by operation):"
    return [Section("Your line", [SourceLines(lines, caption)])]


def call_path(report: NanReport) -> list[Section]:
    if not report.found or not report.call_path:
        return []
    return [Section("Call path", [SourceLines(report.call_path, "Your frames, outermost first:")])]


def why(report: NanReport) -> list[Section]:
    return [Section("Why", [Paragraph(report._explanation())])] if report.found else []


def fixes_tried_on_the_values(report: NanReport) -> list[Section]:
    """Each candidate fix the producer search tried, what it gave, and whether the report offers it."""
    p = report.producer
    tried = [fix for fix in report.fixes if fix.tried]
    if not report.found or p is None or not tried:
        return []
    rows = [
        [f"`{fix.code}`", fix.result, fix.call_result or "-", "offered" if fix.offered else "not offered"]
        for fix in tried
    ]
    columns = ["fix (`v` the value given to it)", f"`{p.primitive}`", "the call's outputs", ""]
    return [Section("Fixes tried on the values", [Table(columns, rows)])]


def why_python_raised(report: NanReport) -> list[Section]:
    if not report.python_error:
        return []
    return [
        Section(
            "Why",
            [
                Paragraph(
                    "Python's own arithmetic (or NumPy's, with np.seterr) raised this, on Python or NumPy numbers, "
                    "before JAX saw anything: JAX arrays never raise on division by zero or overflow, they give "
                    "inf or NaN. Fix the Python expression, or compute it with jnp if you want JAX's "
                    "behaviour."
                )
            ],
        )
    ]


def non_finite_values(report: NanReport) -> list[Section]:
    if not report.nonfinite:
        return []
    rows = [
        [f"`{leaf.name}`", str(tuple(leaf.shape)), leaf.dtype, str(leaf.nan_count), str(leaf.inf_count)]
        for leaf in report.nonfinite
    ]
    return [Section("Non-finite values", [Table(["leaf", "shape", "dtype", "NaNs", "infs"], rows)])]


def inside_searches(report: NanReport) -> list[Section]:
    """A section per call ``--inside`` evaluated operation by operation and found a value in, then their scope."""
    if not report.inside_findings:
        return []
    return [_inside_section(found) for found in report.inside_findings]


def what_was_checked(report: NanReport) -> list[Section]:
    """What the checks looked at and what they did not, when nothing was caught (a clean report, or one
    whose findings ``--inside`` made): the whole of what its headline says in short."""
    if report.found or report.python_error:
        return []
    return [Section("What was checked", [Paragraph(report.checked_scope or Scope(report.jit_calls).paragraph())])]


def how_this_was_found(report: NanReport) -> list[Section]:
    return [Section("How this was found", [Paragraph(n) for n in report.notes])] if report.notes else []


def what_jax_printed(report: NanReport) -> list[Section]:
    """What JAX printed on the way. The FloatingPointError itself (``message``) is re-raised under the
    report: its traceback shows it, so it is not repeated here."""
    evidence = "\n".join(report.jax_messages)
    if report.other_error:
        evidence = "\n".join(filter(None, [evidence, report.other_error]))
    if not evidence:
        return []
    below = "; the error is below" if report.found or report.other_error else ""
    title = f"What JAX printed while the cell ran ({counted(len(evidence.splitlines()), 'line')}{below})"
    return [Section("", [Evidence(title, evidence)])]


# The document's sections, in the order drawn
SECTIONS: tuple[Callable[[NanReport], list[Section]], ...] = (
    what,
    where_it_was_made,
    your_line,
    call_path,
    why,
    fixes_tried_on_the_values,
    why_python_raised,
    non_finite_values,
    inside_searches,
    what_was_checked,
    how_this_was_found,
    what_jax_printed,
)
