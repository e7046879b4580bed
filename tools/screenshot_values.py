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

sys.path.insert(0, str(ROOT / "demo_notebooks"))
import section9_script  # noqa: E402

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
    (None, section9_script.source(bugs_fixed=0)),  # the chapter's section 9 script, its three bugs in
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
