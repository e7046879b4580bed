"""Provenance: the three answers every finding gives about where its value came from.

(a) ``made_at`` - the user's line that made the value (the producing operation, the
    line that built an array, stored a tracer, drew with a key);
(b) ``function`` and ``transforms`` - the innermost user function it was made in, and
    the transformations around it, outermost first (``jit(train_step) > grad > scan
    body``), with ``position`` the loop iteration or batch index where known;
(c) ``started_by`` - the user's line that started the trace or made the call (the cell
    line ``w, loss = train_step(w, x)``): context, shown after the producing line.

Built by ``jaxmagic.probes._support.attribution`` from equations' ``source_info``, JAX's
own error messages, Python frames and NumPy allocation tracebacks. When the line cannot
be told, ``unknown`` says why - a report never guesses a line.
"""

from __future__ import annotations

import dataclasses

from jaxmagic.report import SourceLine
from jaxmagic.report.document import Block, Facts, Paragraph, SourceLines


@dataclasses.dataclass
class Provenance:
    made_at: SourceLine | None = None
    function: str = ""  # innermost user function ("loss_fn", "loss_fn.<locals>.body" shown as "body")
    transforms: list[str] = dataclasses.field(default_factory=list)  # outermost first
    position: str = ""  # "iteration 899", "sample 3", "branch 1"
    started_by: SourceLine | None = None  # the user's line that started the trace / made the call
    library_function: str = ""  # "jax.nn.logsumexp" when made inside a library function called from made_at
    unknown: str = ""  # why made_at could not be told ("" when it was)

    @property
    def path(self) -> str:
        """``"jit(step) > grad > scan body"``; "" when no transformation was around the value."""
        return " > ".join(self.transforms)

    @property
    def known(self) -> bool:
        return self.made_at is not None

    @property
    def context(self) -> str:
        """``"in loss_fn under jit(step) > grad, iteration 3"``: function, path and position in words."""
        parts = []
        if self.library_function:
            parts.append(f"inside `{self.library_function}`")
        if self.function and self.function != "<module>":
            parts.append(f"in `{self.function}`")
        if self.transforms:
            parts.append(f"under {self.path}")
        text = " ".join(parts)
        if self.position:
            text = f"{text}, {self.position}" if text else self.position
        return text

    @property
    def text(self) -> str:
        """One sentence: where it was made, in what, and which call started it."""
        if self.made_at is None:
            made = f"could not tell where it was made, because {self.unknown}" if self.unknown else ""
        else:
            made = f"made at {self.made_at.where}"
        context = self.context
        pieces = [p for p in (made, context) if p]
        if self.started_by is not None and self.started_by != self.made_at:
            pieces.append(f"started by {self.started_by.where}")
        return "; ".join(pieces)

    def lines(self) -> list[SourceLine]:
        """The lines to show, producing line first and the call that started it as context."""
        shown = [line for line in (self.made_at, self.started_by) if line is not None]
        return shown if len(shown) < 2 or shown[0] != shown[1] else shown[:1]


def provenance_blocks(provenance: Provenance, what: str = "the value") -> list[Block]:
    """The blocks every report shows for a provenance: the producing line first, then the
    function and transformations, then the call that started it as context - or why the
    line could not be told."""
    blocks: list[Block] = []
    if provenance.made_at is not None:
        blocks.append(SourceLines([provenance.made_at], caption=f"The line that made {what}:"))
    elif provenance.unknown:
        blocks.append(Paragraph(f"Could not tell which line made {what}, because {provenance.unknown}."))
    pairs = [
        (name, value)
        for name, value in (
            ("library function", provenance.library_function),
            ("function", provenance.function if provenance.function != "<module>" else ""),
            ("transformations", provenance.path),
            ("where", provenance.position),
        )
        if value
    ]
    if pairs:
        blocks.append(Facts(pairs))
    if provenance.started_by is not None and provenance.started_by != provenance.made_at:
        blocks.append(SourceLines([provenance.started_by], caption="Started by the call:"))
    return blocks
