"""Cost of naming the operation that produced a NaN (the producer search), paid only once a NaN appeared.

Two programs:

* a jitted ``lax.scan`` of 1,000 iterations over a small state, whose body
  makes a NaN at iteration 900 (``log`` of a negative number);
* a jitted training step of a deep MLP (layer norm, matmul, gelu; forward,
  backward and an Adam update) whose layer 9 makes the NaN, at about 1.5k and 5k
  equations, and 20k with ``JAXMAGIC_BENCH_LARGE=1`` (layer count and width vary): in the forward pass
  (``log`` of a temperature that went negative) or only in the backward pass
  (the gradient of ``jnp.linalg.norm`` of a gate that is all zeros).

Figures:

* ``search``: the producer search alone on that call (``nan_producer.search``:
  trace the call, run the scan body compiled once per iteration or walk the
  step's equations, evaluate the narrowed part operation by operation);
* ``debug_nans``: the baseline - the same call re-run under
  ``jax.debug_nans(True)`` until JAX raises (its own re-run of the
  de-optimized function included), which names only ``scan``/``jit``;
* ``cell``: the whole ``%%jax_nans`` cell on the scan's NaN (JAX's check, the
  report, the search) against the same cell under ``with jax.debug_nans(True):``
  (goal <= 2x); the cell is run again and again, as a user re-runs it while debugging:
  the search's compiled scan is kept from the first run (``jaxpr_eval``), as JAX keeps
  the operations its debug_nans re-run compiled;
* ``first``: the first search and the first re-run in the process, when JAX has
  not compiled the operations one by one yet (what a notebook user meets once);
* ``compile``: compiling the training step once, against the re-run: what any
  search that compiles the program (or prefixes of it) pays before running it.

Wall-clock figures: on a busy shared machine they move by tens of percent between
runs; the ratios compare runs taken in turn in the same process.
The clean-cell overhead (``%%jax_nans`` on a 1,000-step loop vs
``with jax.debug_nans(True)``) is ``bench_nans.py``.
"""

from __future__ import annotations

import os
import textwrap

from harness import Row, make_shell, median, quiet, run_cell, timed

ITERATIONS = 1000
BAD_ITERATION = 900
REPETITIONS = 5

SETUP = f"""
import jax, jax.numpy as jnp
from jax import lax

def body(state, drive):
    state = jnp.tanh(state * 0.9 + drive)
    energy = jnp.log(jnp.sum(state ** 2) - drive[0] * 1e3)
    return state, energy

@jax.jit
def simulate(state0, drives):
    return lax.scan(body, state0, drives)

state0 = jnp.full(8, 0.5)
drives = jnp.zeros(({ITERATIONS}, 8)).at[{BAD_ITERATION}, 0].set(1.0)
"""

CALL = "simulate(state0, drives)"

# The training step: (layers, width, batch) for programs of about 1.5k and 5k equations; about 20k with
# JAXMAGIC_BENCH_LARGE=1 (its compiles alone, once plain and once under debug_nans, take 10-20 minutes here).
STEP_SIZES = [(10, 1024, 256), (34, 256, 64)] + ([(135, 128, 32)] if os.environ.get("JAXMAGIC_BENCH_LARGE") else [])
BAD_LAYER = 9
STEP_REPETITIONS = 3

