"""Which compilations to examine for size, kept while the block runs and examined after it.

The program of a compilation is taken from the stack only when it may be slow (at least ``SLOW_FLOOR``
seconds, or, for a cell that asks, the slowest so far), so the watch pays nothing for quick ones; the
equations are counted after the block, for the slow ones only, and the programs (which hold the user's
constants) are dropped then.
"""

from __future__ import annotations

import dataclasses
from types import FrameType

from jaxmagic._jax.compile_frames import program_compiling
from jaxmagic._jax.constants_as_arguments import lowered_without_constants
from jaxmagic._jax.types import Program
from jaxmagic.probes._compiles.cost_sections import SLOW_FLOOR, SLOW_SECONDS, SLOW_SHARE, is_slow
from jaxmagic.probes._compiles.program_size import CONSTANT_BYTES, ProgramSize, measure
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import error_line, format_bytes

KEPT = 3  # slow compilations examined per block (the slowest first)


@dataclasses.dataclass
class _Kept:
    size: ProgramSize
    program: Program | None  # the traced program (None: not on the stack); dropped after the block
    call: SourceLine | None
    started: SourceLine | None


class SlowPrograms:
    """``slowest=True``: a cell that asks (``%%jax_compiles``, the doctor) always gets its slowest
    compilation examined; False (the watch): only slow ones."""

    def __init__(self, slowest: bool):
        self._slowest = slowest
        self._kept: list[_Kept] = []

    def wants(self, seconds: float) -> bool:
        if seconds >= SLOW_FLOOR:
            return True
        return self._slowest and (not self._kept or seconds > self._kept[0].size.seconds)

    def keep(
        self, frame: FrameType | None, size: ProgramSize, call: SourceLine | None, started: SourceLine | None
    ) -> None:
        program = program_compiling(frame)
        if program is None:
            size.unknown = "JAX's traced program was not on the stack (an ahead-of-time .lower().compile()?)"
        self._kept.append(_Kept(size, program, call, started))
        self._kept.sort(key=lambda kept: -kept.size.seconds)
        slow = [k for k in self._kept if k.size.seconds >= SLOW_FLOOR]
        self._kept = (slow or self._kept[:1])[:KEPT]

    def finish(self, block_seconds: float) -> list[ProgramSize]:
        """Examine the slow ones (and the slowest when asked); drop every program."""
        examined = []
        for i, kept in enumerate(self._kept):
            size = kept.size
            slow = size.slow = is_slow(size.seconds, block_seconds)
            if not slow and not (self._slowest and i == 0):
                continue
            size.why_examined = (
                f"slow: {size.seconds:.2f} s (slow means over {SLOW_SECONDS:.1f} s, or over {SLOW_FLOOR:.1f} s "
                f"and {SLOW_SHARE:.0%} of the cell's {block_seconds:.2f} s)"
                if slow
                else f"the slowest compilation of the cell ({size.seconds:.2f} s; not slow: under {SLOW_SECONDS:.1f} s "
                f"and under {SLOW_SHARE:.0%} of the cell's {block_seconds:.2f} s)"
            )
            if kept.program is not None:
                try:
                    _examine(size, kept.program, kept.call, kept.started)
                except Exception as failure:  # never lose the report over a program we cannot read
                    size.unknown = f"jaxmagic could not read the program ({error_line(failure)})"
            examined.append(size)
        self._kept = []
        return examined


def _examine(size: ProgramSize, program: Program, call: SourceLine | None, started: SourceLine | None) -> None:
    size.equations, size.lines, size.constants = measure(program)
    size.constant_bytes = sum(c.bytes for c in size.constants)
    loop = size.unrolled
    made_at = loop.line if loop is not None else next((line.line for line in size.lines if line.line), None)
    if loop is not None:
        size.fix = (
            f"Replace `{loop.loop}` by jax.lax.fori_loop (or jax.lax.scan, to keep each step's output): the program "
            f"then holds the loop body once ({loop.per_iteration} equations) instead of {loop.iterations} copies "
            f"({loop.equations} equations), and compiles in about the time of one."
        )
        size.fix_trial = "Not tried: it needs your loop rewritten, which jaxmagic does not do."
    elif size.constant_bytes >= CONSTANT_BYTES:
        first = size.constants[0]
        size.fix = (
            f"Pass the {first.type} array as an argument of the jitted function instead of closing over it: "
            f"a closed-over array is a constant compiled into the program ({format_bytes(size.constant_bytes)} "
            "here), an argument is an input (jax#10615)."
        )
        size.fix_trial = _constants_trial(program, size)
        made_at = first.line or made_at
    program_name = size.function if "(" in size.function else f"jit({size.function})"  # vmap(f): its own name
    if made_at is not None:
        size.provenance = Provenance(
            made_at=made_at, function=made_at.function, transforms=[program_name], started_by=call
        )
    else:
        size.provenance = Provenance(
            transforms=[program_name],
            started_by=call,
            unknown="no equation came from a line of yours inside it (JAX's or a library's code only)",
        )


def _constants_trial(program: Program, size: ProgramSize) -> str:
    """Lower the same equations with the constants as arguments (no code of the user's runs)."""
    try:
        characters, seconds = lowered_without_constants(program)
    except Exception as failure:
        return f"Not tried: lowering the program with its constants as arguments failed ({error_line(failure)})."
    before = f"{size.lower_seconds:.3f} s" if size.lower_seconds is not None else "an unmeasured time"
    return (
        f"Tried: the same program with its constants as arguments lowers in {seconds:.3f} s (with them baked "
        f"in: {before}) to {characters:,} characters of StableHLO, {format_bytes(size.constant_bytes)} of "
        "constants no longer written into it."
    )
