"""Time to stop at the failing line with ``%jax_debug`` against re-running the same call under ``jax.disable_jit()``.

Two calls that fail with a NaN under ``jax.debug_nans``:

* a jitted ``lax.scan`` of 1,000 steps whose body makes a NaN at step 900 (``log`` of a
  negative number): ``%jax_debug``'s re-run runs the loop compiled once (finding the first
  non-finite step and the carry going into it), then only step 900 op by op;
* a jitted training step of a small MLP (value_and_grad and an SGD update) whose layer 3
  makes the NaN in the forward pass: no loop to skip, so the whole step runs op by op.

Figures: ``debug_after(error)`` - the whole probe: finding the call, the re-run to the stop and
the report - against the baseline, the same call under ``jax.disable_jit()`` +
``jax.debug_nans(True)`` until it raises (goal <= 0.1x for the scan). Wall clock on a shared
machine: the median of per-repetition ratios, with the spread.
"""

from __future__ import annotations

from harness import Row, median, quiet, timed

REPETITIONS = 3
LAYERS, WIDTH, BATCH, BAD_LAYER = 6, 256, 64, 3


def _scan_case():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def body(c, x):
        y = jnp.log(c - x)
        return c + 0.001, y

    @jax.jit
    def run(c0, xs):
        return lax.scan(body, c0, xs)

    xs = jnp.concatenate([jnp.zeros(900), jnp.full(100, 5.0)])
    c0 = jnp.array(1.0)
    return lambda: run(c0, xs)  # the call as a user writes it: %jax_debug evaluates its parts again


def _mlp_case():
    import jax
    import jax.numpy as jnp
    import numpy as np

    def loss(params, x, y):
        h = x
        for p in params:
            h = jnp.tanh(h @ p["w"] + p["b"]) * jnp.log(p["temperature"])
        return jnp.mean((h - y) ** 2)

    @jax.jit
    def train_step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), value

    keys = jax.random.split(jax.random.PRNGKey(0), LAYERS)
    params = [
        {
            "w": jax.random.normal(key, (WIDTH, WIDTH)) / np.sqrt(WIDTH),
            "b": jnp.zeros(WIDTH),
            "temperature": jnp.float32(-1.0 if i == BAD_LAYER else np.e),
        }
        for i, key in enumerate(keys)
    ]
    x = jax.random.normal(jax.random.PRNGKey(1), (BATCH, WIDTH))
    y = jnp.zeros((BATCH, WIDTH))
    return lambda: train_step(params, x, y)


def _error_of(call) -> BaseException:
    import jax

    try:
        with quiet(), jax.debug_nans(True):
            jax.block_until_ready(call())
    except FloatingPointError as error:
        return error
    raise RuntimeError("no NaN under debug_nans")


def _eager_rerun(call) -> None:
    import jax

    try:
        with quiet(), jax.disable_jit(), jax.debug_nans(True):
            jax.block_until_ready(call())
    except FloatingPointError:
        return
    raise RuntimeError("the eager re-run did not raise")


def _rows(name: str, call, goal: float | None) -> list[Row]:
    from jaxmagic.probes import debug_after

    error = _error_of(call)
    # the first of each in the process: what a notebook user meets (JAX compiles each eager operation once)
    first_stop = timed(lambda: debug_after(error).release())
    first_eager = timed(lambda: _eager_rerun(call))
    stops, eager, ratios = [], [], []
    for _ in range(REPETITIONS):
        stops.append(timed(lambda: debug_after(error).release()))
        eager.append(timed(lambda: _eager_rerun(call)))
        ratios.append(stops[-1] / eager[-1])
    report = debug_after(error).report
    where = f"stopped at `{report.stopped.line.code}`" if report.stopped else "did not stop"
    spread = f"ratios {min(ratios):.3f}-{max(ratios):.3f}; stop {min(stops):.2f}-{max(stops):.2f} s"
    return [
        Row(
            f"%jax_debug time-to-stop vs disable_jit re-run: {name}",
            median(stops),
            median(eager),
            goal=goal,
            values=ratios,
            note=f"{where} {report.position}; {report.compiled_runs} compiled run(s); {spread}; "
            f"median of {REPETITIONS} per-run ratios; wall clock",
        ),
        Row(
            f"first %jax_debug stop vs first disable_jit re-run in the process: {name}",
            first_stop,
            first_eager,
            note="JAX compiles each eager operation once; for information",
        ),
    ]


def run() -> list[Row]:
    return _rows("1,000-step scan failing at step 900", _scan_case(), goal=0.1) + _rows(
        f"{LAYERS}-layer MLP step, NaN in layer {BAD_LAYER}'s forward pass", _mlp_case(), goal=None
    )


if __name__ == "__main__":
    from harness import table

    print(table(run()))
