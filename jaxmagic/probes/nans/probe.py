"""NaN/inf probe: run code with JAX's NaN (and inf) checking scoped to it.

Usage without IPython::

    with jaxmagic.probes.nans() as report:
        grads = jax.grad(loss)(params, x)   # raises FloatingPointError on a NaN
    # report.primitive, report.phase, report.origin_lines, report.nonfinite ...

We use the scoped ``jax.debug_nans(True)`` form, never
``jax.config.update("jax_debug_nans", True)``: in JAX 0.12 the global switch
misses NaNs in computations that already ran once any ``vmap`` has been
traced in the process (chapter section 3.1); the scoped form does not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import sys
import traceback as traceback_module
from collections.abc import Iterator

from jaxmagic._jax import jit_calls
from jaxmagic._jax.exclusive import AlreadyActive
from jaxmagic._jax.jax_prints import jax_prints_collected
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.nan.failing_call import FailingCall, enters_jax, failing_calls, failing_expressions
from jaxmagic.probes._support.nan.nonfinite import NonFiniteLeaf, looks_like_array_tree, nonfinite_leaves
from jaxmagic.probes._support.nan.producer import (
    InsideSearch,
    LoopPosition,
    NanProducer,
    OperandValue,
    ProducerSearch,
    search,
    search_inside,
)
from jaxmagic.probes._support.nan.watch import NanWatch
from jaxmagic.probes._support.report_base import Report
from jaxmagic.probes.nans.call_sites import counting_call_sites
from jaxmagic.report import SourceLine, Status
from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.source import is_user_file, source_line, user_lines
from jaxmagic.report.wording import error_line, first_line, message_of

__all__ = [
    "InsideSearch",
    "LoopPosition",
    "NanProducer",
    "NanReport",
    "NonFiniteLeaf",
    "OperandValue",
    "Provenance",
    "ProducerSearch",
    "explain_nan_sighting",
    "nan_finding_provenance",
    "nan_finding_text",
    "nan_fix",
    "nans",
]

CONFIG_NAMES = ("jax_debug_nans", "jax_debug_infs")

_JAX_WORDING = re.compile(
    r"\((nan|inf)\) encountered|Invalid (nan|inf) value"
)  # NumPy says "invalid value encountered"
_MESSAGE = re.compile(r"invalid value \((nan|inf)\) encountered in ([\w.\-]+)")

# What usually makes each primitive produce NaN/inf in a forward computation.
FORWARD_CAUSES = {
    "log": "log of a negative number gives NaN, log(0) gives -inf",
    "log1p": "log1p of a number below -1 gives NaN",
    "sqrt": "square root of a negative number",
    "rsqrt": "1/sqrt of a negative number (or of 0: inf)",
    "div": "0/0 gives NaN, x/0 gives inf",
    "rem": "remainder by zero",
    "pow": "a negative base with a non-integer exponent, or 0 to a negative power",
    "asin": "asin of a value outside [-1, 1]",
    "acos": "acos of a value outside [-1, 1]",
    "atanh": "atanh of a value outside (-1, 1)",
    "acosh": "acosh of a value below 1",
    "sub": "inf - inf",
    "add": "inf + (-inf)",
    "mul": "0 * inf",
    "exp": "exp overflowing float range gives inf (and inf - inf later gives NaN)",
    "dot_general": "a NaN/inf entering a matrix product, or overflow",
    "reduce_sum": "a sum that overflows, or that adds up values already infinite",
}

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


def _gradient_clause(p) -> str:
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
    jit_calls: dict[str, int] = dataclasses.field(default_factory=dict)  # jitted function -> calls the cell made
    checked_scope: str = ""  # what the checks covered: "the outputs of 2 call(s) of `f` ..." (set after the cell)
    inside: bool = False  # --inside: the first call of each jitted function was evaluated op by op
    inside_searches: list[InsideSearch] = dataclasses.field(default_factory=list)  # one per call evaluated

    @property
    def inside_findings(self) -> list[InsideSearch]:
        """The evaluated calls in which an operation made a non-finite value (masked later or not)."""
        return [s for s in self.inside_searches if s.producer is not None]

    @property
    def status(self) -> Status:
        if self.found or self.nonfinite or self.inside_findings:
            return Status.PROBLEM
        return Status.ERROR if self.other_error else Status.OK

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
        if self.found and self.compiled_only:
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
            return self._producer_summary(what)
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
        return f"No {self.checked} in what was checked: {self.checked_scope or scope_text(self.jit_calls)}"

    def _producer_summary(self, what: str) -> str:
        p = self.producer
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
        if p.nan_maker and p.value == "inf":
            return (
                f"NaN in {phase}: `{p.primitive}`{inside} made inf{at}{loops}{call}, and `{p.nan_maker}` "
                f"made NaN of it ({p.nan_maker_values})."
            )
        return f"{what} produced by `{p.primitive}`{inside} in {phase}{at}{loops}{call}."

    def document(self):

        sections = []
        if self.found and self.producer is not None:
            sections += self._producer_sections()
        elif self.found:
            facts = [("value", self.value), ("primitive", self.primitive or "(not named)"), ("phase", self.phase)]
            if self.library_function:
                facts.append(("inside", self.library_function))
            if self.failing_call:
                facts.append(("failing call", self.failing_call))
            sections.append(Section("What", [Facts(facts)]))
            if self.provenance is not None:
                sections.append(Section("Where it was made", provenance_blocks(self.provenance, f"the {self.value}")))
            if self.origin_lines:
                caption = (
                    "The operation whose gradient produced it"
                    if self.phase == "backward"
                    else "The operation that produced it"
                )
                caption += " (found by re-running the call op by op):" if self.origin_by_rerun else ":"
                sections.append(Section("Your line", [SourceLines(self.origin_lines[-3:], caption)]))
            if self.call_path:
                sections.append(Section("Call path", [SourceLines(self.call_path, "Your frames, outermost first:")]))
            sections.append(Section("Why", [Paragraph(self._explanation())]))
        if self.python_error:
            sections.append(
                Section(
                    "Why",
                    [
                        Paragraph(
                            "Python's own arithmetic (or NumPy's, with np.seterr) raised this, on Python or NumPy numbers, before JAX "
                            "saw anything: JAX arrays never raise on division by zero or overflow, they give "
                            "inf or NaN. Fix the Python expression, or compute it with jnp if you want JAX's "
                            "behaviour."
                        )
                    ],
                )
            )
        if self.nonfinite:
            rows = [
                [f"`{leaf.name}`", str(tuple(leaf.shape)), leaf.dtype, str(leaf.nan_count), str(leaf.inf_count)]
                for leaf in self.nonfinite
            ]
            sections.append(Section("Non-finite values", [Table(["leaf", "shape", "dtype", "NaNs", "infs"], rows)]))
        if self.inside_findings:
            sections += [_inside_section(found) for found in self.inside_findings]
        if self.inside_findings:
            sections.append(Section("What was checked", [Paragraph(self.checked_scope or scope_text(self.jit_calls))]))
        if self.notes:
            sections.append(Section("How this was found", [Paragraph(n) for n in self.notes]))
        # The FloatingPointError itself (self.message) is re-raised under the report: its traceback
        # shows it, so only what JAX printed on the way is kept here.
        evidence = "\n".join(self.jax_messages)
        if self.other_error:
            evidence = "\n".join(filter(None, [evidence, self.other_error]))
        if evidence:
            title = f"What JAX printed while the cell ran ({len(evidence.splitlines())} lines; the error is below)"
            sections.append(Section("", [Evidence(title, evidence)]))
        return Document("%%jax_nans", self.status, self.summary, sections)

    def _producer_sections(self) -> list:

        p = self.producer
        facts = [("value", self.value), ("operation", f"`{p.primitive}` made {p.value}")]
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
        if p.calls:
            facts.append(("in jitted", " > ".join(f"`{c}`" for c in p.calls)))
        if self.call_number > 1 and self.call_line is not None:
            facts.append(("call", f"{self.call_number} of line {self.call_line.lineno}: `{self.call_line.code}`"))
        if p.nan_maker:
            facts.append(("then", f"`{p.nan_maker}` turned it into NaN: {p.nan_maker_values}"))
        if p.discarded_by:
            facts.append(("discarded by", f"`{p.discarded_by}`: the result is finite"))
        if self.primitive and self.primitive != p.primitive:
            facts.append(("JAX named", f"`{self.primitive}` (the outermost operation the value left)"))
        if self.failing_call or self.searched_call:
            facts.append(("failing call", self.searched_call or self.failing_call))
        sections = [Section("What", [Facts(facts)])]
        if self.provenance is not None:
            sections.append(Section("Where it was made", provenance_blocks(self.provenance, f"the {self.value}")))
        lines = [line for line in (p.line, p.nan_maker_line, p.discarded_line) if line is not None]
        lines = list({(line.filename, line.lineno): line for line in lines}.values())
        if lines:
            if p.phase == "backward" or p.derivative:
                caption = "The forward line whose derivative produced it"
            else:
                caption = "The line that produced it"
            caption += f" (found by evaluating {self.searched_call} operation by operation):"
            sections.append(Section("Your line", [SourceLines(lines, caption)]))
        if self.call_path:
            sections.append(Section("Call path", [SourceLines(self.call_path, "Your frames, outermost first:")]))
        sections.append(Section("Why", [Paragraph(self._explanation())]))
        return sections

    def _explanation(self) -> str:
        p = self.producer
        fix = f" {self.fix}" if self.fix else ""
        if p is not None and p.discarded_by:
            return DISCARDED_EXPLANATION.format(by=p.discarded_by) + fix
        if p is not None and p.phase == "forward" and not p.derivative and _overflowed(p):
            return f"{p.description}: {_overflowed(p)}." + fix
        if p is not None and p.phase == "forward" and not p.derivative:
            cause = FORWARD_CAUSES.get(p.primitive)
            text = f"{p.description}" + (f": {cause}." if cause else ".")
            return text + (fix if self.fix and not (cause and cause in self.fix) else "")
        if p is not None and p.user_rule:
            line = f" (`{p.line.code.strip()}`)" if p.line is not None and p.line.code else ""
            return f"{p.description}, in your own derivative rule{line}, run for the gradient." + (
                fix or " Could not tell which fix applies to these values."
            )
        if p is not None:
            line = f" of `{p.line.code}`" if p.line is not None and p.line.code else ""
            then = f" `{p.nan_maker}` then made NaN of it ({p.nan_maker_values})." if p.nan_maker else ""
            return f"{p.description}, in the derivative{line} JAX computed for the gradient.{then}" + (
                fix
                or " Could not tell which fix applies to these values: make the derivative finite where "
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
        cause = FORWARD_CAUSES.get(self.primitive)
        text = f"`{self.primitive}` produced {self.value}" + (f": typically {cause}." if cause else ".")
        if self.nonfinite:
            return text + " The inputs were already non-finite: see the table of non-finite values."
        return text + " Look at the values reaching that line (jax.debug.print, or %jax_check on the call)."


def _calls_text(jit_calls: dict[str, int]) -> str:
    parts = [f"{n} call{'s' if n != 1 else ''} of `{name}`" for name, n in jit_calls.items()]
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else ""


def scope_text(jit_calls: dict[str, int], inside: int = 0, counted: bool = True) -> str:
    """What ``jax.debug_nans``/``debug_infs`` looked at in this cell, in words: the outputs of the
    compiled programs of the jitted calls the cell made (``jit_calls``) and of every eager operation;
    ``inside``: how many calls were also evaluated op by op (``--inside``)."""
    calls = _calls_text(jit_calls)
    if not counted:
        text = (
            "the outputs of every compiled program and every eager operation the cell ran (its jitted calls could "
            "not be counted: sys.monitoring was unavailable); values inside compiled programs are checked only "
            "where they reach an output"
        )
    elif calls:
        text = (
            f"the outputs of {calls} made by the cell (and of every eager operation); values inside compiled "
            "programs are checked only where they reach an output"
        )
    else:
        text = (
            "the output of every eager operation (the cell called no jitted function directly); values inside a "
            "compiled program (a jitted function called through jax.grad, vmap or a library) are checked only where "
            "they reach its output"
        )
    if inside:
        later = " (later calls only where values reach an output)" if sum(jit_calls.values()) > inside else ""
        first = "the first call of each jitted function" if inside > 1 else "the first call"
        return text + (
            f"; with --inside, {first} was also evaluated op by op ({inside} call{'s' if inside != 1 else ''}), "
            f"every intermediate checked{later}."
        )
    if not calls:
        return (
            text + " - `%%jax_nans --inside` checks every intermediate of the jitted functions a cell calls directly."
        )
    return text + " - `%%jax_nans --inside` checks every intermediate."


def _at(line: SourceLine | None) -> str:
    return f" at {line.function} ({line.label or line.filename}, line {line.lineno})" if line is not None else ""


def inside_summary(found: InsideSearch, count: int = 1) -> str:
    p = found.producer
    inside = f" inside `{p.library_function}`" if p.library_function else ""
    made = f"`{p.primitive}`{inside} made {p.value}{_at(p.line)}, in call {found.call} of `{found.function}`"
    more = f" ({count - 1} more jitted function{'s' if count > 2 else ''} made one too)" if count > 1 else ""
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
    facts = [("operation", f"`{p.primitive}` made {p.value}"), ("values", p.description)]
    if p.library_function:
        facts.append(("inside", f"`{p.library_function}`, called from your line"))
    facts.append(("call", f"{found.call} of `{found.function}`"))
    if found.masked_by:
        facts.append(("masked by", f"`{found.masked_by}` (`{found.masked_primitive}`): its output is finite"))
    elif found.reached_output:
        facts.append(("reached", "the output of the call"))
    blocks = [Facts(facts)]
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
    return Section(f"Inside `{found.function}`", blocks)


# -- the fix: matched to the producing operation and the values it saw -----------------------

_ROW_FUNCTIONS = ("jax.nn.logsumexp", "jax.nn.log_softmax", "jax.nn.softmax", "jax.scipy.special.logsumexp")
_SQRT_LIKE = ("sqrt", "rsqrt", "pow")
SUGGESTION = " (A suggestion: jaxmagic did not try it.)"


def _zero_operand(p) -> bool:
    return any(op.value in ("0.0", "-0.0", "0") for op in p.operands)


def _inf_line(p) -> SourceLine | None:
    """The user's line among the producer's where ``-inf`` is written (the mask fill), if one is."""
    for line in (p.discarded_line, p.nan_maker_line, p.line):
        if line is not None and "inf" in (line.code or ""):
            return line
    return None


# The logit from which 1 - sigmoid(z) rounds to 0 (measured: 1 - sigmoid(17.0) == 0 in float32)
_UNDERFLOW = {"float32": 17, "float64": 37}


_ARITHMETIC = ("mul", "add", "sub", "dot_general", "reduce_sum", "integer_pow", "square", "pow", "exp", "exp2")
_HALF = ("float16", "bfloat16")


def _overflowed(p) -> str:
    """Why an arithmetic operation made inf from finite values: its result is above its dtype's largest
    value (float16's is 65504) - not 0 * inf, which needs an inf to begin with; "" for anything else."""
    dtype = next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "")
    if p.value != "inf" or p.primitive not in _ARITHMETIC or not dtype:
        return ""
    import jax.numpy as jnp  # deferred: JAX is imported once a NaN is explained

    try:
        largest = f"{float(jnp.finfo(dtype).max):.6g}"  # bfloat16's too
    except (TypeError, ValueError):
        return ""
    return f"the result is above the largest {dtype} value ({largest}): it overflowed to inf"


