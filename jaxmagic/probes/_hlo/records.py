"""The records of an ``HloReport``: one operation, kernel, scope, baked literal, captured constant,
the compiled program's memory figures, one point of a sweep - and the thresholds that make a
captured array a finding."""

from __future__ import annotations

import dataclasses

from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance

STAGES = ("jaxpr", "stablehlo", "hlo")
LARGE_CONSTANT_BYTES = 1 << 20  # captured arrays from here on are a memory concern (jit cache keeps them)
# An array made while tracing (NumPy code in the function: np.random.rand(n), np.arange(n)) from here on
# is a finding: its values are fixed at trace time, and the program and the jit cache carry it.
BAKED_CONSTANT_BYTES = 1 << 14


@dataclasses.dataclass
class ScopeOp:
    """One operation of the queried scope in one stage."""

    stage: str  # "jaxpr", "stablehlo" or "hlo"
    op: str  # the operation's own name segment: "dot_general", "max", "jit(relu)"
    inner: str  # scopes nested inside the queried one ("attn"), "" if none
    backward: bool  # part of a gradient's backward pass (under transpose)
    name: str  # how the stage writes it: "dot_general", "stablehlo.dot_general", "%dot_general.1"
    full_name: str  # the whole name path, e.g. "jit(f)/encoder/dot_general"
    kernel: str = ""  # HLO: the instruction that runs it, when it runs inside a fusion
    kernel_label: str = ""  # that kernel's op_name
    kernel_in_scope: bool = True
    line: SourceLine | None = None
    text: str = ""  # the jaxpr equation / the HLO instruction line

    @property
    def key(self) -> tuple[bool, str, str]:
        return (self.backward, self.inner, self.op)


@dataclasses.dataclass
class Kernel:
    """An optimized-HLO instruction that runs operations of the scope (a fusion or a single op)."""

    name: str
    opcode: str
    fusion_kind: str
    label: str  # its op_name: the name a profiler shows
    in_scope: bool  # the label itself carries the scope
    scope_ops: int  # operations of the scope inside it
    other_ops: int  # operations of other scopes fused into it


@dataclasses.dataclass
class ScopeNode:
    """One named scope of the program with its operation counts (descendants included)."""

    path: str  # "encoder/attn"
    counts: dict[str, int]  # per stage; "kernels": HLO instructions labelled with this scope


@dataclasses.dataclass
class BakedLiteral:
    """A global or closure value that tracing turned into a literal of the jaxpr."""

    name: str  # "SCALE", "cfg.scale"
    kind: str  # "global" or "closure"
    value: str  # the literal as the jaxpr prints it: "2.0:f32[]"
    equation: str  # "b:f32[] = mul a 2.0:f32[]"
    line: SourceLine | None = None
    provenance: Provenance | None = None  # made_at: the line that read the value while tracing (= line)


@dataclasses.dataclass
class CapturedConstant:
    """An array the traced function closes over: a constant of the program, kept by the jit cache."""

    name: str  # "TABLE", or "" when it is not a visible global/closure value
    kind: str  # "global", "closure" or "" (made inside the function)
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    line: SourceLine | None = None  # where the program first uses it (its equation's source_info)
    numpy: bool = False  # a NumPy array (NumPy code run at trace time), not a JAX array
    # made_at: the line that built the array (tracemalloc's record of its allocation), or None with
    # ``unknown`` saying why and where it is first used; function and transformations of the first use
    provenance: Provenance | None = None
    # an earlier value of ``name``: the program was traced before the name was assigned its current value
    # (JAX's trace cache), as a fresh trace of the function showed
    earlier: bool = False

    @property
    def large(self) -> bool:
        return self.nbytes >= LARGE_CONSTANT_BYTES

    @property
    def made_while_tracing(self) -> bool:
        """An array computed by the function's own code during tracing (no global or closure holds it)."""
        return not self.name and self.nbytes >= BAKED_CONSTANT_BYTES


@dataclasses.dataclass
class MemoryFigures:
    """``Compiled.memory_analysis()``, in bytes."""

    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    generated_code_bytes: int = 0
    peak_bytes: int = 0  # 0 when the backend does not say

    @property
    def total_bytes(self) -> int:
        """Arguments + outputs + temporaries, minus outputs that reuse (alias) argument buffers."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes


@dataclasses.dataclass
class SweepPoint:
    value: str
    memory: MemoryFigures | None = None
    flops: float | None = None
    failure: str = ""
