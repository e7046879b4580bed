"""%jax_config, %jax_env and %jax_traceback probes: config diff, environment info, traceback view."""

from __future__ import annotations

import platform
import subprocess
import sys
import traceback

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic.probes._config import default_config
from jaxmagic.probes._tracebacks import MODES, resolved_mode


def test_nothing_changed_in_a_clean_process():
    report = probes.config_diff()
    assert report.nondefault == {} and report.status.value == "ok"
    assert report.total == len(jax.config.values) > 100
    assert report.summary.startswith(f"All {report.total} JAX flags have the values of a fresh process")


def test_scoped_switches_show_up_inside_the_block_only():
    with jax.debug_nans(True), jax.log_compiles(True):
        inside = probes.config_diff()
    assert inside.nondefault == {"jax_debug_nans": ("False", "True"), "jax_log_compiles": ("False", "True")}
    assert {f.source for f in inside.changed} == {"set in this process"}
    assert probes.config_diff().nondefault == {}


def test_a_flag_set_by_an_environment_variable_says_so(monkeypatch):
    monkeypatch.setenv("JAX_DEBUG_NANS", "1")
    with jax.debug_nans(True):
        report = probes.config_diff()
    [flag] = report.changed
    assert flag.source == "environment variable JAX_DEBUG_NANS=1"
    assert report.environment["JAX_DEBUG_NANS"] == "1"


def test_all_and_pattern():
    everything = probes.config_diff(all_flags=True)
    assert len(everything.flags) == everything.total
    matching = probes.config_diff(pattern="DEBUG_N")
    assert [f.name for f in matching.flags] == ["jax_debug_nans"]
    nothing = probes.config_diff(pattern="nothing-like-this")
    assert nothing.flags == [] and "No flag name contains 'nothing-like-this'." in str(nothing)


def test_defaults_are_read_once():
    first = default_config()
    assert default_config() == first and first["jax_traceback_filtering"] == "'auto'"


def test_environment_hides_the_host_name():
    hidden = probes.environment()
    assert f"jax:    {jax.__version__}" in hidden.text and "jaxlib:" in hidden.text
    assert hidden.versions["jax"] == jax.__version__ and "local devices" in hidden.devices
    assert "node='<hidden>'" in hidden.text and f"node='{platform.node()}'" not in hidden.text
    shown = probes.environment(show_host=True)
    assert f"node='{platform.node()}'" in shown.text and shown.host_shown


def inner_reshape(x):
    return x.reshape(3, 5)


outer_jit = jax.jit(lambda x: inner_reshape(x) * 2)


def reshape_error():
    try:
        outer_jit(jnp.ones(4))
    except TypeError as error:
        return error
    raise AssertionError("expected a TypeError")


@pytest.mark.parametrize("mode", list(MODES))
def test_modes_switch_and_your_frames_survive(mode):
    previous = probes.set_traceback_filtering(mode)
    try:
        error = reshape_error()
        report = probes.traceback_view(error, previous_mode=previous)
    finally:
        probes.set_traceback_filtering(previous)
    assert report.mode == mode and report.previous_mode == previous
    assert report.frames_total == len(traceback.extract_tb(error.__traceback__))
    assert [f.function for f in report.your_frames][-2:] == ["<lambda>", "inner_reshape"]
    assert report.your_frames[-1].code == "return x.reshape(3, 5)"
    if mode == "remove_frames":
        assert report.cause == "UnfilteredStackTrace"
    if mode == "quiet_remove_frames":
        assert report.notes == 1
    assert jax.config.jax_traceback_filtering == previous


def test_removing_frames_removes_jax_frames():
    counts = {}
    for mode in ("off", "remove_frames"):
        previous = probes.set_traceback_filtering(mode)
        try:
            counts[mode] = probes.traceback_view(reshape_error())
        finally:
            probes.set_traceback_filtering(previous)
    assert counts["remove_frames"].frames_total < counts["off"].frames_total
    assert counts["remove_frames"].frames_jax < counts["off"].frames_jax


def test_auto_means_quiet_remove_frames_outside_ipython():
    # A fresh plain Python process (this test session may host an IPython shell).
    code = "from jaxmagic.probes._tracebacks import resolved_mode; print(resolved_mode('auto'), resolved_mode())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["quiet_remove_frames", "quiet_remove_frames"], done.stderr
    assert resolved_mode("off") == "off"
    with pytest.raises(ValueError, match="is not a traceback filtering mode"):
        probes.set_traceback_filtering("bogus")


def test_traceback_magic_in_ipython(ip):
    ip.run_cell("import jax, jax.numpy as jnp\nouter = jax.jit(lambda x: x.reshape(3, 5))")
    ip.run_cell("outer(jnp.ones(4))")
    ip.run_line_magic("jax_traceback", "-o tb_rep")
    report = ip.user_ns["tb_rep"]
    assert report.resolved == "tracebackhide" and report.error.startswith("TypeError: cannot reshape")
    assert report.frames_hidden > 0 and report.your_frames[-1].code == "outer = jax.jit(lambda x: x.reshape(3, 5))"
    before = jax.config.jax_traceback_filtering
    try:
        ip.run_line_magic("jax_traceback", "off -o tb_off")
        assert jax.config.jax_traceback_filtering == "off" and ip.user_ns["tb_off"].previous_mode == before
    finally:
        jax.config.update("jax_traceback_filtering", before)
    result = ip.run_cell("%jax_traceback sideways")
    assert "%jax_traceback: mode 'sideways' is not a traceback filtering mode" in str(result.error_in_exec)


def test_environment_variables_are_listed(monkeypatch):
    monkeypatch.setenv("JAX_JAXMAGIC_PROBE", "yes")
    report = probes.environment()
    assert report.environment["JAX_JAXMAGIC_PROBE"] == "yes"
    assert "JAX_JAXMAGIC_PROBE" in str(report)
