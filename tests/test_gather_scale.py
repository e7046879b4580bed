"""%jax_gather at scale and where a stuck process is, without a cluster: synthetic entries, real dumps.

- A merge of 1,024 processes (synthetic entries made from one real ``%%jax_doctor``
  report): findings grouped by what differs, processes written as ranges, the
  Processes table a row per group.
- A hang named as such: "process 1021 is in `spin` at line N; processes 1020, 1022
  wait in JAX", from faulthandler dumps of the shape jax#38503 shows (one rank in
  Python while the others wait in a collective:
  https://github.com/jax-ml/jax/issues/38503).
- Where a process waits, read from a real faulthandler dump of a process blocked in
  ``block_until_ready``.
- Fault cases of the stack dump (a dump cut short by the engine dying, no dump, a
  signal that cannot be sent) end in an answer, never a wait past the limit.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

import jaxmagic.probes as probes
from jaxmagic.ipython import engine_stacks
from jaxmagic.probes._gather import ProcessEntry, merge
from jaxmagic.probes._gather.ranges import grouped, process_ranges
from jaxmagic.probes._gather.stack_dump import INFO_MARK, dump_file_name, stack_dir
from jaxmagic.probes._gather.stacks import dump_stacks, where_it_is

USER = "/home/me/train.py"
JAX = "/venv/lib/python3.13/site-packages/jax/_src"


def dump(*frames: tuple[str, int, str], other_thread: bool = True) -> str:
    """A faulthandler dump (innermost frame first): the kernel's own thread, then the one running the cell."""
    text = ""
    if other_thread:
        text += (
            "Thread 0x00007f0000000001 (most recent call first):\n"
            '  File "/usr/lib/python3.13/threading.py", line 359 in wait\n'
            '  File "/usr/lib/python3.13/threading.py", line 1012 in _bootstrap\n\n'
        )
    text += "Current thread 0x00007f0000000002 (most recent call first):\n"
    text += "".join(f'  File "{file}", line {line} in {function}\n' for file, line, function in frames)
    return text


SPINNING = dump((USER, 8, "spin"), (USER, 14, "train_step"), (USER, 30, "<module>"))
WAITING = dump(
    (f"{JAX}/array.py", 620, "block_until_ready"),
    (USER, 22, "update"),
    (USER, 31, "<module>"),
)


def test_process_ranges_and_grouped_lines():
    assert process_ranges([5, 0, 1, 2, 7, 8, None]) == "0-2, 5, 7-8"
    assert process_ranges([*range(512), *range(513, 1024)]) == "0-511, 513-1023"
    lines = [(p, f"process {p}", "2 compilations" if p == 3 else "1 compilation") for p in range(6)]
    lines.append((None, "engine 9", "1 compilation"))
    assert grouped(lines) == ["processes 0-2, 4-5, engine 9: 1 compilation", "process 3: 2 compilations"]


def test_a_process_in_a_python_loop_is_running_and_one_in_block_until_ready_is_waiting():
    spinning, waiting = where_it_is(SPINNING), where_it_is(WAITING)
    assert spinning["state"] == "running" and spinning["function"] == "spin" and spinning["line"] == 8
    assert [f["function"] for f in spinning["user_frames"]] == ["spin", "train_step", "<module>"]  # user's first
    assert waiting["state"] == "waiting" and waiting["function"] == "update" and waiting["line"] == 22
    assert waiting["blocked_in"] == "`block_until_ready`"
    assert where_it_is("")["state"] == "unknown"


