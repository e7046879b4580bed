"""Where a compiled program's size comes from: equations per line of the user's, loops unrolled, constants.

"Why does it take minutes to compile?" has three usual answers (jax#2777, jax#10615, jax#21300): a Python
loop traced into thousands of equations, a large array closed over and baked into the program, or simply
a large program. This counts the traced program's equations by the user's line that made them (into
every sub-program: scan, while and cond bodies, inner jits), finds a line whose equations repeat one
short sequence (one iteration of a Python loop, unrolled) and the constants by the line that used them.
It reads the program only: nothing of the user's runs.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache

from jaxmagic._jax import compat
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.source import is_user_file, source_line
from jaxmagic.report.wording import format_bytes

UNROLLED_EQUATIONS = 100  # a line with this many equations, repeating one sequence, is a loop unrolled
CONSTANT_BYTES = 1 << 20  # constants past this size are worth passing as arguments
LINES_KEPT = 5


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
        return self.equations >= UNROLLED_EQUATIONS and self.iterations > 1


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


def measure(program) -> tuple[int, list[LineSize], list[BakedConstant]]:
    """Count ``program``'s equations by the user's line (sub-programs included) and its constants."""
    jaxpr = getattr(program, "jaxpr", program)
    counts: dict[tuple | None, int] = {}
    sequences: dict[tuple, list[str]] = {}
    total = 0
    constant_lines: dict[int, tuple] = {}
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
            frame = compat.user_frame(eqn.source_info.traceback)
            key = (frame.file_name, frame.start_line, frame.function_name) if frame is not None else None
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
            stack.extend(compat.sub_jaxprs(eqn))
        wanted = {}  # constants are the outer program's; inner ones are variables of their own
    lines = []
    for key, count in sorted(counts.items(), key=lambda item: -item[1])[:LINES_KEPT]:
        if key is None:
            lines.append(LineSize(None, count))
            continue
        period = _period(sequences.get(key, []))
        iterations = count // period if period and period < count else 0
        user = source_line(*key) if is_user_file(key[0]) else None
        lines.append(LineSize(user, count, period if iterations else 0, iterations, _loop_around(key[0], key[1])))
    constants = []
    for index, value in enumerate(getattr(program, "consts", []) or []):
        size = int(getattr(value, "nbytes", 0) or 0)
        if size:
            key = constant_lines.get(index)
            line = source_line(*key) if key is not None and is_user_file(key[0]) else None
            constants.append(BakedConstant(_type_text(value), size, line))
    constants.sort(key=lambda c: -c.bytes)
    return total, lines, constants


def _period(sequence: list[str]) -> int:
    """The length of the shortest block ``sequence`` repeats (its own length when it repeats none)."""
    n = len(sequence)
    for period in range(1, n // 2 + 1):
        if n % period == 0 and all(sequence[i] == sequence[i % period] for i in range(period, n)):
            return period
    return n


def _loop_around(filename: str, lineno: int) -> str:
    """The header of the innermost Python ``for``/``while`` loop around ``lineno`` in the source, or ""."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return ""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    innermost = 0  # the loop that starts last among those around the line is the innermost
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While)) and node.body:
            last = max(getattr(n, "end_lineno", 0) or 0 for n in node.body)
            if node.lineno <= lineno <= last and node.lineno > innermost:
                innermost = node.lineno
    return linecache.getline(filename, innermost).strip().removesuffix(":").strip() if innermost else ""


def _type_text(value) -> str:
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", ())
    return f"{dtype}[{','.join(str(d) for d in shape)}]"
