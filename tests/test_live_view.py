"""The live view of a long cell, seen through a real kernel's messages (jupyter_client).

A cell that runs for seconds under a magic shows a card that updates in place
(``display_data`` with a display id, then ``update_display_data``), each finding as
soon as the probe knows it, and ends as the final static report.
"""

from __future__ import annotations

import re

import pytest
from jupyter_client.manager import start_new_kernel

SETUP = """
%load_ext jaxmagic
import time
import jax, jax.numpy as jnp
"""

COMPILES_LOOP = """%%jax_compiles
def shrink(x):
    return x.sum()
f = jax.jit(shrink)
for n in range(1, 9):
    f(jnp.ones(n))          # a new shape every step: a recompilation every step
    time.sleep(0.5)
"""

DOCTOR_LOOP = """%%jax_doctor
@jax.jit
def train_step(w, x):
    return w - 0.1 * jnp.log(x) * w
w = jnp.ones(3)
for step in range(8):
    x = jnp.full(3, -1.0 if step == 2 else 1.0)  # step 3 (call 3) feeds log a negative number
    w = train_step(w, x)
    time.sleep(0.5)
"""

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def kernel():
    manager, client = start_new_kernel(kernel_name="python3", extra_arguments=[], startup_timeout=60)
    # "python3" is ipykernel's own spec: the interpreter running the tests, with jaxmagic installed.
    try:
        run(client, SETUP)
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run(client, code: str, timeout: float = 120) -> list[dict]:
    """Execute ``code``; every iopub message of that execution, in order, up to idle."""
    msg_id = client.execute(code)
    messages = []
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return messages


def displays(messages: list[dict]) -> list[tuple[str, str, str]]:
    """(message type, display id, plain text) of every display message with a display id."""
    out = []
    for msg in messages:
        if msg["msg_type"] in ("display_data", "update_display_data"):
            display_id = msg["content"].get("transient", {}).get("display_id", "")
            if display_id:
                text = ANSI.sub("", msg["content"]["data"].get("text/plain", ""))
                out.append((msg["msg_type"], display_id, text))
    return out


def _check_live_then_final(messages, finding: str, final: str) -> None:
    shown = displays(messages)
    assert shown, "no live view was shown"
    assert shown[0][0] == "display_data" and "[RUNNING]" in shown[0][2]
    ids = {display_id for _kind, display_id, _text in shown}
    assert len(ids) == 1, "every update goes to one display"
    updates = [text for kind, _id, text in shown if kind == "update_display_data"]
    live_updates = [text for text in updates if "[RUNNING]" in text]
    assert len(live_updates) + 1 >= 3, f"fewer than 3 live states: {len(live_updates) + 1}"
    assert any(finding in text for text in [shown[0][2], *live_updates]), "the finding never showed while running"
    assert "[RUNNING]" not in updates[-1] and final in updates[-1], "the last state is the final report"
    # Nothing else was displayed: the report is the live view's last state, not a second output.
    others = [m for m in messages if m["msg_type"] == "display_data" and not m["content"].get("transient")]
    assert not others


def test_a_recompiling_loop_shows_its_recompilation_while_it_runs_and_ends_as_the_report(kernel):
    messages = run(kernel, COMPILES_LOOP)
    _check_live_then_final(messages, "`shrink` compiled", "%%jax_compiles [FOUND]")


def test_a_nan_at_step_3_shows_while_the_loop_runs_and_the_report_replaces_the_view(kernel):
    messages = run(kernel, DOCTOR_LOOP)
    _check_live_then_final(messages, "NaN in the result of call 3 of `train_step`", "%%jax_doctor [FOUND]")


def test_a_short_cell_shows_its_report_once_without_a_live_view(kernel):
    messages = run(kernel, "%%jax_compiles\njax.jit(lambda x: x + 1)(jnp.ones(2))")
    assert not displays(messages)
    reports = [m for m in messages if m["msg_type"] == "display_data"]
    assert len(reports) == 1 and "%%jax_compiles" in reports[0]["content"]["data"]["text/plain"]


WATCHED_LOOP = """
@jax.jit
def update(w, x):
    return w * jnp.sqrt(x)
w = jnp.ones(2)
for step in range(8):
    w = update(w, jnp.full(2, -1.0 if step == 2 else 1.0))  # call 3: sqrt of a negative number
    time.sleep(0.4)
"""

# The argument types of the loop above (jnp.full(2, 1.0) is weakly typed; jnp.ones(2) is not, and would be a
# recompilation the watch tells at once: avoidable)
CLEAN_WATCHED_LOOP = """
for step in range(6):
    w = update(jnp.ones(2), jnp.full(2, 1.0))
    time.sleep(0.4)
"""


def test_a_watched_cell_shows_a_new_problem_while_it_runs_and_a_clean_one_shows_nothing(kernel):
    run(kernel, "%jax_watch on")
    try:
        messages = run(kernel, WATCHED_LOOP)
        shown = displays(messages)
        assert shown and shown[0][0] == "display_data" and "[RUNNING]" in shown[0][2]
        assert "NaN in the results of `update` (call 3)" in shown[0][2]
        assert shown[-1][0] == "update_display_data" and "[RUNNING]" not in shown[-1][2]
        assert "update" in shown[-1][2]
        clean = run(kernel, CLEAN_WATCHED_LOOP)
        assert not [m for m in clean if m["msg_type"] in ("display_data", "update_display_data", "stream")]
    finally:
        run(kernel, "%jax_watch off")


def test_a_card_is_never_left_running_when_the_magic_fails_before_its_report(monkeypatch):
    import time as time_module

    from jaxmagic.ipython import live_view
    from jaxmagic.probes._support.progress import Board

    class Handle:
        def __init__(self):
            self.shown = []

        def update(self, bundle, raw=False):
            self.shown.append(bundle["text/plain"])

    handle = Handle()

    def fake_display(bundle, raw=False, display_id=False):
        handle.shown.append(bundle["text/plain"])
        return handle

    monkeypatch.setattr(live_view, "display", fake_display)
    board = Board()
    board.add(lambda: ([("calls", 1)], []))
    with pytest.raises(RuntimeError):
        with live_view.LiveView("%%jax_doctor", board, in_kernel=True, delay=0.01, interval=0.01):
            time_module.sleep(0.3)
            raise RuntimeError("the probe failed")
    assert "[RUNNING]" in handle.shown[0]
    assert "[FAILED]" in handle.shown[-1] and "RuntimeError" in handle.shown[-1]
