"""``%jax_sharding --collectives``: the listing against the compilation it explains.

A training step (a 4-layer MLP's gradient, the batch split over 'data', weights split over
'data' too - a fully-sharded layout with all-gathers and all-reduces) on 8 fake CPU devices
(a child process with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``).

* compile: ``jit(step).trace(...).lower().compile()`` of a fresh function each run;
* listing: ``list_collectives`` on that compiled object (reads its optimized-HLO text,
  attributes each collective to a line, scope, axes, bytes and cause). Goal: compile + listing
  within 1.25x of compile (median of per-run ratios).
* the fix trials (``try_fixes``: one more compilation per tried layout) are shown for scale only:
  they compile, so they cost about what the compile does.

Wall-clock figures on a shared 2-core machine move by 10% between runs: read the ratio, not the
seconds.
"""

from __future__ import annotations

import json
import sys

from harness import Row, measured_with_devices, median

REPETITIONS = 7


def run() -> list[Row]:
    m = measured_with_devices(__file__, 8)
    return [
        Row(
            "%jax_sharding --collectives: compile + listing vs the compile it explains",
            median(m["with_listing"]),
            median(m["compile"]),
            goal=1.25,
            value=median(m["ratio"]),
            note=f"{m['collectives']} collectives, {m['instructions']} HLO instructions; listing alone "
            f"{median(m['listing']) * 1e3:.1f} ms; {REPETITIONS} runs, median of per-run ratios "
            f"(middle half {_middle_half(m['ratio'])})",
        ),
        Row(
            "  fix trials (compiling the program again per tried layout), for scale",
            median(m["trials"]),
            median(m["compile"]),
            note=f"info: {m['fixes']} layout(s) tried; each trial is a compilation",
        ),
    ]


def _middle_half(values: list[float]) -> str:
    ordered = sorted(values)
    quarter = len(ordered) // 4
    return f"{ordered[quarter]:.2f}-{ordered[-1 - quarter]:.2f}x"


def child() -> dict:
    import time

    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxmagic.probes._hlo.hlo_text import parse_hlo_module
    from jaxmagic.probes._sharding.collective_fixes import try_collective_fixes
    from jaxmagic.probes._sharding.collectives import list_collectives
    from jaxmagic.probes._sharding.compiled import inputs_as_compiled, outputs_as_compiled
    from jaxmagic.probes._sharding.report import CallShardings

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    sizes = [256, 512, 512, 256, 16]
    params = [
        jax.device_put(jnp.ones((a, b)) * 0.01, NamedSharding(mesh, P("data", "model" if n % 2 else None)))
        for n, (a, b) in enumerate(zip(sizes, sizes[1:]))
    ]
    batch = jax.device_put(jnp.ones((64, sizes[0])), NamedSharding(mesh, P("data", None)))

    def loss(params, x):
        for w in params:
            x = jnp.tanh(x @ w)
        return (x**2).mean()

    out: dict = {k: [] for k in ("compile", "listing", "with_listing", "ratio", "trials")}
    for _ in range(REPETITIONS + 1):

        def step(params, x):  # a new function each run: traced and compiled afresh
            return jax.grad(loss)(params, x)

        jitted = jax.jit(step)
        start = time.perf_counter()
        traced = jitted.trace(params, batch)
        compiled = traced.lower().compile()
        compile_time = time.perf_counter() - start
        call = CallShardings(function="step", was_jitted=True, collectives_asked=True)
        call.inputs = inputs_as_compiled(jitted, compiled, traced, (params, batch), {}, "step(params, batch)")
        call.outputs = outputs_as_compiled(traced, compiled)
        start = time.perf_counter()
        found = list_collectives(compiled, call, traced=traced)
        listing = time.perf_counter() - start
        start = time.perf_counter()
        fixes = try_collective_fixes(jitted, traced, compiled, call, found)
        trials = time.perf_counter() - start
        if _ == 0:  # warm-up: imports, first parse
            continue
        out["compile"].append(compile_time)
        out["listing"].append(listing)
        out["with_listing"].append(compile_time + listing)
        out["ratio"].append((compile_time + listing) / compile_time)
        out["trials"].append(trials)
    out["collectives"] = len(found)
    out["fixes"] = len(fixes)
    out["instructions"] = sum(1 for _ in parse_hlo_module(compiled.as_text() or "").instructions())
    return out


if __name__ == "__main__":
    if "--child" in sys.argv:
        print(json.dumps(child()))
    else:
        from harness import table

        print(table(run()))
