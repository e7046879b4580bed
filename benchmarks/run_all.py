"""Run every benchmark (``make bench``) and print one table of results.

Each ``benchmarks/bench_<name>.py`` module exposes ``run() -> list[Row]``
(see ``harness.Row``); this script runs them in name order, each in a process
of its own, and prints their rows together. ``python benchmarks/run_all.py nans``
runs only the modules whose name contains ``nans``. Timings are reported, never
asserted: the exit status is 0 unless a benchmark itself crashed.

A process per module: the benchmarks share IPython's one ``InteractiveShell``, so
in one process a module ran with every earlier module's namespace still alive
(``bench_live``'s 100,000 arrays made ``%jax_watch``'s cell without JAX pay +4 ms
for counting them, and ``%jax_live``'s holder search walk every earlier name).
"""

from __future__ import annotations

import importlib
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Row, markdown_table, table  # noqa: E402


def discover(filters: list[str]) -> list[str]:
    names = sorted(p.stem for p in HERE.glob("bench_*.py"))
    if filters:
        names = [n for n in names if any(f in n for f in filters)]
    return names


def main(argv: list[str]) -> int:
    modules = discover(argv)
    if not modules:
        print(f"no benchmark module matches {argv}", file=sys.stderr)
        return 2
    machine = describe_machine()
    print(machine)
    rows: list[Row] = []
    crashed = []
    for name in modules:
        print(f"\n== {name}", flush=True)
        start = time.perf_counter()
        new_rows = _run_in_own_process(name)
        if new_rows is None:
            crashed.append(name)
            continue
        for row in new_rows:
            print(f"   {row.name}: {row.formatted_result()}", flush=True)
        print(f"   ({time.perf_counter() - start:.1f} s)")
        rows.extend(new_rows)

    print("\nResults (medians; every ratio is against a baseline measured in this same run):\n")
    print(table(rows))
    print(f"\nFor the overhead page, docs/overhead.md ({machine}; load average at the end {load_average()}):\n")
    print(markdown_table(rows))
    if crashed:
        print(f"\nbenchmarks that crashed: {', '.join(crashed)}", file=sys.stderr)
        return 1
    return 0


def describe_machine() -> str:
    """What the figures were measured on and of: the CPU, Python, JAX, the commit, the load, the date."""
    cpu = platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty", "--abbrev=10"], cwd=HERE, capture_output=True, text=True
    ).stdout.strip()
    try:
        from importlib.metadata import version

        jax_version = version("jax")
    except Exception:
        jax_version = "?"
    return (
        f"commit {commit or '?'}, {time.strftime('%Y-%m-%d %H:%M %Z')}: {cpu}, {os.cpu_count()} CPUs, "
        f"{platform.system()}, Python {platform.python_version()}, JAX {jax_version}; "
        f"load average at the start {load_average()}"
    )


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _run_in_own_process(name: str) -> list[Row] | None:
    """The rows of ``name``'s ``run()``, run in a new Python process; None if it crashed (its
    traceback printed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.pickle"
        done = subprocess.run([sys.executable, __file__, "--one", name, str(out)], check=False)
        if done.returncode != 0 or not out.exists():
            return None
        return pickle.loads(out.read_bytes())


def _run_one(name: str, out: str) -> int:
    try:
        rows = importlib.import_module(name).run()
    except Exception:
        traceback.print_exc()
        return 1
    Path(out).write_bytes(pickle.dumps(rows))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        sys.exit(_run_one(sys.argv[2], sys.argv[3]))
    sys.exit(main(sys.argv[1:]))
