"""Screenshot the %jax_sharding / %jax_devices reports, like tools/screenshot_reports.py.

Runs the magics on 64 fake CPU devices (``%jax_devices 64`` as the first magic
of a fresh in-process IPython shell), renders each report's static HTML and
photographs it with headless Chromium:

* ``docs/img/<name>.png`` for each report below;
* ``build/screenshots/sharding.html`` / ``sharding.png``: all of them on one page.

Usage: ``.venv/bin/python tools/screenshot_sharding.py [--chromium PATH] [--scale 2]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from screenshot_reports import ROOT, photograph  # noqa: E402

CELLS: list[tuple[str | None, str]] = [
    (None, "%jax_devices 64"),
    (
        None,
        """\
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((2, 2), ("data", "model"), devices=jax.devices()[:4])
A = jnp.arange(32.0).reshape(8, 4)
x = jax.device_put(A, NamedSharding(mesh, P("data", "model")))
c = jax.device_put(A, NamedSharding(mesh, P(None, "model")))
mesh64 = jax.make_mesh((8, 8), ("x", "y"))
big = jax.device_put(jnp.zeros((64, 64)), NamedSharding(mesh64, P("x", "y")))
mesh3 = jax.make_mesh((2, 2, 2), ("a", "b", "c"), devices=jax.devices()[:8])
t3 = jax.device_put(jnp.zeros((4, 6, 8)), NamedSharding(mesh3, P("a", None, ("b", "c"))))
mesh4 = jax.make_mesh((4,), ("d",), devices=jax.devices()[:4])
xs = jax.device_put(jnp.arange(16.0), NamedSharding(mesh4, P("d")))
bad_sum = jax.jit(jax.shard_map(lambda b: b.sum(), mesh=mesh4, in_specs=P("d"), out_specs=P(), check_vma=False))

@jax.jit
def f(a):
    b = jnp.sin(a) * 2
    return b.sum(axis=1)
x2 = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh4, P("d")))
""",
    ),
    ("jax_sharding_2d", "%jax_sharding x -o jax_sharding_2d"),
    ("jax_sharding_partial", "%jax_sharding c -o jax_sharding_partial"),
    ("jax_sharding_64", "%jax_sharding big -o jax_sharding_64"),
    ("jax_sharding_3d", "%jax_sharding t3 -o jax_sharding_3d"),
    ("jax_sharding_replica_trap", "%jax_sharding bad_sum(xs) -o jax_sharding_replica_trap"),
    ("jax_sharding_call", "%jax_sharding f(x2) --intermediates -o jax_sharding_call"),
    ("jax_sharding_pytree", "%jax_sharding {'w': x, 'b': xs, 'step': 3} -o jax_sharding_pytree"),
    (
        None,
        """\
def local_sum(block):
    jax.debug.print("local block {b}", b=block)
    return block.sum()
""",
    ),
    (
        "jax_per_device",
        """\
%%jax_per_device -o jax_per_device
jax.jit(jax.shard_map(local_sum, mesh=mesh4, in_specs=P("d"), out_specs=P(), check_vma=False))(xs)
""",
    ),
    ("jax_devices", "%jax_devices -o jax_devices"),
]


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(photograph(CELLS, "sharding", "jaxmagic sharding reports", sys.argv[1:], __doc__))
