"""What jaxmagic does where the floor lacks something (issue 60.4): Python 3.11 has no ``sys.monitoring``.

``_jax/monitoring_tool.py`` gives a watcher ``_jax/trace_events.py``'s stand-in there (``sys.settrace`` on the
block's thread: PY_START, PY_RETURN, LINE, RAISE) and refuses one that needs CALL events, with words a report
shows. These tests run on every Python: on 3.12+ the ``no_sys_monitoring`` fixture makes ``monitoring_tool``
act as on 3.11 (the stand-in is plain Python and runs there too), on 3.11 it is the real thing - the floor
lane (``make test-floor``, ``tools/floor_lane.sh``) runs them with JAX 0.10.2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmagic import probes
from jaxmagic._jax import monitoring_tool
from jaxmagic._jax.monitoring_tool import MonitoringTool, NoFreeToolId, watchers_held, why_no_tool

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_sys_monitoring(monkeypatch):
    """``monitoring_tool`` as on Python 3.11, whatever this Python has."""
    monkeypatch.setattr(monitoring_tool, "HAS_MONITORING", False)
    yield
    assert watchers_held() == []
    assert sys.gettrace() is None


def _user_function(x):
    y = x + 1
    return y


def _raising():
    raise KeyError("inside")


# -- the stand-in itself -------------------------------------------------------------------------------


def test_the_stand_in_gives_starts_returns_lines_and_raises_with_their_frames(no_sys_monitoring):
    seen: list[tuple] = []
    with MonitoringTool("floor test") as tool:
        events, between = tool.events, tool.frames_between

        def on_start(code, offset):
            seen.append(("start", code.co_name, sys._getframe(1 + between).f_code is code))

        tool.on(events.PY_START, on_start)
        tool.on(events.PY_RETURN, lambda code, offset, value: seen.append(("return", code.co_name, value)))
        tool.on(events.LINE, lambda code, line: seen.append(("line", code.co_name)))
        tool.on(events.RAISE, lambda code, offset, error: seen.append(("raise", code.co_name, type(error).__name__)))
        tool.watch_code(_user_function.__code__, events.PY_START | events.PY_RETURN | events.LINE)
        tool.watch_code(_raising.__code__, events.RAISE)
        _user_function(1)
        with pytest.raises(KeyError):
            _raising()
    assert seen == [
        ("start", "_user_function", True),
        ("line", "_user_function"),
        ("line", "_user_function"),
        ("return", "_user_function", 2),
        ("raise", "_raising", "KeyError"),
    ]


def test_a_disabled_line_calls_back_no_more_until_events_restart(no_sys_monitoring):
    lines: list[int] = []

    def on_line(code, line):
        lines.append(line)
        return monitoring_tool.DISABLE

    with MonitoringTool("floor test") as tool:
        tool.on(tool.events.LINE, on_line)
        tool.watch_code(_user_function.__code__, tool.events.LINE)
        _user_function(1)
        _user_function(1)  # every line switched off: its frames are not followed line by line
        assert len(lines) == 2
        monitoring_tool.restart_events()
        _user_function(1)
        assert len(lines) == 4


def test_the_frames_running_already_are_followed(no_sys_monitoring):
    """A trace function reaches only frames made after it: the block's own frame is older (a cell)."""
    lines: list[int] = []
    here = sys._getframe().f_code
    with MonitoringTool("floor test") as tool:
        tool.on(tool.events.LINE, lambda code, line: lines.append(line) if code is here else None)
        tool.watch(tool.events.LINE)
        first = sys._getframe().f_lineno
        _user_function(1)
    assert first + 1 in lines


def test_a_watcher_of_calls_is_refused_in_plain_words_never_taken(no_sys_monitoring):
    with pytest.raises(NoFreeToolId) as refused:
        MonitoringTool("calls", calls=True)
    assert str(refused.value) == why_no_tool(calls=True)
    assert "Python 3.11 has no sys.monitoring" in str(refused.value) and "taken" not in str(refused.value)


def test_a_debugger_holding_settrace_is_said_and_left_alone(no_sys_monitoring):
    def debugger(frame, event, arg):
        return None

    sys.settrace(debugger)
    try:
        with pytest.raises(NoFreeToolId, match="held by a debugger"):
            MonitoringTool("floor test")
        assert sys.gettrace() is debugger
    finally:
        sys.settrace(None)


# -- the probes on it ----------------------------------------------------------------------------------


@jax.jit
def _double(x):
    return x * 2


