"""What an out-of-memory message says, in each form XLA writes one: the one reader of that text.

* **CPU** (XLA's CPU client): ``RESOURCE_EXHAUSTED: Out of memory allocating 68719476736 bytes.``
* **TPU, at compile time** (the usual TPU kind: the compiler lays every buffer out and finds no room):
  ``RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for
  HLO temporaries (47.68G) exceeds available HBM (15.75G). HLO module: jit_nearest.`` (JAX 0.10.2 leaves out
  ``E1000: CompileTimeHbmOom:``); older libtpu: ``Used 21.95G of 15.48G hbm. Exceeded hbm capacity by 6.47G.``
* **TPU, at run time** (the program fits alone; what is held leaves no room for it):
  ``RESOURCE_EXHAUSTED: E0101: RuntimeProgramAllocationFailure: Error loading program 'jit_nearest':
  Attempting to reserve 11.94G at the bottom of memory. That was not possible. There are 2.76G free, 0B
  reserved, and 2.76G reservable.``
* **GPU** (the BFC allocator): ``Out of memory while trying to allocate 6291456 bytes.`` followed by
  ``BufferAssignment OOM Debugging.``, the allocation stats and ``Peak buffers:`` (each ``Buffer N:`` with its
  Size, Operator metadata, XLA Label, Shape or Entry Parameter Subshape), or the allocator's own
  ``Allocator (GPU_0_bfc) ran out of memory trying to allocate 27.93GiB (rounded to 29995136256)``.

libtpu's "G" is GiB (47.68G is the 51,200,000,512 bytes of the recorded buffer assignment's temporaries).
"""

from __future__ import annotations

import dataclasses
import re