STEP_SETUP = """
import numpy as np
import jax, jax.numpy as jnp

def block(p, h):
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    z = (p["g"] * (h - mu) / jnp.sqrt(var + 1e-5)) @ p["w"] + p["b"]
    z = z * jnp.log(p["temperature"])  # forward NaN where the temperature went negative
    z = z * jnp.linalg.norm(p["gate"])  # backward NaN where the gate is all zeros
    return h + jax.nn.gelu(z)

def loss(params, x, y):
    h = x
    for p in params:
        h = block(p, h)
    return jnp.mean((h - y) ** 2)

@jax.jit
def train_step(params, opt, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt["v"], grads)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, {{"m": m, "v": v}}, value

def make_params(bad):
    keys = jax.random.split(jax.random.PRNGKey(0), {layers})
    return [
        {{
            "w": jax.random.normal(key, ({width}, {width})) / np.sqrt({width}),
            "b": jnp.zeros({width}),
            "g": jnp.ones({width}),
            "temperature": jnp.float32(-1.0 if (i, bad) == ({bad_layer}, "forward") else np.e),
            "gate": jnp.zeros(4) if (i, bad) == ({bad_layer}, "backward") else jnp.full(4, 0.5),
        }}
        for i, key in enumerate(keys)
    ]

params_forward, params_backward = make_params("forward"), make_params("backward")
opt = {{"m": jax.tree.map(jnp.zeros_like, params_forward), "v": jax.tree.map(jnp.zeros_like, params_forward)}}
x = jax.random.normal(jax.random.PRNGKey(1), ({batch}, {width}))
y = jnp.zeros(({batch}, {width}))
"""
STEP_CALL = "train_step(params, opt, x, y)"


def _raising_cell(shell, cell: str) -> float:
    def go():
        with quiet():
            result = shell.run_cell(cell, store_history=False)
        if result.success:
            raise RuntimeError(f"benchmark cell did not raise:\n{cell}")

    return timed(go)


def _raises_under_debug_nans(function, args) -> None:
    import jax

    try:
        with quiet(), jax.debug_nans(True):
            jax.block_until_ready(function(*args))
    except FloatingPointError:
        return
    raise RuntimeError("no NaN under debug_nans")


def _equations(program) -> int:
    """Equations of a traced program, those of its sub-programs (jit, custom_jvp, ...) included."""
    from jaxmagic._jax import jaxpr_parts

    jaxpr, _ = jaxpr_parts.closed_parts(program)
    return sum(1 + sum(_equations(sub) for sub in jaxpr_parts.sub_jaxprs(eqn)) for eqn in jaxpr.eqns)


def _step_rows(shell, layers: int, width: int, batch: int) -> list[Row]:
    """The producer search on a training step whose layer 9 makes the NaN, forward or backward."""
    import jax

    from jaxmagic.probes._nans.search.producer import search

    run_cell(shell, STEP_SETUP.format(layers=layers, width=width, batch=batch, bad_layer=BAD_LAYER))
    ns = shell.user_ns
    step = ns["train_step"]
    calls = {bad: [ns[f"params_{bad}"], ns["opt"], ns["x"], ns["y"]] for bad in ("forward", "backward")}
    equations = _equations(jax.make_jaxpr(step)(*calls["forward"]))
    compile_time = timed(lambda: jax.block_until_ready(step(*calls["forward"])))
    # A notebook's first NaN: JAX's re-run (compiling each operation it runs alone), then the search.
    first_nans = timed(lambda: _raises_under_debug_nans(step, calls["backward"]))
    first_search = timed(lambda: search(step, calls["backward"], source=STEP_CALL))
    found = {bad: search(step, args, source=STEP_CALL) for bad, args in calls.items()}
    _raises_under_debug_nans(step, calls["forward"])
    ratios: dict[str, list[float]] = {"forward": [], "backward": []}
    rerun: dict[str, list[float]] = {"forward": [], "backward": []}
    searched: dict[str, list[float]] = {"forward": [], "backward": []}
    for _ in range(STEP_REPETITIONS):
        for bad, args in calls.items():
            rerun[bad].append(timed(lambda a=args: _raises_under_debug_nans(step, a)))
            searched[bad].append(timed(lambda a=args: search(step, a, source=STEP_CALL)))
            ratios[bad].append(searched[bad][-1] / rerun[bad][-1])
    where = f"{layers}-layer MLP step (width {width}, batch {batch}), {equations} equations"
    forward, backward = found["forward"].producer, found["backward"].producer
    rows = [
        Row(
            f"producer search vs re-run under debug_nans, NaN in layer {BAD_LAYER}'s {bad} pass ({equations} eqns)",
            median(searched[bad]),
            median(rerun[bad]),
            goal=3.0,
            values=ratios[bad],
            note=f"{where}; median of {STEP_REPETITIONS} per-run ratios; busy machine: wall clock",
        )
        for bad in ("forward", "backward")
    ]
    rows += [
        Row(
            f"first producer search vs first re-run under debug_nans ({equations} eqns)",
            first_search,
            first_nans,
            note=f"{where}; NaN in the backward pass; JAX compiles each operation it runs alone once; for information",
        ),
        Row(
            f"compiling the step once vs re-run under debug_nans ({equations} eqns)",
            compile_time,
            median(rerun["backward"]),
            note=f"{where}; what a search compiling the program (or prefixes of it) pays per compile; for information",
        ),
        Row(
            f"forward NaN named at its line in layer {BAD_LAYER} ({equations} eqns)",
            compare="check",
            goal=True,
            value=forward is not None
            and (forward.primitive, forward.phase) == ("log", "forward")
            and forward.line is not None
            and 'jnp.log(p["temperature"])' in forward.line.code,
        ),
        Row(
            f"backward NaN named at its line in layer {BAD_LAYER} ({equations} eqns)",
            compare="check",
            goal=True,
            value=backward is not None
            and (backward.primitive, backward.phase, backward.nan_maker) == ("div", "backward", "mul")
            and backward.library_function == "jnp.linalg.norm"
            and backward.line is not None
            and 'jnp.linalg.norm(p["gate"])' in backward.line.code,
        ),
    ]
    return rows


