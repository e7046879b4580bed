"""The newest features where they misled (issue 52, item 7 d-f): `%jax_watch on` while a watch is on, the
per-shard arrays a look at a sharded array left alive, and an explorer of a program with no operation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from IPython.core.error import UsageError

ROOT = Path(__file__).resolve().parent.parent


# -- (d) %jax_watch on, while on ---------------------------------------------------------------


def test_watch_on_while_on_keeps_the_session_and_its_findings(ip, capsys):
    # the shape of jax#1052's NaN (a log of a negative input) found by the watch, then `%jax_watch on` again
    ip.run_cell("def f_watch_again(x):\n    return jnp.log(x)\nf_watch_again_jit = jax.jit(f_watch_again)")
    ip.run_line_magic("jax_watch", "on")
    try:
        ip.run_cell("y_watch_again = f_watch_again_jit(-jnp.ones(3))")
        ip.run_line_magic("jax_watch", "status -o watch_log_before")
        before = ip.user_ns["watch_log_before"]
        assert [f.area for f in before.findings] == ["NaN"]
        capsys.readouterr()
        ip.run_line_magic("jax_watch", "on")  # again, same options: the running session goes on
        said = capsys.readouterr().out
        assert "already on" in said and "1 finding(s) kept" in said, said
        ip.run_line_magic("jax_watch", "status -o watch_log_after")
        after = ip.user_ns["watch_log_after"]
        assert after is before and [f.area for f in after.findings] == ["NaN"]
        with pytest.raises(UsageError, match="already on .* `%jax_watch off` ends it"):
            ip.run_line_magic("jax_watch", "on --budget 5")  # other options: never replaced silently
        ip.run_line_magic("jax_watch", "status -o watch_log_last")
        assert ip.user_ns["watch_log_last"] is before and before.budget == 2
    finally:
        ip.run_line_magic("jax_watch", "off")


# -- (e) a look at a sharded array copies nothing that stays -------------------------------------------

LOOK = """
import gc, json, jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from jaxmagic import probes
from jaxmagic._jax import array_shards


mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
w = jax.device_put(jnp.arange(8 * 8 * 6, dtype=jnp.float32).reshape(8, 8, 6), NamedSharding(mesh, P("data")))

def alive():
    gc.collect()
    return sorted(str(a.shape) for a in jax.live_arrays())

before = alive()
report = probes.sharding(w, expression="w")  # compares the two copies of each block, bit for bit
after_sharding = alive()
live = probes.live(namespace={"w": w})
after_live = alive()
with array_shards.addressable_shards(w) as shards:
    during = len(shards)
print(json.dumps({
    "before": before, "after_sharding": after_sharding, "after_live": after_live, "after_shards": alive(),
    "shards": during, "replicas": report.arrays[0].replica_check, "compared": report.arrays[0].copies_compared,
    "groups": [(g.type_text, g.count, g.device_bytes_each) for g in live.groups],
}))
"""


@pytest.mark.kernel  # a fresh process with 8 fake devices
def test_a_look_at_a_sharded_array_leaves_no_per_shard_array_alive():
    # jaxlib caches the per-shard arrays `addressable_shards` makes on the array asked, for as long as it lives:
    # after the replica check (and %jax_live's device bytes) `%jax_live` listed 8 x f32[2,8,6] "held elsewhere"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOOK)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == ["(8, 8, 6)"]
    assert seen["after_sharding"] == ["(8, 8, 6)"], "the replica check left per-shard arrays alive"
    assert seen["after_live"] == ["(8, 8, 6)"], "%jax_live's device bytes left per-shard arrays alive"
    assert seen["after_shards"] == ["(8, 8, 6)"] and seen["shards"] == 8
    assert seen["replicas"] == "consistent" and seen["compared"] == 8  # the check still reads every copy
    # one group: the array, its 2 copies of each block counted on the devices (8 shards of 2x8x6 floats)
    assert seen["groups"] == [["f32[8,8,6]", 1, 8 * 2 * 8 * 6 * 4]]


# -- (f) an explorer of a program with no operation ---------------------------------------------


def test_the_hlo_explorer_of_a_program_with_no_operation_does_not_say_it_could_not_be_built(ip, capsys):
    import jaxmagic.ipython.explorers.shown as module

    shown: list = []
    saved = module.display
    module.display = lambda bundle, raw=False: shown.append(bundle)
    ip.kernel = object()  # taken for a notebook kernel
    try:
        ip.run_cell("%jax_hlo (lambda x: None)(jnp.ones(2)) --explore -o hlo_none")
    finally:
        module.display = saved
        del ip.kernel
    said = capsys.readouterr().out
    assert ip.user_ns["hlo_none"].status.value == "ok" and not ip.user_ns["hlo_none"].failure
    assert "could not be built" not in said
    assert "jit(<lambda>) has no operation in any stage" in said and shown == []
