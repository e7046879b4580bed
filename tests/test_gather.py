"""%jax_gather and jaxmagic.gather: one magic's reports from every process of a jax.distributed job, merged.

The cluster tests start real ipyparallel engines on loopback (ipyparallel's local
launcher), each a jax.distributed process on CPU, run a small data-parallel
training script under ``%%jax_doctor`` on all of them, and merge: a NaN from one
process's data shard, a ragged last batch on one process (another program), arrays
piling up on one process, the same dropout key everywhere, an engine still busy
(a hang) and an engine killed mid-cell. The script path runs two processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import jaxmagic.probes as probes
from jaxmagic.probes._gather import entry_of, merge

ipp = pytest.importorskip("ipyparallel", reason="ipyparallel is the optional extra jaxmagic[parallel]")


@contextlib.contextmanager
def _cpu_engines():
    """JAX_PLATFORMS=cpu while engines start (they inherit it); this process's environment after, as before
    (kernels started later by other tests, the demo notebooks, must not inherit it)."""
    before = os.environ.get("JAX_PLATFORMS")
    os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        yield
    finally:
        if before is None:
            del os.environ["JAX_PLATFORMS"]
        else:
            os.environ["JAX_PLATFORMS"] = before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- merging real reports made here ---------------------------------------------------------


def test_a_nan_on_one_process_only_is_named_with_its_line_and_the_clean_process_is_not():
    import jax.numpy as jnp

    def loss(x):
        return jnp.sum(jnp.sqrt(x))  # a negative value in this process's shard

    reports = []
    for shard in (jnp.ones(3), jnp.array([1.0, -1.0, 2.0])):
        try:
            with probes.nans() as report:
                loss(shard)
        except FloatingPointError:  # the probe names the NaN, then lets the user's error through
            pass
        reports.append(report)
    merged = merge([entry_of(r, process=i) for i, r in enumerate(reports)], "rep")
    data = merged.to_dict()
    nan = [f for f in data["findings"] if f["area"] == "NaN"]
    assert len(nan) == 1 and nan[0]["processes"] == [1]
    assert "jnp.sum(jnp.sqrt(x))" in nan[0]["line"] and nan[0]["function"] == "loss"
    assert [p["process"] for p in data["processes"]] == [0, 1]
    assert data["processes"][0]["status"] == "ok" and data["processes"][1]["status"] == "problem"
    assert "NaN on 1 of 2 processes only" in merged.summary


def test_processes_that_agree_give_no_finding():
    import jax.numpy as jnp

    reports = []
    for _ in range(2):
        with probes.nans() as report:
            jnp.ones(3).sum()
        reports.append(report)
    merged = merge([entry_of(r, process=i) for i, r in enumerate(reports)], "rep")
    assert merged.findings == [] and merged.status.value == "ok"


# -- a real cluster: ipyparallel engines, each a jax.distributed process ---------------------------

TRAIN = """
%%jax_doctor -o rep
import numpy as np
def loss_fn(w, x, y):
    h = jnp.sqrt(x) @ w               # a negative input gives NaN
    return jnp.mean((h - y) ** 2)
@jax.jit
def train_step(w, x, y, dropout_key):
    keep = jax.random.bernoulli(dropout_key, 0.9, x.shape)
    loss, g = jax.value_and_grad(loss_fn)(w, x * keep, y)
    return w - 0.1 * g, loss
me = jax.process_index()
rng = np.random.default_rng(me)
data = rng.uniform(0.1, 1.0, size=(44 if me == 1 else 48, 4)).astype(np.float32)
if me == 1:
    data[9, 0] = -1.0                 # one bad sample in process 1's shard (batch 2)
key = jax.random.PRNGKey(0)           # the same seed on every process
w = jnp.ones(4)
history = []
for start in range(0, len(data), 8):  # process 1's last batch has 4 rows: another program
    key, dropout_key = jax.random.split(key)
    batch = jnp.asarray(data[start:start + 8])
    w, loss = train_step(w, batch, batch.sum(axis=1), dropout_key)
    if me == 0:
        history.extend(jnp.zeros(3) + i for i in range(4))  # only process 0 keeps arrays
