"""Reading XLA's buffer assignment and live ranges (the texts ``_jax.compile_dumps`` gets): the one
place jaxmagic parses them, as ``hlo_text`` is for the module itself.

Two texts, both written by XLA for one compiled module (CPU, GPU and TPU write the same form):

* the buffer assignment: ``allocation N: size S, <kind>...:`` followed by the values assigned to it
  (`` value: <id name{index} @color> (size=..,offset=..): shape``). The kind says what the memory is for:
  ``parameter K`` (an argument of the program), ``maybe-live-out`` (an output), ``preallocated-temp``
  (the temporaries, all in one block), ``thread-local`` and ``constant`` (scalars of reducer bodies,
  literals);
* the live ranges: the scheduled instructions, each buffer's range (``name{index}:start-end``, both ends
  included) and ``Live ranges at T (peak):`` followed by the buffers XLA says are live at T.

The peak is computed here from every buffer's range, not taken from XLA's ``(peak)`` section: XLA:CPU of
jaxlib 0.12 names a time after a 64 GiB temporary died as the peak of ``exp(...) @ w`` (2 MiB live), and
a trial compiled with donation then "needed" 4.5 MiB. It is the time the most temporaries are live: XLA
holds the arguments and outputs for the whole run and one block for the temporaries, as large as they are
at their most, so what is listed then - the temporaries live, every argument and output - adds up to what
the device reserves (``memory_analysis()``, an out-of-memory's figure). XLA's time is kept when it is a
peak by this count. Each piece of memory (allocation, offset) is counted once: a value made in place over
another (a sort over its operand, an output over a donated argument) is live beside it for one step in one
memory.

An allocation's ``color N`` is its memory space. Only color 0 is the device's main memory (HBM on a TPU or
GPU, what ``memory_analysis()`` and an out-of-memory count): XLA:TPU also prefetches arguments into its
alternate memory (``copy-start`` to layout ``S(1)``, color 1: a TPU v5e copied a 16 MiB argument there,
which XLA's own ``(peak)`` list counts beside the HBM buffers; the device's ``peak_bytes_in_use`` did not
grow by it) and keeps scalars and semaphores in colors 2 and 6. The peak, what is listed then and the totals
are the main memory's only.

The parser is tolerant: a line it does not understand is skipped, never fatal.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TypeAlias


@dataclasses.dataclass
class Allocation:
    index: int
    size: int
    parameter: int | None = None  # the program's argument number, for a parameter's allocation
    live_out: bool = False  # holds (part of) the program's output
    temporary: bool = False  # XLA's preallocated temporaries
    thread_local: bool = False  # scalars of reducer and comparator bodies
    constant: bool = False
    color: int = 0  # the memory space: 0 the device's main memory, others on-chip (a TPU's S(1), semaphores)
    values: list[AssignedValue] = dataclasses.field(default_factory=list)

    @property
    def in_main_memory(self) -> bool:
        return self.color == 0


@dataclasses.dataclass(frozen=True)
class AssignedValue:
    """A value XLA placed in an allocation: values at one offset with one size share the memory, each
    made in place over the one before (a sort over its operand, an update over its input)."""

    instruction: str
    size: int
    offset: int
    shape_index: str = ""  # "" for a whole value, "0" / "1,2" for a tuple element


@dataclasses.dataclass
class PeakValue:
    """A buffer live at the program's peak."""

    instruction: str  # the HLO instruction that defines it
    shape_index: str  # "" for a whole value, "0" / "1,2" for a tuple element
    size: int


@dataclasses.dataclass(frozen=True)
class LiveRange:
    instruction: str
    shape_index: str
    start: int
    end: int  # included


@dataclasses.dataclass
class Totals:
    """What the allocations add up to, as ``memory_analysis()`` counts them (also when compiling failed)."""

    arguments: int = 0
    outputs: int = 0
    temporaries: int = 0
    aliased: int = 0  # outputs written over an argument (a parameter's allocation that is also live out)

    @property
    def total(self) -> int:
        return self.arguments + self.outputs + self.temporaries - self.aliased


