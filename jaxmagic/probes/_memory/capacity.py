"""What the device can give a program: bytes free now and in all, and where those figures come from.

On a GPU or TPU, JAX's allocator keeps figures of its own (``device.memory_stats()``: ``bytes_limit``,
``bytes_in_use``, ``largest_free_block_bytes`` where the allocator has it). On CPU it returns None:
XLA's CPU client allocates from the host, so what it can get is the host's available memory
(``MemAvailable`` of ``/proc/meminfo``), bounded by a control group's limit when the process runs in
one (containers, batch schedulers). Written against JAX's public API; only the CPU path was run here.
"""

from __future__ import annotations

import os

import jax

from jaxmagic.probes._memory.messages import OutOfMemoryMessage
from jaxmagic.probes._memory.records import Capacity


def capacity(device: jax.Device | None = None) -> Capacity:
    """What ``device`` (default: JAX's first device) can still give, and how that was found."""
    if device is None:
        device = jax.devices()[0]
    name = f"{device.platform}:{device.id}"
    try:
        stats = device.memory_stats()
    except Exception:  # a backend without the call
        stats = None
    found = stats_capacity(stats, name)
    if found is not None:
        return found
    if device.platform == "cpu":
        return host_capacity(name)
    return Capacity(None, source=f"memory_stats() of {name} gives no bytes_limit", device=name)


def stats_capacity(stats: dict[str, int] | None, name: str) -> Capacity | None:
    """What ``device.memory_stats()`` says the device can give (None without a ``bytes_limit``: CPU)."""
    if not stats or not stats.get("bytes_limit"):
        return None
    limit, in_use = int(stats["bytes_limit"]), int(stats.get("bytes_in_use", 0) or 0)
    free = int(stats.get("largest_free_block_bytes") or limit - in_use)
    return Capacity(free, limit, in_use, f"memory_stats() of {name}", name)


def host_capacity(device: str = "cpu:0") -> Capacity:
    available, total = _meminfo()
    source = "the host's MemAvailable in /proc/meminfo"
    limit = _cgroup_room()
    if limit is not None and (available is None or limit < available):
        available, source = limit, "the memory limit of this process's control group"
    if available is None:
        return Capacity(None, source="no /proc/meminfo or control-group limit to read", device=device)
    in_use = total - available if total is not None else None
    return Capacity(available, total, in_use, source, device)


def _meminfo() -> tuple[int | None, int | None]:
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    fields[key] = int(parts[0]) * 1024  # kB
    except OSError:
        return None, None
    return fields.get("MemAvailable"), fields.get("MemTotal")


def _cgroup_room() -> int | None:
    """The bytes left under a control group's memory limit (v2, then v1); None without a limit."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and limit < 1 << 60:  # "max" or a huge number: no limit
            return max(limit - (usage or 0), 0)
    return None


def _read_int(path: str) -> int | None:
    if not os.path.exists(path):
        return None
    try:
        with open(path) as file:
            text = file.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def capacity_at_failure(message: OutOfMemoryMessage, now: Capacity) -> Capacity:
    """What the device could give when the error was raised: the runtime's own figure when its message has one
    (TPU: "There are 2.76G free"; the arrays held then may be gone by now), with the limit ``memory_stats()``
    gives; a compiler's figure for what it had when nothing else says; else the device's figures now."""
    if message.free is not None:
        total = now.total if now.total is not None else None
        in_use = total - message.free if total is not None else None
        return Capacity(message.free, total, in_use, "the runtime's message (free when it failed)", now.device)
    if message.capacity and now.available is None:
        return Capacity(message.capacity, message.capacity, None, "the compiler's message", now.device)
    return now
