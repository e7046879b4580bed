"""The report on a value that is not an array given to a jitted function (``non_array``): the leaf, what
it is, and the fixes with what trying them showed."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table


@dataclasses.dataclass
class NonArrayArgumentReport(Report):
    """jit's "Error interpreting argument ... as an abstract array", explained."""

    kind = "jax_explain"

    error_type: str = "TypeError"
    error_kind: str = "non_array"  # beside TracerErrorReport's kinds ("bool", "int", ...): one field to read
    function: str = ""  # the user's function given to the transformation ("loss")
    transformation: str = "jit"  # "jit", "eval_shape", "grad", "value_and_grad"
    argument: str = ""  # its parameter that holds the value ("model")
    argument_index: int | None = None  # where that argument was given among the positional ones
    differentiated: str = ""  # "grad" when the jitted function is jax.grad of the user's function
    path: str = ""  # JAX's path to the first such leaf ("model.activation")
    leaves: dict[str, str] = dataclasses.field(default_factory=dict)  # every such leaf: path -> what it is
    fixes: list[Fix] = dataclasses.field(default_factory=list)  # best first, each tried or said not to be
    your_lines: list[SourceLine] = dataclasses.field(default_factory=list)  # outermost first
    notes: list[str] = dataclasses.field(default_factory=list)
    trial_notes: list[str] = dataclasses.field(default_factory=list)  # what trying the fixes put back

    def concerns(self) -> list[Concern]:
        return [act(f"{self.error_type} explained: a value that is not an array given to `{self.function}`")]

    @property
    def working_fixes(self) -> list[Fix]:
        return [f for f in self.fixes if not f.checked.startswith("checked: still fails")]

    @property
    def summary(self) -> str:
        leaves = list(self.leaves.items())
        shown = "; ".join(f"`{path}` is {what}" for path, what in leaves[:3])
        more = f" (and {len(leaves) - 3} more)" if len(leaves) > 3 else ""
        return (
            f"{self.error_type}: `{self.function}` was given values that are not arrays in its argument "
            f"`{self.argument}`: {shown}{more}. {self._traces}."
        )

    @property
    def _traces(self) -> str:
        if self.transformation in ("grad", "value_and_grad"):
            return f"jax.{self.transformation} differentiates every leaf of the argument it differentiates"
        return f"jax.{self.transformation} traces every leaf of its arguments as an array"

    @property
    def first_fix(self) -> str:
        working = self.working_fixes
        if not working:
            return ""
        fix = working[0]
        return f"`{fix.use}` - {fix.when}" + (f" ({fix.checked})" if fix.checked else "")

    def document(self) -> Document:
        sections = []
        if self.your_lines:
            sections.append(Section("Your line", [SourceLines(self.your_lines[-4:], "")]))
        facts = [("error", self.error_type), ("function", f"{self.function}, given to jax.{self.transformation}")]
        facts.append(("argument", self.argument))
        facts += [(f"`{path}`", what) for path, what in self.leaves.items()]
        sections.append(Section("What", [Facts(facts)]))
        working = self.working_fixes
        rows = [[f"`{fix.use}`", fix.when, fix.checked] for fix in working]
        blocks: list[Block] = [Table(["write", "when", "tried"], rows)] if rows else []
        failing = [f for f in self.fixes if f not in working]
        if failing:
            blocks.append(
                Paragraph(
                    ("No fix of this kind works here as written. " if not rows else "")
                    + "Tried and left out: "
                    + "; ".join(f"`{f.use}` ({f.checked.removeprefix('checked: ')})" for f in failing)
                )
            )
        sections.append(Section("Fixes", blocks))
        why: list[Block] = [
            Paragraph(
                f"jax.{self.transformation} turns every leaf of the arguments it traces into a traced array; a "
                "function, a string or another object among them cannot be one. Pass only arrays (and numbers) "
                "there; give settings as static arguments, or close over them."
            )
        ]
        sections.append(Section("Why", why + [Paragraph(note) for note in self.notes]))
        return Document("%jax_explain", self.status, self.summary, sections, fix=self.first_fix)
