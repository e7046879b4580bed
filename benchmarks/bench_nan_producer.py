"""Cost of naming the operation that produced a NaN (the producer search), paid only once a NaN appeared.

The program: a jitted ``lax.scan`` of 1,000 iterations over a small state,
whose body makes a NaN at iteration 900 (``log`` of a negative number).

* ``search``: the producer search alone on that call (``nan_producer.search``:
  trace the call, run the scan body compiled once per iteration, evaluate
  iteration 900 operation by operation);
* ``debug_nans``: the baseline - the same call re-run under
  ``jax.debug_nans(True)`` until JAX raises (its own re-run of the
  de-optimized function included), which names only ``scan``;
* ``cell``: the whole ``%%jax_nans`` cell on that NaN (JAX's check, the
  report, the search) against the same cell under ``with jax.debug_nans(True):``.

The clean-cell overhead (``%%jax_nans`` on a 1,000-step loop vs
``with jax.debug_nans(True)``) is ``bench_nans.py``.
"""

from __future__ import annotations

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


def _raising_cell(shell, cell: str) -> float:
    def go():
        with quiet():
            result = shell.run_cell(cell, store_history=False)
        if result.success:
            raise RuntimeError(f"benchmark cell did not raise:\n{cell}")

    return timed(go)


def run() -> list[Row]:
    import jax

    from jaxmagic.probes._support.nan_producer import search

    shell = make_shell()
    run_cell(shell, SETUP)
    ns = shell.user_ns
    simulate, args = ns["simulate"], [ns["state0"], ns["drives"]]

    def under_debug_nans():
        try:
            with jax.debug_nans(True):
                jax.block_until_ready(simulate(*args))
        except FloatingPointError:
            return
        raise RuntimeError("no NaN under debug_nans")

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
    return [
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
            note=f"{where}; the whole report, search included; for information",
        ),
        Row(
            "producer named inside the scan",
            compare="check",
            goal=True,
            value=producer.primitive == "log" and producer.loops[0].index == BAD_ITERATION,
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
