"""A long soak: one magic's per-run time and memory from the first runs to the last, against plain cells.

``python benchmarks/soak.py jax_leaks 600`` runs the ok / raising / interrupted
example of the magic (tests/test_magics_contract.py ``EXAMPLES``) 600 times in
one IPython shell, and the same cells without the magic as many times, taking
turns, and prints the late/early ratio of the time per run (last tenth of the
runs against the first tenth, medians) and the RSS growth per run of both.
``jax_watch`` instead runs a small cell (a jitted call and a list append) that
many times watched and unwatched. A growing ratio well above the plain cells'
(IPython's own history makes every cell a little slower) is a cost of ours
that grows with the session. ``--profile`` prints where the late runs spend
more than the early ones. Nothing asserts on a figure.
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from harness import make_shell  # noqa: E402

CHUNK = 100  # watched cells in a row, then as many unwatched
WATCHED_CELL = "y = small(jnp.ones(4))\nhistory.append(float(y[0]))"


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cells(magic: str) -> tuple[list[str], list[str]]:
    """(cells with the magic, the same cells without it)."""
    if magic == "jax_watch":
        return [WATCHED_CELL], [WATCHED_CELL]
    from test_magics_contract import EXAMPLES
    from test_soak import CASES, _without_magics

    with_magic = [getattr(EXAMPLES[magic], case).format(out="soak_rep") for case in CASES]
    return with_magic, [_without_magics(c) for c in with_magic]


def soak(magic: str, runs: int, profile: bool = False) -> dict:
    from test_magics_contract import SETUP

    shell = make_shell()
    shell.run_cell(SETUP, silent=True)
    shell.run_cell("small = jax.jit(lambda x: x * 2)\nhistory = []", silent=True)
    magic_cells, plain_cells = _cells(magic)
    times: dict[str, list[float]] = {"magic": [], "plain": []}
    growth = {"magic": 0, "plain": 0}
    profiles = {"early": cProfile.Profile(), "late": cProfile.Profile()}
    watch = magic == "jax_watch"
    # The watch is one session over many cells: it is switched on and off in chunks of CHUNK cells.
    chunk = CHUNK if watch else 1
    for start in range(0, runs, chunk):
        for kind, cells in (("magic", magic_cells), ("plain", plain_cells)):
            if watch:  # not silent: IPython runs no pre/post_run_cell callbacks for a silent cell
                with contextlib.redirect_stdout(io.StringIO()):
                    shell.run_cell("%jax_watch" if kind == "magic" else "%jax_watch off")
            for i in range(start, min(start + chunk, runs)):
                _run(shell, kind, cells, i, runs, times, growth, profiles if profile else None, watch)
    shell.run_cell("%jax_watch off", silent=True)
    gc.collect()
    tenth = max(1, runs // 10)
    result = {}
    for kind, values in times.items():
        early, late = statistics.median(values[:tenth]), statistics.median(values[-tenth:])
        result[kind] = (early * 1e3, late * 1e3, late / early, growth[kind] / max(1, runs - 1) / len(magic_cells))
    if profile:
        for phase in ("early", "late"):
            print(f"--- {phase} runs")
            pstats.Stats(profiles[phase]).sort_stats("cumtime").print_stats(25)
    return result


def _run(shell, kind, cells, i, runs, times, growth, profiles, watch) -> None:
    """Run ``cells`` once (run ``i`` of ``runs``), adding its time per cell and its RSS growth."""
    phase = "early" if i < runs // 10 else "late" if i >= runs - runs // 10 else ""
    prof = profiles[phase] if profiles and kind == "magic" and phase else None
    rss = _rss()
    began = time.perf_counter()
    if prof:
        prof.enable()
    for cell in cells:
        shell.run_cell(cell, silent=not watch, store_history=True)
    if prof:
        prof.disable()
    times[kind].append((time.perf_counter() - began) / len(cells))
    if i:  # the first run of each kind pays imports and compilations
        growth[kind] += _rss() - rss


def main(argv: list[str]) -> int:
    profile = "--profile" in argv
    argv = [a for a in argv if a != "--profile"]
    magic = argv[0] if argv else "jax_watch"
    runs = int(argv[1]) if len(argv) > 1 else 600
    result = soak(magic, runs, profile)
    print(f"{magic}: {runs} runs each, with and without the magic, taking turns")
    for kind, (early, late, ratio, grown) in result.items():
        print(
            f"  {kind:5s} ms per cell: first tenth {early:.2f}, last tenth {late:.2f} (late/early {ratio:.2f}x); "
            f"RSS growth {grown / 1024:.1f} KiB per cell"
        )
    m, p = result["magic"][2], result["plain"][2]
    print(f"  late/early of the magic against the plain cells': {m / p:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