def nan_fix(report: NanReport) -> str:
    """The fix for this NaN: chosen by the producing operation and the input values it saw, naming only
    what is in the program; "" when no fix is known for what was seen (never a fix for another bug)."""
    p = report.producer
    if p is None:
        if report.primitive in FORWARD_CAUSES and report.phase == "forward":
            return (
                f"`{report.primitive}` produced {report.value or 'NaN'}: typically {FORWARD_CAUSES[report.primitive]}."
            )
        return ""
    overflow = _overflowed(p) if p.phase == "forward" and not p.derivative else ""
    if overflow and any(op.dtype in _HALF for op in p.operands):
        half = next(op.dtype for op in p.operands if op.dtype in _HALF)
        code = f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""
        return (
            f"`{p.primitive}`{code} overflowed {half}. Compute it in float32 - `.astype(jnp.float32)` on its "
            f"inputs, and back to {half} after if you need it - or scale the values down first." + SUGGESTION
        )
    library = p.library_function
    code = f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""
    if p.neg_inf_rows and p.nan_maker_library in _ROW_FUNCTIONS:  # -inf made elsewhere, NaN in the row function
        library = p.nan_maker_library
        code = f" (`{p.nan_maker_line.code}`)" if p.nan_maker_line is not None and p.nan_maker_line.code else ""
    if p.neg_inf_rows and (library in _ROW_FUNCTIONS or p.primitive in ("sub", "log", "exp", "mul")):
        where = _inf_line(p)
        fill = f" - the `-jnp.inf` in `{where.code}`" if where is not None else ""
        name = f"`{library}`" if library else "the max-subtracting reduction"
        dtype = next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "float32")
        in_what = "its gradient" if p.phase == "backward" or p.derivative else "its value"
        return (
            f"{name}{code} got {p.neg_inf_rows} in which every entry is -inf (a fully masked row): there the "
            f"max it subtracts is -inf too, and -inf - (-inf) is NaN (in {in_what}). Fill masked entries with a large finite "
            f"negative number instead of -inf{fill} (e.g. `jnp.finfo(jnp.{dtype}).min`), or leave rows with no "
            "unmasked entry out of the loss." + SUGGESTION
        )
    if p.discarded_by and not library:
        prim = p.primitive
        at_where = f" (`{p.discarded_line.code}`)" if p.discarded_line is not None and p.discarded_line.code else ""
        return (
            f"`{prim}` made {p.value} in the branch `{p.discarded_by}` discarded{code}; its gradient is still "
            "computed and multiplied by zero (0 * NaN = NaN). Use the double where: make the input of "
            f"`{prim}` safe in the discarded case too - with `ok` the condition of the `{p.discarded_by}`{at_where} "
            f"and `v` the value given to `{prim}`: `jnp.where(ok, jnp.{prim}(jnp.where(ok, v, 1.0)), 0.0)`."
            + SUGGESTION
        )
    sqrt_made = p.primitive in _SQRT_LIKE or any(op.made_by in _SQRT_LIKE for op in p.operands)
    if library == "jnp.std" or library == "jnp.var" and sqrt_made:
        return (
            f"The gradient of `jnp.std`{code} where the variance is 0 (all entries equal) is 0.5/sqrt(0) = inf "
            f"({p.description}). Take the square root of the variance kept away from 0, with the same arguments "
            "as the `jnp.std` call: `jnp.sqrt(jnp.var(..., axis=...) + eps)`, or the double where on the variance."
            + SUGGESTION
        )
    expression = p.expression or (p.line.code.strip() if p.line is not None else "")
    if p.derivative and expression.startswith(("jnp.arccos(", "jnp.arcsin(")) and _zero_operand(p):
        function = expression.split("(")[0]
        return (
            f"The derivative of `{function}`{code} is 1/sqrt(1 - c**2): infinite where its input is -1 or 1 "
            f"({p.description}). Keep the input inside (-1, 1) where the gradient is taken: "
            f"`{function}(jnp.clip(c, -1 + eps, 1 - eps))` (`c` the value given to it, eps e.g. 1e-6)." + SUGGESTION
        )
    if p.derivative and expression.startswith("jnp.arctan2(") and _zero_operand(p):
        return (
            f"The derivative of `jnp.arctan2(y, x)`{code} is (x, -y) / (x**2 + y**2): 0/0 at y = x = 0 "
            f"({p.description}). Use the double where on its inputs: `ok = x**2 + y**2 > 0; jnp.where(ok, "
            "jnp.arctan2(jnp.where(ok, y, 0.0), jnp.where(ok, x, 1.0)), 0.0)`." + SUGGESTION
        )
    if sqrt_made and p.derivative and _zero_operand(p):
        what = f"`{library}`" if library else "the square root"
        if library == "jnp.linalg.norm" or any(
            op.made_by in _SQRT_LIKE and {"reduce_sum", "dot_general"} & set(op.made_from) for op in p.operands
        ):  # a norm: the square root of a sum of squares
            safe = (
                "Use the double-where safe norm, so that the gradient is finite at 0 too (`v` the vector "
                "whose norm is taken): `ss = jnp.sum(v**2, axis=-1); jnp.where(ss > 0, jnp.sqrt(jnp.where(ss > 0, "
                "ss, 1.0)), 0.0)`."
            )
        else:  # an elementwise square root
            safe = (
                f"Use the double where, so that the gradient is finite at 0 too (`v` the value given to {what} "
                "there): `jnp.where(v > 0, jnp.sqrt(jnp.where(v > 0, v, 1.0)), 0.0)`"
                + (
                    " - or `jnp.abs(...)` for the square root of a square."
                    if re.search(r"\*\*\s*2\b", expression)
                    else "."
                )
            )
        return f"The derivative of {what}{code} at 0 is 0.5/sqrt(0) = inf ({p.description}). {safe}" + SUGGESTION
    if p.primitive == "cholesky" and not p.derivative:
        what = f"`{library}`" if library else "`cholesky`"
        matrix = p.operands[0].value if p.operands else "a matrix that is not positive definite"
        fix = (
            f"{what}{code} got {matrix}; a Cholesky factorization needs a positive definite matrix. Add a "
            "small multiple of the identity before factorizing (`K` the matrix given there): "
        )
        if p.jitter:
            return (
                fix + f"`jnp.linalg.cholesky(K + {p.jitter} * jnp.eye(K.shape[-1]))`. Tried on these values: with "
                f"{p.jitter} added to the diagonal, the same `cholesky` gives finite values."
            )
        return fix + "`jnp.linalg.cholesky(K + eps * jnp.eye(K.shape[-1]))`." + SUGGESTION
    if p.primitive in ("sqrt", "rsqrt") and not p.derivative:
        return (
            f"`{p.primitive}` got a negative value ({p.description}){code}: keep its input at or above 0 "
            "(`jnp.maximum(x, 0.0)`), or find why it goes negative." + SUGGESTION
        )
    if p.primitive in ("div", "rem") and len(p.operands) == 2 and p.operands[1].value in ("0.0", "-0.0", "0"):
        den = p.operands[1]
        if p.derivative:
            return ""  # a derivative's own division: the cases above name the ones known
        if den.made_by in ("reduce_sum", "add", "add_any"):
            return (
                f"The denominator{code} is a sum that was 0 ({p.description}) - e.g. a mask with no entry set, "
                "an all-padding batch. Guard that denominator: `den = ...; num / jnp.maximum(den, 1)`, or "
                "`jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)`." + SUGGESTION
            )
        return (
            f"The denominator{code} was 0 ({p.description}): guard it, "
            "`jnp.where(den != 0, num / jnp.where(den != 0, den, 1.0), 0.0)`." + SUGGESTION
        )
    if p.primitive == "log" and p.operands and (not library or library.startswith("jax.nn.")):
        # the log of a probability computed first: it rounds to 0 long before its logarithm is out of range
        op = p.operands[0]
        when = ""
        if op.made_by == "logistic":
            written = "`jax.nn.log_sigmoid(z)` for `jnp.log(jax.nn.sigmoid(z))`"
        elif op.made_by == "sub" and "logistic" in op.made_from:
            written = "`jax.nn.log_sigmoid(-z)` for `jnp.log(1 - jax.nn.sigmoid(z))`"
            if op.dtype in _UNDERFLOW:
                when = f" (1 - sigmoid(z) is 0 in {op.dtype} from z = {_UNDERFLOW[op.dtype]} on)"
        elif op.made_by == "div" and op.made_from[:1] == ["exp"]:
            written = "`jax.nn.log_softmax(z)` for `jnp.log(jax.nn.softmax(z))` (or of exp(z) / sum(exp(z)))"
        else:
            written = ""
        if written:
            return (
                f"`log` got {op.value}{code}: a probability computed from logits rounded to 0 in {op.dtype}{when}, "
                f"and its log is -inf. Compute the log-probability from the logits `z` directly: {written}; it "
                "stays finite, and so does its gradient." + SUGGESTION
            )
    if p.primitive in ("log", "log1p") and not library:
        return (
            f"`{p.primitive}` got {p.operands[0].value if p.operands else 'a value out of its domain'}{code}: "
            f"with `v` the value given to `{p.primitive}` there, clamp it (`jnp.{p.primitive}(jnp.maximum(v, tiny))`) "
            f"or select with the double where (`jnp.where(v > 0, jnp.{p.primitive}(jnp.where(v > 0, v, 1.0)), "
            "fallback)`)." + SUGGESTION
        )
    if p.phase == "forward" and not p.derivative and p.primitive in FORWARD_CAUSES:
        return f"`{p.primitive}`: typically {FORWARD_CAUSES[p.primitive]}."
    return ""


