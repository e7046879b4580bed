"""Fake CPU devices for this process, and the devices JAX has.

Usage without IPython::

    report = jaxmagic.probes.devices(8)   # before anything touched a device
    report.applied        # True: JAX will create 8 CPU devices when its backend starts
    report = jaxmagic.probes.devices()    # list the devices (this starts the backend)

JAX reads the number of CPU devices once, when its backend starts (at the
first operation that needs a device, not at ``import jax``). Before that,
``jax_num_cpu_devices`` decides it (it takes precedence over the older
``XLA_FLAGS=--xla_force_host_platform_device_count=N``); after it, nothing
changes the count but a restart of the process.
"""

from __future__ import annotations

import dataclasses
import os

import jax

from jaxmagic._jax import runtime
from jaxmagic.probes._sharding.sharding_layout import id_list
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, Status, act
from jaxmagic.report.document import Document, Facts, Paragraph, Section, Table
from jaxmagic.report.wording import shown

_FLAG = "--xla_force_host_platform_device_count"
# 4,096 fake CPU devices take the backend ~30 s and 1.4 GB to start here; 16,384 never start.
MAX_FAKE_DEVICES = 4096


@dataclasses.dataclass
class DevicesReport(Report):
    """What ``%jax_devices`` did or found."""

    kind = "jax_devices"

    requested: int | None = None  # N of %jax_devices N (None: just list)
    applied: bool = False  # jax_num_cpu_devices was set before the backend started
    backend_started: bool = False  # the backend had started before this call
    cpu_devices: int | None = None  # CPU devices JAX has (None: backend not started)
    devices: list[list[str]] = dataclasses.field(default_factory=list)  # [id, platform, kind, process]
    default_backend: str = ""
    num_cpu_devices_config: int = -1  # jax_num_cpu_devices after the call
    xla_flags: str = ""  # XLA_FLAGS in the environment

    def concerns(self) -> list[Concern]:
        if self.requested is not None and not self.applied and self.cpu_devices != self.requested:
            return [act(f"{self.requested} CPU devices asked for after the backend started")]
        return []

    @property
    def summary(self) -> str:
        n = self.requested
        if n is not None and self.applied:
            return f"{n} CPU devices: JAX will create them when its backend starts (jax_num_cpu_devices = {n})."
        if n is not None and self.cpu_devices == n:
            return f"JAX already has {n} CPU devices; nothing to change."
        if n is not None:
            return f"Too late for {n} devices: the JAX backend already started with {self.cpu_devices} CPU device(s)."
        return f"{len(self.devices)} device(s) on the {self.default_backend} backend."

    def document(self) -> Document:

        facts = []
        if self.requested is not None:
            facts.append(("requested", f"{self.requested} CPU devices"))
        facts.append(
            (
                "backend",
                ("started before this call" if self.backend_started else "not started yet")
                + (f", default {self.default_backend}" if self.default_backend else ""),
            )
        )
        facts.append(("jax_num_cpu_devices", str(self.num_cpu_devices_config)))
        if self.xla_flags:
            facts.append(("XLA_FLAGS", self.xla_flags))
        sections = [Section("Setting", [Facts(facts)])]
        if self.requested is not None and not self.applied and self.cpu_devices != self.requested:
            sections.append(
                Section(
                    "Why it did not work",
                    [
                        Paragraph(
                            "JAX fixes the number of CPU devices when its backend starts: at the first operation that needs a "
                            "device (creating an array, `jax.devices()`, a jitted call), not at `import jax`. In this kernel "
                            "that has already happened, and neither `jax_num_cpu_devices` nor `XLA_FLAGS` changes it now. "
                            "Other processes (`subprocess` with "
                            f"`XLA_FLAGS={_FLAG}=N`) are another way."
                        )
                    ],
                )
            )
        elif self.applied:
            sections.append(
                Section(
                    "Note",
                    [
                        Paragraph(
                            "The backend starts at the first JAX operation. If this process joins a multi-process job, call "
                            "`jax.distributed.initialize(...)` before that. `jax.devices()` then lists the devices."
                        )
                    ],
                )
            )
        if self.devices:
            groups: dict[tuple[str, str, str], list[int]] = {}  # (platform, kind, process) -> device ids
            for device_id, platform, kind, process in self.devices:
                groups.setdefault((platform, kind, process), []).append(int(device_id))
            rows = [
                [platform, kind, process, str(len(ids)), id_list(ids)]
                for (platform, kind, process), ids in groups.items()
            ]
            sections.append(Section("Devices", [Table(["platform", "kind", "process", "count", "ids"], rows)]))
        return Document("%jax_devices", self.status, self.summary, sections, fix=self.fix)

    @property
    def fix(self) -> str:
        if self.status is not Status.PROBLEM:
            return ""
        return (
            f"Restart the kernel and run `%jax_devices {self.requested}` right after `%load_ext jaxmagic`, in the "
            "first cell, before anything touches a device."
        )


def devices(count: int | None = None) -> DevicesReport:
    """Set ``count`` fake CPU devices if the backend has not started; else say how things are.

    Without ``count``, list the devices (starting the backend if needed).
    Raises ProbeArgumentError (a ValueError) for a count below 1 or above MAX_FAKE_DEVICES.
    """
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise ProbeArgumentError("count", f"must be a positive whole number of devices, got {shown(count)}")
    if count is not None and count > MAX_FAKE_DEVICES:
        raise ProbeArgumentError(
            "count",
            f"must be at most {MAX_FAKE_DEVICES:,} fake CPU devices (the backend would not start), got {count:,}",
        )
    report = DevicesReport(
        requested=count, backend_started=runtime.backend_started(), xla_flags=os.environ.get("XLA_FLAGS", "")
    )
    if count is not None and not report.backend_started:
        jax.config.update("jax_num_cpu_devices", count)
        report.applied = True
    elif count is None or report.backend_started:
        cpu = jax.devices("cpu")
        report.cpu_devices = len(cpu)
        report.default_backend = jax.default_backend()
        report.devices = [[str(d.id), d.platform, d.device_kind, str(d.process_index)] for d in jax.devices()]
    report.num_cpu_devices_config = int(jax.config.jax_num_cpu_devices)
    return report
