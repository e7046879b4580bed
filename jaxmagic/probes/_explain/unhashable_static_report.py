"""The report on a static argument jit cannot hash (``unhashable_static``): which argument of which
function, what the value is, and the fix for that kind of value."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._leaks.tracers.text import english_list
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act
from jaxmagic.report.document import Document, Facts, Paragraph, Section, SourceLines, Table


@dataclasses.dataclass
class UnhashableStaticReport(Report):
    """jit's "Non-hashable static arguments are not supported", explained."""

    kind = "jax_explain"

    error_type: str = "ValueError"
    error_kind: str = "unhashable_static"  # beside TracerErrorReport's kinds ("bool", "int", ...) and "non_array"
    function: str = ""  # the jitted function called on the failing line ("" when not told)
    parameters: list[str] = dataclasses.field(default_factory=list)  # the static parameter(s) it may be
    value_type: str = ""  # "Config", "dict"
    value_text: str = ""  # as JAX wrote it: "Config(some_value=2)"
    what: str = ""  # "a dataclass that is not frozen (eq=True without frozen=True leaves it without a hash)"
    fixes: list[Fix] = dataclasses.field(default_factory=list)
    your_lines: list[SourceLine] = dataclasses.field(default_factory=list)  # outermost first

    def concerns(self) -> list[Concern]:
        return [act(f"{self.error_type} explained: a static argument of type `{self.value_type}` has no hash")]

    @property
    def summary(self) -> str:
        given = f"`{self.function}`'s static argument" if self.function else "a jitted function's static argument"
        if len(self.parameters) == 1:
            given += f" `{self.parameters[0]}`"
        elif self.parameters:
            given += f" (one of {english_list(self.parameters)})"
        return (
            f"{self.error_type}: {given} is {self.what} (`{self.value_text}`): jit looks up its compilations by "
            "the static arguments' hashes, so a static value must be hashable."
        )

    @property
    def first_fix(self) -> str:
        if not self.fixes:
            return ""
        fix = self.fixes[0]
        return f"`{fix.use}` - {fix.when}" + (f" ({fix.checked})" if fix.checked else "")

    def document(self) -> Document:
        sections = []
        if self.your_lines:
            sections.append(Section("Your line", [SourceLines(self.your_lines[-4:], "")]))
        facts = [
            ("error", self.error_type),
            ("function", self.function or "not told (no jitted call found on the line)"),
        ]
        if self.parameters:
            facts.append(("static parameter", ", ".join(self.parameters)))
        facts += [("value", self.value_text), ("type", self.value_type), ("what it is", self.what)]
        sections.append(Section("What", [Facts(facts)]))
        rows = [[f"`{fix.use}`", fix.when, fix.checked] for fix in self.fixes]
        if rows:
            sections.append(Section("Fixes", [Table(["write", "when", "tried"], rows)]))
        sections.append(
            Section(
                "Why",
                [
                    Paragraph(
                        "jit keeps one compilation per value of its static arguments and finds it by the value's "
                        "hash; a dict, a list, a NumPy array or a dataclass that is not frozen has none. Older JAX "
                        "hashed such values by identity and recompiled at every call (jax-ml/jax#3701); JAX now "
                        "refuses them. Equal values must hash equal, so that equal settings share one compilation."
                    )
                ],
            )
        )
        return Document("%jax_explain", self.status, self.summary, sections, fix=self.first_fix)
