"""One out-of-memory error, four paths: the explainer (on by default), %%jax_memory, %%jax_doctor and
%jax_watch tell the same call, line and tried way down - from one analysis (``out_of_memory_finding``)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("jax")

SETUP = """
import jax, jax.numpy as jnp
@jax.jit
def nearest_p(x):
    d = jnp.abs(x[:, None] - x[None, :])
    return jnp.sort(d, axis=0)[1]
"""
CELL = "nn_p = nearest_p(jnp.linspace(0.0, 1.0, 2 ** 17))\nprint(nn_p[:3])"


@pytest.fixture(scope="module")
def shell(ip):
    ip.run_cell(SETUP)
    return ip


def _way(fix: str) -> str:
    """The way down a fix line offers, without its figures: what the device has free moves between runs (the
    host's MemAvailable), so the block size that fits can differ."""
    return re.sub(r"[\d,.]+ ?(GiB|MiB|KiB)?", "N", fix.split(":")[0])


def _fix_of_explainer(shell) -> str:
    result = shell.run_cell(CELL)
    error = result.error_in_exec
    assert type(error).__name__ == "JaxRuntimeError" and "Out of memory" in str(error)
    from jaxmagic.probes import explain_out_of_memory

    report = explain_out_of_memory(error)  # what the explainer showed (kept on the exception)
    assert report.program.function == "nearest_p"
    return report.fix


def test_every_path_tells_the_same_call_and_way_down(shell):
    fix = _fix_of_explainer(shell)
    assert fix.startswith("`nearest_p` on ") and "rows at a time" in fix

    result = shell.run_cell("%%jax_memory -o rep_mem\n" + CELL)
    assert type(result.error_in_exec).__name__ == "JaxRuntimeError"  # the user's error, raised unchanged
    memory = shell.user_ns["rep_mem"]
    assert memory.out_of_memory.program.function == "nearest_p" and _way(memory.fix) == _way(fix)
    assert memory.out_of_memory.read == "nn_p"
    assert getattr(result.error_in_exec, "_jaxmagic_explained", "")  # the explainer does not repeat it

    result = shell.run_cell("%%jax_doctor -o rep_doc\n" + CELL)
    assert type(result.error_in_exec).__name__ == "JaxRuntimeError"
    finding = shell.user_ns["rep_doc"].finding("memory")
    assert finding is not None and finding.area == "out of memory" and _way(finding.fix) == _way(fix)
    assert finding.line is not None and "jnp.sort(d, axis=0)" in finding.line.code

    shell.run_cell("%jax_watch on -o rep_watch")
    try:
        shell.run_cell(CELL)
    finally:
        shell.run_cell("%jax_watch off")
    log = shell.user_ns["rep_watch"]
    [told] = [f for f in log.findings if f.area == "memory"]
    assert _way(told.fix) == _way(fix) and told.function == "nearest_p" and "jnp.sort" in told.line.code


def test_a_cell_that_fits_is_measured_not_blamed(shell):
    shell.run_cell("%%jax_memory -o rep_fit\nsmall_p = nearest_p(jnp.linspace(0.0, 1.0, 1024))")
    report = shell.user_ns["rep_fit"]
    assert report.status.value == "ok" and report.out_of_memory is None
    [program] = report.programs
    assert program.buffers[0].shape == "f32[1024,1024]" and program.called_at.code.startswith("small_p =")
