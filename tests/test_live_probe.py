"""The live-array probe (%jax_live, %%jax_live): groups, holders of every kind, no references kept.

Every test uses array shapes of its own (7919, 1009, ...) so that arrays other
tests left alive in this process do not disturb its assertions.
"""

from __future__ import annotations

import collections
import gc
import sys

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic.probes._live.holders.search import KIND_NAME, KIND_OUTPUT, find_holders, namespace_roots
from jaxmagic.render import static_bundle
from jaxmagic.report import Status


def live_count() -> int:
    gc.collect()
    return len(jax.live_arrays())


def test_holders_of_each_kind():
    class Trainer:
        def __init__(self):
            self.history = [jnp.zeros((7919,))]

    def make_closure():
        table = jnp.ones((7907,))

        def f(x):
            return x + table

        return f

    Pair = collections.namedtuple("Pair", "mu nu")
    ns = {
        "debug_cache": [jnp.ones((1009, 3)) for _ in range(4)],
        "hist": {"acts": [jnp.ones((1013,)) for _ in range(2)]},
        "trainer": Trainer(),
        "state": Pair(jnp.ones((1019,)), 1),
        "loss_fn": make_closure(),
        "plain": jnp.ones((1021,)),
    }
    report = probes.live(namespace=ns)
    holders = {g.shape: g.holders for g in report.groups}
    assert holders[(1009, 3)] == ["debug_cache[0..3]"]
    assert holders[(1013,)] == ["hist['acts'][0..1]"]
    assert holders[(7919,)] == ["trainer.history[0]"]
    assert holders[(1019,)] == ["state.mu"]
    assert holders[(7907,)] == ["loss_fn (closure variable table)"]
    assert holders[(1021,)] == ["plain"]
    group = report.group((1009, 3), "float32")
    assert group.count == 4 and group.bytes_each == 1009 * 3 * 4 and group.held_by_names == 4
    assert group.placement == f"{jax.devices()[0].platform}:0"


def test_groups_are_largest_first_and_top_limits_the_view():
    ns = {"small": [jnp.ones((3001,)) for _ in range(2)], "big": jnp.ones((3011, 40))}
    report = probes.live(namespace=ns, top=1)
    assert report.groups[0].total_bytes >= report.groups[-1].total_bytes
    assert report.total_arrays >= 3 and report.total_bytes >= 3011 * 40 * 4
    text = str(report)
    assert "smaller group(s)" in text and "--top" in text


def test_cell_diff_names_the_leaking_list():
    """The chapter's section 7.3: a debugging list that keeps every step's activations."""

    @jax.jit
    def fwd_step(w, x):
        h = jnp.tanh(x @ w)
        return h, (h**2).mean()

    ns = {
        "w7": jax.random.normal(jax.random.key(7), (128, 512)) / 12.0,
        "x7": jax.random.normal(jax.random.key(8), (64, 128)),
        "debug_cache": [],
    }
    with probes.live_diff(namespace=ns) as report:
        for _ in range(10):
            h, loss = fwd_step(ns["w7"], ns["x7"])
            ns["debug_cache"].append(h)
        ns["h"], ns["loss"] = h, loss
        del h, loss
    leaked = report.group((64, 512), "float32")
    assert leaked.count == 10 and leaked.holders[0] == "debug_cache[0..9]"
    assert report.group((), "float32").holders == ["loss"]
    assert report.status is Status.PROBLEM and "debug_cache[0..9]" in report.summary

    # The fix: keep Python numbers, not arrays. Nothing the cell made stays alive.
    stats_log = []
    with probes.live_diff(namespace=ns) as report:
        ns["debug_cache"].clear()
        del ns["h"], ns["loss"]
        for _ in range(10):
            h, loss = fwd_step(ns["w7"], ns["x7"])
            stats_log.append(float(loss))
        del h, loss
    assert report.groups == [] and report.status is Status.OK and len(stats_log) == 10
    assert report.freed_arrays == 11  # the ten activations and the loss from before


