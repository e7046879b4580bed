"""Reading XLA's buffer assignment and live ranges (the texts ``_jax.compile_dumps`` gets): the one
place jaxmagic parses them, as ``hlo_text`` is for the module itself.

Two texts, both written by XLA for one compiled module:

* the buffer assignment: ``allocation N: size S, <kind>...:`` followed by the values assigned to it
  (`` value: <id name @index> (size=..,offset=..): shape``). The kind says what the memory is for:
  ``parameter K`` (an argument of the program), ``maybe-live-out`` (an output), ``preallocated-temp``
  (the temporaries, all in one block), ``thread-local`` and ``constant`` (scalars of reducer bodies,
  literals);
* the live ranges: the scheduled instructions, each buffer's range, and ``Live ranges at T (peak):``
  followed by every buffer live at that point (``name{index}: N bytes (cumulative: M bytes)``).

The parser is tolerant: a line it does not understand is skipped, never fatal.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass
class Allocation:
    index: int
    size: int
    parameter: int | None = None  # the program's argument number, for a parameter's allocation
    live_out: bool = False  # holds (part of) the program's output
    temporary: bool = False  # XLA's preallocated temporaries
    thread_local: bool = False  # scalars of reducer and comparator bodies
    constant: bool = False
    values: list[AssignedValue] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class AssignedValue:
    """A value XLA placed in an allocation: values at one offset with one size share the memory, each
    made in place over the one before (a sort over its operand, an update over its input)."""

    instruction: str
    size: int
    offset: int


@dataclasses.dataclass
class PeakValue:
    """A buffer live at the program's peak."""

    instruction: str  # the HLO instruction that defines it
    shape_index: str  # "" for a whole value, "0" / "1,2" for a tuple element
    size: int


@dataclasses.dataclass
class BufferAssignment:
    allocations: list[Allocation]
    peak: list[PeakValue]  # largest first; [] when XLA wrote no live ranges
    peak_bytes: int  # what the buffers live at the peak add up to (0 when unknown)

    def allocation_of(self, instruction: str) -> tuple[Allocation, AssignedValue] | None:
        for allocation in self.allocations:
            for value in allocation.values:
                if value.instruction == instruction:
                    return allocation, value
        return None

    def sharing(self, instruction: str) -> list[str]:
        """The other values held in the same memory as ``instruction``'s (same allocation, offset and size),
        in XLA's order."""
        found = self.allocation_of(instruction)
        if found is None:
            return []
        allocation, mine = found
        return [
            v.instruction
            for v in allocation.values
            if v.instruction != instruction and (v.offset, v.size) == (mine.offset, mine.size)
        ]


_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):\s*$")
_VALUE = re.compile(r"^\s*value: <\d+ ([\w.\-]+) @[\d,]*> \(size=(\d+),offset=(\d+)\)")
_PARAMETER = re.compile(r"\bparameter (\d+)\b")
_PEAK_HEADER = re.compile(r"^\s*Live ranges at \d+ \(peak\):\s*$")
_PEAK_VALUE = re.compile(r"^\s*([\w.\-]+)\{([\d,]*)\}: (\d+) bytes")


def parse_buffer_assignment(buffer_assignment: str, live_range: str = "") -> BufferAssignment:
    allocations: list[Allocation] = []
    for line in buffer_assignment.splitlines():
        header = _ALLOCATION.match(line)
        if header:
            kinds = header.group(3)
            parameter = _PARAMETER.search(kinds)
            allocations.append(
                Allocation(
                    index=int(header.group(1)),
                    size=int(header.group(2)),
                    parameter=int(parameter.group(1)) if parameter else None,
                    live_out="maybe-live-out" in kinds,
                    temporary="preallocated-temp" in kinds,
                    thread_local="thread-local" in kinds,
                    constant="constant" in kinds,
                )
            )
            continue
        value = _VALUE.match(line)
        if value and allocations:
            name, size, offset = value.group(1), int(value.group(2)), int(value.group(3))
            allocations[-1].values.append(AssignedValue(name, size, offset))
    peak = _peak_values(live_range)
    peak.sort(key=lambda v: -v.size)
    assignment = BufferAssignment(allocations, peak, 0)
    # A donated argument and the output written over it are two values live at the peak in one memory:
    # each piece of memory is counted once.
    slots: dict[tuple, int] = {}
    for live in peak:
        found = assignment.allocation_of(live.instruction)
        slot = (found[0].index, found[1].offset) if found is not None else ("unassigned", live.instruction)
        slots[slot] = max(slots.get(slot, 0), live.size)
    assignment.peak_bytes = sum(slots.values())
    return assignment


def _peak_values(live_range: str) -> list[PeakValue]:
    values: list[PeakValue] = []
    inside = False
    for line in live_range.splitlines():
        if _PEAK_HEADER.match(line):
            inside = True
            continue
        if not inside:
            continue
        match = _PEAK_VALUE.match(line)
        if match is None:
            break  # the section ends where its value lines do
        values.append(PeakValue(match.group(1), match.group(2), int(match.group(3))))
    return values
