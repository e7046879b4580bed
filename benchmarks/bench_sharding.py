"""%jax_sharding at scale: a 64-device drawing, and a (4096, 4096) array on 8 devices.

Fake devices must be set before JAX starts, so the measurements run in a child
process with ``XLA_FLAGS=--xla_force_host_platform_device_count=64``; ``run()``
starts it and turns its figures into rows.

* 64-device 2-D layout (an 8x8 mesh, ``P('x', 'y')``): the probe plus every
  rendering a notebook gets (static HTML and plain text). Goal: <= 0.5 s.
  For scale, JAX's own ``visualize_array_sharding`` (rich, printing) on the same array.
* (4096, 4096) float32 (64 MiB) split over 8 devices: the probe must not read the data.
  Measured against the same layout of an (8, 8) array (the time should not grow with
  the data), and by counting reads of array data (``__array__`` calls on jax arrays):
  0 for a split array.
* The same array replicated on 8 devices: here the replica check reads all 8 copies and
  compares them; against doing that by hand (the chapter's ``replicas_consistent``), and
  with ``--no-check`` (no read at all).
"""

from __future__ import annotations

import json
import sys

from harness import Row, measured_with_devices, median

REPETITIONS = 7


def run() -> list[Row]:
    m = measured_with_devices(__file__, 64)
    return [
        Row(
            "%jax_sharding 64-device 2-D layout: probe + HTML + text",
            median(m["render64"]),
            compare="difference",
            goal=0.5,
            values=m["render64"],
            note=f"8x8 mesh, P('x','y'); {REPETITIONS} runs, median",
        ),
        Row(
            "  vs jax.debug.visualize_array_sharding (rich) on the same array",
            median(m["render64"]),
            median(m["visualize64"]),
            note="info: JAX's drawing prints a rich table, ours builds three views",
        ),
        Row(
            "(4096,4096) split over 8 devices vs the same layout of (8,8)",
            median(m["split_big"]),
            median(m["split_small"]),
            goal=1.5,
            values=m["split_ratio"],
            note="median of per-run ratios: no data read, so size does not matter",
        ),
        Row(
            "array data read for the split (4096,4096) array",
            compare="check",
            goal=0,
            value=m["split_reads"],
            note="reads of Shard.data, ArrayImpl._value, __array__, __buffer__ during probe + rendering",
        ),
        Row(
            "(4096,4096) replicated on 8 devices: replica check vs by hand",
            median(m["replicated"]),
            median(m["by_hand"]),
            values=m["replicated_ratio"],
            note=f"reads {m['replicated_reads']} copies of 64 MiB; by hand = the chapter's replicas_consistent",
        ),
        Row(
            "(4096,4096) replicated, --no-check",
            median(m["replicated_no_check"]),
            compare="difference",
            goal=0.5,
            values=m["replicated_no_check"],
            note=f"array data read: {m['no_check_reads']}",
        ),
    ]


def child() -> dict:
    import contextlib
    import io
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxmagic import probes
    from jaxmagic.render import static_bundle

    def show(value, **options):
        report = probes.sharding(value, expression="x", **options)
        static_bundle(report.document())
        return report

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    # Every way to reach an array's values: a shard's data, the whole array's
    # host value, NumPy's __array__ and the buffer protocol (NumPy's zero-copy path on CPU).
    from jax._src import array as array_impl

    reads = {"n": 0, "shard_data": 0}

    def counted(original, kind="n"):
        def wrapper(*args, **kwargs):
            reads[kind] += 1
            return original(*args, **kwargs)

        return wrapper

    shard_data = array_impl.Shard.data
    array_impl.Shard.data = property(counted(shard_data.fget, "shard_data"))
    value = array_impl.ArrayImpl._value
    array_impl.ArrayImpl._value = property(counted(value.fget))
    for name in ("__array__", "__buffer__"):
        setattr(array_impl.ArrayImpl, name, counted(getattr(array_impl.ArrayImpl, name)))

    def count_reads(fn) -> int:
        """How many times array values were reached: whole arrays, or one device's copy."""
        reads["n"] = reads["shard_data"] = 0
        fn()
        return max(reads["n"], reads["shard_data"])  # np.asarray(shard.data) counts once, not twice

    out: dict = {
        k: []
        for k in (
            "render64",
            "visualize64",
            "split_big",
            "split_small",
            "split_ratio",
            "replicated",
            "by_hand",
            "replicated_ratio",
            "replicated_no_check",
        )
    }
    mesh64 = jax.make_mesh((8, 8), ("x", "y"))
    big64 = jax.device_put(jnp.zeros((64, 64)), NamedSharding(mesh64, P("x", "y")))
    mesh8 = jax.make_mesh((4, 2), ("x", "y"), devices=jax.devices()[:8])
    split = NamedSharding(mesh8, P("x", "y"))
    big = jax.device_put(jnp.ones((4096, 4096), jnp.float32), split)
    small = jax.device_put(jnp.ones((8, 8), jnp.float32), split)
    replicated = jax.device_put(jnp.ones((4096, 4096), jnp.float32), NamedSharding(mesh8, P()))
    jax.block_until_ready((big64, big, small, replicated))

    def by_hand(arr):  # the chapter's replicas_consistent
        copies = [np.asarray(s.data) for s in arr.addressable_shards]
        return all(np.array_equal(copies[0], c) for c in copies[1:])

    show(big64), show(big), show(small), show(replicated), by_hand(replicated)  # warm-up
    with contextlib.redirect_stdout(io.StringIO()):
        jax.debug.visualize_array_sharding(big64)
    for _ in range(REPETITIONS):
        out["render64"].append(timed(lambda: show(big64)))
        with contextlib.redirect_stdout(io.StringIO()):
            out["visualize64"].append(timed(lambda: jax.debug.visualize_array_sharding(big64)))
        b, s = timed(lambda: show(big)), timed(lambda: show(small))
        out["split_big"].append(b), out["split_small"].append(s), out["split_ratio"].append(b / s)
        r, h = timed(lambda: show(replicated)), timed(lambda: by_hand(replicated))
        out["replicated"].append(r), out["by_hand"].append(h), out["replicated_ratio"].append(r / h)
        out["replicated_no_check"].append(timed(lambda: show(replicated, check_replicas=False)))
    out["split_reads"] = count_reads(lambda: show(big))
    out["replicated_reads"] = count_reads(lambda: show(replicated))
    out["no_check_reads"] = count_reads(lambda: show(replicated, check_replicas=False))
    assert show(replicated).arrays[0].replica_check == "consistent"
    return out


if __name__ == "__main__":
    if "--child" in sys.argv:
        print(json.dumps(child()))
    else:
        from harness import table

        print(table(run()))