def test_jit_cache_constant_is_identified_and_clear_caches_frees_it():
    """The chapter's section 7.5: a global read by a jitted function outlives its name."""
    ns = {"TABLE": jnp.ones((509, 509))}

    def lookup(x):
        return (x + ns["TABLE"]).sum()

    lookup_jit = jax.jit(lookup)
    with probes.live_diff(namespace=ns) as report:
        lookup_jit(jnp.float32(1.0))
        ns["TABLE"] = jnp.zeros((251, 251))
    old = probes.live(namespace=ns).group((509, 509))
    assert old.count == 1 and old.in_jit_cache == 1 and old.jit_functions == ["lookup"]
    assert "clear_caches" in str(probes.live(namespace=ns))
    assert report.group((251, 251)).holders == ["TABLE"]
    jax.clear_caches()
    assert probes.live(namespace=ns).group((509, 509)) is None


def test_unreachable_holder_is_held_elsewhere():
    deep = {"a": {"b": {"c": {"d": jnp.ones((4099,))}}}}  # four steps below the name
    report = probes.live(namespace={"deep": deep})
    group = report.group((4099,))
    assert group.elsewhere == 1 and group.holders == []
    assert "held elsewhere" in str(report)
    assert probes.live(namespace={"deep": deep["a"]}).group((4099,)).holders == ["deep['b']['c']['d']"]


def test_traceback_holder():
    def failing(big):
        raise RuntimeError("boom")

    try:
        failing(jnp.ones((4111,)))
    except RuntimeError as error:
        sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__
    try:
        group = probes.live(namespace={}).group((4111,))
        assert group.by_kind == {"traceback": 1}
        assert group.holders == ["traceback: failing() big"]
    finally:
        sys.last_type = sys.last_value = sys.last_traceback = None


def test_deleted_arrays_are_not_live():
    """The chapter's section 7.4: x.delete() frees the buffer whatever refers to it."""
    big = jnp.ones((1031, 1031))
    alias = big
    before = probes.live(namespace={"big": big, "alias": alias})
    assert before.group((1031, 1031)).holders == ["big", "alias"]
    big.delete()
    after = probes.live(namespace={"big": big, "alias": alias})
    assert after.group((1031, 1031)) is None
    assert before.total_bytes - after.total_bytes == 1031 * 1031 * 4
    assert alias.is_deleted()


def test_probe_keeps_no_reference():
    ns = {"keep": [jnp.ones((2003,)) for _ in range(5)]}
    start = live_count()
    report = probes.live(namespace=ns)
    with probes.live_diff(namespace=ns) as diff:
        ns["more"] = [jnp.ones((2011,)) for _ in range(3)]
    assert live_count() == start + 3
    del ns["keep"], ns["more"]
    assert live_count() == start - 5
    assert report.group((2003,)).count == 5 and diff.group((2011,)).count == 3


def test_holder_search_is_linear_in_what_it_reaches():
    arrays = [jnp.ones((5,)) for _ in range(50)]
    shared = list(arrays)
    # 2,000 names all pointing at the same list: the list is searched once, not 2,000 times.
    ns = {f"name{i}": shared for i in range(2000)}
    search = find_holders({id(a): 0 for a in arrays}, namespace_roots(ns))
    assert search.visited == 2000 + 50
    assert search.best_kind[id(arrays[7])] == KIND_NAME


def test_output_cache_roots_are_named_as_such():
    ns = {"Out": {12: jnp.ones((3,))}, "_": None, "_12": None, "_i12": "x", "In": [], "result": 1}
    labels = [(label, kind) for label, _value, kind in namespace_roots(ns)]
    assert labels == [("result", KIND_NAME), ("Out[12]", KIND_OUTPUT)]


# -- through IPython ------------------------------------------------------------


@pytest.fixture
def shell(ip):
    return ip


