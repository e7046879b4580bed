"""Where a compiled program's size comes from: equations per line of the user's, loops unrolled, constants.

"Why does it take minutes to compile?" has three usual answers (jax#2777, jax#10615, jax#21300): a Python
loop traced into thousands of equations, a large array closed over and baked into the program, or simply
a large program. This counts the traced program's equations by the user's line that made them (into
every sub-program: scan, while and cond bodies, inner jits), finds a line whose equations repeat one
short sequence (one iteration of a Python loop, unrolled) and the constants by the line that used them.
It reads the program only: nothing of the user's runs.

A line's equations are counted at the user's own innermost line inside the traced function
(``usercode.source.is_user_file``), not at JAX's notion of a user frame, which includes every library: an
Optax or Flax line that ``jax.tree.map``s over 40 leaves repeats one sequence 40 times without any loop
(jax#16084, jax#4667), and is the user's ``tx.update(...)`` line here. A repeat is a loop unrolled only
when that line sits in the body of a ``for``/``while`` of the user's source in the same function (the
AST says so): repetition alone is no evidence.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
from typing import Any

from jaxmagic._jax import jaxpr_parts, recorded_sources
from jaxmagic._jax.types import Program
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import format_bytes
from jaxmagic.usercode.source import is_user_file, source_line

UNROLLED_EQUATIONS = 100  # a line with this many equations, repeating one sequence, is a loop unrolled
CONSTANT_BYTES = 1 << 20  # constants past this size are worth passing as arguments
LINES_KEPT = 5
SEGMENTS_CHECKED = 5_000  # a line's equations past this many are checked for one repeated block only


@dataclasses.dataclass
class LineSize:
    """The equations one of the user's lines made in the program."""

    line: SourceLine | None  # None: equations of no line of the user's (JAX's own)
    equations: int
    per_iteration: int = 0  # when the line's equations repeat one sequence: its length
    iterations: int = 0  # and how many times it repeats
    loop: str = ""  # the Python loop around the line in the source: "for i in range(500)" (no colon), "" if none

    @property
    def unrolled(self) -> bool:
        """A loop of the user's unrolled: many equations repeating one block, from a line in a loop's body."""
        return (
            self.line is not None and bool(self.loop) and self.equations >= UNROLLED_EQUATIONS and self.iterations > 1
        )


@dataclasses.dataclass
class BakedConstant:
    """An array closed over by the traced function: a constant of the compiled program."""

    type: str  # "float32[1000,1000]"
    bytes: int
    line: SourceLine | None  # the user's line that used it (where it was baked in)


@dataclasses.dataclass
class ProgramSize:
    """Why one compilation was as big as it was (plain data)."""

    function: str
    number: int  # which compilation of the function
    seconds: float  # trace + lower + XLA compile
    trace_seconds: float | None
    lower_seconds: float | None
    compile_seconds: float
    why_examined: str  # "slow: 2.1 s, over 1.0 s" or "the slowest compilation of the cell"
    slow: bool = False  # False: examined as the slowest of a cell that asked, though not slow
    equations: int = 0
    lines: list[LineSize] = dataclasses.field(default_factory=list)  # the biggest first
    constants: list[BakedConstant] = dataclasses.field(default_factory=list)
    constant_bytes: int = 0
    unknown: str = ""  # why the program could not be examined
    fix: str = ""
    fix_trial: str = ""  # what trying the fix showed
    provenance: Provenance | None = None  # made_at: the line that made the most equations; started_by: the call

    @property
    def unrolled(self) -> LineSize | None:
        return next((line for line in self.lines if line.unrolled), None)

    def _not_slow(self, grows_with: str) -> str:
        return "" if self.slow else f" Not slow here; the cost grows with {grows_with}."

    @property
    def stage_times(self) -> str:
        def part(name: str, seconds: float | None) -> str:
            return f"{name} {seconds:.2f} s" if seconds is not None else f"{name} not measured"

        return ", ".join(
            [
                part("trace", self.trace_seconds),
                part("lower", self.lower_seconds),
                part("XLA compile", self.compile_seconds),
            ]
        )

    @property
    def nothing_to_fix(self) -> str:
        """A slow compilation whose program showed no cause to fix: a note with the stage times, never a
        finding - a wall-clock time is no evidence on a shared machine, and no fix was tried."""
        return (
            f"`{self.function}` took {self.seconds:.2f} s to trace, lower and compile ({self.stage_times}; wall-clock "
            f"time, which a busy machine stretches): {self.equations} equations, no Python loop of yours unrolled "
            "into it and no large constant baked in - nothing found to fix."
        )

    @property
    def headline(self) -> str:
        name = f"`{self.function}`"
        took = f"{name} took {self.seconds:.2f} s to trace, lower and compile"
        if self.unknown:
            return f"{took}; where its size comes from could not be told: {self.unknown}."
        loop = self.unrolled
        if loop is not None and loop.line is not None:
            where = f"line {loop.line.lineno} (`{loop.line.code}`)"
            inside = f", inside `{loop.loop}`" if loop.loop else ""
            return (
                f"{took}: {loop.equations} of its {self.equations} equations come from {where}{inside}, "
                f"a Python loop unrolled ({loop.per_iteration} equations x {loop.iterations} iterations)."
                f"{self._not_slow('the iterations')}"
            )
        if self.constant_bytes >= CONSTANT_BYTES:
            first = self.constants[0]
            where = f", used at line {first.line.lineno}: `{first.line.code}`" if first.line else ""
            return (
                f"{took}: {format_bytes(self.constant_bytes)} of constants are baked into the program "
                f"({first.type}{where}).{self._not_slow('the array')}"
            )
        top = self.lines[0] if self.lines else None
        if top is not None and top.line is not None:
            return f"{took}: {self.equations} equations, the most ({top.equations}) from line {top.line.lineno} (`{top.line.code}`)."
        return f"{took}: {self.equations} equations."


