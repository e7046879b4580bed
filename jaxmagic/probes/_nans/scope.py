"""What ``%%jax_nans`` looked at, in words: the one place that decides what a clean report says it checked.

``jax.debug_nans``/``debug_infs`` read the outputs of each eager operation and of each compiled program;
inside a compiled program (a jitted call, the body of a ``cond``/``while``/``scan`` run eagerly, a jitted
function JAX calls under ``vmap`` or ``grad``) a NaN or inf that a later operation masks never reaches an
output, and JAX itself switches its checks off while it evaluates some programs eagerly (the branches of a
``cond`` under ``vmap``: ``core.jaxpr_as_fun``). So a clean report that did not look inside says so in its
headline and names ``--inside``, which does (``inside_calls.py``); with ``--inside`` it says what was still
run whole (``Scope.unevaluated``).
"""

from __future__ import annotations

import dataclasses

from jaxmagic.report.document import fits_headline

# why a compiled computation --inside observed was not evaluated op by op (``Scope.unevaluated``' keys)
# (one, several): the first call of the same function (or of the same control flow on the same line) was
LATER = ("later call", "later calls")
# jnp.linalg.norm's program is JAX's code, not the user's
LIBRARY = ("call of a JAX library function", "calls of JAX library functions")
FAILED = ("call that could not be evaluated", "calls that could not be evaluated")  # said in the notes


@dataclasses.dataclass
class Scope:
    """What the checks covered: the user's direct jitted calls (``jit_calls``), whether they could be counted,
    and with ``--inside`` (``inside``) how many compiled computations were evaluated op by op and how many
    were run whole, by reason (``unevaluated``)."""

    jit_calls: dict[str, int]
    counted: bool = True
    uncounted: str = ""  # why the calls could not be counted, in words (monitoring_tool.why_no_tool)
    inside: bool = False
    evaluated: int = 0
    unevaluated: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)

    def looked(self) -> str:
        """What the checks read: the outputs of the calls and operations, and what --inside evaluated."""
        calls = calls_text(self.jit_calls)
        if not self.counted:
            outputs = "the outputs of every compiled program and eager operation the cell ran"
        elif calls:
            outputs = f"the outputs of {calls} made by the cell and of eager operations"
        else:
            outputs = "the output of each eager operation JAX checked (the cell called no jitted function directly)"
        if not (self.inside and self.evaluated):
            return outputs
        evaluated = f"{self.evaluated} compiled computation{'s' if self.evaluated != 1 else ''}"
        return f"every intermediate of {evaluated} (evaluated op by op, --inside) and {outputs}"

    def not_looked(self, checked: str = "NaN/inf") -> str:
        """What was run whole, whose inside was not looked at; "" when --inside evaluated everything it saw."""
        if self.inside and self.counted:
            if not self.unevaluated:
                return ""
            parts = [f"{n} {reason[0] if n == 1 else reason[1]}" for reason, n in self.unevaluated.items()]
            return f"Not looked inside {_joined(parts)}: checked only at their outputs."
        return f"Not looked inside compiled code: a {checked} masked there (or made by its gradient) is unseen."

    def headline(self, checked: str) -> str:
        """The clean report's headline: what was looked at and, in the same paragraph, what was not, naming
        ``--inside`` when it would look (at most two lines: the long wording first)."""
        looked = f"No {checked} in what was checked: {self.looked()}."
        missed = self.not_looked(checked)
        if not missed:
            return looked
        option = " - `%%jax_nans --inside` looks." if not self.inside else ""
        for text in (
            f"{looked} {missed.rstrip('.')}{option}" if option else f"{looked} {missed}",
            f"{looked} Not looked inside compiled code{option or '.'}",
        ):
            if fits_headline(text):
                return text
        return f"No {checked} in the outputs checked; not looked inside compiled code{option or '.'}"

    def paragraph(self) -> str:
        """The whole scope, for the "What was checked" paragraph (``NanReport.checked_scope``)."""
        text = self.looked()
        if not self.counted and self.uncounted:
            text += f" (its jitted calls could not be counted: {self.uncounted})"
        text += "; values inside compiled programs are checked only where they reach an output"
        if self.inside and self.counted:
            if not self.evaluated:
                text += " (--inside evaluated no compiled computation op by op)"
            missed = self.not_looked()
            return f"{text}. {missed}" if missed else f"{text}."
        return (
            f"{text}, and JAX switches its checks off inside some programs it evaluates eagerly (the branches of a "
            "`cond` under `vmap`) - `%%jax_nans --inside` checks every intermediate of the jitted functions, "
            "control flow and transformed functions a cell runs (the first call of each)."
        )


def _joined(parts: list[str]) -> str:
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else ""


def calls_text(jit_calls: dict[str, int]) -> str:
    """ "3 calls of `layer_norm` and 1 call of `f`"."""
    return _joined([f"{n} call{'s' if n != 1 else ''} of `{name}`" for name, n in jit_calls.items()])