def test_ipython_output_cache_and_cell_result(shell):
    result = shell.run_cell("jnp.ones((6007,)) * 2", store_history=True)
    number = shell.execution_count - 1
    assert result.success
    shell.run_cell("%jax_live -o live_rep", store_history=True)
    report = shell.user_ns["live_rep"]
    group = report.group((6007,))
    assert group.by_kind == {KIND_OUTPUT: 1} and f"Out[{number}]" in group.holders
    assert report.status is Status.PROBLEM and "%reset -f out" in static_bundle(report.document())["text/html"]
    # the cell's own result is not what it leaves behind
    shell.run_cell(
        "%%jax_live -o cell_rep\nkept_6011 = [jnp.ones((6011,)) for _ in range(2)]\njnp.ones((6013,))",
        store_history=True,
    )
    cell = shell.user_ns["cell_rep"]
    assert [g.shape for g in cell.groups] == [(6011,)] and cell.groups[0].holders == ["kept_6011[0..1]"]
    assert cell.result_arrays == 1 and cell.result_label.startswith("Out[")


def test_magic_options(shell):
    import os
    import tempfile

    from IPython.core.error import UsageError

    bad = shell.run_cell("%jax_live --top 0")
    assert isinstance(bad.error_in_exec, UsageError) and "--top" in str(bad.error_in_exec)
    path = os.path.join(tempfile.mkdtemp(), "memory.prof")
    shell.run_cell(f"%jax_live --profile {path} -o prof_rep")
    report = shell.user_ns["prof_rep"]
    assert report.profile_path == path and open(path, "rb").read(2) == b"\x1f\x8b"  # gzip
    assert "pprof -http" in str(report)
    assert report.devices and report.devices[0].stats is None  # CPU: no memory_stats


def test_magics_keep_nothing_alive(shell):
    shell.run_cell("keep_9001 = [jnp.ones((9001,)) for _ in range(3)]")
    before = live_count()
    shell.run_cell("%jax_live -o keep_rep")
    shell.run_cell("%%jax_live -o keep_cell\nmore_9011 = [jnp.ones((9011,)) for _ in range(2)]")
    shell.run_cell("%jax_hlo jnp.sin(keep_9001[0]) -o keep_hlo")
    assert live_count() == before + 2  # only what the cell itself keeps
    shell.run_cell("del keep_9001, more_9011")
    assert live_count() == before - 3
    assert shell.user_ns["keep_cell"].group((9011,)).holders == ["more_9011[0..1]"]


SHARDED = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxmagic import probes
mesh = jax.make_mesh((4,), ("x",))
ns = {"split": jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("x"))),
      "copies": jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P())), "local": jnp.ones((8, 4))}
report = probes.live(namespace=ns)
for g in report.groups:
    print("RESULT", g.holders[0], g.placement, g.bytes_each, g.device_bytes_each)
print("RESULT devices", len(report.devices), "on devices" in str(report))
"""


def test_placement_splits_groups_and_counts_device_bytes():
    import subprocess

    proc = subprocess.run([sys.executable, "-c", SHARDED], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split()[1]: line.split(" ", 2)[2] for line in proc.stdout.splitlines() if line.startswith("RESULT")}
    assert rows["split"] == "4 devices, NamedSharding(P('x',)) 128 128"
    assert rows["copies"] == "4 devices, NamedSharding(P()) 128 512"  # replicated: once per device
    assert rows["local"] == "cpu:0 128 128"
    assert rows["devices"] == "4 True"


BEFORE_BACKEND = """
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "jaxmagic")
ip.run_cell("%jax_live -o rep")
ip.run_cell("%%jax_live -o cell_rep\\nx = 1 + 1")
import jax._src.xla_bridge as xb
print("RESULT", xb.backends_are_initialized(), ip.user_ns["rep"].backend_started, ip.user_ns["cell_rep"].groups)
"""


def test_live_does_not_start_a_backend():
    import subprocess

    proc = subprocess.run([sys.executable, "-c", BEFORE_BACKEND], capture_output=True, text=True, timeout=300)
    assert "RESULT False False []" in proc.stdout, proc.stdout + proc.stderr


def test_typed_prng_keys_hold_their_key_data():
    keys = jax.random.split(jax.random.key(3), 4099)
    report = probes.live(namespace={"rngs": {"dropout": keys}})
    group = report.group((4099, 2), "uint32")
    assert group.holders == ["rngs['dropout'] (key data)"] and group.held_by_names == 1


def test_holders_differing_in_one_list_index_are_one_range():
    # the common metrics log: a list of dicts of arrays, one per step
    train_metrics = []
    namespace = {"train_metrics": train_metrics}
    with probes.live_diff(namespace=namespace) as report:
        for step in range(40):
            train_metrics.append({"preds": jnp.ones(64) * step, "loss": jnp.float32(step)})
    holders = sorted(h for g in report.groups for h in g.holders)
    assert holders == ["train_metrics[0..39]['loss']", "train_metrics[0..39]['preds']"]
    assert "more)" not in report.summary and "train_metrics[0..39]['preds']" in report.summary
    train_metrics.clear()


# -- containers holding many arrays (issue 23, class 6) -----------------------------------


@pytest.fixture
def allocations_recorded():
    """tracemalloc with enough frames to reach the user's line, stopped again if we started it."""
    import tracemalloc

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(25)
    yield
    if started:
        tracemalloc.stop()


