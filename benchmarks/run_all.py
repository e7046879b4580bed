"""Run every benchmark (``make bench``) and print one table of results.

Each ``benchmarks/bench_<name>.py`` module exposes ``run() -> list[Row]``
(see ``harness.Row``); this script imports them in name order, runs them and
prints their rows together. ``python benchmarks/run_all.py nans`` runs only
the modules whose name contains ``nans``. Timings are reported, never asserted:
the exit status is 0 unless a benchmark itself crashed.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Row, table  # noqa: E402


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
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    rows: list[Row] = []
    crashed = []
    for name in modules:
        print(f"\n== {name}", flush=True)
        start = time.perf_counter()
        try:
            module = importlib.import_module(name)
            new_rows = module.run()
        except Exception:
            traceback.print_exc()
            crashed.append(name)
            continue
        for row in new_rows:
            print(f"   {row.name}: {row.formatted_result()}", flush=True)
        print(f"   ({time.perf_counter() - start:.1f} s)")
        rows.extend(new_rows)

    print("\nResults (medians; every ratio is against a baseline measured in this same run):\n")
    print(table(rows))
    if crashed:
        print(f"\nbenchmarks that crashed: {', '.join(crashed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
