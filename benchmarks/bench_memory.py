"""``%jax_memory`` on a training step of 1,000+ equations: what measuring costs beside one compilation.

The step (a 30-block MLP with a 4x hidden layer, its gradient and an SGD update: ~1,300 equations) is
defined afresh at every repetition (a new function object), so nothing is served from JAX's caches:

* ``baseline``: ``jax.jit(step).lower(params, x).compile()`` - one compilation of the call, the least a
  person does to read ``memory_analysis()``;
* ``measure``: ``probes.memory_of_call(step, ..., try_ways=False)`` - trace (the same trace as the
  baseline's), compile with XLA's dumps on, read and parse the dumps, attribute the buffers at the peak
  (goal: <= 1.3x of the baseline);
* ``with trials``: the same with the ways down tried; each trial is one more compilation (here donation
  and two jax.checkpoint variants, which trace the step again), so this is reported as the number of
  compilations' worth it costs, not held to the goal.
"""

from __future__ import annotations

import statistics

from harness import Row, make_shell, median, run_cell, timed

BLOCKS = 30
WIDTH = 128
REPETITIONS = 7

SETUP = f"""
import jax, jax.numpy as jnp
import jaxmagic.probes

def make_step():
    def block(p, x):
        h = jax.nn.gelu(x @ p["w1"])
        return x + h @ p["w2"]

    def loss(params, x):
        for p in params:
            x = block(p, x)
        return jnp.mean(x ** 2)

    def step(params, x):
        grads = jax.grad(loss)(params, x)
        return jax.tree.map(lambda a, g: a - 0.01 * g, params, grads)

    return step

params = [{{"w1": jax.ShapeDtypeStruct(({WIDTH}, {4 * WIDTH}), jnp.float32),
           "w2": jax.ShapeDtypeStruct(({4 * WIDTH}, {WIDTH}), jnp.float32)}}] * {BLOCKS}
x = jax.ShapeDtypeStruct((512, {WIDTH}), jnp.float32)
equations = len(jax.make_jaxpr(make_step())(params, x).jaxpr.eqns)
"""

CELLS = {
    "baseline": "step = jax.jit(make_step())\n_c = step.lower(params, x).compile()",
    "measure": "step = jax.jit(make_step())\nrep = jaxmagic.probes.memory_of_call(step, (params, x), try_ways=False)",
    "trials": "step = jax.jit(make_step())\nrep_t = jaxmagic.probes.memory_of_call(step, (params, x))",
}


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for cell in CELLS.values():  # warm up JAX's own internal caches
        run_cell(shell, cell)
    times: dict[str, list[float]] = {name: [] for name in CELLS}
    order = list(CELLS)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=CELLS[name]: run_cell(shell, c)))
    measured = shell.user_ns["rep"].programs[0]
    tried = shell.user_ns["rep_t"].programs[0]
    assert measured.buffers and tried.ways_down, measured
    equations = shell.user_ns["equations"]
    ratios = [m / b for m, b in zip(times["measure"], times["baseline"])]
    trials = [t / b for t, b in zip(times["trials"], times["baseline"])]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return [
        Row(
            f"%jax_memory (measure only) on a {equations}-equation training step vs one compilation",
            median(times["measure"]),
            median(times["baseline"]),
            goal=1.3,
            values=ratios,
            note=f"{REPETITIONS} reps, fresh function each; middle half {q1:.2f}-{q3:.2f}",
        ),
        Row(
            f"%jax_memory with its {len(tried.ways_down)} ways down tried vs one compilation",
            median(times["trials"]),
            median(times["baseline"]),
            values=trials,
            note="each way down is one more compilation (jax.checkpoint traces the step again): not held to the goal",
        ),
    ]
