"""Screenshots of the tracer-error, leak, config and traceback reports (docs/img/).

Same approach as tools/screenshot_reports.py (whose helpers it uses): real
buggy code runs through the magics in an in-process IPython shell, each report's
static HTML is photographed with headless Chromium.

Usage: ``.venv/bin/python tools/screenshot_tracer_reports.py [--chromium PATH] [--scale 2]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from screenshot_reports import ROOT, photograph

CELLS: list[tuple[str | None, str]] = [
    (None, "import jax, jax.numpy as jnp\nfrom jax import lax"),
    (
        None,
        """\
def clip_positive(x, limit):
    if x > limit:
        return limit
    return x

try:
    jax.jit(clip_positive)(jnp.float32(3.0), 1.0)
except Exception as error:
    clip_error = error
""",
    ),
    ("jax_explain", "%jax_explain clip_error -o jax_explain\n"),
    (
        None,
        """\
class Cache:
    pass

cache = Cache()
cache.store = {}

def remember(x):
    h = jnp.tanh(x)
    cache.store["h"] = h        # leaks the tracer h
    return h * 2
""",
    ),
    ("jax_leaks", "%%jax_leaks -o jax_leaks\nout = jax.jit(remember)(jnp.ones(3))\n"),
    (
        None,
        """\
class Model:
    def __call__(self, x):
        h = jnp.tanh(x)
        self.last_hidden = h
        return h * 2

m_leak = Model()
out = jax.jit(m_leak)(jnp.ones(3))
""",
    ),
    ("jax_leaks_unexpected", "%%jax_leaks -o jax_leaks_unexpected\ntotal = jnp.sum(m_leak.last_hidden)\n"),
    (
        "jax_config",
        """\
with jax.debug_nans(True), jax.log_compiles(True):
    %jax_config -o jax_config
""",
    ),
    (
        None,
        """\
def inner_reshape(x):
    return x.reshape(3, 5)

outer_jit = jax.jit(lambda x: inner_reshape(x) * 2)
""",
    ),
    (None, "outer_jit(jnp.ones(4))\n"),  # fails on purpose: the last exception
    ("jax_traceback", "%jax_traceback -o jax_traceback\n"),
]


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(photograph(CELLS, "tracer_reports", "jaxmagic tracer reports", sys.argv[1:], __doc__, setup_may_fail=True))