def test_transfers_keep_their_lines(no_sys_monitoring):
    x_host = np.ones(3, np.float32)
    _double(jnp.ones(3))
    with probes.transfers() as rep:
        for _ in range(3):
            _double(x_host)  # the transfer
    assert rep.lines_followed
    assert {group.line.code for group in rep.transfers} == {"_double(x_host)  # the transfer"}
    assert sum(group.count for group in rep.transfers) == 3


def test_the_memory_cell_form_sees_fast_and_first_calls(no_sys_monitoring):
    @jax.jit
    def first_here(x):
        return (x @ x).sum()

    x = jnp.ones((64, 64))
    _double(x)
    with probes.memory() as rep:
        _double(x)  # served from the C++ cache: JAX's post hook sees it
        first_here(x)  # compiled here: cache_miss's start
    assert sorted(program.function for program in rep.programs) == ["_double", "first_here"]
    assert not rep.notes


def test_the_nan_probe_says_why_calls_are_not_counted(no_sys_monitoring):
    with pytest.raises(FloatingPointError), probes.nans() as rep:
        _double(jnp.log(jnp.array(-1.0)))
    assert rep.found
    with probes.nans() as rep:
        _double(jnp.ones(2))
    words = rep.to_dict()
    assert why_no_tool(calls=True) in words["checked_scope"]
    assert "taken" not in json.dumps(words)


def test_whether_the_users_python_ran_again_is_known(no_sys_monitoring):
    from jaxmagic.probes._support.rerun.users_python import users_python_watched

    with users_python_watched() as ran:
        _user_function(1)
    assert ran.known and ran.ran == ["_user_function"]


# -- JAX imported from a folder on PYTHONPATH (the TPU image: JAX under /opt, not site-packages) ---------

SCRIPT = """
import json
import jax, jax.numpy as jnp
from jaxmagic import probes
from jaxmagic.usercode.source import code_kind


@jax.jit
def f(x):
    y = jnp.log(x - 1.0)
    return y * 2


try:
    with probes.nans() as found:
        f(jnp.array(0.5))
except FloatingPointError:
    pass


@jax.jit
def step(w, x):
    return w * x


with probes.compiles() as compiled:
    for n in (2, 3):
        step(jnp.ones(n), 2.0)

print(json.dumps({
    "jax": jax.__file__,
    "kinds": [code_kind(jax.__file__), code_kind(__file__)],
    "nan_line": [found.where_line.filename, found.where_line.lineno],
    "compile_lines": [[c.line.filename, c.line.lineno] for c in compiled.compilations_of("step")],
}))
"""


@pytest.mark.kernel  # a fresh Python process
def test_jax_from_a_folder_on_pythonpath_leaves_the_users_lines_to_the_user(tmp_path):
    """``pip install --target``'s layout: jax and jaxlib with their metadata in a folder on PYTHONPATH."""
    site = Path(jax.__file__).resolve().parent.parent
    target = tmp_path / "jaxfloor"
    target.mkdir()
    shutil.copytree(site / "jax", target / "jax", ignore=shutil.ignore_patterns("__pycache__"))
    (target / "jaxlib").symlink_to(site / "jaxlib")
    for info in [*site.glob("jax-*.dist-info"), *site.glob("jaxlib-*.dist-info")]:
        shutil.copytree(info, target / info.name)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    # what PYTHONPATH held stays after (the TPU image's JAX folder, with numpy beside it)
    path = [str(target), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    lines = SCRIPT.splitlines()
    assert got["jax"].startswith(str(target))
    assert got["kinds"] == ["jax", "user"]
    assert got["nan_line"] == [str(script), lines.index("    y = jnp.log(x - 1.0)") + 1]
    call = lines.index("        step(jnp.ones(n), 2.0)") + 1
    assert got["compile_lines"] == [[str(script), call]] * 2


def test_the_profile_is_read_in_memory_and_leaves_no_folder(tmp_path, monkeypatch):
    """JAX 0.10's ``stop_trace()`` returns nothing and writes ``start_trace(None)``'s trace to ``./None``:
    ``_jax/profiler_trace.py`` reads it back from a temporary folder it removes."""
    monkeypatch.chdir(tmp_path)

    @jax.jit
    def matmul(x):
        return jnp.tanh(x @ x).sum()

    x = jnp.ones((128, 128))
    matmul(x).block_until_ready()
    with probes.profile() as rep:
        matmul(x).block_until_ready()
    assert "matmul" in json.dumps(rep.to_dict())
    assert list(tmp_path.iterdir()) == []
