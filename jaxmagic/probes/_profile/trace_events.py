"""Reading a profiler trace into the few kinds of events the profile probe needs.

Two sources give the same events (``read_profile_data``, ``read_trace_json``: the events, and
notes on what could not be read):

* the ``ProfileData`` that ``jax.profiler.trace(None)`` keeps in memory (planes
  of lines of events, times in ns from the trace's start, stats as pairs);
* a saved Chrome/Perfetto JSON trace (``*.trace.json.gz``: complete events,
  ``ph == "X"``, times in microseconds, stats in ``args``).

A **kernel** event is one an executable's thunk emitted: it carries the stats
``hlo_module`` (``jit_mlp``) and ``hlo_op`` (the optimized-HLO instruction,
``ynn_fusion.1``), and ``run_id`` (one per execution). A **dispatch** event is
jaxlib's ``PjitFunction(name)`` span around one call of a jitted function (or
an eager operation, which JAX runs as a small jitted program); calls made while
another is under way (tracing calls ``jnp`` functions) nest inside it.
``DevicePut`` spans are host-to-device copies.

On CPU (measured, JAX 0.12) the kernels run on host threads, read here. An accelerator's kernels are
on a plane of its own (``/device:TPU:0``, ``/device:GPU:0``; in JSON, a process of that name), read by
``device_planes`` into the same kernel events.

Each Python thread has a line of its own (named ``python``); the probe marks the block's thread with a
``CELL_MARK`` annotation at its start, and ``other_threads`` sets aside what other threads did while the
block ran (a data loader, a thread looping on its own jitted function): the dispatches and copies on
their lines, the kernels that ran inline there, and the kernels on XLA's worker threads of programs only
they dispatched. A program both dispatched cannot be split by the trace on CPU (the worker threads' runs
carry no caller): it stays the block's, and is named.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from typing import TYPE_CHECKING

from jaxmagic.probes._profile.device_planes import PlaneEvent, PlaneLine, device_of, read_device_plane
from jaxmagic.probes._profile.events import TraceEvent, TraceReading

if TYPE_CHECKING:
    from jax.profiler import ProfileData, ProfileLine

    from jaxmagic.report import JsonDict

DISPATCH_PREFIX = "PjitFunction("
TRANSFER_NAMES = ("DevicePut",)
CELL_MARK = "jaxmagic.profile: the block's thread"  # a TraceAnnotation the probe makes on the block's thread
_SKIPPED_PLANES = ("/host:metadata", "Task Environment")


def events_from_profile_data(profile_data: ProfileData) -> list[TraceEvent]:
    """The kernel, dispatch and transfer events of a ``jax.profiler.ProfileData`` (``read_profile_data``'s events)."""
    return read_profile_data(profile_data).events


def read_profile_data(profile_data: ProfileData) -> TraceReading:
    """A ``jax.profiler.ProfileData`` read: the host's lines here, each device plane by ``device_planes``.

    Reading an event's stats through jaxlib's bindings is the slow part, so a
    name once seen without kernel stats on the host (jaxlib's host events, ``end: ...``
    markers) is not looked at again.
    """
    reading = TraceReading()
    host_names: set[str] = set()
    thread = 0
    with warnings.catch_warnings():
        # jaxlib's stats types warn "has no __module__ attribute" on first use (Python 3.13)
        warnings.simplefilter("ignore", DeprecationWarning)
        for plane in profile_data.planes:
            if plane.name in _SKIPPED_PLANES:
                continue
            if device_of(plane.name):
                lines = []
                for line in plane.lines:
                    thread += 1
                    lines.append(PlaneLine(line.name, thread, functools.partial(_plane_events, line)))
                read_device_plane(plane.name, lines, reading)
                continue
            for line in plane.lines:
                thread += 1
                _host_line(line, thread, host_names, reading.events)
    return reading


def _plane_events(line: ProfileLine) -> list[PlaneEvent]:
    return [PlaneEvent(e.name, e.start_ns, e.duration_ns, dict(e.stats)) for e in line.events]


def _host_line(line: ProfileLine, thread: int, host_names: set[str], events: list[TraceEvent]) -> None:
    """The dispatch, transfer and kernel events of one host line (a thread: Python's, XLA:CPU's workers)."""
    for event in line.events:
        name = event.name
        if name in host_names:
            continue
        if name.startswith(DISPATCH_PREFIX) or name in TRANSFER_NAMES or name == CELL_MARK:
            events.append(TraceEvent(name, thread, event.start_ns, event.duration_ns))
            continue
        stats = dict(event.stats)  # ~10 pairs; a later pair of one key wins, as it did in a loop
        op = stats.get("hlo_op", "")
        if not op:
            host_names.add(name)
            continue
        events.append(
            TraceEvent(
                name,
                thread,
                event.start_ns,
                event.duration_ns,
                stats.get("hlo_module", ""),
                op,
                str(stats.get("program_id", "")),
                str(stats.get("run_id", "")),
            )
        )


def events_from_trace_json(trace: JsonDict | list[object]) -> list[TraceEvent]:
    """The kernel, dispatch and transfer events of a Chrome/Perfetto JSON trace (``read_trace_json``'s events)."""
    return read_trace_json(trace).events


def read_trace_json(trace: JsonDict | list[object]) -> TraceReading:
    """A Chrome/Perfetto JSON trace (already loaded) read: host threads here, each device's events by
    ``device_planes`` (a process named ``/device:TPU:0`` is that device's plane, its threads its lines)."""
    raw = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    processes, thread_names = _json_names(raw)
    reading = TraceReading()
    threads: dict[tuple[object, object], int] = {}  # (pid, tid) -> its number
    device_lines: dict[object, dict[object, list[PlaneEvent]]] = {}
    for item in raw:
        if not isinstance(item, dict) or item.get("ph") != "X":
            continue
        name = str(item.get("name", ""))
        key = (item.get("pid"), item.get("tid"))
        thread = threads.get(key)
        if thread is None:
            thread = threads[key] = len(threads) + 1
        start, duration = float(item.get("ts", 0)) * 1e3, float(item.get("dur", 0)) * 1e3
        if device_of(processes.get(key[0], "")):
            args = item.get("args")
            stats = args if isinstance(args, dict) else {}
            device_lines.setdefault(key[0], {}).setdefault(key[1], []).append(PlaneEvent(name, start, duration, stats))
            continue
        if name.startswith(DISPATCH_PREFIX) or name in TRANSFER_NAMES or name == CELL_MARK:
            reading.events.append(TraceEvent(name, thread, start, duration))
            continue
        args = item.get("args")
        if isinstance(args, dict) and "hlo_op" in args:
            reading.events.append(_kernel(name, thread, start, duration, args))
    for pid, lines in device_lines.items():
        plane = [
            PlaneLine(str(thread_names.get((pid, tid), tid)), threads[(pid, tid)], functools.partial(list, events))
            for tid, events in lines.items()
        ]
        read_device_plane(processes[pid], plane, reading)
    return reading


def _json_names(raw: list[object]) -> tuple[dict[object, str], dict[tuple[object, object], str]]:
    """The process names (``/device:TPU:0``) and thread names (``XLA Ops``) of a JSON trace's metadata events."""
    processes: dict[object, str] = {}
    threads: dict[tuple[object, object], str] = {}
    for item in raw:
        if not isinstance(item, dict) or item.get("ph") != "M" or not isinstance(item.get("args"), dict):
            continue
        if item.get("name") == "process_name":
            processes[item.get("pid")] = str(item["args"].get("name", ""))
        elif item.get("name") == "thread_name":
            threads[(item.get("pid"), item.get("tid"))] = str(item["args"].get("name", ""))
    return processes, threads


def _kernel(name: str, thread: int, start: float, duration: float, stats: dict[str, object]) -> TraceEvent:
    return TraceEvent(
        name,
        thread,
        float(start),
        float(duration),
        module=str(stats.get("hlo_module", "")),
        op=str(stats.get("hlo_op", "")) or name,
        program_id=str(stats.get("program_id", "")),
        run_id=str(stats.get("run_id", "")),
    )


def dispatched_name(event: TraceEvent) -> str:
    """``PjitFunction(mlp)`` -> ``mlp``."""
    return event.name[len(DISPATCH_PREFIX) : -1] if event.name.endswith(")") else event.name[len(DISPATCH_PREFIX) :]


@dataclasses.dataclass
class OtherThreads:
    """What other threads did while the block ran, set aside (``other_threads``)."""

    functions: list[str] = dataclasses.field(default_factory=list)  # jitted functions only they called
    calls: int = 0  # their dispatches
    kernel_ns: float = 0.0  # their kernels' time
    transfers: int = 0  # their host-to-device copies
    shared: list[str] = dataclasses.field(default_factory=list)  # called by the block and by another thread


def other_threads(events: list[TraceEvent]) -> tuple[list[TraceEvent], OtherThreads | None]:
    """``events`` less what other threads did, and what that was; (events, None) without the block's mark
    (a saved trace of another tool)."""
    marks = [e for e in events if e.name == CELL_MARK]
    if not marks:
        return events, None
    block = marks[0].thread
    python = {e.thread for e in events if e.name.startswith(DISPATCH_PREFIX) or e.name in TRANSFER_NAMES}
    python.add(block)
    called: dict[int, set[str]] = {}
    for e in events:
        if e.name.startswith(DISPATCH_PREFIX):
            called.setdefault(e.thread, set()).add(_function_name(dispatched_name(e)))
    mine = called.get(block, set())
    theirs = set().union(*(names for thread, names in called.items() if thread != block))
    only_theirs = theirs - mine
    kept: list[TraceEvent] = []
    other = OtherThreads(shared=sorted(mine & theirs))
    functions: set[str] = set()
    for e in events:
        if e.name == CELL_MARK:
            continue
        if e.op:  # a kernel: inline on a Python thread, or on a worker thread for the program's caller
            if e.thread == block or (e.thread not in python and _function_name(e.module, 4) not in only_theirs):
                kept.append(e)
            else:
                other.kernel_ns += e.duration_ns
                functions.add(_function_name(e.module, 4))
        elif e.thread == block:
            kept.append(e)
        elif e.name.startswith(DISPATCH_PREFIX):
            other.calls += 1
            functions.add(_function_name(dispatched_name(e)))
        else:
            other.transfers += 1
    other.functions = sorted(functions)
    return kept, other


def _function_name(name: str, prefix: int = 0) -> str:
    """A jitted function's name as its HLO module spells it: ``g_bg`` for ``PjitFunction(g_bg)`` and (with
    ``prefix=4``) for the module ``jit_g_bg``; ``_lambda_`` for ``<lambda>``."""
    if prefix and name.startswith("jit_"):
        name = name[prefix:]
    return re.sub(r"\W", "_", name)


def outermost(events: list[TraceEvent]) -> list[TraceEvent]:
    """The events not inside another of ``events`` on the same thread (by time)."""
    kept: list[TraceEvent] = []
    ends: dict[int, float] = {}
    for event in sorted(events, key=lambda e: (e.thread, e.start_ns, -e.duration_ns)):
        if event.start_ns < ends.get(event.thread, float("-inf")):
            continue
        kept.append(event)
        ends[event.thread] = event.end_ns
    return kept


def self_times(kernels: list[TraceEvent]) -> list[float]:
    """Each kernel's time less the kernels nested inside it on its thread (a loop's body, in ns).

    Returned in the order of ``kernels``.
    """
    order = sorted(range(len(kernels)), key=lambda i: (kernels[i].thread, kernels[i].start_ns, -kernels[i].duration_ns))
    result = [k.duration_ns for k in kernels]
    ends = [k.start_ns + k.duration_ns for k in kernels]  # end_ns, computed once per kernel
    stack: list[int] = []
    thread = None
    for index in order:
        event = kernels[index]
        if event.thread != thread:
            stack, thread = [], event.thread
        while stack and ends[stack[-1]] <= event.start_ns:
            stack.pop()
        if stack:
            result[stack[-1]] -= event.duration_ns
        stack.append(index)
    return [max(value, 0.0) for value in result]


def union_ns(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by (start, end) intervals."""
    total, current_start = 0.0, 0.0
    current_end: float | None = None  # None: no interval open yet
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        elif end > current_end:
            current_end = end
    if current_end is not None:
        total += current_end - current_start
    return total


def overlap_ns(intervals: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """Length of the union of ``intervals`` that lies inside the union of ``cover``."""
    merged = _merged(cover)
    total, j = 0.0, 0
    for start, end in _merged(intervals):
        while j < len(merged) and merged[j][1] <= start:
            j += 1
        k = j
        while k < len(merged) and merged[k][0] < end:
            total += min(end, merged[k][1]) - max(start, merged[k][0])
            k += 1
    return total


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]