def test_list_of_keys_from_one_split_is_a_finding_with_its_line(allocations_recorded):
    """jax#17432 ("Jax leaks memory with random keys"): `key, *data_keys = random.split(key, iters + 1)`
    keeps one array per key; `%jax_live` said [OK]."""
    key = jax.random.PRNGKey(0)
    key, *data_keys = jax.random.split(key, 2001)  # the line that made them
    report = probes.live(namespace={"key": key, "data_keys": data_keys})
    found = report.to_dict()["containers"]
    assert report.status is Status.PROBLEM
    assert [c["container"] for c in found] == ["data_keys"]
    finding = found[0]
    assert finding["count"] == 2000 and finding["shape"] == [2] and finding["dtype"] == "uint32"
    assert finding["bytes"] == 2000 * 8 and finding["holders"] == "data_keys[0..1999]"
    made = finding["provenance"]["made_at"]
    assert made["code"] == "key, *data_keys = jax.random.split(key, 2001)  # the line that made them"
    assert made["filename"] == __file__
    assert "jax.random.split(key, 2000)" in finding["fix"] and "del data_keys" in finding["fix"]
    text = str(report)
    assert "`data_keys` holds 2000 arrays `u32[2]`" in report.summary
    assert "The line that made the arrays in `data_keys`:" in text


def test_metrics_appended_in_a_loop_to_an_attribute(allocations_recorded):
    """A trainer that keeps every step's loss array (the Flax/Optax loop `history.append(loss)`):
    the container is named through the object, the line is the one that made the losses."""

    class Trainer:
        def __init__(self):
            self.history = []

    @jax.jit
    def train_step(w, x):
        return ((x @ w) ** 2).mean()

    trainer = Trainer()
    w, x = jnp.ones((7,)), jnp.ones((3, 7))
    for _ in range(150):
        loss = train_step(w, x)
        trainer.history.append(loss)
    report = probes.live(namespace={"trainer": trainer, "w": w, "x": x})
    (finding,) = report.to_dict()["containers"]
    assert finding["container"] == "trainer.history" and finding["count"] == 150
    assert finding["shape"] == [] and finding["dtype"] == "float32" and finding["kind"] == "sequence"
    assert finding["provenance"]["made_at"]["code"] == "loss = train_step(w, x)"
    assert finding["provenance"]["function"] == "test_metrics_appended_in_a_loop_to_an_attribute"
    assert "float(loss)" in finding["fix"] and "del trainer.history" in finding["fix"]


def test_without_tracemalloc_the_line_is_not_told_and_says_why():
    import tracemalloc

    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc is on in this process")
    metrics = {f"step_{i}": jnp.full((1031,), i) for i in range(120)}  # a dict of metrics, Haiku-style
    report = probes.live(namespace={"metrics": metrics})
    (finding,) = [c for c in report.to_dict()["containers"] if c["container"] == "metrics"]
    assert finding["count"] == 120 and finding["shape"] == [1031] and finding["holders"] == "metrics[...]"
    provenance = finding["provenance"]
    assert provenance["made_at"] is None and "tracemalloc" in provenance["unknown"]
    assert "Could not tell which line made the arrays in `metrics`, because" in str(report)


