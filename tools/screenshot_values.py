"""Screenshot the %%jax_print / %jax_bisect / %%jax_keys / %%jax_doctor reports, like tools/screenshot_reports.py.

Runs the magics on the chapter's section 1 prints and bisection and on its section 9 training
script in an in-process IPython shell, renders each report's static HTML and photographs it with
headless Chromium:

* ``docs/img/<name>.png`` for each report below;
* ``build/screenshots/values.html`` / ``values.png``: all of them on one page.

Usage: ``.venv/bin/python tools/screenshot_values.py [--chromium PATH] [--scale 2] [--only NAMES]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from screenshot_reports import ROOT, photograph  # noqa: E402

CELLS: list[tuple[str | None, str]] = [
    (
        None,
        """\
import numpy as np, jax, jax.numpy as jnp
from jax import lax
from functools import partial

@jax.jit
def stats(x):
    jax.debug.print("mean={m:.3f}  max={mx:.2f}", m=x.mean(), mx=x.max())
    jax.debug.print("first={} last={}", x[0], x[-1])
    return x * 2

def branchy(x):
    return lax.cond(x > 0, lambda x: (jax.debug.print("positive {x}", x=x), x)[1],
                    lambda x: (jax.debug.print("negative {x}", x=x), -x)[1], x)
""",
    ),
    (
        "jax_print",
        """\
%%jax_print -o jax_print
stats(jnp.array([1.0, 2.0, 4.5]))
jax.vmap(branchy)(jnp.array([1.0, -1.0]))
""",
    ),
    (
        None,
        """\
W_bug = jax.random.normal(jax.random.key(1), (128, 128)) / jnp.sqrt(128.0)
X_bug = jax.random.normal(jax.random.key(2), (50, 128))
ref_bug = (np.asarray(W_bug, np.float64) @ np.asarray(X_bug, np.float64).T).sum(0)

def closure_version(X):
    return jax.vmap(lambda x: jnp.sum(W_bug @ x))(X)

def variance_by_moments(x):
    return jnp.mean(x ** 2) - jnp.mean(x) ** 2
""",
    ),
    ("jax_bisect", "%jax_bisect closure_version(X_bug) --ref ref_bug -o jax_bisect\n"),
    (
        "jax_bisect_algorithm",
        "%jax_bisect variance_by_moments(jnp.array([1e4 + 1, 1e4 + 2, 1e4 + 3])) -o jax_bisect_algorithm\n",
    ),
    (
        None,
        """\
def make_data(key, n=512, d=16):
    kx, kw = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    return X, (X @ jax.random.normal(kw, (d,)) > 0).astype(jnp.int32)

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

def loss_v0(params, x, y, key):
    logits = forward(params, x, key)
    ce = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))
    return ce + 1e-3 * sum(jnp.linalg.norm(layer["b"]) for layer in params)

def make_train_step_v0(loss_fn):
    @partial(jax.jit, static_argnames=("step",))
    def train_step(params, x, y, key, step):
        lr = 0.5 * 0.98 ** step
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, key)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss
    return train_step

def train_v0(step_fn, params, X, Y, n_steps, seed=0):
    key = jax.random.key(seed)
    losses = []
    for step in range(n_steps):
        step_key = jax.random.split(key)[0]
        params, loss = step_fn(params, X, Y, step_key, step)
        losses.append(float(loss))
    return params, losses

X_tr, Y_tr = make_data(jax.random.key(42))
params0 = init_params(jax.random.key(1), [16, 64, 64, 2])
""",
    ),
    (
        "jax_keys",
        """\
%%jax_keys -o jax_keys
train_v0(make_train_step_v0(loss_v0), params0, X_tr, Y_tr, 4)
""",
    ),
    (
        "jax_doctor",
        """\
%%jax_doctor -o jax_doctor
step_v0 = make_train_step_v0(loss_v0)
_, losses_v0 = train_v0(step_v0, params0, X_tr, Y_tr, 8)
""",
    ),
]


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(photograph(CELLS, "values", "jaxmagic print, bisect, keys and doctor reports", sys.argv[1:], __doc__))
