"""Memory probe: what fills a jitted program's peak, by the user's line, and ways down tried by compiling.

Usage without IPython::

    report = jaxmagic.probes.memory_of_call(step, (params, batch))   # compiled, never run
    report.programs[0].buffers[0].made_at, report.programs[0].offered

    with jaxmagic.probes.memory(namespace=globals()) as report:       # every jitted call of the block
        nn = nearest(x)

    try:
        print(nearest(x)[:3])
    except Exception as error:
        report = jaxmagic.probes.explain_out_of_memory(error)          # None for other errors

Modules: ``program`` (one call compiled with XLA's dumps: the buffers live at the peak, by line and
role), ``ways_down`` (donation, the batch gradient, jax.checkpoint, a smaller input - each compiled),
``failed_call`` (from an out-of-memory error to the call that ran out, also when it surfaced at a later
read), ``capacity`` (what the device or host can give), ``records`` and ``report``.
"""

from jaxmagic.probes._memory.probe import (
    explain_out_of_memory,
    held_arrays,
    is_out_of_memory,
    memory,
    memory_of_call,
    run_memory_call,
)
from jaxmagic.probes._memory.records import (
    ARGUMENT,
    OUTPUT,
    SAVED_FOR_BACKWARD,
    TEMPORARY,
    Capacity,
    EagerAllocation,
    HeldArrays,
    PeakBuffer,
    ProgramMemory,
    WayDown,
)
from jaxmagic.probes._memory.report import MemoryReport, OutOfMemoryReport

__all__ = [
    "ARGUMENT",
    "OUTPUT",
    "SAVED_FOR_BACKWARD",
    "TEMPORARY",
    "Capacity",
    "EagerAllocation",
    "HeldArrays",
    "MemoryReport",
    "OutOfMemoryReport",
    "PeakBuffer",
    "ProgramMemory",
    "WayDown",
    "explain_out_of_memory",
    "held_arrays",
    "is_out_of_memory",
    "memory",
    "memory_of_call",
    "run_memory_call",
]
