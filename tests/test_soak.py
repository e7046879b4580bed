"""A bounded soak: every magic, run a few hundred times ok / raising / interrupted, leaves nothing behind.

Each round runs the ok, raising and interrupted example of every registered
magic (tests/test_magics_contract.py EXAMPLES). After the rounds the JAX state
(config, ``jax`` loggers, ``jax.monitoring`` listeners) and the
``sys.monitoring`` tools must be exactly as before, and the process's memory
must not grow per run by more than a generous margin over the same cells run
without the magics (the control). Memory and per-run times are printed as
information; a timing is never asserted.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import time

import pytest
from test_magics_contract import EXAMPLES, SETUP

from jaxmagic._jax.restore import take_snapshot
from jaxmagic.ipython.call_expression import split_call_and_options

ROUNDS = 3  # 3 x 3 cases x every magic after a warm-up round: ~220 runs, about 35 s
# Generous: JAX's own caches and IPython's history wobble by a few KB a run. An unbounded cache of ours
# (a retrace token per cell compiled everything again: ~430 KB a run) is far above it.
MARGIN_PER_RUN = 100 * 1024
CALL_MAGICS = ("jax_check", "jax_stages", "jax_hlo", "jax_bisect", "jax_sharding")
CASES = ("ok", "raising", "interrupt")


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _without_magics(cell: str) -> str:
    """The same cell with no magic: a cell magic's body; a line magic's call, or ``pass``."""
    lines = []
    for line in cell.splitlines():
        indent, text = re.match(r"(\s*)(.*)", line).groups()
        if text.startswith("%%"):
            continue
        if text.startswith("%"):
            name, _, rest = text[1:].partition(" ")
            call = split_call_and_options(rest)[0] if name in CALL_MAGICS else ""
            text = call or "pass"
        lines.append(indent + text)
    return "\n".join(lines) or "pass"


def _cells(with_magics: bool) -> list[str]:
    cells = [getattr(EXAMPLES[m], case).format(out="soak_rep") for m in sorted(EXAMPLES) for case in CASES]
    return cells if with_magics else [_without_magics(cell) for cell in cells]


def _monitoring_tools() -> list:
    return [sys.monitoring.get_tool(tool) for tool in range(6)]


def _soak(shell, cells: list[str]) -> tuple[int, list[float]]:
    """Run ``cells`` ROUNDS times after one warm-up round; the RSS growth and each round's seconds per run."""
    for cell in cells:  # warm-up: first compilations, the config defaults' subprocess, lazy imports
        shell.run_cell(cell, silent=True)
    gc.collect()
    start = _rss()
    per_run = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        for cell in cells:
            shell.run_cell(cell, silent=True)
        per_run.append((time.perf_counter() - began) / len(cells))
    gc.collect()
    return _rss() - start, per_run


@pytest.fixture(scope="module")
def shell(ip):
    ip.run_cell(SETUP)
    return ip


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the RSS from /proc")
def test_soak_every_magic_leaves_state_memory_and_time_flat(shell, capsys):
    before, tools = take_snapshot(), _monitoring_tools()

    control_growth, control_times = _soak(shell, _cells(with_magics=False))
    magic_growth, magic_times = _soak(shell, _cells(with_magics=True))

    after = take_snapshot()
    capsys.readouterr()  # every report and traceback of the runs
    runs = ROUNDS * len(_cells(True))
    with capsys.disabled():
        print(
            f"\nsoak: {runs} runs of {len(EXAMPLES)} magics ({'/'.join(CASES)}), against the same cells without them\n"
            f"  RSS growth per run: with magics {magic_growth / runs / 1024:.1f} KiB, "
            f"without {control_growth / runs / 1024:.1f} KiB\n"
            f"  ms per run, round by round: with {[round(t * 1e3, 1) for t in magic_times]}, "
            f"without {[round(t * 1e3, 1) for t in control_times]}\n"
            f"  last round / first round: with {magic_times[-1] / magic_times[0]:.2f}, "
            f"without {control_times[-1] / control_times[0]:.2f}"
        )
    assert before.differences(after) == []
    assert _monitoring_tools() == tools
    assert magic_growth / runs <= control_growth / runs + MARGIN_PER_RUN
