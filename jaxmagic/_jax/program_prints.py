"""A fingerprint of each program JAX compiles, to tell whether processes compiled the same programs.

Processes of one job that compile different programs for one function deadlock in
their next collective (openxla/xla#7716; marin#9042: a shape that depends on the
process index). To see it before, each process digests every program it compiles,
at the compile event the compilation probe already listens to
(``/jax/core/compile/backend_compile_duration``): that event is recorded in
``pxla._cached_compilation``, whose frame holds the lowered module being compiled
(``computation``). (The executable's own ``fingerprint`` is not used: it differs
between two processes that compiled the same program.)

The digest is of the lowered StableHLO text without its locations: a cell's file
name holds the engine's process id, so locations differ between processes that run
the same program. Each operation is digested too, with its text (cut) and the user's
line its location names, so two processes' programs can be compared operation by
operation and the first that differs named. Cost: printing the module (~0.5 ms for a
small step function) and one regex pass over its lines, at each compilation only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from jaxmagic._jax import distributed_store

if TYPE_CHECKING:
    from jaxmagic.report import JsonDict

MAX_OPS = 400  # operations kept (digest, text, line) per program; the whole program's digest covers all
OP_TEXT_CHARS = 160
CONSTANT_ELEMENTS = 1024  # constants up to this size are printed, and so digested; larger ones are elided

_ALIAS = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$")
_LOC = re.compile(r"\s*loc\((?:[^()\"]|\"[^\"]*\"|\((?:[^()\"]|\"[^\"]*\")*\))*\)")
_LOC_REF = re.compile(r"loc\((#loc\d*)\)")
_FILE_LINE = re.compile(r"\"([^\"]+)\":(\d+)(?::\d+)?")
_OP_NAME = re.compile(r"^(?:%[\w#:, %]+=\s*)?\"?([\w.]+)")
_SSA = re.compile(r"%[\w#]+")


@dataclasses.dataclass
class ProgramPrint:
    """One compiled program, digested: equal on two processes when they compiled the same program.

    Not told apart: programs that differ only in a constant of more than ``CONSTANT_ELEMENTS``
    elements (an array closed over), which the printed text elides (printing it whole would cost
    its size at every compilation).
    """

    digest: str  # of the lowered text without locations (16 hex digits)
    op_count: int
    # the first MAX_OPS operations: [digest (8 hex digits), text without locations (cut), index into lines or -1]
    ops: list[list[str | int]] = dataclasses.field(default_factory=list)
    lines: list[str] = dataclasses.field(default_factory=list)  # "In [3], line 4: h = x @ w" (user lines, distinct)

    def to_dict(self) -> JsonDict:
        return dataclasses.asdict(self)


def in_multi_process_job() -> bool:
    """True on an ipyparallel engine or in a ``jax.distributed`` job: where programs are digested.

    (A notebook that drives engines imports ``ipyparallel`` but not its engine package.)
    """
    return "ipyparallel.engine" in sys.modules or distributed_store.initialized()


def compiling_frame(start: FrameType | None) -> FrameType | None:
    """The frame of ``pxla._cached_compilation`` out from ``start`` (the compile event's listener), or None."""
    frame = start
    for _ in range(12):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "_cached_compilation" and code.co_filename.endswith("pxla.py"):
            return frame
        frame = frame.f_back
    return None


def print_of_compilation(user_line: Callable[[str, int], str]) -> ProgramPrint | None:
    """The print of the program being compiled, read at the backend compile event; None when not found there.

    ``user_line(filename, lineno)`` words a user's line ("" for a library's file).
    """
    frame = compiling_frame(sys._getframe(1))
    if frame is None:
        return None
    try:
        computation = frame.f_locals.get("computation")
        if computation is None:
            return None
        text = computation.operation.get_asm(enable_debug_info=True, large_elements_limit=CONSTANT_ELEMENTS)
    finally:
        del frame
    return print_of_text(text, user_line)


def print_of_text(text: str, user_line: Callable[[str, int], str]) -> ProgramPrint:
    """Digest a module's text (MLIR with its location aliases at the end)."""
    aliases: dict[str, str] = {}
    body = []
    for raw in text.splitlines():
        alias = _ALIAS.match(raw)
        if alias:
            aliases[alias.group(1)] = alias.group(2)
        elif raw.strip():
            body.append(raw)
    whole = hashlib.blake2b(digest_size=8)
    ops: list[list[str | int]] = []
    lines: list[str] = []
    line_index: dict[str, int] = {}
    resolved: dict[str, str] = {}
    count = 0
    for raw in body:
        bare = _LOC.sub("", raw).strip()
        whole.update(bare.encode())
        whole.update(b"\n")
        if bare in ("}", "{") or bare.startswith(("module ", "} ")):
            continue
        count += 1
        if len(ops) >= MAX_OPS:
            continue
        ref = _LOC_REF.findall(raw)
        where = _resolve(ref[-1], aliases, user_line, resolved) if ref else ""
        if where and where not in line_index:
            line_index[where] = len(lines)
            lines.append(where)
        digest = hashlib.blake2b(_SSA.sub("%", bare).encode(), digest_size=4).hexdigest()
        ops.append([digest, short_op_text(bare), line_index.get(where, -1)])
    return ProgramPrint(digest=whole.hexdigest(), op_count=count, ops=ops, lines=lines)


def short_op_text(bare: str) -> str:
    """An operation as a reader compares it: its name and its types (``stablehlo.dot_general : (...) -> ...``)."""
    name = op_name(bare)
    _, colon, types = bare.rpartition(" : ")
    keep_whole = bare.startswith("func.func") or name == "stablehlo.constant"  # a signature, a value baked in
    text = f"{name} : {types}" if colon and not keep_whole else bare
    return text if len(text) <= OP_TEXT_CHARS else text[: OP_TEXT_CHARS - 3] + "..."


def op_name(text: str) -> str:
    """``%3 = stablehlo.dot_general %1, %2 ...`` -> ``stablehlo.dot_general``."""
    match = _OP_NAME.match(text)
    name = match.group(1) if match else text.split(" ", 1)[0]
    if name in ("call", "func.call"):  # which function it calls: `call @_bernoulli`
        callee = re.search(r"@[\w.$-]+", text)
        return f"{name} {callee.group(0)}" if callee else name
    return name


def _resolve(ref: str, aliases: dict[str, str], user_line: Callable[[str, int], str], memo: dict[str, str]) -> str:
    """The innermost user's line a location alias names (callee before caller), "" when none."""
    if ref in memo:
        return memo[ref]
    memo[ref] = ""  # a cycle (never in practice) resolves to nothing
    found = ""
    body = aliases.get(ref, "")
    # In order of the text: a callsite names its callee first, so the first user file is the innermost.
    for token in re.finditer(r"#loc\d*|\"[^\"]+\":\d+(?::\d+)?", body):
        piece = token.group(0)
        if piece.startswith("#loc"):
            found = _resolve(piece, aliases, user_line, memo)
        else:
            file_line = _FILE_LINE.match(piece)
            found = user_line(file_line.group(1), int(file_line.group(2))) if file_line else ""
        if found:
            break
    memo[ref] = found
    return found