def nan_provenance(report: NanReport, started: SourceLine | None = None) -> Provenance:
    """Where the NaN was made: the producer's line, function, transformations and iteration, else the
    line JAX attached; ``started`` (or the outermost user frame) is the call that started it."""
    started = started or report.call_line or (report.call_path[0] if report.call_path else None)
    p = report.producer
    if p is not None and p.value == "inf" and p.nan_maker_library and p.nan_maker_provenance is not None:
        # The inf was made on one line, the NaN of it inside a library function called on another
        # (a -inf mask fill, then logsumexp): the NaN is the value reported, made where that function ran.
        made = dataclasses.replace(p.nan_maker_provenance, started_by=started)
        made.transforms = list(made.transforms)
        return made
    if p is not None and p.provenance is not None:
        made = dataclasses.replace(p.provenance, started_by=started)
        made.transforms = list(made.transforms)
        return made
    if report.origin_lines:
        line = report.origin_lines[-1]
        return Provenance(
            made_at=line, function=line.function, started_by=started, library_function=report.library_function
        )
    why = "JAX named the primitive but no line inside the call"
    if report.search_stopped_at:
        why += f", and the producer search could not look inside `{'`, `'.join(report.search_stopped_at)}`"
    elif not report.found:
        why = "no NaN was caught"
    return Provenance(started_by=started, library_function=report.library_function, unknown=why)


