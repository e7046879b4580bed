"""The events the profile probe reads from a trace, and what a reading of a whole trace gives.

Kept apart from the readers (``trace_events`` for the host's lines and the two trace formats,
``device_planes`` for an accelerator's planes) so that both build the same events.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class OpOrigin:
    """What a device trace says of an op by itself, beside its name.

    A TPU's saved JSON trace gives each op its HLO instruction, its name stack and the Python stack
    of the line that made it; that is what places an op on a line and a scope when the program's
    HLO was not captured (a saved trace read later, a program the capture missed).
    """

    instruction: str = ""  # the op's HLO instruction text: "%fusion = bf16[] fusion(...), calls=..."
    name_stack: str = ""  # "jit(mm)/matmul/dot_general" (JAX's name stack, as XLA's op_name)
    frames: tuple[tuple[str, int], ...] = ()  # (file, line) of the op's Python stack, innermost first
    category: str = ""  # XLA's own word for the op: "convolution fusion", "copy-start"


@dataclasses.dataclass(slots=True)
class TraceEvent:
    name: str
    thread: int  # one number per (plane, line) or (pid, tid)
    start_ns: float
    duration_ns: float
    module: str = ""  # kernels: hlo_module
    op: str = ""  # kernels: hlo_op
    program_id: str = ""
    run_id: str = ""
    origin: OpOrigin | None = None  # kernels: what the trace says of the op itself (device traces)

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns

    @property
    def is_kernel(self) -> bool:
        return bool(self.op)


@dataclasses.dataclass
class TraceReading:
    """A whole trace read: its events, the devices whose kernel time was read, and what was not read.

    ``notes`` are sentences for the report: a device plane, line or stat the reader found missing or
    could not use, and what that leaves out. ``devices`` name where kernel time came from
    ("TPU 0 (its XLA Ops line)"); empty for a trace of the host alone (CPU).
    """

    events: list[TraceEvent] = dataclasses.field(default_factory=list)
    devices: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