"""


@contextlib.contextmanager
def jax_job(engines: int):
    """A local ipyparallel cluster whose engines are the processes of one jax.distributed job (CPU)."""
    started = ipp.Cluster(n=engines, engines="local", controller_ip="127.0.0.1", log_level=40)
    with _cpu_engines():
        client = started.start_and_connect_sync()
        client.wait_for_engines(engines, timeout=120)
    try:
        view = client[:]
        view.execute("%load_ext jaxmagic\nimport jax, jax.numpy as jnp", block=True)
        port = _free_port()
        joins = [
            client[i].execute(
                f"jax.distributed.initialize('127.0.0.1:{port}', num_processes={engines}, process_id={i})",
                block=False,
            )
            for i in client.ids
        ]
        for join in joins:
            join.get(timeout=120)
        yield client, view
    finally:
        client.close()
        started.stop_cluster_sync()


@pytest.fixture(scope="module")
def cluster():
    with jax_job(2) as job:
        yield job


def test_the_doctor_on_every_engine_merged_names_each_per_process_bug(cluster, ip):
    client, view = cluster
    run = view.execute(TRAIN, block=False)
    try:
        run.get(timeout=180)
    except Exception:
        pass  # the doctor re-raises nothing here; any error is in the reports
    ip.user_ns["dv"] = view
    ip.run_line_magic("jax_gather", "rep -o merged")
    merged = ip.user_ns["merged"]
    data = merged.to_dict()
    by_area = {f["area"]: f for f in data["findings"]}
    assert [p["process"] for p in data["processes"]] == [0, 1]
    assert by_area["NaN"]["processes"] == [1]
    assert "jnp.sqrt(x) @ w" in by_area["NaN"]["line"], by_area["NaN"]
    assert by_area["divergence"]["function"] == "train_step" and by_area["divergence"]["processes"], by_area
    assert by_area["memory"]["processes"] == [0]
    assert by_area["random keys"]["processes"] == [0, 1] and "fold_in" in by_area["random keys"]["fix"]
    html = merged._repr_mimebundle_()["text/html"]
    assert "Differences between processes" in html and "process" in str(merged)


DRIFT = """
%%jax_compiles -o rep_p
@jax.jit
def update(w, x):
    h = x @ w
    return w - 0.1 * (x.T @ h) / x.shape[0]
@jax.jit
def scale(w):
    return w * 2.0
me = jax.process_index()
params = {"w": jnp.ones(3), "b": jnp.zeros(2), "step": jnp.int32(5)}
scale(params["w"])                       # the same program on both processes
x = jnp.ones((6 if me == 1 else 8, 3))   # process 1's shard has other rows: another program
update(params["w"], x)
if me == 1:
    params["b"] = params["b"] + 1e-3     # a replica perturbed on one process
"""


def test_a_program_compiled_differently_and_a_perturbed_replica_are_named_from_real_engines(cluster, ip):
    # openxla/xla#7716, marin#9042: a shape that depends on the process index compiles another program
    _client, view = cluster
    view.execute(DRIFT, block=True)
    ip.user_ns["dv"] = view
    ip.run_line_magic("jax_gather", "rep_p --values params -o merged")
    data = ip.user_ns["merged"].to_dict()
    by_function = {f["function"]: f for f in data["findings"] if f["function"]}
    assert "scale" not in by_function, by_function  # the same program: cell file names differ, digests do not
    update = by_function["update"]
    assert "first differing operation is `stablehlo.dot_general`" in update["summary"], update
    assert "h = x @ w" in update["line"] and "tensor<6x3xf32>" in " ".join(update["details"]), update
    (values,) = [f for f in data["findings"] if f["area"] == "values"]
    assert "1 of 3 leaves differ" in values["summary"] and "0.001 in `params['b']`" in values["summary"], values
    assert values["processes"] == [0, 1] and "larger than rounding" in values["fix"], values


HANG = """import time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end: pass
def train_step():
    spin(8)