_MESSAGE = re.compile(r"RESOURCE_EXHAUSTED|Out of memory|Ran out of memory|ran out of memory", re.IGNORECASE)
_SIZE = r"([\d.,]+)\s*((?:[KMGT]i?B?)|B|bytes)?"
_UNITS = {"": 1, "B": 1, "BYTES": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

_ASKED = re.compile(r"(?:allocating|trying to allocate|allocate request for)\s+" + _SIZE, re.IGNORECASE)
_ROUNDED = re.compile(r"\(rounded to (\d+)\)")
_RESERVE = re.compile(r"Attempting to (?:reserve|allocate)\s+" + _SIZE)
_FREE = re.compile(r"There (?:are|is)\s+" + _SIZE + r" free")
_RESERVABLE = re.compile(r"and\s+" + _SIZE + r" reservable")
_REQUIRED = re.compile(r"required for HLO temporaries \(" + _SIZE + r"\) exceeds available (\w+) \(" + _SIZE + r"\)")
_TPU_USED = re.compile(r"Used ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) (\w+)")
_MODULE = re.compile(r"HLO module:\s*([\w\-]+(?:\.\w[\w\-]*)*)|(?:loading|load) program '([\w.\-]+)'")
_CODE = re.compile(r"\b(E\d{4}): (\w+):")
_ALLOCATOR = re.compile(r"Allocator \((\w+)\) ran out of memory trying to allocate\s+" + _SIZE)

# "Peak buffers:" of the GPU's BufferAssignment OOM Debugging
_BUFFER = re.compile(r"^\s*Buffer (\d+):\s*$")
_BUFFER_SIZE = re.compile(r"^\s*Size:\s*" + _SIZE + r"\s*$")
_OPERATOR = re.compile(
    r'^\s*Operator:\s*op_name="((?:[^"\\]|\\.)*)"(?:.*source_file="([^"]*)")?(?:.*source_line=(\d+))?'
)
_LABEL = re.compile(r"^\s*XLA Label:\s*(\S+)")
_SHAPE = re.compile(r"^\s*(Shape|Entry Parameter Subshape):\s*(\S+)")
_STAT = re.compile(r"^\s*(parameter|constant|maybe_live_out|preallocated temp|total) allocation:\s*" + _SIZE)


@dataclasses.dataclass
class ListedBuffer:
    """One buffer of the GPU message's "Peak buffers" list (XLA's own account, when no dump is at hand)."""

    size: int
    shape: str = ""
    label: str = ""  # XLA's opcode ("fusion", "concatenate")
    op_name: str = ""
    source_file: str = ""
    source_line: int = 0
    parameter: bool = False  # "Entry Parameter Subshape": an argument of the program


@dataclasses.dataclass
class OutOfMemoryMessage:
    """What XLA's message says. ``kind``: "compile" (the compiler found no room for the program), "program"
    (loading a compiled program: the runtime could not reserve its memory), "allocation" (one allocation at
    run time, or an allocator's failure), "" (an out-of-memory error of no form known here)."""

    text: str  # the message's first line
    whole: str = ""  # the whole message, as the allocator wrote it
    kind: str = ""
    code: str = ""  # libtpu's code and name: "E1000: CompileTimeHbmOom"
    module: str = ""  # the HLO module: "jit_nearest"
    asked: int | None = None  # bytes asked for (an allocation, or a program's reservation)
    required: int | None = None  # the compiler: bytes its program needs (the temporaries)
    capacity: int | None = None  # the compiler: what the device has for it
    memory: str = ""  # the compiler's name for it ("HBM")
    free: int | None = None  # at run time: bytes free when it failed
    reservable: int | None = None  # at run time (TPU): bytes that could be reserved in one piece
    allocator: str = ""  # "GPU_0_bfc"
    stats: dict[str, int] = dataclasses.field(default_factory=dict)  # "preallocated temp": bytes, ...
    buffers: list[ListedBuffer] = dataclasses.field(default_factory=list)

    @property
    def at_compile(self) -> bool:
        return self.kind == "compile"

    @property
    def function(self) -> str:
        """The jitted function the module is named after (``jit_nearest`` -> ``nearest``)."""
        return self.module[4:] if self.module.startswith("jit_") else self.module

    @property
    def used(self) -> int | None:  # the older wording's name for what the compiler needed
        return self.required


def size_in_bytes(number: str, unit: str | None) -> int:
    unit = (unit or "").upper().replace("IB", "").replace("I", "")
    if unit.endswith("B") and unit != "B":
        unit = unit[:-1]
    return int(float(number.replace(",", "")) * _UNITS.get(unit, 1))


def read_message(text: str) -> OutOfMemoryMessage | None:
    """The out-of-memory facts of a message; None when it is not one."""
    if not _MESSAGE.search(text) or ("RESOURCE_EXHAUSTED" not in text and "memory" not in text.lower()):
        return None
    stripped = text.strip()
    found = OutOfMemoryMessage(stripped.splitlines()[0] if stripped else "", whole=stripped)
    code = _CODE.search(text)
    if code:
        found.code = f"{code.group(1)}: {code.group(2)}"
    module = _MODULE.search(text)
    if module:
        found.module = module.group(1) or module.group(2) or ""
    _compile_facts(found, text)
    if not found.kind:
        _run_time_facts(found, text)
    _listed_buffers(found, text)
    return found


def _compile_facts(found: OutOfMemoryMessage, text: str) -> None:
    required = _REQUIRED.search(text)
    if required:
        found.kind = "compile"
        found.required = size_in_bytes(required.group(1), required.group(2))
        found.memory = required.group(3)
        found.capacity = size_in_bytes(required.group(4), required.group(5))
        return
    used = _TPU_USED.search(text)
    if used:
        found.kind = "compile" if "compile" in text.lower() or "hbm" in used.group(5).lower() else "allocation"
        found.required = size_in_bytes(used.group(1), used.group(2))
        found.capacity = size_in_bytes(used.group(3), used.group(4))
        found.memory = used.group(5).upper()


def _run_time_facts(found: OutOfMemoryMessage, text: str) -> None:
    reserve = _RESERVE.search(text)
    if reserve:
        found.kind = "program" if "reserve" in reserve.group(0) else "allocation"  # a program's whole memory
        found.asked = size_in_bytes(reserve.group(1), reserve.group(2))
    free = _FREE.search(text)
    if free:
        found.free = size_in_bytes(free.group(1), free.group(2))
    reservable = _RESERVABLE.search(text)
    if reservable:
        found.reservable = size_in_bytes(reservable.group(1), reservable.group(2))
    allocator = _ALLOCATOR.search(text)
    if allocator:
        found.allocator = allocator.group(1)
        rounded = _ROUNDED.search(text[allocator.end() :])
        found.asked = int(rounded.group(1)) if rounded else size_in_bytes(allocator.group(2), allocator.group(3))
        found.kind = "allocation"
    asked = _ASKED.search(text)
    if asked and found.asked is None:
        found.asked = size_in_bytes(asked.group(1), asked.group(2))
        found.kind = "allocation"


def _listed_buffers(found: OutOfMemoryMessage, text: str) -> None:
    current: ListedBuffer | None = None
    for line in text.splitlines():
        stat = _STAT.match(line)
        if stat:
            found.stats[stat.group(1)] = size_in_bytes(stat.group(2), stat.group(3))
            continue
        if _BUFFER.match(line):
            current = ListedBuffer(0)
            found.buffers.append(current)
            continue
        if current is None:
            continue
        size = _BUFFER_SIZE.match(line)
        operator = _OPERATOR.match(line)
        label = _LABEL.match(line)
        shape = _SHAPE.match(line)
        if size:
            current.size = size_in_bytes(size.group(1), size.group(2))
        elif operator:
            current.op_name = operator.group(1)
            current.source_file = operator.group(2) or ""
            current.source_line = int(operator.group(3) or 0)
        elif label:
            current.label = label.group(1)
        elif shape:
            current.shape, current.parameter = shape.group(2), shape.group(1).startswith("Entry")
