"""``%jax_hlo`` on a 40-layer MLP: what the report costs on top of building the program.

Every repetition defines the model afresh (a new function object), so nothing
is served from JAX's trace, lowering or compilation caches, for either side:

* ``magic``:    ``%jax_hlo layer_17 mlp(params, x) -o rep`` in an in-process
  IPython shell: trace, lower, compile, the jaxpr walk, the StableHLO walk
  (MLIR bindings), parsing the optimized HLO text, matching the scope, the
  scope tree, baked-literal/constant checks, memory/cost analysis, the
  rendered report;
* ``baseline``: ``jax.jit(mlp).lower(params, x).compile().as_text()`` as a
  plain cell - the least a person does to look at the optimized program (the
  goal: magic <= 1.25x of it);
* ``probe``:    ``jaxmagic.probes.hlo(...)`` called directly, for information
  (the magic minus parsing its line and displaying the report).
"""

from __future__ import annotations

import statistics

from harness import Row, make_shell, median, run_cell, timed

LAYERS = 40
WIDTH = 256
REPETITIONS = 9

SETUP = f"""
import jax, jax.numpy as jnp
import jaxmagic.probes

def make_mlp():
    def mlp(params, x):
        h = x
        for i, (w, b) in enumerate(params):
            with jax.named_scope(f"layer_{{i}}"):
                h = jax.nn.gelu(h @ w + b)
        with jax.named_scope("head"):
            return jnp.mean(h ** 2)
    return mlp

_keys = jax.random.split(jax.random.key(0), {LAYERS})
params = [(jax.random.normal(k, ({WIDTH}, {WIDTH})) / {WIDTH} ** 0.5, jnp.zeros({WIDTH})) for k in _keys]
x = jnp.ones((32, {WIDTH}))
"""

CELLS = {
    "magic": "mlp = make_mlp()\n%jax_hlo layer_17 mlp(params, x) -o rep",
    "baseline": "mlp = make_mlp()\n_text = jax.jit(mlp).lower(params, x).compile().as_text()",
    "probe": "mlp = make_mlp()\n_rep = jaxmagic.probes.hlo(mlp, params, x, scope='layer_17')",
}


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for cell in CELLS.values():  # warm up JAX's own internal caches (jnp functions, gelu, ...)
        run_cell(shell, cell)
    times: dict[str, list[float]] = {name: [] for name in CELLS}
    order = list(CELLS)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=CELLS[name]: run_cell(shell, c)))
    report = shell.user_ns["rep"]
    assert report.scope_found and len(report.tree) == LAYERS + 1, report.summary
    ratios = [m / b for m, b in zip(times["magic"], times["baseline"])]
    probe = [p / b for p, b in zip(times["probe"], times["baseline"])]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    counts = ", ".join(f"{n} {s}" for s, n in report.counts.items())
    return [
        Row(
            f"%jax_hlo SCOPE on a {LAYERS}-layer MLP vs lower+compile+as_text",
            median(times["magic"]),
            median(times["baseline"]),
            goal=1.25,
            values=ratios,
            note=f"{REPETITIONS} reps, fresh function each; middle half {q1:.2f}-{q3:.2f}; scope: {counts}",
        ),
        Row(
            "probes.hlo (no magic, no display) vs lower+compile+as_text",
            median(times["probe"]),
            median(times["baseline"]),
            values=probe,
            note="for information",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