train_step()
"""


def test_an_engine_stuck_in_a_python_loop_is_named_with_its_stack_and_the_line(cluster, ip):
    """jax#38503's shape: one rank alive but stuck in Python while the others wait
    (https://github.com/jax-ml/jax/issues/38503). The late engine's stack comes back through a signal."""
    client, view = cluster
    ip.user_ns["dv"] = view
    view.execute("%%jax_nans -o rep_stuck\n1 + 1", block=True)
    ip.run_line_magic("jax_gather", "rep_stuck -o merged")  # both answer: their process indices are known
    busy = client[1].execute(HANG, block=False)
    time.sleep(1)
    ip.run_line_magic("jax_gather", "rep_stuck --timeout 2 -o merged")
    merged = ip.user_ns["merged"]
    hang = [f for f in merged.to_dict()["findings"] if f["area"] == "not finished"][0]
    assert hang["processes"] == [1] and hang["function"] == "spin", hang
    assert hang["summary"].startswith(
        "A hang: process 1 is in `spin` at line 4: `while time.monotonic() < end: pass`"
    ), hang["summary"]
    assert hang["summary"].endswith("process 0 finished")
    assert "process 1: your frames `spin` line 4 <- `train_step` line 6 <- line 7" in hang["details"]
    assert "targets=[1]" in hang["fix"]
    assert str(merged).startswith("%jax_gather [FOUND] A hang: process 1 is in `spin` at line 4")
    first_lines = str(merged).split("\n\n")[0]  # the advice under the headline, not only in the details
    assert "\nFix: process 1 never left your Python code (`spin`, line 4)" in first_lines, first_lines
    # a timeout shorter than the stack dump: a report still, naming the busy process, never a hung cell
    ip.run_line_magic("jax_gather", "rep_stuck --timeout 0.001 -o merged")
    late = [f for f in ip.user_ns["merged"].to_dict()["findings"] if f["area"] == "not finished"][0]
    assert 1 in late["processes"], late
    busy.get(timeout=60)


def test_a_busy_engine_is_named_after_the_timeout_and_one_killed_mid_cell_as_failed(cluster, ip):
    client, view = cluster
    # long enough to outlast the 3 s timeout and the gather's own seconds, short enough not to be waited for long
    busy = client[1].execute("import time\ntime.sleep(9)", block=False)
    ip.user_ns["dv"] = view
    started = time.monotonic()
    ip.run_line_magic("jax_gather", "rep --timeout 3 -o merged")
    assert time.monotonic() - started < 15
    stuck = [f for f in ip.user_ns["merged"].to_dict()["findings"] if f["area"] == "not finished"]
    assert stuck and stuck[0]["processes"] == [1], stuck
    assert "process 1 waits in `time.sleep(9)` in `<module>` at line 2" in stuck[0]["summary"], stuck
    assert "did not answer within 3 s" in ip.user_ns["merged"].processes[1].headline
    busy.get(timeout=60)
    pid = client[1].apply_sync(os.getpid)
    client[1].execute("import time\ntime.sleep(30)", block=False)  # a cell running on process 1 ...
    time.sleep(1)
    os.kill(pid, signal.SIGKILL)  # ... when the process is killed
    time.sleep(3)
    ip.run_line_magic("jax_gather", "rep --timeout 10 -o merged")
    stuck = [f for f in ip.user_ns["merged"].to_dict()["findings"] if f["area"] == "not finished"]
    assert stuck and stuck[0]["processes"] == [1], ip.user_ns["merged"].to_dict()


# -- a script on every process ---------------------------------------------------------------

SCRIPT = textwrap.dedent(
    """
    import sys, jax, jax.numpy as jnp, jaxmagic, jaxmagic.probes
    port, me = sys.argv[1], int(sys.argv[2])
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=me)
    def normalise(x):
        return x / jnp.sum(x)          # process 1's shard sums to 0
    try:
        with jaxmagic.probes.nans() as report:
            normalise(jnp.zeros(3) if me == 1 else jnp.ones(3))
    except FloatingPointError:
        pass
    merged = jaxmagic.gather(report, timeout=60)
    if me == 0:
        print("MERGED", merged.to_dict()["findings"][0]["processes"], merged.summary)
    else:
        print("MERGED", merged)
    """
)


def test_a_script_on_two_processes_gathers_on_process_0_through_the_key_value_store(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    port = str(_free_port())
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen([sys.executable, str(script), port, str(i)], stdout=subprocess.PIPE, text=True, env=env)
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert "MERGED [1] NaN on 1 of 2 processes only" in outs[0], outs[0]
    assert "MERGED None" in outs[1]


RAGGED = """%%px
%%jax_compiles -o rep_c
@jax.jit
def step(w, x):
    return w - 0.01 * (x.T @ (x @ w))
w = jnp.ones(3)
rows = 10 if jax.process_index() == 3 else 16   # the last process's shard is ragged
for start in range(0, rows, 8):
    w = step(w, jnp.ones((min(8, rows - start), 3)))
"""


def test_four_engines_under_px_name_the_one_process_that_runs_another_program(ip):
    with jax_job(4) as (_client, view):
        view.activate()  # %%px in this shell runs the cell on every engine
        ip.user_ns["dv"] = view
        ip.run_cell(RAGGED)
        ip.run_line_magic("jax_gather", "rep_c -o merged")
    data = ip.user_ns["merged"].to_dict()
    divergence = [f for f in data["findings"] if f["area"] == "divergence"]
    assert [p["process"] for p in data["processes"]] == [0, 1, 2, 3]
    assert divergence and divergence[0]["function"] == "step" and divergence[0]["processes"] == [3], data
    assert "collective" in divergence[0]["fix"]
