"""Probes: plain-Python context managers and functions, usable without IPython.

Each probe switches one JAX tool on, runs the user's code, switches it off and
returns (or yields) a report.
"""

from jaxmagic.probes.check import CheckReport, check
from jaxmagic.probes.compiles import CompileBudgetExceeded, CompileReport, compiles
from jaxmagic.probes.config import ConfigReport, EnvReport, config_diff, environment
from jaxmagic.probes.devices import DevicesReport, devices
from jaxmagic.probes.explain import TracerErrorReport, explain, explain_any
from jaxmagic.probes.leaks import LeakReport, leaks
from jaxmagic.probes.nans import NanReport, nans
from jaxmagic.probes.per_device import PerDeviceReport, per_device
from jaxmagic.probes.sharding import ShardingReport, sharding, sharding_of_call
from jaxmagic.probes.sharding import run_call as run_sharding_call
from jaxmagic.probes.stages import StagesReport, stages, stages_of_call
from jaxmagic.probes.tracebacks import TracebackReport, set_traceback_filtering, traceback_view
from jaxmagic.probes.transfers import TransferReport, transfers

__all__ = [
    "nans",
    "NanReport",
    "check",
    "CheckReport",
    "sharding",
    "sharding_of_call",
    "run_sharding_call",
    "ShardingReport",
    "devices",
    "DevicesReport",
]
__all__ += [
    "leaks",
    "LeakReport",
    "explain",
    "explain_any",
    "TracerErrorReport",
    "config_diff",
    "ConfigReport",
    "environment",
    "EnvReport",
    "traceback_view",
    "set_traceback_filtering",
    "TracebackReport",
]
__all__ += ["compiles", "CompileReport", "CompileBudgetExceeded"]
__all__ += ["per_device", "PerDeviceReport"]
from jaxmagic.probes.hlo import HloReport, hlo  # noqa: E402
from jaxmagic.probes.live import LiveReport, live, live_diff  # noqa: E402

__all__ += ["hlo", "HloReport", "live", "live_diff", "LiveReport"]
__all__ += ["stages", "stages_of_call", "StagesReport"]
__all__ += ["transfers", "TransferReport"]
from jaxmagic.probes.prints import PrintReport, prints  # noqa: E402

__all__ += ["prints", "PrintReport"]
from jaxmagic.probes.bisect import BisectReport, bisect  # noqa: E402

__all__ += ["bisect", "BisectReport"]
from jaxmagic.probes.keys import KeyReport, keys  # noqa: E402

__all__ += ["keys", "KeyReport"]
from jaxmagic.probes.doctor import DoctorReport, doctor  # noqa: E402

__all__ += ["doctor", "DoctorReport"]