def measure(program: Program) -> tuple[int, list[LineSize], list[BakedConstant]]:
    """Count ``program``'s equations by the user's line (sub-programs included) and its constants."""
    jaxpr = getattr(program, "jaxpr", program)
    counts: dict[tuple[str, int, str] | None, int] = {}
    sequences: dict[tuple[str, int, str], list[str]] = {}
    total = 0
    constant_lines: dict[int, tuple[str, int, str]] = {}
    constvars = list(getattr(jaxpr, "constvars", []))
    wanted = {id(v): i for i, v in enumerate(constvars)}
    stack = [jaxpr]
    seen = 0
    while stack and seen < 2_000:  # bounded: a program of programs is walked at most this deep
        seen += 1
        item = stack.pop()
        current = getattr(item, "jaxpr", item)  # a ClosedJaxpr holds its Jaxpr
        for eqn in getattr(current, "eqns", ()):
            total += 1
            key = _users_line(eqn.source_info.traceback)
            counts[key] = counts.get(key, 0) + 1
            if key is not None:
                sequence = sequences.setdefault(key, [])
                if len(sequence) < 100_000:
                    sequence.append(str(eqn.primitive))
            if wanted and key is not None:
                for var in eqn.invars:
                    index = wanted.get(id(var))
                    if index is not None and index not in constant_lines:
                        constant_lines[index] = key
            stack.extend(jaxpr_parts.sub_jaxprs(eqn))
        wanted = {}  # constants are the outer program's; inner ones are variables of their own
    lines = []
    for key, count in sorted(counts.items(), key=lambda item: -item[1])[:LINES_KEPT]:
        if key is None:
            lines.append(LineSize(None, count))
            continue
        per_iteration, iterations = _repeats(sequences.get(key, []))
        line = source_line(*key)
        lines.append(LineSize(line, count, per_iteration, iterations, _loop_around(*key[:2])))
    constants = []
    for index, value in enumerate(getattr(program, "consts", []) or []):
        size = int(getattr(value, "nbytes", 0) or 0)
        if size:
            key = constant_lines.get(index)
            used_at = source_line(*key) if key is not None else None
            constants.append(BakedConstant(_type_text(value), size, used_at))
    constants.sort(key=lambda c: -c.bytes)
    return total, lines, constants


def _users_line(traceback: Any) -> tuple[str, int, str] | None:
    """(file, line, function) of the innermost frame of the user's own code inside the traced function (JAX
    cuts an equation's traceback at the transformation's entry: the line that called ``jit`` is not in it,
    so a library callable jitted in the user's training loop has no line of the user's)."""
    for frame in recorded_sources.user_frames(traceback):  # innermost first; JAX's own frames left out, libraries kept
        if is_user_file(frame.file_name):
            return (frame.file_name, frame.start_line, frame.function_name)
    return None


def _repeats(sequence: list[str]) -> tuple[int, int]:
    """(equations per iteration, iterations) when ``sequence`` is one block repeated, or runs of blocks each
    repeated the same number of times - a loop body differentiated is its forward blocks, then its backward
    ones (jax.grad of an unrolled loop); (0, 0) when it repeats nothing."""
    n = len(sequence)
    period = _period(sequence)
    if period < n:
        return period, n // period
    if n > SEGMENTS_CHECKED:
        return 0, 0
    for times in sorted((k for k in range(2, n // 2 + 1) if n % k == 0), reverse=True):
        if _runs_of(sequence, times):
            return n // times, times
    return 0, 0


def _runs_of(sequence: list[str], times: int) -> bool:
    """True when ``sequence`` splits into consecutive runs, each one block repeated ``times`` times."""
    position, n = 0, len(sequence)
    while position < n:
        for length in range(1, (n - position) // times + 1):
            block = sequence[position : position + length]
            if sequence[position : position + length * times] == block * times:
                position += length * times
                break
        else:
            return False
    return True


def _period(sequence: list[str]) -> int:
    """The length of the shortest block ``sequence`` repeats (its own length when it repeats none)."""
    n = len(sequence)
    for period in range(1, n // 2 + 1):
        if n % period == 0 and all(sequence[i] == sequence[i % period] for i in range(period, n)):
            return period
    return n


def _loop_around(filename: str, lineno: int) -> str:
    """The header of the innermost Python ``for``/``while`` whose body holds ``lineno``, in the same function
    (a ``def`` in between is code the loop defines, not code it repeats), or ""."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return ""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    loop = _innermost_loop(tree, lineno, None)
    return linecache.getline(filename, loop.lineno).strip().removesuffix(":").strip() if loop is not None else ""


Loop = ast.For | ast.AsyncFor | ast.While


def _innermost_loop(node: ast.AST, lineno: int, loop: Loop | None) -> Loop | None:
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            continue  # the line's statement is enough: a loop repeats statements
        start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
        if start is None or end is None or not start <= lineno <= end:
            continue
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return _innermost_loop(child, lineno, None)
        if isinstance(child, (ast.For, ast.AsyncFor, ast.While)) and child.body:
            body_start, body_end = child.body[0].lineno, child.body[-1].end_lineno or child.body[-1].lineno
            inner = child if body_start <= lineno <= body_end else loop  # its `else:` runs once
            return _innermost_loop(child, lineno, inner)
        return _innermost_loop(child, lineno, loop)
    return loop


def _type_text(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", ())
    return f"{dtype}[{','.join(str(d) for d in shape)}]"
