"""Reading a profiler trace into the few kinds of events the profile probe needs.

Two sources give the same events (JAX 0.12, CPU measured; GPU planes have the
same kernel stats per stream):

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
"""

from __future__ import annotations

import dataclasses
import warnings

DISPATCH_PREFIX = "PjitFunction("
TRANSFER_NAMES = ("DevicePut",)
_SKIPPED_PLANES = ("/host:metadata", "Task Environment")


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

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns

    @property
    def is_kernel(self) -> bool:
        return bool(self.op)


def events_from_profile_data(profile_data) -> list[TraceEvent]:
    """The kernel, dispatch and transfer events of a ``jax.profiler.ProfileData``.

    Reading an event's stats through jaxlib's bindings is the slow part, so a
    name once seen without kernel stats (jaxlib's host events, ``end: ...``
    markers) is not looked at again.
    """
    events: list[TraceEvent] = []
    host_names: set[str] = set()
    thread = 0
    with warnings.catch_warnings():
        # jaxlib's stats types warn "has no __module__ attribute" on first use (Python 3.13)
        warnings.simplefilter("ignore", DeprecationWarning)
        for plane in profile_data.planes:
            if plane.name in _SKIPPED_PLANES:
                continue
            for line in plane.lines:
                thread += 1
                for event in line.events:
                    name = event.name
                    if name in host_names:
                        continue
                    if name.startswith(DISPATCH_PREFIX) or name in TRANSFER_NAMES:
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
    return events


def events_from_trace_json(trace: dict | list) -> list[TraceEvent]:
    """The kernel, dispatch and transfer events of a Chrome/Perfetto JSON trace (already loaded)."""
    raw = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    threads: dict[tuple, int] = {}
    events: list[TraceEvent] = []
    for item in raw:
        if not isinstance(item, dict) or item.get("ph") != "X":
            continue
        name = str(item.get("name", ""))
        key = (item.get("pid"), item.get("tid"))
        thread = threads.get(key)
        if thread is None:
            thread = threads[key] = len(threads) + 1
        start, duration = float(item.get("ts", 0)) * 1e3, float(item.get("dur", 0)) * 1e3
        if name.startswith(DISPATCH_PREFIX) or name in TRANSFER_NAMES:
            events.append(TraceEvent(name, thread, start, duration))
            continue
        args = item.get("args")
        if isinstance(args, dict) and "hlo_op" in args:
            events.append(_kernel(name, thread, start, duration, args))
    return events


def _kernel(name: str, thread: int, start: float, duration: float, stats: dict) -> TraceEvent:
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