@pytest.fixture(scope="module")
def doctor_data():
    """One real %%jax_doctor report's data: a jitted step compiled once."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(w, x):
        return w - 0.01 * (x.T @ (x @ w))

    with probes.doctor() as report:
        w = jnp.ones(3)
        w = step(w, jnp.ones((8, 3)))
        w = step(w, jnp.ones((8, 3)))
    return report.to_dict()


def synthetic_job(data: dict, processes: int = 1024) -> list[ProcessEntry]:
    """``processes`` entries of ``data``: process 512 compiled `step` again for a ragged batch, processes
    100-199 piled arrays up, process 1021 is stuck in a Python loop while 1020 and 1022 wait in JAX."""
    ragged = copy.deepcopy(data)
    for function in ragged["compiles"]["functions"]:
        if function["name"] == "step":
            function["count"], function["last_argument_types"] = 2, "f32[3], f32[4,3]"
    growing = copy.deepcopy(data)
    growing["live_growth"] = {"float32[3]": 4}
    entries = []
    for p in range(processes):
        if p in (1020, 1021, 1022):
            why = "did not answer within 30 s (still running its cell?)"
            stack = where_it_is(SPINNING if p == 1021 else WAITING)
            entries.append(ProcessEntry(p, p, f"host{p // 8}", why, "missing", error=why, stack=stack))
            continue
        report = ragged if p == 512 else growing if 100 <= p < 200 else data
        entries.append(ProcessEntry(p, p, f"host{p // 8}", report["summary"], report["status"], "jax_doctor", report))
    return entries


def test_a_merge_of_1024_processes_is_grouped_by_what_differs_with_processes_as_ranges(doctor_data):
    merged = merge(synthetic_job(doctor_data)[::-1], "rep")  # arrival order does not matter
    data = merged.to_dict()
    by_area = {f["area"]: f for f in data["findings"]}
    assert [p["process"] for p in data["processes"]] == list(range(1024))

    divergence = by_area["divergence"]
    assert divergence["function"] == "step" and divergence["processes"] == [512]
    assert divergence["details"] == [
        "processes 0-511, 513-1019, 1023: 1 compilation(s), last for f32[3], f32[8,3]",
        "process 512: 2 compilation(s), last for f32[3], f32[4,3]",
    ]
    assert by_area["memory"]["details"] == ["processes 100-199: 4 array(s) piled up"]

    hang = by_area["not finished"]
    assert hang["processes"] == [1020, 1021, 1022]
    assert hang["summary"] == (
        "A hang: process 1021 is in `spin` at line 8; processes 1020, 1022 wait in JAX (`block_until_ready`) "
        "in `update` at line 22; processes 0-1019, 1023 finished"
    )
    assert "process 1021: your frames `spin` line 8 <- `train_step` line 14 <- line 30" in hang["details"]
    assert "targets=[1021]" in hang["fix"]

    text = str(merged)
    assert text.startswith("%jax_gather [FOUND] A hang: process 1021 is in `spin` at line 8")
    assert len(text.splitlines()) < 60, text  # readable: a row per group, not per process
    table = text[text.index("Processes:") :]
    assert "0-1019, 1023 " in table and "1020-1022 " in table and "128 hosts" in table


class FakeClient:
    """An ipyparallel client whose engine writes ``dumped`` to its stack file when signalled (or raises)."""

    def __init__(self, path, dumped: str | None = None, error: Exception | None = None):
        self.path, self.dumped, self.error = path, dumped, error

    def send_signal(self, sig, targets=None, block=None):
        if self.error is not None:
            raise self.error
        if self.dumped is not None:
            with open(self.path, "a") as file:
                file.write(self.dumped)


@pytest.fixture
def engine_file():
    directory = stack_dir()
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / dump_file_name(9999, socket.gethostname(), os.getpid())  # a live process's file
    path.write_text("an earlier dump\n")  # only what the signal adds is read
    yield path
    path.unlink()


def test_a_dump_cut_short_by_the_engine_dying_still_says_where_it_was(engine_file):
    cut = SPINNING[: SPINNING.index("line 14")]  # killed while writing: the innermost frames made it
    found = dump_stacks(FakeClient(engine_file, cut), [9999], wait=0.5)[9999]
    assert found["state"] == "running" and found["function"] == "spin"


def test_no_dump_and_a_signal_that_cannot_be_sent_end_in_a_reason(engine_file):
    silent = dump_stacks(FakeClient(engine_file), [9999], wait=0.1)[9999]  # killed before it could write
    assert silent["state"] == "unknown" and "sent no stack within 0.1 s" in silent["where"]
    gone = dump_stacks(FakeClient(engine_file, error=IndexError("engine 9999 not registered")), [9999], 0.1)
    assert "could not be sent" in gone[9999]["where"]
    elsewhere = dump_stacks(FakeClient(engine_file), [9998], 0.1)[9998]  # no file here: another host
    assert "jaxmagic is not loaded on it" in elsewhere["where"] and "another host" in elsewhere["where"]
    left = engine_file.with_name(dump_file_name(9996, socket.gethostname(), _exited_pid()))
    left.write_text("")  # left behind by an engine that exited
    try:
        passed_over = dump_stacks(FakeClient(left, SPINNING), [9996], 0.1)[9996]
    finally:
        left.unlink()
    assert "jaxmagic is not loaded on it" in passed_over["where"]


def _exited_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_only_an_ipyparallel_engine_listens_for_stack_requests(ip):
    assert engine_stacks.engine_id(ip) is None  # the user's own kernel: its signals are left alone
    kernel_class = type("IPythonParallelKernel", (), {"__module__": "ipyparallel.engine.kernel", "engine_id": 3})
    assert engine_stacks.engine_id(types.SimpleNamespace(kernel=kernel_class())) == 3


TWO_DUMPS = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    import jax, jax.numpy as jnp
    from jaxmagic.probes._gather.stack_dump import listen_for_stack_requests
    print(listen_for_stack_requests(int(sys.argv[1])), flush=True)

    @jax.jit
    def update(x, steps):
        return jax.lax.fori_loop(0, steps, lambda i, c: c * 1.0000001 + 1e-9, x)

    def spin(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    update(jnp.ones(4), 1).block_until_ready()   # compiled: the call below only runs its program
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGWINCH)).start()
    update(jnp.ones(4), 400_000_000)
    time.sleep(0.5)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGWINCH)).start()
    spin(1.0)
    time.sleep(0.5)
    """
)