def run() -> list[Row]:
    from jaxmagic.probes._nans.search.producer import search

    shell = make_shell()
    run_cell(shell, SETUP)
    ns = shell.user_ns
    simulate, args = ns["simulate"], [ns["state0"], ns["drives"]]

    def under_debug_nans():
        _raises_under_debug_nans(simulate, args)

    found = search(simulate, args, source=CALL)
    producer = found.producer
    assert producer is not None and producer.loops[0].index == BAD_ITERATION, found
    under_debug_nans()  # compile under debug_nans

    search_times, nans_times = [], []
    for _ in range(REPETITIONS):
        search_times.append(timed(lambda: search(simulate, args, source=CALL)))
        nans_times.append(timed(under_debug_nans))

    magic_cell = "%%jax_nans\n" + CALL
    scoped_cell = "with jax.debug_nans(True):\n" + textwrap.indent(CALL, "    ")
    _raising_cell(shell, magic_cell)
    _raising_cell(shell, scoped_cell)
    magic_times, scoped_times = [], []
    for _ in range(REPETITIONS):
        magic_times.append(_raising_cell(shell, magic_cell))
        scoped_times.append(_raising_cell(shell, scoped_cell))

    where = f"{ITERATIONS}-iteration scan, NaN at iteration {BAD_ITERATION}, {REPETITIONS} reps"
    rows = [
        Row(
            "producer search vs re-run under debug_nans",
            median(search_times),
            median(nans_times),
            note=f"{where}; names `{producer.primitive}` at iteration {producer.loops[0].index} "
            "(debug_nans names `scan`); for information",
        ),
        Row(
            "%%jax_nans cell with a NaN vs with jax.debug_nans(True)",
            median(magic_times),
            median(scoped_times),
            goal=2.0,
            note=f"{where}; the whole report, search included",
        ),
        Row(
            "producer named inside the scan",
            compare="check",
            goal=True,
            value=producer.primitive == "log" and producer.loops[0].index == BAD_ITERATION,
        ),
    ]
    for layers, width, batch in STEP_SIZES:
        rows += _step_rows(shell, layers, width, batch)
    return rows


if __name__ == "__main__":
    from harness import table

    print(table(run()))
