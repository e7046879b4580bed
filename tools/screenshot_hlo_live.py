"""Screenshot the %jax_hlo / %jax_live / %%jax_live reports, like tools/screenshot_reports.py.

Runs the magics on the chapter's section 2 and 7 programs in an in-process
IPython shell, renders each report's static HTML and photographs it with
headless Chromium:

* ``docs/img/<name>.png`` for each report below;
* ``build/screenshots/hlo_live.html`` / ``hlo_live.png``: all of them on one page.

Usage: ``.venv/bin/python tools/screenshot_hlo_live.py [--chromium PATH] [--scale 2] [--only NAMES]``.
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
import jax, jax.numpy as jnp

SCALE = 2.0

def scaled(x):
    return x * SCALE

def scoped_mlp(params, x):
    with jax.named_scope("encoder"):
        h = jax.nn.relu(x @ params["w1"])
    with jax.named_scope("head"):
        out = h @ params["w2"]
        loss = jnp.mean(out ** 2)
    return loss

p_ns = {"w1": jnp.ones((4, 8)) * 0.1, "w2": jnp.ones((8, 2)) * 0.1}
x_ns = jnp.ones((3, 4))

def two_steps(x):
    with jax.named_scope("a"):
        y = jnp.sin(x)
    with jax.named_scope("b"):
        return y * 2

def per_example_loss(w, x, y):
    return (jnp.dot(x, w) - y) ** 2

P_dim = 4096
spec_w = jax.ShapeDtypeStruct((P_dim,), jnp.float32)
per_ex_grad = jax.jit(jax.vmap(jax.grad(per_example_loss), in_axes=(None, 0, 0)))
""",
    ),
    ("jax_hlo_scope", "%jax_hlo encoder scoped_mlp(p_ns, x_ns) -o jax_hlo_scope\n"),
    ("jax_hlo_tree", "%jax_hlo scoped_mlp(p_ns, x_ns) --stage jaxpr,hlo -o jax_hlo_tree\n"),
    ("jax_hlo_fused", "%jax_hlo a two_steps(jnp.ones(8)) -o jax_hlo_fused\n"),
    ("jax_hlo_baked", "%jax_hlo scaled(1.0) --stage jaxpr -o jax_hlo_baked\n"),
    (
        "jax_hlo_sweep",
        "%jax_hlo per_ex_grad(spec_w, jax.ShapeDtypeStruct((B, P_dim), jnp.float32), "
        "jax.ShapeDtypeStruct((B,), jnp.float32)) --sweep B=64,256,1024 --stage hlo -o jax_hlo_sweep\n",
    ),
    (
        None,
        """\
@jax.jit
def fwd_step(w, x):
    h = jnp.tanh(x @ w)
    return h, (h ** 2).mean()

w7 = jax.random.normal(jax.random.key(7), (128, 512)) / 12.0
x7 = jax.random.normal(jax.random.key(8), (64, 128))
""",
    ),
    (
        "jax_live_cell",
        """\
%%jax_live -o jax_live_cell
debug_cache = []
for step in range(10):
    h, loss = fwd_step(w7, x7)
    debug_cache.append(h)
""",
    ),
    (
        None,
        """\
TABLE = jnp.ones((512, 512))
def lookup(x):
    return (x + TABLE).sum()
lookup_jit = jax.jit(lookup)
lookup_jit(jnp.float32(1.0))
TABLE = jnp.zeros((256, 256))
hist = {"acts": [jnp.ones((32, 32)) for _ in range(3)]}
""",
    ),
    (None, "jnp.ones((300, 300)) * 2\n"),
    ("jax_live", "%jax_live -o jax_live\n"),
]


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(photograph(CELLS, "hlo_live", "jaxmagic program and memory reports", sys.argv[1:], __doc__))