def test_real_dumps_tell_a_process_blocked_in_a_jitted_call_from_one_in_a_python_loop(tmp_path):
    """faulthandler shows no C frames: the engine's samples (the same call instruction in each) say it waits."""
    script = tmp_path / "two_dumps.py"
    script.write_text(TWO_DUMPS)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, str(script), str(90000 + os.getpid() % 1000)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    path = Path(done.stdout.split()[0])
    try:
        text = path.read_text()
    finally:
        path.unlink()
    blocked = where_it_is(INFO_MARK.join(text.split(INFO_MARK)[:2]))
    assert blocked["state"] == "waiting" and blocked["line"] == 18, text
    assert blocked["where"].startswith("waits in `update(jnp.ones(4), 400_000_000)` (jitted, computing)")
    assert blocked["code"] == "update(jnp.ones(4), 400_000_000)", blocked["where"]
    spinning = where_it_is(text)  # the last dump
    assert spinning["state"] == "running" and spinning["function"] == "spin" and spinning["line"] == 13, text
    assert spinning["where"] == "is in `spin` at line 13: `while time.monotonic() < end:`"


THREADS_COME_AND_GO = textwrap.dedent(
    """
    import sys, threading, time
    from jaxmagic.probes._gather.stack_dump import listen_for_stack_requests
    print(listen_for_stack_requests(int(sys.argv[1])), flush=True)
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:   # a loader's worker threads, started and ended all the time
        workers = [threading.Thread(target=sum, args=(range(2000),)) for _ in range(4)]
        [w.start() for w in workers]
        [w.join() for w in workers]
    print("done", flush=True)
    """
)


def test_a_dump_while_threads_start_and_end_leaves_the_process_running(tmp_path):
    """faulthandler's all-threads dump walked the other threads while one ended and crashed the process (3 in 12
    runs of the test above); the engine's dump is now taken with the interpreter's lock held, from Python."""
    import signal

    script = tmp_path / "threads.py"
    script.write_text(THREADS_COME_AND_GO)
    process = subprocess.Popen(
        [sys.executable, str(script), str(91000 + os.getpid() % 1000), "4"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert process.stdout is not None
    path = Path(process.stdout.readline().strip())
    try:
        for _sent in range(25):
            process.send_signal(signal.SIGWINCH)
            time.sleep(0.12)
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0 and out.strip() == "done"
        dumps = path.read_text().count(INFO_MARK)
        assert dumps >= 10, dumps  # signals that arrive while one is answered are one wake-up
    finally:
        process.kill()
        path.unlink(missing_ok=True)


def test_the_script_path_names_a_process_that_never_sent_its_entry_after_the_timeout(monkeypatch):
    """Three processes, process 2 stuck before jaxmagic.gather: process 0 polls the arrival count (never 3),
    reads what arrived in one request when the time is up and names process 2."""
    from jaxmagic._jax import distributed_store
    from jaxmagic.probes._gather import gather

    store: dict[str, bytes] = {}
    other = ProcessEntry(1, headline="fine", status="ok", kind="jax_nans", report={"kind": "jax_nans"})
    store["jaxmagic/gather/{n}/entries/1"] = json.dumps(dataclasses.asdict(other)).encode()
    reads = []
    monkeypatch.setattr(distributed_store, "initialized", lambda: True)
    monkeypatch.setattr(distributed_store, "process_index_and_count", lambda: (0, 3))
    monkeypatch.setattr(distributed_store, "put", lambda key, value: store.__setitem__(key, value))
    monkeypatch.setattr(distributed_store, "count_up", lambda key: 1)
    monkeypatch.setattr(distributed_store, "count_of", lambda key: reads.append(key) or 2)  # process 2 never
    monkeypatch.setattr(distributed_store, "delete", lambda prefix: None)

    def all_under(prefix):
        n = prefix.split("/")[2]
        return {k.replace("{n}", n): v for k, v in store.items() if k.replace("{n}", n).startswith(prefix)}

    monkeypatch.setattr(distributed_store, "all_under", all_under)
    with probes.nans() as report:
        pass
    merged = gather(report, timeout=0.3)
    assert merged is not None
    data = merged.to_dict()
    assert [p["process"] for p in data["processes"]] == [0, 1, 2]
    stuck = [f for f in data["findings"] if f["area"] == "not finished"][0]
    assert stuck["processes"] == [2] and "sent no report within 0.3 s" in stuck["summary"]
    assert len(reads) < 30  # polled with growing pauses, not in a busy loop


def test_listening_here_answers_a_signal_with_this_thread_waiting_in_its_call_and_unloading_undoes_it():
    """The engine's side in this process: the signal, the dump with the samples, then stop_listening."""
    import signal
    import threading
    import time

    from jaxmagic.probes._gather.stack_dump import listen_for_stack_requests, stop_listening

    path = listen_for_stack_requests(9997)
    assert path is not None and path.exists()
    try:
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGWINCH)).start()
        time.sleep(0.5)  # the signal comes, and the answering thread samples this thread, here
        text = path.read_text()
        found = where_it_is(text)
    finally:
        stop_listening()
    assert found["state"] == "waiting" and found["where"].startswith("waits in `time.sleep(0.5)`"), found
    assert found["code"].startswith("time.sleep(0.5)"), text
    assert not path.exists()
    os.kill(os.getpid(), signal.SIGWINCH)  # SIGWINCH's default again: ignored