def _bindings(namespace: dict | None) -> dict[str, int]:
    if namespace is None:
        return {}
    return {name: id(value) for name, value in namespace.items() if not name.startswith("_")}


def _scan_rebound(namespace: dict | None, before: dict[str, int]) -> list[NonFiniteLeaf]:
    """Non-finite leaves of the variables the cell bound or rebound."""
    if namespace is None:
        return []
    found = []
    for name, value in list(namespace.items()):
        if name.startswith("_") or before.get(name) == id(value) or not looks_like_array_tree(value):
            continue
        found += nonfinite_leaves(value, f"variable {name}")
    return found


def _checks_on(infs: bool):
    import jax

    stack = contextlib.ExitStack()
    stack.enter_context(jax.debug_nans(True))
    if infs:
        stack.enter_context(jax.debug_infs(True))
    return stack


def _checks_off():
    import jax

    stack = contextlib.ExitStack()
    stack.enter_context(jax.debug_nans(False))
    stack.enter_context(jax.debug_infs(False))
    return stack


@contextlib.contextmanager
def nans(*, infs: bool = False, namespace: dict | None = None, inside: bool = False) -> Iterator[NanReport]:
    """Check every JAX computation in the block for NaN (and inf with ``infs``).

    On a NaN the block's ``FloatingPointError`` propagates unchanged; the
    yielded report is filled in before it does. ``namespace`` (a dict of the
    user's variables) lets the probe also list NaN leaves of the variables the
    block bound. ``inside``: the first call of each jitted function the block
    calls is also evaluated op by op before it runs, and the first operation
    that made a NaN or inf is reported even when a later one masked it
    (``report.inside_searches``); every call then takes JAX's slower Python
    dispatch path.
    """
    report = NanReport(checks=["nan", "inf"] if infs else ["nan"], inside=inside)
    before = _bindings(namespace)
    counts = None
    try:
        with (
            preserved_jax_state(CONFIG_NAMES),
            jax_prints_collected(report.jax_messages),
            counting_call_sites() as counts,
            _evaluating_inside(report, counts) if inside else contextlib.nullcontext(),
            _checks_on(infs),
        ):
            yield report
    except (ZeroDivisionError, OverflowError) as error:  # Python's own arithmetic: JAX arrays never raise these
        report.python_error = report.other_error = error_line(error)
        report.call_path = user_lines(error.__traceback__)
        raise
    except FloatingPointError as error:
        with preserved_jax_state(CONFIG_NAMES):
            try:
                _explain(report, error, infs, counts)
                _conclude(report)
            except Exception as failure:  # never let our analysis hide the user's error
                report.notes.append(f"jaxmagic could not finish its analysis: {error_line(failure)}")
        raise
    except BaseException as error:
        report.other_error = error_line(error)
        raise
    finally:
        report.nonfinite += _scan_rebound(namespace, before)
        report.jit_calls = dict(counts.jitted) if counts is not None else {}
        evaluated = sum(1 for found in report.inside_searches if not found.failure)
        tried = not any(note.startswith("--inside") for note in report.notes)
        if inside and tried and not report.inside_searches and counts is not None:
            report.notes.append(
                "--inside evaluated no call op by op: the cell called no jitted function of its own directly "
                "(calls through jax.grad, vmap or a library are not evaluated)."
            )
        report.checked_scope = scope_text(report.jit_calls, inside=evaluated, counted=counts is not None)


