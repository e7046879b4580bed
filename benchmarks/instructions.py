"""Instructions per loop step of a magic against its bare tool, counted by valgrind: noise-free.

Wall-clock ratios on a shared 2-core virtual machine move by 10% between runs of the same
code, more than the 5% goals of ``%%jax_nans`` or ``%%jax_compiles``. valgrind's callgrind
counts the instructions the cell's thread executes, the same in every run of the same
program whatever else the machine does. A cell's steady cost per step is

    (instructions with N steps - instructions with 0 steps) / N

of the Python thread, each run after the same warm-up and a one-step run of the variant,
with the garbage collector paused (as ``harness.timed`` does) (XLA's own threads are left out: their spin-waiting depends on
timing). Each variant runs in its own process under callgrind (~50x slower than native:
a few minutes for all of them, two at a time).

A benchmark module takes part by defining ``SETUP`` (a cell run first) and
``instruction_cells(steps) -> {variant: cell}``, the first variant the baseline. Usage::

    .venv/bin/python benchmarks/instructions.py nans [steps]

Instructions are not time (a cache miss costs more than an add), but a Python-level
overhead is instructions: a change that removes work shows here whatever the machine's
noise. Nothing asserts on the figures.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

RUNNER = """
import gc
import sys
sys.path.insert(0, {here!r})
import {module} as bench
from harness import make_shell, run_cell
shell = make_shell()
run_cell(shell, bench.SETUP)
for _ in range(2):  # compiled under every variant, caches warm
    for cell in bench.instruction_cells(3).values():
        run_cell(shell, cell)
# A cell text seen for the first time costs once (IPython's compile cache, the magic's own); the
# counted cell is new in both runs of a variant, and a one-step run of it came just before.
run_cell(shell, bench.instruction_cells(1)[{variant!r}])
gc.collect()
gc.disable()  # a full collection lands in one run and not the other: tens of millions of instructions
run_cell(shell, bench.instruction_cells({steps})[{variant!r}])
"""


def _main_thread_instructions(module: str, variant: str, steps: int, workdir: Path) -> int:
    script = workdir / f"{variant}-{steps}.py"
    script.write_text(RUNNER.format(here=str(HERE), module=module, variant=variant, steps=steps))
    out = workdir / f"{variant}-{steps}.out"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}",
            sys.executable,
            script,
        ],
        check=True,
        capture_output=True,
    )
    main_thread = out.with_name(out.name + "-01")  # callgrind numbers the threads; 01 is the one that ran the cells
    match = re.search(r"^summary:\s*(\d+)", main_thread.read_text(errors="replace"), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no instruction count in {main_thread}")
    return int(match.group(1))


def count(module: str, steps: int) -> dict[str, float]:
    """Instructions per step of each variant of ``module``'s ``instruction_cells``."""
    variants = list(importlib.import_module(module).instruction_cells(steps))
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = {
            (variant, n): pool.submit(_main_thread_instructions, module, variant, n, Path(tmp))
            for variant in variants
            for n in (0, steps)
        }
        totals = {key: future.result() for key, future in runs.items()}
    return {variant: (totals[variant, steps] - totals[variant, 0]) / steps for variant in variants}


def main(argv: list[str]) -> int:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    name = argv[0] if argv else "nans"
    steps = int(argv[1]) if len(argv) > 1 else 300
    per_step = count(f"bench_{name}", steps)
    baseline_name, baseline = next(iter(per_step.items()))
    print(f"bench_{name}: instructions per step of the cell's thread, {steps} steps")
    for variant, value in per_step.items():
        print(f"  {variant:10s} {value:12,.0f}  {value / baseline:.3f}x of {baseline_name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
