"""Overhead of ``%%jax_print`` against capturing ``jax.debug.print`` output by hand.

A cell calls a jitted function with two debug prints 100 times (200 lines), through ``shell.run_cell``:

* ``magic``: ``%%jax_print`` + the calls: every line caught with its site and its call, the program
  traced once more under the magic's cache key the first time, ``effects_barrier`` after each call;
* ``bare``: ``contextlib.redirect_stdout`` around the calls and one ``jax.effects_barrier()`` at
  the end - the chapter's ``capture_stdout``; the baseline (goal <= 1.15x: the magic waits for the
  prints of every call, so that each line is attributed to its call);
* ``plain``: the calls with the prints going to the cell's output (for information).
"""

from __future__ import annotations

from bench_doctor import make_shell, quartiles, run_cell
from harness import Row, median, timed

CALLS = 100
REPETITIONS = 7

SETUP = """
import contextlib, io
import jax, jax.numpy as jnp

@jax.jit
def stats(x):
    jax.debug.print("mean={m:.3f} max={mx:.2f}", m=x.mean(), mx=x.max())
    jax.debug.print("first={} last={}", x[0], x[-1])
    return x * 2

xs = jnp.linspace(0.0, 1.0, 1000)
"""

# The last line is an assignment: a bare `jax.block_until_ready(out)` would make the magic's cell show
# the 1,000-element result as Out[] (~10 ms of array printing) while the bare cell, whose last line is
# inside a `with`, shows nothing.
BODY = f"for _ in range({CALLS}):\n    out = stats(xs)\nout = jax.block_until_ready(out)"
BARE = (
    "_buffer = io.StringIO()\nwith contextlib.redirect_stdout(_buffer):\n"
    f"    for _ in range({CALLS}):\n        out = stats(xs)\n    jax.block_until_ready(out)\n    jax.effects_barrier()"
)
CELLS = {"magic": "%%jax_print\n" + BODY, "bare": BARE, "plain": BODY + "\njax.effects_barrier()"}


def instruction_cells(steps: int) -> dict[str, str]:
    """The cells for ``benchmarks/instructions.py``, baseline first: ``steps`` calls."""
    loop = f"range({CALLS})"
    return {name: CELLS[name].replace(loop, f"range({steps})") for name in ("bare", "magic", "plain")}


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for cell in CELLS.values():
        run_cell(shell, cell)
    run_cell(shell, "%%jax_print -o _print_check\n" + BODY)
    check = shell.user_ns["_print_check"]
    times: dict[str, list[float]] = {name: [] for name in CELLS}
    order = list(CELLS)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=CELLS[name]: run_cell(shell, c)))
    ratios = [m / b for m, b in zip(times["magic"], times["bare"])]
    return [
        Row(
            "%%jax_print vs redirect_stdout + effects_barrier",
            median(times["magic"]),
            median(times["bare"]),
            goal=1.15,
            values=ratios,
            note=f"{CALLS} calls, {2 * CALLS} lines, {REPETITIONS} reps; middle half: {quartiles(ratios)}",
        ),
        Row(
            "%%jax_print vs printing to the cell",
            median(times["magic"]),
            median(times["plain"]),
            values=[m / p for m, p in zip(times["magic"], times["plain"])],
            note="(for information)",
        ),
        Row(
            "every line caught, by site and by call",
            compare="check",
            goal=True,
            value=len(check.texts) == 2 * CALLS and len(check.calls) == CALLS and len(check.sites) == 2,
            note=f"{len(check.texts)} lines, {len(check.calls)} calls, {len(check.sites)} sites",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
