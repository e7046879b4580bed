"""Overhead of ``%%jax_nans`` on a cell that runs a small jitted step 1,000 times.

Three ways of running the same cell body in one in-process IPython shell:

* ``magic``:   ``%%jax_nans`` + body;
* ``scoped``:  ``with jax.debug_nans(True):`` + body, as a plain cell - what a
  user would write by hand; the baseline of the goal (<= 1.05x);
* ``plain``:   the body with no checking at all (for information: the price
  of ``jax_debug_nans`` itself, which the magic cannot avoid);
* ``inside``:  ``%%jax_nans --inside`` + body: the first call of ``step`` is also
  traced and evaluated op by op (every intermediate checked), and every call takes
  JAX's Python dispatch path; measured against ``magic`` (no goal is set: for
  information, so that its price is stated).

All three go through ``shell.run_cell``, so they pay IPython's cell cost
alike; the magic additionally pays its own nested ``run_cell`` of the body,
which is part of what we measure. Everything is compiled in a warm-up first;
then the three variants alternate for several repetitions and we report the
median of the per-repetition ratios.
"""

from __future__ import annotations

import textwrap

from harness import Row, alternate, make_shell, median, per_call_benchmark, quartiles, run_cell

STEPS = 1000
REPETITIONS = 25

SETUP = """
import jax, jax.numpy as jnp

@jax.jit
def step(params, x):
    def loss(p):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        y = h @ p["w2"] + p["b2"]
        return jnp.mean((y - 1.0) ** 2)
    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 1e-2 * g, params, grads)

_key = jax.random.split(jax.random.key(0), 3)
params0 = {
    "w1": 0.1 * jax.random.normal(_key[0], (16, 32)), "b1": jnp.zeros(32),
    "w2": 0.1 * jax.random.normal(_key[1], (32, 4)), "b2": jnp.zeros(4),
}
x = jax.random.normal(_key[2], (32, 16))
"""

BODY = f"""
params = params0
for _ in range({STEPS}):
    params = step(params, x)
params = jax.block_until_ready(params)
""".strip()


def variants(body: str) -> dict[str, str]:
    return {
        "magic": "%%jax_nans\n" + body,
        "scoped": "with jax.debug_nans(True):\n" + textwrap.indent(body, "    "),
        "plain": body,
        "inside": "%%jax_nans --inside\n" + body,
    }


CELLS = variants(BODY)


def instruction_cells(steps: int) -> dict[str, str]:
    """The cells for ``benchmarks/instructions.py``, baseline first: the loop with ``steps`` steps."""
    cells = variants(BODY.replace(f"range({STEPS})", f"range({steps})"))
    return {name: cells[name] for name in ("scoped", "magic", "plain", "inside")}


# The same cell without the loop: what the magic costs per cell, whatever the cell does.
EMPTY_CELLS = {name: cell for name, cell in variants("params = params0").items() if name != "inside"}


def ratio_rows() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for _ in range(2):  # compile under each config (debug_nans is part of jit's cache key), warm caches
        for cell in list(CELLS.values()) + list(EMPTY_CELLS.values()):
            run_cell(shell, cell)

    run_cell(shell, "%%jax_nans --inside -o _inside_check\n" + BODY)
    inside_check = shell.user_ns["_inside_check"]
    times = alternate(shell, CELLS, REPETITIONS)
    empty = alternate(shell, EMPTY_CELLS, REPETITIONS)

    magic_vs_scoped = [m / s for m, s in zip(times["magic"], times["scoped"])]
    magic_vs_plain = [m / p for m, p in zip(times["magic"], times["plain"])]
    scoped_vs_plain = [s / p for s, p in zip(times["scoped"], times["plain"])]
    inside_vs_magic = [i / m for i, m in zip(times["inside"], times["magic"])]
    searched = [found for found in inside_check.inside_searches if not found.failure]
    per = f"{STEPS} jitted steps/cell, {REPETITIONS} reps"
    return [
        Row(
            "%%jax_nans vs with jax.debug_nans(True)",
            median(times["magic"]),
            median(times["scoped"]),
            goal=1.05,
            values=magic_vs_scoped,
            note=f"{per}; middle half of the ratios: {quartiles(magic_vs_scoped)}",
        ),
        Row(
            "%%jax_nans fixed cost per cell",
            median(empty["magic"]),
            median(empty["scoped"]),
            compare="difference",
            values=[m - s for m, s in zip(empty["magic"], empty["scoped"])],
            note="a one-line cell (params = params0), magic minus scoped; for information",
        ),
        Row(
            "%%jax_nans vs no checking",
            median(times["magic"]),
            median(times["plain"]),
            values=magic_vs_plain,
            note="for information",
        ),
        Row(
            "with jax.debug_nans(True) vs no checking",
            median(times["scoped"]),
            median(times["plain"]),
            values=scoped_vs_plain,
            note="the price of JAX's own NaN checking",
        ),
        Row(
            "%%jax_nans --inside vs %%jax_nans",
            median(times["inside"]),
            median(times["magic"]),
            values=inside_vs_magic,
            note=f"{per}; the first call evaluated op by op, every call on JAX's Python path; no goal "
            f"(for information); middle half of the ratios: {quartiles(inside_vs_magic)}",
        ),
        Row(
            "--inside evaluated the first call op by op",
            compare="check",
            goal=True,
            value=len(searched) == 1 and searched[0].equations > 0 and not inside_check.inside_findings,
            note=f"{len(searched)} call(s) evaluated, {sum(f.equations for f in searched)} equations, "
            f"{len(inside_check.inside_findings)} finding(s)",
        ),
    ]


def run() -> list[Row]:
    """The ratios above, then the microseconds added per call (``harness.per_call_rows``)."""
    return ratio_rows() + per_call_benchmark("nans")


if __name__ == "__main__":
    from harness import table

    print(table(run()))
