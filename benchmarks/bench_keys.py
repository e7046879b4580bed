"""Overhead of ``%%jax_keys`` against the bare ``jax.debug_key_reuse(True)`` on a 200-step training loop.

The loop is the chapter's section 9 model with every bug fixed (a new key every step), run through
``shell.run_cell``:

* ``magic``: ``%%jax_keys`` + the loop: JAX's checker for the cell, plus the distinct-key count per
  jitted function (each typed key argument's data read at every call) and the legacy-key listing;
* ``bare``: ``with jax.debug_key_reuse(True):`` around the same loop - the JAX tool by hand; the
  baseline of the goal (<= 1.2x);
* ``plain``: the loop without any check (for information: what the checker itself costs).
"""

from __future__ import annotations

import statistics

from bench_doctor import LOOP, SETUP, make_shell, quartiles, run_cell
from harness import Row, median, per_call_benchmark, timed

REPETITIONS = 7
CELLS = {"magic": "%%jax_keys\n" + LOOP, "bare": "with jax.debug_key_reuse(True):\n    " + LOOP, "plain": LOOP}


def ratio_rows() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for cell in CELLS.values():
        run_cell(shell, cell)
    run_cell(shell, "%%jax_keys -o _keys_check\n" + LOOP)
    check = shell.user_ns["_keys_check"].flow("train_step")
    times: dict[str, list[float]] = {name: [] for name in CELLS}
    order = list(CELLS)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=CELLS[name]: run_cell(shell, c)))
    magic_bare = [m / b for m, b in zip(times["magic"], times["bare"])]
    return [
        Row(
            "%%jax_keys vs jax.debug_key_reuse(True)",
            median(times["magic"]),
            median(times["bare"]),
            goal=1.2,
            values=magic_bare,
            note=f"200 steps, {REPETITIONS} reps; middle half: {quartiles(magic_bare)}",
        ),
        Row(
            "jax.debug_key_reuse(True) vs no check",
            median(times["bare"]),
            median(times["plain"]),
            value=statistics.median(b / p for b, p in zip(times["bare"], times["plain"])),
            note="JAX's own per-call key checks (for information)",
        ),
        Row(
            "keys counted: 200 distinct in 200 calls",
            compare="check",
            goal=True,
            value=(check.calls, check.distinct) == (200, 200),
            note=f"{check.distinct}/{check.calls}",
        ),
    ]


def run() -> list[Row]:
    """The ratios above, then the microseconds added per call (``harness.per_call_rows``)."""
    return ratio_rows() + per_call_benchmark("keys")


if __name__ == "__main__":
    from harness import table

    print(table(run()))