def _explain(report: NanReport, error: BaseException, infs: bool, counts=None) -> None:
    if not _JAX_WORDING.search(message_of(error)) and not _raised_by_jax(error):
        report.python_error = report.other_error = error_line(error)  # NumPy's np.seterr(all="raise"), ...
        report.call_path = user_lines(error.__traceback__)
        return
    report.found = True
    report.message = first_line(error)
    match = _MESSAGE.search(message_of(error))
    if match:
        report.value, report.primitive = match.group(1), match.group(2)
    else:
        report.value = "inf" if "inf" in report.message.split("(")[0] else "nan"
    report.compiled_only = "de-optimized function did not" in message_of(error)
    report.phase = "backward" if any("backward pass" in m for m in report.jax_messages) else "forward"
    report.call_path = user_lines(error.__traceback__)
    report.origin_lines, report.library_function = _origin(error, report.call_path)

    calls = failing_calls(error.__traceback__)
    infinite = []  # (call, its arguments' leaves holding inf and no NaN), when a NaN was caught
    passed_in = None  # the first call whose arguments held what was caught
    for call in calls:
        leaves = _argument_leaves(call)
        if leaves and not _made_from_infinities(report, leaves):
            passed_in = (call, leaves)
            break
        if leaves:
            infinite.append((call, leaves))
    _search_producer(report, error, counts)
    if passed_in is not None and report.producer is None:
        call, leaves = passed_in
        report.nonfinite += leaves
        report.notes.append(
            f"The arguments of {call.source} already held non-finite values when it was "
            "called: the value came in from an earlier step, not from this computation."
        )
        return
    if infinite and report.producer is None:
        call, leaves = infinite[0]
        report.nonfinite += leaves
        report.notes.append(
            f"The arguments of {call.source} held inf but no NaN when it was called (a log-probability "
            "of -inf, a mask): an operation inside turned an infinity into NaN (inf - inf, 0 * inf, "
            "inf / inf), which the search could not name."
        )
    if not calls:
        report.notes.append(
            "No call on your lines could be re-evaluated safely (only plain calls of names, "
            "attributes and literals are), so arguments and results were not examined."
        )
        return
    # Forward: the cell's own call says most; backward: the innermost one is the gradient call.
    report.failing_call = calls[-1].source if report.phase == "backward" else calls[0].source
    if report.phase == "backward":
        if not report.origin_lines:
            _locate_op_by_eager_rerun(report, calls[-1], infs)
        _scan_result_without_checks(report, calls[-1])


