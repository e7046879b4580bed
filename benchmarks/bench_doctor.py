"""Overhead of ``%%jax_doctor`` on a clean 200-step training loop (the chapter's section 9 model, bugs fixed).

Cells, all through ``shell.run_cell``, alternating for several repetitions:

* ``plain``:  the loop alone, ``train_step`` compiled before (what the user runs
  without jaxmagic); the baseline of the goal;
* ``doctor``: ``%%jax_doctor`` + the same loop, after one doctor cell has run
  (the doctor keeps its traces from one doctor cell to the next): the steady
  cost of leaving it on while developing. Goal <= 1.25x (issue 17);
* ``tools``:  the loop under the bare JAX switches the doctor stands for, by
  hand - ``jax.debug_nans``, ``jax.checking_leaks``, ``jax.log_compiles``,
  ``jax.explain_cache_misses``, ``jax.transfer_guard("log")`` and
  ``jax.debug_key_reuse`` - which stop at the first finding instead of listing
  them (for information: the doctor against the bare tools).

A second pair measures a cell that *defines* the step function and then trains,
the way a notebook cell is edited and re-run: the function is new each time, so
both the plain cell and the doctor cell compile it (the doctor compiles it once
more under its own cache key).
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import Row, make_shell, median, per_call_benchmark, quartiles, run_cell, timed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "demo_notebooks"))  # the section 9 script
import section9_script

STEPS = 200
REPETITIONS = 9

# The chapter's section 9 script with its three bugs fixed (demo_notebooks/section9_script.py).
SETUP = section9_script.source(bugs_fixed=3) + "train_step = make_train_step_v2(loss_v1)\n"

LOOP = f"params, losses = train_v3(train_step, params0, X_tr, Y_tr, {STEPS})"
FRESH = f"train_step_new = make_train_step_v2(loss_v1)\nparams, losses = train_v3(train_step_new, params0, X_tr, Y_tr, {STEPS})"
TOOLS = (
    "with jax.debug_nans(True), jax.checking_leaks(), jax.log_compiles(True), jax.explain_cache_misses(True), "
    "jax.transfer_guard('log'), jax.debug_key_reuse(True):\n    " + LOOP
)

CELLS = {
    "plain": LOOP,
    "doctor": "%%jax_doctor\n" + LOOP,
    "tools": TOOLS,
    "fresh_plain": FRESH,
    "fresh_doctor": "%%jax_doctor\n" + FRESH,
}


def ratio_rows() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for cell in CELLS.values():  # warm-up: compilations in every context, imports, the doctor's cache key
        run_cell(shell, cell)
    run_cell(shell, "%%jax_doctor -o _doctor_check\n" + LOOP)
    clean = shell.user_ns["_doctor_check"]

    times: dict[str, list[float]] = {name: [] for name in CELLS}
    order = list(CELLS)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=CELLS[name]: run_cell(shell, c)))

    def ratios(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(times[a], times[b])]

    per = f"{STEPS} steps of the section 9 MLP (dropout, 3 layers), {REPETITIONS} reps"
    doctor_plain = ratios("doctor", "plain")
    return [
        Row(
            "%%jax_doctor vs the plain loop (steady)",
            median(times["doctor"]),
            median(times["plain"]),
            goal=1.25,
            values=doctor_plain,
            note=f"{per}; middle half of the ratios: {quartiles(doctor_plain, 2)}",
        ),
        Row(
            "%%jax_doctor vs the bare JAX switches",
            median(times["doctor"]),
            median(times["tools"]),
            values=ratios("doctor", "tools"),
            note="debug_nans + checking_leaks + log_compiles + explain_cache_misses + transfer_guard + "
            "debug_key_reuse around the same loop (for information)",
        ),
        Row(
            "cell defining and training a new step: doctor vs plain",
            median(times["fresh_doctor"]),
            median(times["fresh_plain"]),
            values=ratios("fresh_doctor", "fresh_plain"),
            note="both compile the new function; the doctor once more, under its cache key (for information)",
        ),
        Row(
            "the clean loop gives no finding",
            compare="check",
            goal=True,
            value=not clean.findings,
            note=clean.summary[:90],
        ),
    ]


def run() -> list[Row]:
    """The ratios above, then the microseconds added per call (``harness.per_call_rows``)."""
    return ratio_rows() + per_call_benchmark("doctor")


if __name__ == "__main__":
    from harness import table

    print(table(run()))
