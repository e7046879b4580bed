"""The records of the memory probe's reports: one buffer live at a program's peak, one program's memory,
what the device can give, one way down tried by compiling. Plain data: shapes and bytes, no arrays."""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._hlo.records import MemoryFigures
from jaxmagic.probes._memory.messages import OutOfMemoryMessage
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import format_bytes

# A way down is offered when it takes at least this share off the peak (a donated 1 MiB argument beside a
# 64 GiB temporary lowers the peak, but changes nothing the user would notice).
WORTH_OFFERING = 0.05
FITS_SHARE = 0.9  # a peak "fits" when it takes at most this share of what the device can give

# The kinds of ways down (``WayDown.kind``), each tried by one module of ``ways_down``; at one peak they are
# offered in this order - a change of the program before donation, which deletes the caller's arrays.
BATCH_GRADIENT, CHECKPOINT, CHUNK, ROWS, DONATE = "batch_gradient", "checkpoint", "chunk", "rows", "donate"
OFFER_ORDER = (BATCH_GRADIENT, CHECKPOINT, CHUNK, ROWS, DONATE)

# What a buffer live at the peak is for (XLA's buffer assignment, plus where its readers are).
ARGUMENT, OUTPUT, TEMPORARY, SAVED_FOR_BACKWARD = "argument", "output", "temporary", "saved for backward"


@dataclasses.dataclass
class PeakBuffer:
    """Buffers live at the program's peak, of one shape, made by one operation on one line (``count`` of them)."""

    shape: str  # "f32[131072,131072]"
    bytes: int  # all ``count`` buffers together
    role: str  # ARGUMENT, OUTPUT, TEMPORARY or SAVED_FOR_BACKWARD
    operation: str  # the JAX operation that made it ("sort", "tanh"); "" for an argument
    scope: str = ""  # JAX's name path of that operation ("jit(nearest)/jit(sort)/sort")
    argument: str = ""  # an argument's path as JAX names it ("x", "params['w']")
    made_at: SourceLine | None = None
    count: int = 1
    reuses: list[str] = dataclasses.field(default_factory=list)  # "`abs` at line 4": made in place over those
    # a scan's stack of the body's value, one row per iteration (``made_at`` is the body's line):
    stacked: int = 0  # its rows (the scan's iterations); 0 when not a scan's stack
    scan_at: SourceLine | None = None  # the line that called the scan
    carry: bool = False  # the stack holds the carry the body got (``made_at`` makes the next one)

    @property
    def stacking(self) -> str:
        """ "stacked by the scan at line 12, 8 rows" ("" for a buffer no scan stacks)."""
        if not self.stacked:
            return ""
        what = "the carry " if self.carry else ""
        at = f" at line {self.scan_at.lineno}" if self.scan_at is not None else ""
        return f"{what}stacked by the scan{at}, {self.stacked} rows"

    @property
    def what(self) -> str:
        """``f32[131072,131072]`` or ``3 x f32[4096,512]``."""
        return self.shape if self.count == 1 else f"{self.count} x {self.shape}"

    @property
    def made_by(self) -> str:
        if self.role == ARGUMENT:
            return f"argument `{self.argument}`" if self.argument else "an argument"
        where = f" at {self.made_at.where}" if self.made_at is not None else ""
        if self.stacking:
            where += f" ({self.stacking})"
        if "`" in self.operation:  # XLA's own buffer, told by its neighbour ("iota for `sort`")
            return f"XLA's {self.operation}{where}"
        return f"`{self.operation}`{where}" if self.operation else f"an operation{where}"


@dataclasses.dataclass
class Capacity:
    """What the device can give: bytes free now and in all, and where the figures come from."""

    available: int | None  # bytes the program can still get (None: unknown)
    total: int | None = None
    in_use: int | None = None  # by this process's arrays (device) or by everything (host)
    source: str = ""  # "memory_stats() of cpu:0", "the host's MemAvailable (/proc/meminfo)"
    device: str = ""  # "cpu:0", "cuda:0"

    @property
    def described(self) -> str:
        if self.available is None:
            return f"how much {self.device or 'the device'} can give is unknown ({self.source or 'no figures'})"
        total = f" of {format_bytes(self.total)}" if self.total else ""
        return f"{format_bytes(self.available)} available{total} ({self.source})"


@dataclasses.dataclass
class WayDown:
    """One change tried by compiling (never by running): its program's peak beside the original's."""

    kind: str  # one of OFFER_ORDER
    title: str  # "donate `params` (donate_argnums=(0,))"
    code: str  # what to write
    peak_before: int
    peak_after: int | None = None  # None: could not be compiled (``problem`` says why)
    how: str = ""  # how it was tried: "compiled the traced program with donate_argnums=(0,)"
    problem: str = ""
    fits: bool | None = None  # whether the new peak fits the device's capacity (None: unknown)
    traced_again: bool = False  # the user's function was traced again to try it
    refused: bool = False  # the compiler ran out of memory compiling it (XLA:TPU): it does not fit, proven
    platform: str = ""  # what it was compiled for ("tpu"): the proof holds for that device
    # why a way that lowers the peak is still not offered: donating what the caller may use after the call
    # ("`params` may be used after the call (the line does not rebind it); donate only if you no longer need it")
    withheld: str = ""

    @property
    def unmeasured(self) -> bool:
        """Its trial was built (``how``) and no peak came back: not measured here - a compile nothing here can
        make for the device, a trace that failed. A way never built (not applicable, not worth compiling) is not."""
        return self.peak_after is None and bool(self.how)

    @property
    def lowers(self) -> bool:
        return (
            not self.refused
            and self.peak_after is not None
            and self.peak_after <= self.peak_before * (1 - WORTH_OFFERING)
        )

    @property
    def effect(self) -> str:
        if self.peak_after is None:
            return f"could not be tried: {self.problem}" if self.problem else "could not be tried"
        before, after = format_bytes(self.peak_before), format_bytes(self.peak_after)
        if self.refused:
            return f"the compiler for {self.platform or 'this device'} refused it: it needs {after}"
        if not self.lowers:
            saved = self.peak_before - self.peak_after
            if saved > 0:
                return f"peak {after} ({format_bytes(saved)} less than {before}): too little to offer"
            return f"peak {after}, not lower than {before}: not offered"
        if self.withheld:
            return f"peak {before} -> {after}, not offered: {self.withheld}"
        return f"peak {before} -> {after}"


