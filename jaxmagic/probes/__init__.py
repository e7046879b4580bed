"""Probes: plain-Python context managers and functions, usable without IPython.

Each probe switches one JAX tool on, runs the user's code, switches it off and
returns (or yields) a report. Probes that take a call have two forms: the
explicit ``X_of_call(fn, args, kwargs, *, options)``, where the call's own
keywords can have any name, and ``X(fn, *args, options..., **kwargs)`` for
people. ``run_X_call`` (same arguments as ``X_of_call``) also returns the call's
own exception, ``(report, exception or None)``: the magics show the report and
then raise it. A bad option raises ``ProbeArgumentError`` (a ValueError) naming
the parameter.

The names bound here are the API. Each probe's own module is private (``_nans``, ``_compiles``, ...),
so that ``jaxmagic.probes.nans`` is the probe and ``import jaxmagic.probes._nans as m`` the module.
"""

from jaxmagic.probes._bisect import BisectReport, bisect, bisect_of_call
from jaxmagic.probes._bisect import run_call as run_bisect_call
from jaxmagic.probes._check import CheckReport, check, check_of_call
from jaxmagic.probes._check import run_call as run_check_call
from jaxmagic.probes._compiles import CompileBudgetExceeded, CompileReport, compiles
from jaxmagic.probes._config import ConfigReport, EnvReport, config_diff, environment
from jaxmagic.probes._debug import BreakpointReport, DebugReport, DebugSession, breakpoints, debug_after, ended_by_quit
from jaxmagic.probes._devices import DevicesReport, devices
from jaxmagic.probes._doctor import DoctorReport, doctor
from jaxmagic.probes._explain import (
    TracerErrorReport,
    UnexplainedErrorReport,
    explain,
    explain_any,
    explain_or_say_why,
)
from jaxmagic.probes._gather import GatherReport, gather, gather_from_engines
from jaxmagic.probes._hlo import HloReport, hlo, hlo_of_call
from jaxmagic.probes._hlo import run_call as run_hlo_call
from jaxmagic.probes._keys import KeyReport, keys
from jaxmagic.probes._leaks import LeakReport, leaks
from jaxmagic.probes._live import LiveReport, live, live_diff
from jaxmagic.probes._memory import (
    MemoryReport,
    OutOfMemoryReport,
    explain_out_of_memory,
    memory,
    memory_of_call,
    run_memory_call,
)
from jaxmagic.probes._nans import NanReport, nans
from jaxmagic.probes._per_device import PerDeviceReport, per_device
from jaxmagic.probes._prints import PrintReport, prints
from jaxmagic.probes._profile import ProfilerBusy, ProfileReport, profile
from jaxmagic.probes._sharding import ShardingReport, sharding, sharding_of_call
from jaxmagic.probes._sharding import run_call as run_sharding_call
from jaxmagic.probes._stages import StagesReport, stages, stages_of_call
from jaxmagic.probes._stages import run_call as run_stages_call
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._tracebacks import TracebackReport, set_traceback_filtering, traceback_view
from jaxmagic.probes._transfers import TransferReport, transfers
from jaxmagic.probes._watch import Watch, WatchLog

__all__ = [
    "ProbeArgumentError",
    # seeing values and the program (chapter sections 1-2)
    "prints",
    "PrintReport",
    "bisect",
    "bisect_of_call",
    "run_bisect_call",
    "BisectReport",
    "hlo",
    "hlo_of_call",
    "run_hlo_call",
    "HloReport",
    # numerical problems (section 3)
    "nans",
    "NanReport",
    "check",
    "check_of_call",
    "run_check_call",
    "CheckReport",
    "debug_after",
    "DebugSession",
    "DebugReport",
    "breakpoints",
    "BreakpointReport",
    "ended_by_quit",
    # tracer errors and leaks (section 4)
    "explain",
    "explain_any",
    "explain_or_say_why",
    "TracerErrorReport",
    "UnexplainedErrorReport",
    "leaks",
    "LeakReport",
    "memory",
    "memory_of_call",
    "run_memory_call",
    "explain_out_of_memory",
    "MemoryReport",
    "OutOfMemoryReport",
    # compilation and speed (section 5)
    "compiles",
    "CompileReport",
    "CompileBudgetExceeded",
    "stages",
    "stages_of_call",
    "run_stages_call",
    "StagesReport",
    "transfers",
    "TransferReport",
    "profile",
    "ProfileReport",
    "ProfilerBusy",
    # errors and configuration (section 6)
    "config_diff",
    "ConfigReport",
    "environment",
    "EnvReport",
    "traceback_view",
    "set_traceback_filtering",
    "TracebackReport",
    # many processes (ipyparallel engines, jax.distributed)
    "gather",
    "gather_from_engines",
    "GatherReport",
    # memory (section 7)
    "live",
    "live_diff",
    "LiveReport",
    # several devices (section 8)
    "sharding",
    "sharding_of_call",
    "run_sharding_call",
    "ShardingReport",
    "devices",
    "DevicesReport",
    "per_device",
    "PerDeviceReport",
    # the whole cell (section 9)
    "keys",
    "KeyReport",
    "doctor",
    "DoctorReport",
    "Watch",
    "WatchLog",
]
