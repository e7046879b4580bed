"""Overhead of ``%jax_watch`` on later cells: each cell watched against the same cell unwatched.

Cells, all through ``shell.run_cell``, taking turns; the watch is switched on
(``%jax_watch``) or off before each timed cell, in an untimed cell:

* ``loop``: 20,000 calls of a small jitted step (compiled before). Goal <= 1.05x;
* ``section9``: the chapter's section 9 training loop, bugs fixed
  (``demo_notebooks/section9_script.py``, as bench_doctor). Goal <= 1.05x;
* ``nojax``: a cell without JAX in it (``sum(range(1000))``, JAX imported): the
  watch's own cost per cell - switching its probes on and off - in the CPU time
  of the cell's thread (steady under load; wall-clock there moved 2x between
  runs). Goal <= 0.4 ms more than unwatched (issue 56).

On loops of very short steps the watch looks at a share of the calls only
(``jaxmagic/_jax/call_sampling.py``); the rows say how many it looked at. What
remains per call is JAX calling the watch's hook and counting the call.

Then a soak (``soak.py``): 2,000 small JAX cells watched and 2,000 unwatched, in
chunks of 100: the late/early time ratio of the watched cells against the
unwatched cells' own (goal <= 1.1x), and the RSS growth per cell more than
theirs (goal <= 2 KiB).
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

from harness import Row, make_shell, median, per_call_benchmark, quartiles, run_cell, timed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "demo_notebooks"))  # the section 9 script
import section9_script

REPETITIONS = 7
CALLS = 20_000
STEPS = 200

SETUP = (
    section9_script.source(bugs_fixed=3)
    + "train_step = make_train_step_v2(loss_v1)\n"
    + "small_step = jax.jit(lambda s, x: s * 0.999 + x)\nsmall_x = jnp.ones(8)\n"
    + "from jaxmagic.probes import Watch\n_watch = Watch()\n"
)
CELLS = {
    "loop": f"s = jnp.zeros(8)\nfor _ in range({CALLS}):\n    s = small_step(s, small_x)\ns.block_until_ready()",
    "section9": f"params, losses = train_v3(train_step, params0, X_tr, Y_tr, {STEPS})",
    "nojax": "total = sum(range(1000))",
}


def instruction_cells(steps: int) -> dict[str, str]:
    """For ``benchmarks/instructions.py``: the small-step loop unwatched, then watched through the
    plain-Python ``Watch`` (what ``%jax_watch`` does around each cell), ``steps`` calls."""
    loop = f"s = jnp.zeros(8)\nfor _ in range({steps}):\n    s = small_step(s, small_x)\ns.block_until_ready()"
    watched = (
        "_watch.begin_cell('In [0]')\ntry:\n" + textwrap.indent(loop, "    ") + "\nfinally:\n    _watch.end_cell()"
    )
    return {"plain": loop, "watched": watched}


def ratio_rows() -> list[Row]:
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
            clock = time.thread_time if cell == "nojax" else time.perf_counter  # nojax: the watch's own Python
            times[name].append(timed(lambda c=CELLS[cell]: run_cell(shell, c), clock))
    run_cell(shell, "%jax_watch off")
    looked = {}
    for cell in ("loop", "section9"):  # how many calls the watch looked at, in one more watched run
        run_cell(shell, "%jax_watch -o _coverage")
        run_cell(shell, CELLS[cell])
        run_cell(shell, "%jax_watch off")
        log = shell.user_ns["_coverage"]
        looked[cell] = f"looked at {log.calls_looked_at:,} of {log.calls_counted:,} calls"

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
                values=r,
                note=f"{REPETITIONS} reps; middle half of the ratios: {quartiles(r, 3)}; {looked[cell]}",
            )
        )
    extra = [w - p for w, p in zip(times["nojax_watched"], times["nojax_plain"])]
    rows.append(
        Row(
            "a watched cell without JAX: the thread's CPU time more per cell",
            median(times["nojax_watched"]),
            median(times["nojax_plain"]),
            compare="difference",
            goal=0.0004,
            values=extra,
            note=f"the watch switched on and off around a cell of plain Python; min {min(extra) * 1e3:+.3f} ms",
        )
    )
    rows.append(
        Row("the clean cells give no finding", compare="check", goal=True, value=not clean.findings, note=clean.summary)
    )
    rows += soak_rows()
    return rows


def soak_rows(cells: int = 2000) -> list[Row]:
    import soak

    result = soak.soak("jax_watch", cells)
    watched, plain = result["magic"], result["plain"]
    return [
        Row(
            f"{cells:,} watched cells: late/early time, against unwatched cells' own",
            compare="ratio",
            goal=1.1,
            value=watched[2] / plain[2],
            note=f"late/early {watched[2]:.2f}x watched, {plain[2]:.2f}x unwatched "
            f"({watched[0]:.2f} -> {watched[1]:.2f} ms vs {plain[0]:.2f} -> {plain[1]:.2f} ms a cell)",
        ),
        Row(
            f"{cells:,} watched cells: RSS growth per cell within 2 KiB of unwatched",
            compare="check",
            goal=True,
            value=(watched[3] - plain[3]) / 1024 <= 2.0,
            note=f"{watched[3] / 1024:.1f} KiB watched, {plain[3] / 1024:.1f} KiB unwatched per cell",
        ),
    ]


def run() -> list[Row]:
    """The ratios above, then the microseconds added per call (``harness.per_call_rows``)."""
    return ratio_rows() + per_call_benchmark("watch")


if __name__ == "__main__":
    from harness import table

    print(table(run()))
