"""Cost of ``%jax_bisect`` against the chapter's hand-written bisection of the same call.

The chapter's section 1.4 example, the weights passed as an argument (``param_version(W, X)``, a
(128, 128) matrix and 50 samples), through ``shell.run_cell``:

* ``magic``:  ``%jax_bisect param_version(W, X) --ref ref``: the jitted run, the op-by-op run, the
  comparison of every leaf, and a trace of the function to list arrays it captures by closure;
* ``hand``:   the chapter's ``bisect_numeric``: ``jax.jit(fn)(*args)`` and the same under
  ``jax.disable_jit()``, each compared with the reference; the baseline (goal <= 1.5x, issue 17);
* ``auto``:   ``%jax_bisect`` without ``--ref``: it traces the function in float64 to see whether a
  float64 run is a sound reference, and runs it op by op (for information).
"""

from __future__ import annotations

from bench_doctor import make_shell, quartiles, run_cell
from harness import Row, median, timed

REPETITIONS = 9

SETUP = """
import numpy as np, jax, jax.numpy as jnp

def to64(a):
    return np.asarray(a, dtype=np.float64)

W = jax.random.normal(jax.random.key(1), (128, 128)) / jnp.sqrt(128.0)
X = jax.random.normal(jax.random.key(2), (50, 128))
ref = (to64(W) @ to64(X).T).sum(0)

def param_version(W, X):
    return jax.vmap(lambda x: jnp.sum(W @ x))(X)

def bisect_numeric(fn, *args, ref):
    err_jit = float(np.abs(to64(jax.jit(fn)(*args)) - ref).max())
    with jax.disable_jit():
        err_eager = float(np.abs(to64(fn(*args)) - ref).max())
    return err_jit, err_eager
"""

CELLS = {
    "magic": "%jax_bisect param_version(W, X) --ref ref -o _bis",
    "hand": "_errors = bisect_numeric(param_version, W, X, ref=ref)",
    "auto": "%jax_bisect param_version(W, X) -o _bis_auto",
}


def instruction_cells(steps: int) -> dict[str, str]:
    """The cells for ``benchmarks/instructions.py``, baseline first: ``steps`` bisections of the call."""
    return {name: "\n".join([CELLS[name]] * steps) if steps else "pass" for name in ("hand", "magic", "auto")}


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for cell in CELLS.values():
        run_cell(shell, cell)
    times: dict[str, list[float]] = {name: [] for name in CELLS}
    order = list(CELLS)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=CELLS[name]: run_cell(shell, c)))
    report, (err_jit, err_eager) = shell.user_ns["_bis"], shell.user_ns["_errors"]
    ratios = [m / h for m, h in zip(times["magic"], times["hand"])]
    return [
        Row(
            "%jax_bisect --ref vs the hand-written bisection",
            median(times["magic"]),
            median(times["hand"]),
            goal=1.5,
            values=ratios,
            note=f"{REPETITIONS} reps; middle half: {quartiles(ratios)}",
        ),
        Row(
            "%jax_bisect with its own float64 reference vs by hand",
            median(times["auto"]),
            median(times["hand"]),
            values=[a / h for a, h in zip(times["auto"], times["hand"])],
            note="(for information)",
        ),
        Row(
            "the same errors as by hand",
            compare="check",
            goal=True,
            value=abs(report.jit.max_abs_error - err_jit) < 1e-9 and abs(report.eager.max_abs_error - err_eager) < 1e-9,
            note=f"jit {err_jit:.3g}, eager {err_eager:.3g}",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
