"""Overhead of ``%%jax_leaks`` on a cell that traces, compiles and runs a small training loop.

Leak checking only happens while tracing, so both ways of checking a cell
must make its functions trace (and therefore compile) again:

* ``magic``:     ``%%jax_leaks`` + body: a fresh cache key for the cell
  (``jax.make_user_context``), the namespace search for held tracers after it,
  and the report;
* ``clear``:     ``jax.clear_caches()`` then ``with jax.checking_leaks():`` + body,
  as a plain cell - what the chapter does by hand; the baseline of the goal
  (<= 1.10x);
* ``cached``:    the body alone, everything cached (for information: what
  re-tracing and compiling cost in the first place).

All go through ``shell.run_cell``. Variants alternate for several repetitions;
we report the median of the per-repetition ratios. A second row measures what
each way leaves behind: right after it, a cell calls a jitted function that the
checked cell does not use (``predict``, compiled during set-up). After
``jax.clear_caches()`` it compiles again; after the magic it runs from the old
cache.
"""

from __future__ import annotations

import textwrap

from harness import Row, make_shell, median, quartiles, run_cell, timed

STEPS = 200
REPETITIONS = 15

SETUP = """
import jax, jax.numpy as jnp

def mlp(p, x):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return h @ p["w2"] + p["b2"]

@jax.jit
def loss(p, x, y):
    return jnp.mean((mlp(p, x) - y) ** 2)

@jax.jit
def step(p, x, y):
    grads = jax.grad(loss)(p, x, y)
    return jax.tree.map(lambda a, g: a - 1e-2 * g, p, grads)

predict = jax.jit(mlp)   # used elsewhere in the notebook, not in the checked cell

@jax.jit
def accuracy(p, x, y):
    return jnp.mean(jnp.abs(mlp(p, x) - y) < 0.5)

_k = jax.random.split(jax.random.key(0), 4)
params0 = {"w1": 0.1 * jax.random.normal(_k[0], (16, 32)), "b1": jnp.zeros(32),
           "w2": 0.1 * jax.random.normal(_k[1], (32, 4)), "b2": jnp.zeros(4)}
x = jax.random.normal(_k[2], (64, 16))
y = jax.random.normal(_k[3], (64, 4))
predictions = predict(params0, x)
"""

BODY = f"""
params = params0
for _ in range({STEPS}):
    params = step(params, x, y)
final = (float(loss(params, x, y)), float(accuracy(params, x, y)))
""".strip()

OTHER = "predictions = predict(params0, x).block_until_ready()"

CELLS = {
    "magic": "%%jax_leaks\n" + BODY,
    "clear": "jax.clear_caches()\nwith jax.checking_leaks():\n" + textwrap.indent(BODY, "    "),
    "cached": BODY,
}


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for cell in CELLS.values():  # warm-up: imports, the magic's first-use cache key, Python caches
        run_cell(shell, cell)
        run_cell(shell, CELLS["cached"])

    times: dict[str, list[float]] = {name: [] for name in CELLS}
    after: dict[str, list[float]] = {"magic": [], "clear": []}
    order = list(CELLS)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=CELLS[name]: run_cell(shell, c)))
            if name in after:  # what an unrelated cached function costs right after this way of checking
                after[name].append(timed(lambda: run_cell(shell, OTHER)))

    magic_vs_clear = [m / c for m, c in zip(times["magic"], times["clear"])]
    next_magic_vs_clear = [m / c for m, c in zip(after["magic"], after["clear"])]
    per = f"{STEPS} jitted steps + 2 evaluations per cell, {REPETITIONS} reps"
    return [
        Row(
            "%%jax_leaks vs clear_caches + checking_leaks",
            median(times["magic"]),
            median(times["clear"]),
            goal=1.10,
            values=magic_vs_clear,
            note=f"{per}; middle half of the ratios: {quartiles(magic_vs_clear)}",
        ),
        Row(
            "next cell, another jitted function: after %%jax_leaks vs after clear_caches",
            median(after["magic"]),
            median(after["clear"]),
            values=next_magic_vs_clear,
            note="predict(params0, x), compiled before; < 1: the magic left its cache warm (for information)",
        ),
        Row(
            "%%jax_leaks vs the cached cell",
            median(times["magic"]),
            median(times["cached"]),
            values=[m / c for m, c in zip(times["magic"], times["cached"])],
            note="the price of tracing and compiling again, which leak checking needs (for information)",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