@dataclasses.dataclass
class BufferAssignment:
    allocations: list[Allocation]
    peak: list[PeakValue]  # largest first; [] when XLA wrote no live ranges
    peak_bytes: int  # what the buffers live at the peak add up to (0 when unknown)
    ranges: list[LiveRange] = dataclasses.field(default_factory=list)
    peak_time: int | None = None
    _index: dict[tuple[str, str | None], tuple[Allocation, AssignedValue]] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    def allocation_of(
        self, instruction: str, shape_index: str | None = None
    ) -> tuple[Allocation, AssignedValue] | None:
        """The allocation holding a value (its first element's, without a shape index)."""
        if self._index is None:  # built once: a large program has thousands of values
            self._index = {}
            for allocation in self.allocations:
                for value in allocation.values:
                    self._index.setdefault((value.instruction, value.shape_index), (allocation, value))
                    self._index.setdefault((value.instruction, None), (allocation, value))
        return self._index.get((instruction, shape_index))

    def sharing(self, instruction: str, shape_index: str | None = None) -> list[str]:
        """The other values held in the same memory as ``instruction``'s (same allocation, offset and size),
        in XLA's order."""
        found = self.allocation_of(instruction, shape_index)
        if found is None:
            return []
        allocation, mine = found
        return [
            v.instruction
            for v in allocation.values
            if v.instruction != instruction and (v.offset, v.size) == (mine.offset, mine.size)
        ]

    def totals(self) -> Totals:
        found = Totals()
        for allocation in self.allocations:
            if not allocation.in_main_memory:
                continue
            if allocation.parameter is not None:
                found.arguments += allocation.size
                if allocation.live_out:
                    found.aliased += allocation.size
            if allocation.live_out:
                found.outputs += allocation.size
            if allocation.temporary:
                found.temporaries += allocation.size
        return found


# XLA's "(peak)" time is kept when what is live then is this close to the most live at any time: at XLA:TPU's
# time a layout copy and a sort's indices are live, one step later the sort's results over them plus the
# 512 bytes of its tuple - the same memory, told by the buffers XLA itself names.
XLA_PEAK_TOLERANCE = 1e-3

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):\s*$")
_VALUE = re.compile(r"^\s*value: <\d+ ([\w.\-]+)(?:\{([\d,]*)\})? @[\d,]*> \(size=(\d+),offset=(\d+)\)")
_PARAMETER = re.compile(r"\bparameter (\d+)\b")
_COLOR = re.compile(r"\bcolor (\d+)\b")
_PEAK_HEADER = re.compile(r"^\s*Live ranges at (\d+) \(peak\):\s*$")
_PEAK_VALUE = re.compile(r"^\s*([\w.\-]+)\{([\d,]*)\}: (\d+) bytes")
_RANGE = re.compile(r"^\s*([\w.\-]+)\{([\d,]*)\}:(\d+)-(\d+)\s*$")


def parse_buffer_assignment(buffer_assignment: str, live_range: str = "") -> BufferAssignment:
    allocations: list[Allocation] = []
    for line in buffer_assignment.splitlines():
        header = _ALLOCATION.match(line)
        if header:
            allocations.append(_allocation(header))
            continue
        value = _VALUE.match(line)
        if value and allocations:
            name, index = value.group(1), value.group(2) or ""
            allocations[-1].values.append(AssignedValue(name, int(value.group(3)), int(value.group(4)), index))
    assignment = BufferAssignment(allocations, [], 0)
    xla_time, xla_peak = _xla_peak(live_range)
    assignment.ranges = _ranges(live_range)
    if assignment.ranges:
        _peak_from_ranges(assignment, xla_time, {(v.instruction, v.shape_index): v.size for v in xla_peak})
    elif xla_peak:  # a text with the peak's list and no ranges: XLA's word is all there is
        in_main = [v for v in xla_peak if _in_main_memory(assignment, v.instruction, v.shape_index)]
        assignment.peak = sorted(in_main, key=lambda v: -v.size)
        assignment.peak_bytes = sum(_slot_sizes(assignment, assignment.peak).values())
        assignment.peak_time = xla_time
    return assignment


def _allocation(header: re.Match[str]) -> Allocation:
    kinds = header.group(3)
    parameter = _PARAMETER.search(kinds)
    color = _COLOR.search(kinds)
    return Allocation(
        index=int(header.group(1)),
        size=int(header.group(2)),
        parameter=int(parameter.group(1)) if parameter else None,
        live_out="maybe-live-out" in kinds,
        temporary="preallocated-temp" in kinds,
        thread_local="thread-local" in kinds,
        constant="constant" in kinds,
        color=int(color.group(1)) if color else 0,
    )


def _xla_peak(live_range: str) -> tuple[int | None, list[PeakValue]]:
    values: list[PeakValue] = []
    time: int | None = None
    for line in live_range.splitlines():
        header = _PEAK_HEADER.match(line)
        if header:
            time = int(header.group(1))
            continue
        if time is None:
            continue
        match = _PEAK_VALUE.match(line)
        if match is None:
            break  # the section ends where its value lines do
        values.append(PeakValue(match.group(1), match.group(2), int(match.group(3))))
    return time, values


