"""Reading an accelerator's planes of a profiler trace: which events are XLA's ops, of which program and run.

On CPU, XLA's kernels run on host threads and carry their program and op as stats (``trace_events``).
An accelerator has a plane of its own per device, ``/device:TPU:0`` or ``/device:GPU:0``, laid out as
its profiler writes it. Two layouts are read, by the same code for every device plane:

* **Op lines** (a TPU; recorded on a v5e with JAX 0.12, ``tests/fixtures/accelerator/``): the line
  ``XLA Modules`` has one event per program run, named ``jit_mm(<fingerprint>)`` with the stat
  ``run_id``; the line ``XLA Ops`` has one event per HLO op executed, named by the op's whole
  instruction text (``%fusion = bf16[]{:T(256)} fusion(...), kind=kOutput, calls=%fused_computation.1``)
  in the in-memory trace, and by the instruction's name (``fusion``, the text in ``long_name``) in the
  saved JSON one. An op carries no program stat: its program and run are those of the ``XLA Modules``
  event around it on the same plane. ``Async XLA Ops`` repeats the spans of asynchronous ops (a copy
  from its ``copy-start`` to its ``copy-done``, both already on ``XLA Ops``): it is not read, so no time
  is counted twice. The device's timestamps are converted to the host's clock by its runtime.
* **Kernel lines** (a GPU): XLA's CUPTI collector (``xla/backends/profiler/gpu/cupti_collector.cc``)
  writes a line per CUDA stream (``Stream #7(Kernel,MemcpyD2D)``) with one event per kernel, named
  after the CUDA kernel; the stats of the launch's XLA annotation (``xla/backends/gpu/runtime/
  annotation.cc``: ``XlaModule:#hlo_module=..,program_id=..#`` around ``Thunk:#hlo_op=..#``) become the
  event's ``hlo_op``, ``hlo_module`` and ``program_id``, beside CUPTI's ``correlation_id`` and
  ``kernel_details``. No run id: ``build`` counts runs then. A tool that post-processes a GPU trace may
  add an ``XLA Ops`` line made from those kernels; the kernels that carry their own ``hlo_op`` are read
  and that line is not, so nothing is counted twice.

What a plane lacks is said in ``TraceReading.notes``, never passed over.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping

from jaxmagic.probes._profile.events import OpOrigin, TraceEvent, TraceReading

MODULES_LINE = "XLA Modules"
OPS_LINE = "XLA Ops"
REPEAT_LINES = ("Async XLA Ops",)  # spans of ops already on the ops line

_DEVICE_PLANE = re.compile(r"^/device:([A-Za-z]+):(\d+)$")
_INSTRUCTION = re.compile(r"^%?([\w.\-]+) = ")
_MODULE_RUN = re.compile(r"^(.*)\((\d+)\)$")  # "jit_mm(3812204964839881644)": module and fingerprint
_FRAME = re.compile(r"^(.+?):(\d+)(?::\d+)?$")  # "/path/q1.py:15:12" (a colon may sit in the path)


@dataclasses.dataclass(slots=True)
class PlaneEvent:
    """One event of a device plane, from either trace format (times in ns; stats as a mapping)."""

    name: str
    start_ns: float
    duration_ns: float
    stats: Mapping[str, object]


@dataclasses.dataclass
class PlaneLine:
    """A line of a device plane; ``load`` reads its events only if the line is read, and once."""

    name: str
    thread: int
    read: Callable[[], list[PlaneEvent]]
    _events: list[PlaneEvent] | None = None

    def load(self) -> list[PlaneEvent]:
        if self._events is None:
            self._events = self.read()
        return self._events

    @property
    def is_samples(self) -> bool:
        """A counter line (``_counters_``: power, temperature samples), not spans of work."""
        return self.name.startswith("_")


def device_of(plane_name: str) -> str:
    """``/device:TPU:0`` -> ``TPU 0``; "" for a plane that is not one device (the host, a custom plane)."""
    match = _DEVICE_PLANE.match(plane_name)
    return f"{match.group(1)} {match.group(2)}" if match else ""


def read_device_plane(plane_name: str, lines: list[PlaneLine], reading: TraceReading) -> None:
    """Add the XLA ops (kernels) of one device plane to ``reading``, or a note saying why there are none."""
    device = device_of(plane_name)
    if _read_kernel_lines(device, lines, reading):
        return
    ops_line = next((line for line in lines if line.name == OPS_LINE), None)
    ops = ops_line.load() if ops_line is not None else []
    if ops_line is None or not ops:
        busy = [line.name for line in lines if not line.is_samples and line.load()]
        if busy:  # the device recorded work, but no op this reader knows: say so (an idle device says nothing)
            reading.notes.append(
                f"{device}: its trace has no XLA op events (no `{OPS_LINE}` line with events, no kernel with an "
                f"`hlo_op` stat; it recorded events on: {', '.join(busy)}), so its device time is not counted here."
            )
        return
    modules_line = next((line for line in lines if line.name == MODULES_LINE), None)
    modules = modules_line.load() if modules_line is not None else []
    events, outside = _ops_in_runs(ops, modules, ops_line.thread)
    reading.events.extend(events)
    reading.devices.append(f"{device} (its {OPS_LINE} line)")
    if modules_line is None:
        reading.notes.append(
            f"{device}: its trace has no `{MODULES_LINE}` line, so its ops cannot be told apart by program "
            "or run: they count as one unnamed program."
        )
    elif outside:
        reading.notes.append(
            f"{device}: {outside} op run(s) fell outside every program run of its `{MODULES_LINE}` line "
            "(the trace started or stopped during a run); they are counted without a program."
        )


def _read_kernel_lines(device: str, lines: list[PlaneLine], reading: TraceReading) -> bool:
    """The kernels that carry their own ``hlo_op`` and ``hlo_module`` (a GPU's stream lines); True if any.

    A device activity that names no XLA op (CUPTI gives every launch and copy a ``correlation_id``: a copy
    the host asked for, a kernel launched outside XLA) is counted and said, not dropped silently.
    """
    found: list[TraceEvent] = []
    stray, stray_ns = 0, 0.0
    for line in lines:
        if line.name in (MODULES_LINE, OPS_LINE, *REPEAT_LINES) or line.is_samples:
            continue
        for event in line.load():
            stats = event.stats
            if stats.get("hlo_op") and stats.get("hlo_module"):
                found.append(_kernel(event, line.thread))
            elif "correlation_id" in stats:
                stray += 1
                stray_ns += event.duration_ns
    if not found:
        return False
    reading.events.extend(found)
    reading.devices.append(f"{device} (its kernels' XLA op stats)")
    if stray:
        reading.notes.append(
            f"{device}: {stray} device activit{'y' if stray == 1 else 'ies'} ({stray_ns / 1e6:.3f} ms) named no "
            "XLA op (copies the host asked for, kernels launched outside XLA): not in the kernel time."
        )
    return True


def _kernel(event: PlaneEvent, thread: int) -> TraceEvent:
    stats = event.stats
    return TraceEvent(
        event.name,
        thread,
        event.start_ns,
        event.duration_ns,
        module=str(stats.get("hlo_module", "")),
        op=str(stats.get("hlo_op", "")),
        program_id=str(stats.get("program_id", "")),
        run_id=str(stats.get("run_id", "")),
    )


def _ops_in_runs(ops: list[PlaneEvent], modules: list[PlaneEvent], thread: int) -> tuple[list[TraceEvent], int]:
    """Each op as a kernel event of the program run (``XLA Modules`` event) it lies in; and how many lay in none."""
    runs = sorted(modules, key=lambda m: m.start_ns)
    events: list[TraceEvent] = []
    outside, index = 0, 0
    for op in sorted(ops, key=lambda o: o.start_ns):
        while index < len(runs) and runs[index].start_ns + runs[index].duration_ns < op.start_ns:
            index += 1
        run = runs[index] if index < len(runs) and runs[index].start_ns <= op.start_ns else None
        module, program_id, run_id = _program_run(run, index) if run is not None else ("", "", "")
        outside += run is None and bool(runs)
        name, instruction = op_name(op.name, op.stats)
        events.append(
            TraceEvent(
                name,
                thread,
                op.start_ns,
                op.duration_ns,
                module=module,
                op=name,
                program_id=program_id,
                run_id=run_id,  # "" without a module line: build counts the runs then
                origin=_origin(op.stats, instruction),
            )
        )
    return events, outside


def _program_run(run: PlaneEvent, index: int) -> tuple[str, str, str]:
    """(module, program id, run id) of an ``XLA Modules`` event: ``jit_mm(3812204964839881644)``, ``run_id``."""
    match = _MODULE_RUN.match(run.name)
    module, fingerprint = (match.group(1), match.group(2)) if match else (run.name, "")
    run_id = run.stats.get("run_id")
    return module, str(run.stats.get("program_id", fingerprint)), f"{run_id}" if run_id is not None else f"#{index}"


def op_name(name: str, stats: Mapping[str, object]) -> tuple[str, str]:
    """An op event's HLO instruction name and text: ``%fusion = bf16[] fusion(...)`` -> ("fusion", the text).

    The in-memory trace names an op by its instruction text; the JSON trace by the name, with the text
    in ``long_name``.
    """
    match = _INSTRUCTION.match(name)
    if match:
        return match.group(1), name
    text = str(stats.get("long_name", ""))
    match = _INSTRUCTION.match(text)
    if match:
        return match.group(1), text
    return name, ""


def _origin(stats: Mapping[str, object], instruction: str) -> OpOrigin | None:
    """What the op's stats say of it (JSON: ``tf_op``, ``source_stack``/``source``, ``hlo_category``)."""
    name_stack = str(stats.get("tf_op", ""))
    if name_stack.endswith(":"):  # "name:type", the type empty for XLA ops
        name_stack = name_stack[:-1]
    frames = _frames(str(stats.get("source_stack", ""))) or _frames(str(stats.get("source", "")))
    category = str(stats.get("hlo_category", ""))
    if not (instruction or name_stack or frames or category):
        return None
    return OpOrigin(instruction, name_stack, frames, category)


def _frames(text: str) -> tuple[tuple[str, int], ...]:
    """``file:line[:column]`` per line, innermost first -> ((file, line), ...); lines not of that form are skipped."""
    found = (_FRAME.match(entry.strip()) for entry in text.splitlines())
    return tuple((match.group(1), int(match.group(2))) for match in found if match)
