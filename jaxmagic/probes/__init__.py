"""Probes: plain-Python context managers and functions, usable without IPython.

Each probe switches one JAX tool on, runs the user's code, switches it off and
returns (or yields) a report.
"""

from jaxmagic.probes.check import CheckReport, check
from jaxmagic.probes.nans import NanReport, nans

__all__ = ["nans", "NanReport", "check", "CheckReport"]
