"""What ``%load_ext jaxmagic`` costs beyond ``import jax``, in fresh processes.

Each repetition starts two new Python processes that first create an
IPython shell (not timed), then time either ``import jax`` alone or
``import jax`` followed by ``%load_ext jaxmagic``. The difference of the
medians is the extension's own import and registration cost (goal <= 0.1 s).
``import jax`` itself varies by tens (on a busy machine, hundreds) of
milliseconds between processes, so the loading process also times
``%load_ext`` on its own, after ``import jax``: the steadier figure (goal <= 30 ms), and
``-X importtime``'s cumulative time of the modules ``%load_ext`` imported (the registration of
the magics only: probes, renderers and each magic's argument parser are made on first use), and
the load in the thread's CPU time (steady when the machine is shared). The note
of the first row gives the noise: ``import jax`` in the loading processes
against ``import jax`` in the import-only ones. The loading process also reports whether a JAX backend was started: it must
not be, so that ``XLA_FLAGS`` or ``jax_num_cpu_devices`` set after loading the
extension still take effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness import Row, median

REPETITIONS = 11

_PRELUDE = """
import json, time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
"""

IMPORT_ONLY = (
    _PRELUDE
    + """
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
print(json.dumps({"total": t1 - t0}))
"""
)

IMPORT_AND_LOAD = (
    _PRELUDE
    + """
t0 = time.perf_counter()
import jax
import sys
t1 = time.perf_counter()
before = set(sys.modules)
c1 = time.thread_time()
ip.run_line_magic("load_ext", "jaxmagic")
t2 = time.perf_counter()
c2 = time.thread_time()
from jax._src import xla_bridge
print(json.dumps({"total": t2 - t0, "load_ext": t2 - t1, "load_ext_cpu": c2 - c1, "new_modules": sorted(set(sys.modules) - before),
                  "backend_initialized": xla_bridge.backends_are_initialized(),
                  "registered": "jax_nans" in ip.magics_manager.magics["cell"]}))
"""
)


# A user's Python caches compiled modules (.pyc); a machine that sets PYTHONDONTWRITEBYTECODE (this
# one does) would time compiling jaxmagic's sources from scratch in every process instead.
_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def measure(script: str, *flags: str) -> dict:
    done = subprocess.run([sys.executable, *flags, "-c", script], capture_output=True, text=True, check=False, env=_ENV)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "importtime" in flags:
        result["import_seconds"] = imported_at_load_ext(done.stderr, set(result["new_modules"]))
    return result


def imported_at_load_ext(importtime: str, new_modules: set[str]) -> float:
    """Seconds ``-X importtime`` counts for the modules ``%load_ext`` imported: the cumulative time of
    each outermost import among them. Import time is the steadier figure on a loaded machine: it
    leaves out the shell's work, and a module's own time varies less than a whole process's."""
    total = 0
    for line in importtime.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[0].startswith("import time:"):
            continue
        name = parts[2][1:]
        if name.strip() in new_modules and not name.startswith(" "):  # outermost: its imports are inside
            total += int(parts[1])
    return total * 1e-6


def run() -> list[Row]:
    measure(IMPORT_AND_LOAD)  # warm the OS file cache and .pyc files before timing
    import_only, loaded = [], []
    for rep in range(REPETITIONS):
        pair = [(IMPORT_ONLY, import_only), (IMPORT_AND_LOAD, loaded)]
        for script, results in pair if rep % 2 == 0 else pair[::-1]:
            results.append(measure(script))

    import_times = [measure(IMPORT_AND_LOAD, "-X", "importtime")["import_seconds"] for _ in range(REPETITIONS)]
    backend = [r["backend_initialized"] for r in loaded]
    registered = all(r["registered"] for r in loaded)
    return [
        Row(
            "%load_ext jaxmagic - import jax",
            median([r["total"] for r in loaded]),
            median([r["total"] for r in import_only]),
            compare="difference",
            goal=0.1,
            note=f"difference of medians, {REPETITIONS} fresh processes each; noise: import jax took "
            f"{median([r['total'] - r['load_ext'] for r in loaded]) * 1e3:.0f} ms in these processes",
        ),
        Row(
            "%load_ext jaxmagic alone, after import jax",
            median([r["load_ext"] for r in loaded]),
            compare="difference",
            goal=0.03,
            values=[r["load_ext"] for r in loaded],
            note=f"same processes, timed on its own; median (min-max) of {REPETITIONS}",
        ),
        Row(
            "%load_ext jaxmagic alone, the thread's CPU time",
            median([r["load_ext_cpu"] for r in loaded]),
            compare="difference",
            values=[r["load_ext_cpu"] for r in loaded],
            note="the same loads in the thread's CPU time: steady on a loaded machine, where the wall-clock "
            "figures above count the waits for a core; for information",
        ),
        Row(
            "%load_ext jaxmagic: its imports (-X importtime)",
            median(import_times),
            compare="difference",
            goal=0.03,
            values=import_times,
            note=f"cumulative import time of the {len(loaded[0]['new_modules'])} modules %load_ext imported, "
            f"after import jax; median (min-max) of {REPETITIONS} processes",
        ),
        Row(
            "JAX backend initialized after %load_ext",
            compare="check",
            goal=False,
            value=any(backend),
            note="magics registered" if registered else "MAGICS NOT REGISTERED",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