def _ranges(live_range: str) -> list[LiveRange]:
    found = []
    inside = False
    for line in live_range.splitlines():
        if line.strip() == "BufferLiveRange:":
            inside = True
            continue
        if inside:
            match = _RANGE.match(line)
            if match is None:
                break
            found.append(LiveRange(match.group(1), match.group(2), int(match.group(3)), int(match.group(4))))
    return found


def _in_main_memory(assignment: BufferAssignment, instruction: str, shape_index: str) -> bool:
    """Whether a buffer lives in the device's main memory (a buffer with no allocation is counted there)."""
    found = assignment.allocation_of(instruction, shape_index)
    return found is None or found[0].in_main_memory


# What one buffer occupies: its allocation's (index, offset), or ("unassigned", instruction, shape index).
_Slot: TypeAlias = tuple[int, int] | tuple[str, str, str]


def _slot(assignment: BufferAssignment, instruction: str, index: str) -> _Slot:
    found = assignment.allocation_of(instruction, index)
    return (found[0].index, found[1].offset) if found is not None else ("unassigned", instruction, index)


def _slot_sizes(assignment: BufferAssignment, values: list[PeakValue]) -> dict[_Slot, int]:
    slots: dict[_Slot, int] = {}
    for value in values:
        slot = _slot(assignment, value.instruction, value.shape_index)
        slots[slot] = max(slots.get(slot, 0), value.size)
    return slots


def _live_over_time(by_slot: dict[_Slot, list[LiveRange]], sizes: dict[LiveRange, int], last: int) -> list[int]:
    """The bytes live at each time: per slot and stretch of time, the largest value live then (in place)."""
    steps = [0] * (last + 2)
    for ranges in by_slot.values():
        bounds = sorted({r.start for r in ranges} | {r.end + 1 for r in ranges})
        for begin, stop in zip(bounds, bounds[1:]):
            size = max((sizes[r] for r in ranges if r.start <= begin <= r.end), default=0)
            steps[begin] += size
            steps[stop] -= size
    totals, running = [0] * (last + 1), 0
    for time in range(last + 1):
        running += steps[time]
        totals[time] = running
    return totals


def _peak_from_ranges(
    assignment: BufferAssignment, xla_time: int | None, xla_sizes: dict[tuple[str, str], int]
) -> None:
    """The peak's time and what the main memory holds then - by every buffer's range, each slot once.

    The time is the one the most temporaries are live (then the most main memory): the temporaries' block is
    as large as they are then, and it is what remat or smaller blocks of rows can shrink. Counting everything
    live by its range instead chose, on XLA:TPU, the end of a scan's backward pass, where its gradients are
    copied to the output, over the stacks the backward pass reads (tests/test_memory_tpu.py); and an output
    made at the end was missing from a peak chosen before it."""
    sizes: dict[LiveRange, int] = {}
    slots: dict[LiveRange, _Slot] = {}
    main: dict[_Slot, list[LiveRange]] = {}  # the main memory's slots: an on-chip copy (color 1) is no byte of it
    temporaries: dict[_Slot, list[LiveRange]] = {}
    whole_run: set[_Slot] = set()  # arguments' and outputs': held from the program's start to its end
    for live in assignment.ranges:
        found = assignment.allocation_of(live.instruction, live.shape_index)
        sizes[live] = found[1].size if found is not None else xla_sizes.get((live.instruction, live.shape_index), 0)
        slots[live] = slot = _slot(assignment, live.instruction, live.shape_index)
        if found is None or found[0].in_main_memory:
            main.setdefault(slot, []).append(live)
            if found is not None and found[0].temporary:
                temporaries.setdefault(slot, []).append(live)
            elif found is not None and (found[0].parameter is not None or found[0].live_out):
                whole_run.add(slot)
    last = max(r.end for r in assignment.ranges)
    scores = list(zip(_live_over_time(temporaries, sizes, last), _live_over_time(main, sizes, last)))
    best = max(scores)
    time = scores.index(best)
    if xla_time is not None and xla_time < len(scores):
        if all(xla >= most * (1 - XLA_PEAK_TOLERANCE) for xla, most in zip(scores[xla_time], best)):
            time = xla_time  # XLA's own choice, where it is the peak
    assignment.peak_time = time
    at_peak: dict[_Slot, LiveRange] = {}
    for ranges in main.values():
        at = [r for r in ranges if r.start <= time <= r.end] or (ranges if slots[ranges[0]] in whole_run else [])
        if at:  # in place: the value made last, over the one it replaces
            at_peak[slots[at[0]]] = max(at, key=lambda r: (r.start, sizes[r]))
    assignment.peak = sorted(
        (PeakValue(r.instruction, r.shape_index, sizes[r]) for r in at_peak.values()), key=lambda v: -v.size
    )
    assignment.peak_bytes = sum(v.size for v in assignment.peak)
