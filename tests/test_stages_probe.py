"""The stages probe: trace / lower / compile / run timed apart, on a fresh copy of the function."""

from __future__ import annotations

import json
from functools import partial

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes


def test_every_stage_is_timed_and_the_first_call_adds_up():
    @jax.jit
    def layer(w, x):
        return jnp.tanh(x @ w).sum()

    w, x = jnp.ones((16, 16)), jnp.ones((4, 16))
    rep = probes.stages(layer, w, x, runs=5, call_text="layer(w, x)")
    assert rep.status.value == "ok" and rep.runs == 5
    for value in (
        rep.trace_seconds,
        rep.lower_seconds,
        rep.compile_seconds,
        rep.first_run_seconds,
        rep.steady_run_seconds,
        rep.xla_compile_seconds,
    ):
        assert value is not None and value > 0
    assert rep.xla_compile_seconds <= rep.compile_seconds
    assert rep.first_call_seconds == pytest.approx(
        rep.trace_seconds + rep.lower_seconds + rep.compile_seconds + rep.first_run_seconds
    )
    assert rep.steady_run_min_seconds <= rep.steady_run_seconds
    assert rep.argument_types == ["f32[16,16]", "f32[4,16]"] and rep.output_types == ["f32[]"]
    assert rep.summary.startswith("`layer(w, x)`: trace ")


def test_an_already_compiled_function_is_timed_cold_on_a_copy():
    @jax.jit
    def warm(x):
        return jnp.sin(x) * 2

    x = jnp.ones(8)
    warm(x)
    size_before = warm._cache_size()  # private API, used here only to see that we left the cache alone
    rep = probes.stages(warm, x, runs=2)
    assert rep.fresh_copy and rep.cached_stages == []
    assert rep.xla_compile_seconds is not None  # a real backend compilation happened
    assert warm._cache_size() == size_before


def test_static_arguments_are_kept_out_of_the_compiled_call():
    @partial(jax.jit, static_argnames=("n",))
    def power(x, n):
        return x**n

    rep = probes.stages(power, jnp.ones(3), n=3, runs=2)
    assert rep.failure == "" and rep.steady_run_seconds is not None
    assert rep.argument_types == ["f32[3]"]


def test_abstract_arguments_compile_without_running():
    def matmul(a, b):
        return a @ b

    spec = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    rep = probes.stages(matmul, spec, spec)
    assert rep.jitted_here and rep.abstract_arguments
    assert rep.first_run_seconds is None and rep.steady_run_seconds is None and rep.runs == 0
    assert rep.cost["flops"] == 2 * 8 * 8 * 8
    assert rep.memory["argument_size_in_bytes"] == 2 * 8 * 8 * 4
    assert rep.memory["output_size_in_bytes"] == 8 * 8 * 4
    assert "compiled, not run" in rep.summary


def test_donated_arguments_stay_valid():
    @partial(jax.jit, donate_argnums=0)
    def update(p, g):
        return p - g

    p, g = jnp.ones(4), jnp.ones(4)
    rep = probes.stages(update, p, g, runs=3)
    assert not p.is_deleted() and rep.steady_run_seconds is not None
    assert any("donation is left off" in note for note in rep.notes)


def test_a_donating_jit_that_cannot_be_made_again_is_compiled_not_run():
    """A jit whose options are not copied (shardings) is timed as it is: its runs would delete the arrays it
    donates, the user's - compiled and said so, not run."""
    cpu = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    update = jax.jit(lambda p, g: p - g, donate_argnums=0, out_shardings=cpu)
    p, g = jnp.ones(4), jnp.ones(4)
    rep = probes.stages(update, p, g, runs=3)
    assert not p.is_deleted() and rep.compile_seconds is not None and rep.first_run_seconds is None
    assert "running it would delete your arrays" in rep.summary and not rep.failure


def test_a_callable_that_cannot_be_copied_is_timed_as_it_is():
    def scale(x, k):
        return x * k

    rep = probes.stages(partial(scale, k=2.0), jnp.ones(3), runs=2)
    assert not rep.fresh_copy and rep.failure == ""
    assert any("could not be copied" in note for note in rep.notes)


def test_a_failing_call_is_reported_with_its_stage():
    @jax.jit
    def bad(x):
        return x @ x  # x is 0-d

    rep = probes.stages(bad, jnp.float32(1.0))
    assert rep.status.value == "error" and rep.failed_stage == "trace"
    assert rep.failure.startswith("TypeError") or rep.failure.startswith("ValueError")
    assert rep.steady_run_seconds is None


def test_the_call_form_without_keywords_runs():
    """stages_of_call(fn, args) passes no kwargs: the call runs (it once failed with '** must be a mapping')."""
    rep = probes.stages_of_call(lambda v: v * 2, (jnp.ones(3),), runs=1)
    assert rep.status.value == "ok" and not rep.failure and rep.compile_seconds is not None


def test_runs_must_be_positive():
    with pytest.raises(ValueError, match="runs must be 1 or more"):
        probes.stages(jnp.sin, jnp.ones(2), runs=0)


def test_report_is_plain_data():
    rep = probes.stages(jax.jit(lambda x: x + 1), jnp.ones(3), runs=2, call_text="f(<b>)")
    data = json.loads(json.dumps(rep.to_dict()))
    assert data["kind"] == "jax_stages" and data["runs"] == 2
    assert "f(&lt;b&gt;)" in rep._repr_mimebundle_()["text/html"]


def test_magic_times_a_call_from_the_namespace(ip):
    ip.run_cell(
        "def deep_fn(ws, x):\n"
        "    for w in ws:\n"
        "        x = jnp.tanh(x @ w)\n"
        "    return x.sum()\n"
        "ws_s = [jnp.eye(8) * 0.5 for _ in range(5)]\n"
        "x_s = jnp.ones((2, 8))\n"
    )
    result = ip.run_cell("%jax_stages deep_fn(ws_s, x_s) -n 4 -o st_rep")
    assert result.success
    rep = ip.user_ns["st_rep"]
    assert rep.call == "deep_fn(ws_s, x_s)" and rep.runs == 4 and rep.jitted_here
    assert rep.argument_types.count("f32[8,8]") == 5


def test_magic_usage_errors(ip):
    from IPython.core.error import UsageError

    assert isinstance(ip.run_cell("%jax_stages").error_in_exec, UsageError)
    assert isinstance(ip.run_cell("%jax_stages jnp.sin(jnp.ones(2)) -n 0").error_in_exec, UsageError)
    assert isinstance(ip.run_cell("%jax_stages no_such_function(1)").error_in_exec, UsageError)
