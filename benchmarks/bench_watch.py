"""Overhead of ``%jax_watch`` on later cells: each cell watched against the same cell unwatched.

Cells, all through ``shell.run_cell``, taking turns; the watch is switched on
(``%jax_watch``) or off before each timed cell, in an untimed cell:

* ``loop``: 20,000 calls of a small jitted step (compiled before). Goal <= 1.05x;
* ``section9``: the chapter's section 9 training loop, bugs fixed
  (``demo_notebooks/section9_script.py``, as bench_doctor). Goal <= 1.05x;
* ``nojax``: a cell without JAX in it (``sum(range(1000))``): the watch's own
  cost per cell, in seconds. Goal <= 1 ms more than unwatched.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import Row, make_shell, median, quartiles, run_cell, timed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "demo_notebooks"))  # the section 9 script
import section9_script

REPETITIONS = 7
CALLS = 20_000
STEPS = 200

SETUP = (
    section9_script.source(bugs_fixed=3)
    + "train_step = make_train_step_v2(loss_v1)\n"
    + "small_step = jax.jit(lambda s, x: s * 0.999 + x)\nsmall_x = jnp.ones(8)\n"
)
CELLS = {
    "loop": f"s = jnp.zeros(8)\nfor _ in range({CALLS}):\n    s = small_step(s, small_x)\ns.block_until_ready()",
    "section9": f"params, losses = train_v3(train_step, params0, X_tr, Y_tr, {STEPS})",
    "nojax": "total = sum(range(1000))",
}


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    run_cell(shell, "%jax_watch -o _watch_log")
    for cell in CELLS.values():  # warm-up, watched and not
        run_cell(shell, cell)
    run_cell(shell, "%jax_watch off")
    for cell in CELLS.values():
        run_cell(shell, cell)
    clean = shell.user_ns["_watch_log"]

    times: dict[str, list[float]] = {f"{name}_{state}": [] for name in CELLS for state in ("plain", "watched")}
    order = list(times)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            cell, state = name.rsplit("_", 1)
            run_cell(shell, "%jax_watch" if state == "watched" else "%jax_watch off")
            times[name].append(timed(lambda c=CELLS[cell]: run_cell(shell, c)))
    run_cell(shell, "%jax_watch off")

    def ratios(cell: str) -> list[float]:
        return [w / p for w, p in zip(times[f"{cell}_watched"], times[f"{cell}_plain"])]

    rows = []
    for cell, what in (("loop", f"{CALLS:,} calls of a small jitted step"), ("section9", f"{STEPS} steps of §9")):
        r = ratios(cell)
        rows.append(
            Row(
                f"watched vs unwatched: {what}",
                median(times[f"{cell}_watched"]),
                median(times[f"{cell}_plain"]),
                goal=1.05,
                value=median(r),
                note=f"{REPETITIONS} reps; middle half of the ratios: {quartiles(r, 3)}",
            )
        )
    extra = [w - p for w, p in zip(times["nojax_watched"], times["nojax_plain"])]
    extra = [w - p for w, p in zip(times["nojax_watched"], times["nojax_plain"])]
    rows.append(
        Row(
            "a watched cell without JAX: time more per cell",
            median(times["nojax_watched"]),
            median(times["nojax_plain"]),
            compare="difference",
            goal=0.001,
            value=median(extra),
            note="the watch switched on and off around a cell of plain Python",
        )
    )
    rows.append(
        Row("the clean cells give no finding", compare="check", goal=True, value=not clean.findings, note=clean.summary)
    )
    return rows


if __name__ == "__main__":
    from harness import table

    print(table(run()))