def _conclude(report: NanReport, started: SourceLine | None = None) -> None:
    """Provenance, library function and fix, from what the search found (kept consistent with
    ``origin_lines`` and ``producer.line``)."""
    if not report.found:
        return
    p = report.producer
    if p is not None and (p.library_function or p.nan_maker_library):
        # The function the NaN was made in: the NaN maker's, when the producer made only an inf it turned into NaN.
        nan_made_there = p.value == "inf" and p.nan_maker and p.nan_maker_library
        report.library_function = p.nan_maker_library if nan_made_there else p.library_function
    report.provenance = nan_provenance(report, started)
    report.fix = nan_fix(report)


def _raised_by_jax(error: BaseException) -> bool:
    tb = error.__traceback__
    while tb is not None:
        if "/jax/" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            return True
        tb = tb.tb_next
    return False


def _search_producer(report: NanReport, error: BaseException, counts) -> None:
    """Find the operation that made the value: evaluate the failing expression's program op by op.

    The user frames are tried outermost first (the cell's own statement gives
    the most context: the discarded ``where``, the call number of the loop);
    a frame whose expression cannot be traced again gives way to the next.
    """
    tried = []
    for call in failing_expressions(error.__traceback__):
        values = [value for _, value in call.args]
        held = [leaf for value in values for leaf in nonfinite_leaves(value, "")]
        if held and not _made_from_infinities(report, held):
            # A NaN argument may play no part: JAX's error is then about an operation of finite inputs,
            # which the search finds with the primitive JAX named. Anything else came in through the
            # arguments, and the finding says so.
            found = _searched(call, want_nan=report.value == "nan")
            if found.producer is None or found.producer.primitive != report.primitive:
                return
            _put_found(report, found)
            _count_calls(report, error, counts)
            return
        found = apply_search(report, call, want_nan=report.value == "nan")
        tried.append(found)
        if report.producer is not None:
            _count_calls(report, error, counts)
            return
    for found in tried:
        if found.failure:
            report.notes.append(f"The operation could not be located in {found.searched}: {found.failure}.")


def _count_calls(report: NanReport, error: BaseException, counts) -> None:
    """The call number of the user's line that ran most often: the loop's pass that failed.

    Frames below a call of a JAX function do not count: there the user's
    functions run because JAX traces them (or re-runs them to locate a NaN),
    not once per call.
    """
    if counts is None:
        return
    best = (0, None)
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            number = counts.number(tb)
            if number > best[0]:
                best = (number, source_line(code.co_filename, tb.tb_lineno, code.co_name))
            if enters_jax(tb):
                break
        tb = tb.tb_next
    report.call_number, report.call_line = best


def apply_search(report: NanReport, call: FailingCall, *, want_nan: bool = True) -> ProducerSearch:
    """Run the producer search on ``call`` and put what it found into ``report``; return the search."""
    found = _searched(call, want_nan=want_nan)
    _put_found(report, found)
    return found


