"""Screenshot the %%jax_compiles / %jax_stages / %%jax_transfers reports, like tools/screenshot_reports.py.

Runs the magics on small programs with the chapter's compilation and transfer
problems in an in-process IPython shell, renders each report's static HTML and
photographs it with headless Chromium:

* ``docs/img/<name>.png`` for each report below;
* ``build/screenshots/compiles.html`` / ``compiles.png``: all of them on one page.

Usage: ``.venv/bin/python tools/screenshot_compiles.py [--chromium PATH] [--scale 2] [--only NAMES]``.
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
import jax, jax.numpy as jnp, numpy as np
from functools import partial

def loss(params, x, y):
    logits = jnp.tanh(x @ params["w"] + params["b"])
    return jnp.mean((logits - y) ** 2)

def make_train_step(loss_fn):
    @partial(jax.jit, static_argnames=("step",))
    def train_step(params, x, y, step):
        lr = 0.5 * 0.98 ** step                        # learning rate decays with the step
        grads = jax.grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads)
    return train_step

train_step = make_train_step(loss)
params = {"w": jnp.zeros((16, 4)), "b": jnp.zeros(4)}
x, y = jnp.ones((32, 16)), jnp.ones((32, 4))

@jax.jit
def scale(w, x):
    return w * x
""",
    ),
    (
        "jax_compiles_static",
        """\
%%jax_compiles -o jax_compiles_static
p = params
for step in range(6):
    p = train_step(p, x, y, step)
""",
    ),
    (
        "jax_compiles_causes",
        """\
%%jax_compiles --all -o jax_compiles_causes
w = jnp.ones(3)
scale(w, jnp.float32(2.0))
scale(w, 2.0)                          # Python float: weakly typed
scale(w.astype(jnp.int32), 2.0)        # dtype changed
for n in (4, 5):
    scale(jnp.ones(n), 2.0)            # shape changed
for _ in range(2):
    jax.jit(lambda v: v + 1)(w)        # a new function object each time
""",
    ),
    (
        None,
        """\
def deep(ws, x):
    for w in ws:                       # a Python loop: unrolled, 40 layers to compile
        x = jnp.tanh(x @ w)
    return x.sum()

ws_deep = [jax.random.normal(k, (32, 32)) / 6.0 for k in jax.random.split(jax.random.key(5), 40)]
x_deep = jnp.ones((8, 32))
""",
    ),
    ("jax_stages", "%jax_stages deep(ws_deep, x_deep) -o jax_stages\n"),
    (
        None,
        """\
f_tg = jax.jit(lambda x: x * 2)
x_dev = jnp.ones(3)
f_tg(x_dev)
def step_on(batch):
    return f_tg(batch)
""",
    ),
    (
        "jax_transfers",
        """\
%%jax_transfers -o jax_transfers
for _ in range(10):
    f_tg(np.ones(3, np.float32))       # NumPy array: copied to the device each call
f_tg(1.0)                              # Python scalar
step_on(np.zeros(3, np.float32))
f_tg(jax.device_put(np.ones(3, np.float32)))   # explicit: allowed
""",
    ),
]


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(photograph(CELLS, "compiles", "jaxmagic compilation reports", sys.argv[1:], __doc__))