def test_list_of_metric_dicts_is_one_finding_and_typed_keys_count_by_key_data(allocations_recorded):
    """`train_metrics.append({'loss': loss, 'acc': acc})` per step; and `list(jax.random.split(key, n))`
    of typed keys (jax.random.key), whose arrays are the keys' data."""
    train_metrics = [{"loss": jnp.zeros((1039,)), "step": i} for i in range(130)]
    keys = list(jax.random.split(jax.random.key(3), 300))
    report = probes.live(namespace={"train_metrics": train_metrics, "keys": keys})
    found = {c["container"]: c for c in report.to_dict()["containers"]}
    assert found["train_metrics"]["holders"] == "train_metrics[0..129]['loss']"
    assert found["train_metrics"]["count"] == 130 and found["train_metrics"]["kind"] == "nested"
    assert found["keys"]["holders"] == "keys[0..299] (key data)" and found["keys"]["key_data"]
    assert found["keys"]["fix"].startswith("Suggestion (not tried): These are PRNG keys; if they come from one")
    assert found["keys"]["provenance"]["made_at"]["code"] == "keys = list(jax.random.split(jax.random.key(3), 300))"


def test_fewer_than_the_threshold_is_no_finding():
    # a list accumulates from 10 like arrays (issue 63.9: one per step); a dict or object from 100
    small = [jnp.ones((1049,)) for _ in range(9)]
    table = {f"k{i}": jnp.ones((1053,)) for i in range(99)}
    report = probes.live(namespace={"small": small, "table": table})
    assert report.containers == [] and report.group((1049,)).holders == ["small[0..8]"]
    ten = [jnp.ones((1049,)) for _ in range(10)]
    (finding,) = probes.live(namespace={"ten": ten, "table": table}).containers
    assert (finding.container, finding.count, finding.kind) == ("ten", 10, "sequence")


def test_groups_carry_the_line_that_made_them_while_tracemalloc_traces(allocations_recorded):
    activations = [jnp.ones((1051, 2)) for _ in range(3)]  # the making line
    report = probes.live(namespace={"activations": activations})
    group = report.to_dict()["groups"][[g.shape for g in report.groups].index((1051, 2))]
    assert report.allocations_recorded
    made = group["provenance"]["made_at"]
    assert made["code"] == "activations = [jnp.ones((1051, 2)) for _ in range(3)]  # the making line"
    assert f"{__file__}:{made['lineno']}" in static_bundle(report.document())["text/html"].replace("<wbr>", "")


def test_without_tracemalloc_the_report_says_how_to_get_the_lines():
    import tracemalloc

    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc is on in this process")
    kept = jnp.ones((1061,))
    report = probes.live(namespace={"kept": kept})
    assert not report.allocations_recorded and report.group((1061,)).provenance is None
    assert "tracemalloc.start(25)" in str(report)


def test_magic_flags_the_list_of_keys_of_a_notebook_cell(shell, allocations_recorded):
    """The issue's case through the magic: `%jax_live` said [OK] while a cell's list held 2,000 keys."""
    shell.run_cell("import jax\nkey = jax.random.PRNGKey(0)\nkey, *sample_keys = jax.random.split(key, 2001)")
    shell.run_cell("%jax_live -o keys_rep")
    report = shell.user_ns["keys_rep"]
    (finding,) = [c for c in report.to_dict()["containers"] if c["container"] == "sample_keys"]
    assert report.status is Status.PROBLEM and finding["count"] == 2000
    made = finding["provenance"]["made_at"]
    assert made["code"] == "key, *sample_keys = jax.random.split(key, 2001)" and made["lineno"] == 3
    assert made["label"].startswith("In [")  # named as the notebook names the cell
    shell.run_cell("del sample_keys")


def test_cell_mode_says_the_cell_made_them_when_the_line_is_not_recorded():
    import tracemalloc

    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc is on in this process")
    ns: dict = {}
    with probes.live_diff(namespace=ns) as report:
        ns["grads_log"] = []
        for step in range(105):
            ns["grads_log"].append(jnp.full((1063,), step))
    (finding,) = report.to_dict()["containers"]
    assert finding["container"] == "grads_log" and finding["count"] == 105
    assert finding["provenance"]["made_at"] is None
    assert finding["provenance"]["unknown"].endswith("; they were made while this cell ran")
    assert report.status is Status.PROBLEM and "`grads_log` holds 105 arrays" in report.summary