def _searched(call: FailingCall, *, want_nan: bool) -> ProducerSearch:
    return search(call.function, [v for _, v in call.args], call.kwargs, source=call.source, want_nan=want_nan)


def _put_found(report: NanReport, found: ProducerSearch) -> None:
    report.search_stopped_at = list(dict.fromkeys(report.search_stopped_at + found.stopped_at))
    if found.producer is None:
        if found.stopped_at:
            report.notes.append(
                f"The producer search could not look inside `{'`, `'.join(found.stopped_at)}` in "
                f"{found.searched}; the primitive JAX named is shown instead."
            )
        return
    report.producer, report.searched_call = found.producer, found.searched
    report.notes.append(
        f"{found.searched} was traced again with the same argument values and its program evaluated "
        f"operation by operation ({found.equations} operations; a loop is run once more compiled to find "
        "its first bad iteration, and only that one is evaluated op by op) to find the first operation "
        + (
            "whose inputs held no NaN and whose output did (its arguments held inf, taken as given)."
            if found.given_inf
            else "whose inputs were finite and whose output was not."
        )
    )
    if found.stopped_at:
        report.notes.append(f"It could not look inside `{'`, `'.join(found.stopped_at)}`.")
    if found.producer.phase == "backward":
        report.phase = "backward"


def _made_from_infinities(report: NanReport, leaves: list[NonFiniteLeaf]) -> bool:
    """A NaN was caught and the arguments held inf but no NaN: the NaN was made inside the call
    (``exp(-inf) = 0``, then ``0 / 0``; ``-inf - -inf``), not passed in - searched for, not blamed on them."""
    return report.value == "nan" and not any(leaf.nan_count for leaf in leaves)


def _argument_leaves(call: FailingCall) -> list[NonFiniteLeaf]:
    leaves = []
    for source, value in call.args:
        leaves += nonfinite_leaves(value, f"argument {source}")
    for name, value in call.kwargs.items():
        leaves += nonfinite_leaves(value, f"argument {name}=")
    return leaves


def _origin(error: BaseException, call_path: list[SourceLine]) -> tuple[list[SourceLine], str]:
    """User lines of the op that failed, from JAX's pre-transformation stack, if JAX attached one.

    That stack starts at the program's entry; we keep the frames below the
    failing call (the last frame it shares with ``call_path``).
    """
    cause = error.__cause__
    if cause is None or type(cause).__name__ != "JaxStackTraceBeforeTransformation":
        return [], ""
    lines = user_lines(cause.__traceback__)
    known = {(line.filename, line.lineno) for line in call_path}
    shared = [i for i, line in enumerate(lines) if (line.filename, line.lineno) in known]
    if shared:
        lines = lines[shared[-1] + 1 :]
    return lines, _library_called(cause.__traceback__)


def _library_called(tb) -> str:
    """The JAX function (public name: ``jnp.linalg.norm``) the innermost user frame of ``tb`` called;
    "" when it called none by a public name (never IPython's or jaxmagic's own frames)."""
    frames = traceback_module.extract_tb(tb) if tb is not None else []
    last_user = max((i for i, f in enumerate(frames) if is_user_file(f.filename)), default=None)
    if last_user is None:
        return ""
    for frame in frames[last_user + 1 :]:
        if "/jax/" not in frame.filename.replace("\\", "/"):
            return ""
        name = attribution.public_name(frame.name, frame.filename)
        if name:
            return name
    return ""


def _locate_op_by_eager_rerun(report: NanReport, call: FailingCall, infs: bool) -> None:
    # Under disable_jit every op runs eagerly with its source information, so
    # a backward-pass NaN comes with the forward line that made the op.
    import jax

    try:
        with jax.disable_jit(), _checks_on(infs), contextlib.redirect_stdout(io.StringIO()):
            call()
    except (FloatingPointError, ZeroDivisionError) as rerun_error:
        lines, function = _origin(rerun_error, report.call_path)
        if not lines:
            lines = user_lines(rerun_error.__traceback__)[-1:]
        report.origin_lines, report.library_function = lines, function
        report.origin_by_rerun = bool(lines)
        report.notes.append(
            f"To find your line, {call.source} was called once more under jax.disable_jit(), "
            "op by op, with the same checks."
        )
    except Exception as other:
        report.notes.append(
            f"Re-running {call.source} op by op to find your line failed: {type(other).__name__}: {first_line(other)}"
        )
    else:
        report.notes.append(
            f"{call.source} did not produce the value when re-run op by op under "
            "jax.disable_jit(): the compiled program differs from the eager one."
        )


def _scan_result_without_checks(report: NanReport, call: FailingCall) -> None:
    try:
        with _checks_off(), contextlib.redirect_stdout(io.StringIO()):
            result = call()
    except Exception as other:
        report.notes.append(f"Re-running {call.source} without checks to see its result failed: " + error_line(other))
        return
    leaves = nonfinite_leaves(result, f"result of {call.source}")
    del result
    report.nonfinite += leaves
    report.notes.append(
        f"{call.source} was called once more with checking off, to list which leaves of its "
        f"result are non-finite ({len(leaves)} found)."
    )


# -- the doctor's and the watch's NaN finding --------------------------------------------


def nan_finding_text(s, nan, where: str) -> tuple[str, str, str, str]:
    """(title, evidence, fix, short) of a NaN sighting (``NanSighting``) explained by ``nan`` (the
    NanReport of its re-run, or None); shared by the doctor and ``%jax_watch``."""
    evidence = f"first in call {s.call_number} of {where} ({', '.join(s.leaves)})"
    if nan is None or not nan.found:
        return f"NaN in the results of {where}", evidence, "", f"in the results of {where}"
    producer = nan.producer
    primitive = producer.primitive if producer is not None else (nan.primitive or "?")
    phase = "the backward pass (gradient)" if nan.phase == "backward" else "the forward pass"
    library = nan.library_function
    inside = f" inside `{library}`" if library else ""
    title = f"NaN made by `{primitive}`{inside} in {phase} of {where}"
    if producer is not None:
        if producer.discarded_by:
            title += f" (in a branch `{producer.discarded_by}` discarded)"
        evidence += f"; {producer.description}"
        if producer.nan_maker:
            evidence += f"; then `{producer.nan_maker}` made NaN of it ({producer.nan_maker_values})"
    fix = nan.fix or (BACKWARD_EXPLANATION if nan.phase == "backward" else "")
    short = f"`{primitive}`{inside} in the {nan.phase} pass of {where}"
    return title, evidence, fix, short


