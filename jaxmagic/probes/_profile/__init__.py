"""Profile probe: where the run time of a block goes - by the user's source line, named_scope and kernel.

Usage without IPython::

    with jaxmagic.probes.profile() as report:
        for _ in range(10):
            loss = train_step(params, x).block_until_ready()
    report.lines[0].line.code, report.lines[0].share      # the line whose kernels took the most device time
    report.scope("encoder").seconds, report.bound          # "device", "host", "compile" or "idle"

The chapter's section 5.5, step 4 ("which operation does the run time go
to?"), without TensorBoard: the block runs under ``jax.profiler.trace`` (kept in
memory; ``save=DIR`` also writes it for Perfetto/xprof). The trace has one
event per executed kernel, named after its optimized-HLO instruction; the
programs' HLO text (see ``jaxmagic._jax.jit_programs``) says which named_scope
and which line of the user's each instruction came from, so kernel time is
summed per line and per scope. jaxlib's host events (``PjitFunction(f)`` around
each call) and the compile probe's figures split the block's wall time into
compilation, host dispatch, device execution and waiting.

Python's own function calls are not traced (``python_tracer_level=0``): they
would slow the Python code under measurement several-fold.

On a TPU or GPU the kernels are read from the device's own plane of the trace
(``device_planes``: a TPU's ``XLA Ops`` line, each op placed in its program run by
the ``XLA Modules`` event around it; a GPU's stream lines, whose kernels carry their
XLA op); what a plane lacks becomes a note of the report, never silence.

The package: ``probe`` (the ``profile`` context manager: the trace, the
program capture and the compile probe around the block), ``trace_events`` and
``device_planes`` (a trace read into ``events``: the host's lines, the devices'
planes), ``build`` (the report from the trace's events and the programs' HLO) and
``report`` (the report, its wording and its document).
"""

from jaxmagic.probes._profile.build import build_report
from jaxmagic.probes._profile.probe import PROFILER_BUSY, ProfilerBusy, profile, trace_running
from jaxmagic.probes._profile.report import (
    HOST_NOTE,
    NO_SCOPE,
    SHARED_NOTE,
    TOP_KERNELS,
    TOP_LINES,
    KernelTime,
    LineTime,
    ProfileReport,
    ProgramTime,
    ScopeTime,
    WallTime,
)

__all__ = [
    "HOST_NOTE",
    "NO_SCOPE",
    "PROFILER_BUSY",
    "SHARED_NOTE",
    "TOP_KERNELS",
    "TOP_LINES",
    "KernelTime",
    "LineTime",
    "ProfileReport",
    "ProfilerBusy",
    "ProgramTime",
    "ScopeTime",
    "WallTime",
    "build_report",
    "profile",
    "trace_running",
]