@dataclasses.dataclass
class ProgramMemory:
    """One jitted program: its peak, what fills it by the user's line, and the ways down tried."""

    function: str  # "nearest"
    call: str = ""  # "nearest(jnp.linspace(0.0, 1.0, 2 ** 17))", or "" when not known
    signature: str = ""  # "f32[131072]"
    called_at: SourceLine | None = None
    figures: MemoryFigures | None = None
    peak_bytes: int = 0
    buffers: list[PeakBuffer] = dataclasses.field(default_factory=list)  # largest first
    buffers_problem: str = ""  # why the buffers at the peak are not known ("" when they are)
    ways_down: list[WayDown] = dataclasses.field(default_factory=list)
    problem: str = ""  # why the program could not be compiled at all
    traced_again: bool = False  # measuring it traced the user's function again (not in JAX's trace cache)
    platform: str = ""  # the backend it was compiled for: "cpu", "tpu", "gpu"
    compile_error: OutOfMemoryMessage | None = None  # the compiler ran out of memory (XLA:TPU): its message
    live_bytes: int = 0  # arguments, outputs and the temporaries live when most are (XLA's live ranges); peak >= it

    @property
    def reserved_bytes(self) -> int:
        """What XLA reserves for the program: arguments + outputs + temporaries - aliased (0 when unknown)."""
        return self.figures.total_bytes if self.figures is not None else 0

    @property
    def offered(self) -> list[WayDown]:
        """The ways down that lowered the peak: those that fit first, then the lowest peak; at one peak, a
        change of the program before donation (which deletes the caller's arrays)."""
        lowering = [w for w in self.ways_down if w.lowers and not w.withheld]
        lowest = min((w.peak_after or 0 for w in lowering), default=0)

        def rank(way: WayDown) -> tuple[bool, bool, int, bool, int]:
            near_lowest = (way.peak_after or 0) <= lowest * (1 + WORTH_OFFERING)  # peaks this close are one
            order = OFFER_ORDER.index(way.kind) if way.kind in OFFER_ORDER else len(OFFER_ORDER)
            # at one peak and kind, a change the user can write as it was tried before one described only
            return (not way.fits, not near_lowest, order if near_lowest else 0, not way.code, way.peak_after or 0)

        return sorted(lowering, key=rank)


@dataclasses.dataclass
class HeldArrays:
    """Live arrays of one shape and dtype holding memory already, and who holds them (``%jax_live``'s search)."""

    what: str  # "12 x f32[4096,4096]"
    bytes: int
    holders: list[str] = dataclasses.field(default_factory=list)  # "cache[0..11]", "Out[4]"


@dataclasses.dataclass
class FreeHeld:
    """The first way down when the program alone fits the device and beside what is held it does not:
    free or move the arrays held (``del``, ``jax.device_get``, ``.delete()``). Figures, all measured: the
    program's peak (compiled), the device's limit and use (``memory_stats()``), the arrays held (live)."""

    program_bytes: int
    limit: int
    in_use: int
    held_bytes: int  # what the held arrays named below take
    holders: list[str] = dataclasses.field(default_factory=list)  # "cache[0..7]"

    @property
    def room_after(self) -> int:
        """What the device could give once they are freed."""
        return self.limit - max(self.in_use - self.held_bytes, 0)

    @property
    def fits_after(self) -> bool:
        return self.program_bytes <= self.room_after

    @property
    def text(self) -> str:
        names = ", ".join(f"`{h}`" for h in self.holders[:4]) or "arrays no name of yours holds"
        first = self.holders[0].split("[")[0] if self.holders else "x"
        return (
            f"free what is held first: {names} hold{'s' if len(self.holders) == 1 else ''} "
            f"{format_bytes(self.held_bytes)}; `del {first}`, or keep it on the host with `jax.device_get`, or "
            f"`.delete()` it - the program needs {format_bytes(self.program_bytes)} of the device's "
            f"{format_bytes(self.limit)}, {format_bytes(self.room_after)} free once they are gone"
        )


@dataclasses.dataclass
class EagerAllocation:
    """An allocation outside any program: an eager operation or a copy to the device, on the user's line."""

    call: str  # "jnp.zeros((2 ** 17, 2 ** 17))"
    shape: str = ""  # its result: "f32[131072,131072]" ("" when it could not be told)
    bytes: int = 0