def nan_finding_provenance(s, nan) -> Provenance:
    """The NaN probe's provenance of the re-run, with the call the user's cell made as ``started_by``;
    when the re-run could not be made, why the producing line is not known."""
    if nan is not None and nan.found and nan.provenance is not None:
        made = nan.provenance
        transforms = list(made.transforms)
        if s.jitted and not (transforms and transforms[0] == f"jit({s.function})"):
            transforms.insert(0, f"jit({s.function})")  # the re-run searched an expression inside the jitted call
        return Provenance(
            made_at=made.made_at,
            function=made.function,
            transforms=transforms,
            position=made.position,
            started_by=s.line,
            library_function=made.library_function,
            unknown=made.unknown,
        )
    why = s.rerun_note or "the call was not re-run under jax.debug_nans"
    return Provenance(started_by=s.line, unknown=f"only the call that returned it is known: {ended_sentence(why)}")


def ended_sentence(text: str) -> str:
    text = text.strip()
    return text[:1].lower() + text[1:].rstrip(".") if text else text


def explain_nan_sighting(watch: NanWatch):
    """Re-run the first NaN-producing jitted call the watch saw under the NaN probe; its NanReport (or None).

    Call this after the cell, with no other probe active. Never raises.
    """
    sighting, call = watch.take_rerun()
    if sighting is None:
        return None
    if not sighting.jitted:  # an eager operation: the primitive and the line are known
        eager = NanReport(
            found=True,
            value="nan",
            primitive=sighting.function,
            phase="forward",
            origin_lines=[sighting.line] if sighting.line else [],
            failing_call=sighting.line.code if sighting.line else "",
            call_number=sighting.call_number,
            call_line=sighting.line,
        )
        _conclude(eager, sighting.line)
        return eager
    if call is None:
        return None
    report = None
    try:
        with jit_calls.paused(), contextlib.redirect_stdout(io.StringIO()):
            with nans() as report:
                call()
    except (FloatingPointError, ZeroDivisionError):
        pass
    except Exception as error:
        sighting.rerun_note = f"Re-running {call.source} under the NaN probe failed: {error_line(error)}"
        del call
        return None
    if report is not None and report.found:
        if report.producer is None:  # the whole jitted call, traced once more with its arguments
            with jit_calls.paused():
                apply_search(report, call, want_nan=report.value != "inf")
        report.call_number = sighting.call_number
        report.call_line = sighting.line
        _conclude(report, sighting.line)
    del call
    if report is not None and not report.found:
        sighting.rerun_note = (
            f"{sighting.call_source} gave no NaN when re-run with the same arguments under "
            "jax.debug_nans: the result depends on something besides the arguments."
        )
    elif report is not None:
        sighting.rerun_note = (
            f"{sighting.call_source} was run once more after the cell, with the same "
            "arguments, under jax.debug_nans (the %%jax_nans probe) to name the primitive "
            "and the line."
        )
    return report


class _FirstCalls(jit_calls.CallObserver):
    """Evaluates the first call of each jitted function the user's code called, op by op, before it runs."""

    def __init__(self, report: NanReport, counts):
        self.report, self.counts = report, counts
        self.seen: set[str] = set()

    def before(self, name: str, is_jit: bool, args: tuple, params: dict) -> None:
        program = params.get("jaxpr")
        if not is_jit or program is None or name in self.seen or name not in self.counts.jitted:
            return  # an eager operation (jnp functions run as jitted programs too), or a later call
        self.seen.add(name)
        try:
            found = search_inside(program, list(args), function=name, call=self.counts.jitted[name])
            started = attribution.started_by(sys._getframe(1))
            for made in (found.producer.provenance if found.producer else None, found.masked_provenance):
                if made is not None:
                    made.started_by = started
                    if f"jit({name})" not in made.transforms:
                        made.transforms.insert(0, f"jit({name})")  # the program evaluated is this jit's body
        except Exception as error:  # never let the check break the user's call
            found = InsideSearch(function=name, failure=f"evaluating `{name}` op by op failed: {error_line(error)}")
        self.report.inside_searches.append(found)
        if found.failure:
            self.report.notes.append(found.failure)
        else:
            self.report.notes.append(
                f"--inside: call {found.call} of `{name}` was evaluated op by op on its own arguments just before "
                f"it ran ({found.equations} operations, with the checks off)."
            )
        if found.budget_reached:
            self.report.notes.append(
                f"`{name}` has more operations than --inside evaluates one by one ({found.equations}); the "
                "sub-programs after that were run whole, and only their outputs were checked."
            )
        if found.stopped_at:
            self.report.notes.append(
                f"--inside could not look inside `{'`, `'.join(found.stopped_at)}` in `{name}`: only its outputs were checked."
            )


@contextlib.contextmanager
def _evaluating_inside(report: NanReport, counts):
    if counts is None:
        report.notes.append(
            "--inside needs sys.monitoring to see your calls, and it was unavailable: nothing was evaluated op by op."
        )
        yield
        return
    with contextlib.ExitStack() as stack:
        try:
            observed = stack.enter_context(jit_calls.observing_calls(_FirstCalls(report, counts)))
        except AlreadyActive as error:  # another probe follows every call: the cell runs without --inside
            report.notes.append(f"--inside did not run: {error}")
            observed = True
        if not observed:
            report.notes.append("--inside could not observe jitted calls in this JAX: nothing was evaluated op by op.")
        yield
