"""Overhead of ``%%jax_doctor`` on a clean 200-step training loop (the chapter's section 9 model, bugs fixed).

Cells, all through ``shell.run_cell``, alternating for several repetitions:

* ``plain``:  the loop alone, ``train_step`` compiled before (what the user runs
  without jaxmagic); the baseline of the goal;
* ``doctor``: ``%%jax_doctor`` + the same loop, after one doctor cell has run
  (the doctor keeps its traces from one doctor cell to the next): the steady
  cost of leaving it on while developing. Goal <= 1.5x;
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

from harness import Row, make_shell, median, quartiles, run_cell, timed

STEPS = 200
REPETITIONS = 9

SETUP = """
import jax, jax.numpy as jnp

def make_data(key, n=512, d=16):
    kx, kw = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    w_true = jax.random.normal(kw, (d,))
    return X, (X @ w_true > 0).astype(jnp.int32)

def init_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [{"w": jax.random.normal(k, (m, n)) * jnp.sqrt(2.0 / m), "b": jnp.zeros(n)}
            for k, m, n in zip(keys, sizes[:-1], sizes[1:])]

def forward(params, x, key=None, rate=0.2):
    for i, layer in enumerate(params):
        x = x @ layer["w"] + layer["b"]
        if i < len(params) - 1:
            x = jax.nn.relu(x)
            if key is not None:
                keep = jax.random.bernoulli(jax.random.fold_in(key, i), 1 - rate, x.shape)
                x = jnp.where(keep, x / (1 - rate), 0.0)
    return x

def safe_norm(v):
    ss = jnp.sum(v ** 2)
    ok = ss > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, ss, 1.0)), 0.0)

def loss_fn(params, x, y, key):
    logits = forward(params, x, key)
    ce = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))
    return ce + 1e-3 * sum(safe_norm(layer["b"]) for layer in params)

def make_train_step():
    @jax.jit
    def train_step(params, x, y, key, step):
        lr = 0.5 * 0.98 ** step
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, key)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss
    return train_step

def train(step_fn, params, X, Y, n_steps, seed=0):
    key = jax.random.key(seed)
    losses = []
    for step in range(n_steps):
        key, step_key = jax.random.split(key)
        params, loss = step_fn(params, X, Y, step_key, jnp.int32(step))
        losses.append(float(loss))
    return params, losses

X_tr, Y_tr = make_data(jax.random.key(42))
params0 = init_params(jax.random.key(1), [16, 64, 64, 2])
train_step = make_train_step()
"""

LOOP = f"params, losses = train(train_step, params0, X_tr, Y_tr, {STEPS})"
FRESH = f"train_step_new = make_train_step()\nparams, losses = train(train_step_new, params0, X_tr, Y_tr, {STEPS})"
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


def run() -> list[Row]:
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
            goal=1.5,
            value=median(doctor_plain),
            note=f"{per}; middle half of the ratios: {quartiles(doctor_plain, 2)}",
        ),
        Row(
            "%%jax_doctor vs the bare JAX switches",
            median(times["doctor"]),
            median(times["tools"]),
            value=median(ratios("doctor", "tools")),
            note="debug_nans + checking_leaks + log_compiles + explain_cache_misses + transfer_guard + "
            "debug_key_reuse around the same loop (for information)",
        ),
        Row(
            "cell defining and training a new step: doctor vs plain",
            median(times["fresh_doctor"]),
            median(times["fresh_plain"]),
            value=median(ratios("fresh_doctor", "fresh_plain")),
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


if __name__ == "__main__":
    from harness import table

    print(table(run()))
