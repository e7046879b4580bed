"""Explorers (``--explore``): how long until the explorer of a big layout or program is built.

Fake devices must be set before JAX starts, so the measurements run in a child process with
``XLA_FLAGS=--xla_force_host_platform_device_count=64``.

* 64-device 4-D layout (a 4x4x4 mesh, ``P('a', 'b', 'c', None)``, 64 blocks): the report
  plus every widget of the sharding explorer (64 device buttons, dimension choosers, slicers,
  the drawn grid), then one device clicked. Goal: <= 0.2 s.
* A program of 5,500 jaxpr equations (17,500 operations over jaxpr, StableHLO and optimized HLO;
  500 ``named_scope`` blocks of a few operations each, grad of it):
  the report plus the scope explorer with its first scope drawn. Goal: <= 0.2 s. The
  probe's own extra work to record every operation by scope (``every_scope=True``) is measured
  against the same probe without it (info: the compile dominates).

Widgets here are built without a kernel (ipywidgets then opens no comm): in a notebook each
widget also sends one comm-open message. Noisy machine: the rows give the median and the range.
"""

from __future__ import annotations

import json
import os
import sys
import time

from harness import Row, measured_with_devices, median

REPETITIONS = 7


def run() -> list[Row]:
    m = measured_with_devices(__file__, 64)

    def spread(name):
        return f"{REPETITIONS} runs, median; range {min(m[name]) * 1e3:.0f}-{max(m[name]) * 1e3:.0f} ms"

    return [
        Row(
            "--explore: 64-device 4-D layout, sharding explorer + a click",
            median(m["sharding"]),
            0.0,
            compare="difference",
            goal=0.2,
            note=f"4x4x4 mesh, 64 blocks; {spread('sharding')}",
        ),
        Row(
            f"--explore: {m['equations']:,} jaxpr equations ({m['ops']:,} operations in 3 stages), scope explorer",
            median(m["hlo"]),
            0.0,
            compare="difference",
            goal=0.2,
            note=f"{m['scopes']} scopes over 3 stages; {spread('hlo')}",
        ),
        Row(
            "  %jax_hlo probe recording every operation by scope vs without",
            median(m["probe_every"]),
            median(m["probe_plain"]),
            note="info: what --explore adds to the probe (trace/lower/compile are cache hits after the first run)",
        ),
    ]


def child() -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxmagic.probes as probes
    from jaxmagic.ipython.explorers.hlo import HloExplorer
    from jaxmagic.ipython.explorers.sharding import ShardingExplorer, sharding_sources

    mesh = jax.make_mesh((4, 4, 4), ("a", "b", "c"), axis_types=(AxisType.Explicit,) * 3)
    x = jax.device_put(jnp.ones((8, 8, 8, 8)), NamedSharding(mesh, P("a", "b", "c", None)))
    report = probes.sharding(x, expression="x")
    sharding_times = []
    for _ in range(REPETITIONS):
        start = time.perf_counter()
        explorer = ShardingExplorer(sharding_sources(report, []))
        explorer.select(37)
        sharding_times.append(time.perf_counter() - start)
        explorer.widget.close_all()  # closes every widget built so far

    def deep(x):
        for i in range(500):
            with jax.named_scope(f"block{i % 50}"):
                with jax.named_scope("inner"):
                    x = jnp.sin(x) * 1.001 + jnp.cos(x)
        return x.sum()

    grad = jax.grad(deep)
    args = (jnp.ones(16),)
    hlo_report = probes.run_hlo_call(grad, args, {}, every_scope=True)[0]
    ops = len(hlo_report.scope_ops)
    equations = sum(1 for op in hlo_report.scope_ops if op.stage == "jaxpr")
    hlo_times, probe_every, probe_plain = [], [], []
    for _ in range(REPETITIONS):
        start = time.perf_counter()
        explorer = HloExplorer(hlo_report)
        hlo_times.append(time.perf_counter() - start)
        explorer.widget.close_all()
    for _ in range(3):
        start = time.perf_counter()
        probes.run_hlo_call(grad, args, {}, every_scope=True)
        probe_every.append(time.perf_counter() - start)
        start = time.perf_counter()
        probes.run_hlo_call(grad, args, {})
        probe_plain.append(time.perf_counter() - start)
    print(
        json.dumps(
            {
                "sharding": sharding_times,
                "hlo": hlo_times,
                "ops": ops,
                "equations": equations,
                "scopes": len(hlo_report.tree),
                "probe_every": probe_every,
                "probe_plain": probe_plain,
            }
        )
    )


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        child()
    else:
        from harness import table

        print(table(run()))
