"""%%jax_keys's probe: reused keys in eager and jitted code, keys per jitted function, legacy keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic._jax.restore import take_snapshot


@jax.jit
def noisy_step(w, key, step):
    return w + 0.01 * jax.random.normal(key, w.shape) * step


def loop_same_key(n):  # the chapter's bug: the key never advances
    key = jax.random.key(0)
    w = jnp.zeros(3)
    for step in range(n):
        step_key = jax.random.split(key)[0]
        w = noisy_step(w, step_key, jnp.float32(step))
    return w


def loop_fixed(n):
    key = jax.random.key(0)
    w = jnp.zeros(3)
    for step in range(n):
        key, step_key = jax.random.split(key)
        w = noisy_step(w, step_key, jnp.float32(step))
    return w


def loop_reseeded(n):  # no error anywhere: a fresh key with the same seed every step
    w = jnp.zeros(3)
    for step in range(n):
        w = noisy_step(w, jax.random.key(7), jnp.float32(step))
    return w


def test_eager_reuse_names_the_consumer_the_line_and_the_first_use():
    before = take_snapshot()
    with pytest.raises(jax.errors.KeyReuseError, match="random_split"):
        with probes.keys() as report:
            loop_same_key(4)
    reuse = report.reuse[0]
    assert (reuse.consumer, reuse.index, reuse.where) == ("random_split", 0, "call")
    assert reuse.reused_at.function == "loop_same_key" and "jax.random.split(key)[0]" in reuse.reused_at.code
    assert reuse.same_line and "never replaces it" in reuse.explanation
    assert report.status.value == "problem" and "key, sub = jax.random.split(key)" in str(report)
    assert take_snapshot().differences(before) == [] and jax.config.jax_debug_key_reuse is False


def test_record_mode_runs_on_and_counts_the_same_key_every_step():
    with probes.keys(record=True) as report:
        w = loop_same_key(5)
    assert w.shape == (3,)  # the loop ran to the end
    assert report.reuse[0].consumer == "random_split" and report.reuse[0].count == 4
    flow = report.flow("noisy_step")
    assert (flow.argument, flow.calls, flow.distinct, flow.repeated_times) == ("key", 5, 1, 5)
    assert report.repeated_flows == [flow]


def test_results_are_those_of_a_run_without_the_checker():
    plain = loop_same_key(5)
    with probes.keys(record=True):
        watched = loop_same_key(5)
    assert jnp.array_equal(plain, watched)


def test_fixed_loop_is_clean_and_gets_a_new_key_every_step():
    with probes.keys() as report:
        loop_fixed(5)
    assert report.reuse == [] and report.legacy == [] and report.status.value == "ok"
    assert (report.flow("noisy_step").calls, report.flow("noisy_step").distinct) == (5, 5)


def test_same_key_without_any_error_is_still_counted():
    with probes.keys() as report:
        loop_reseeded(4)
    assert report.reuse == []
    assert report.flow("noisy_step").distinct == 1 and report.status.value == "problem"
    assert "received 1 distinct key(s) in 4 calls" in report.summary


def test_reuse_inside_a_jitted_function_is_found_when_traced():
    @jax.jit
    def two_draws(key):
        return jax.random.normal(key) + jax.random.uniform(key)

    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            two_draws(jax.random.key(1))
    reuse = report.reuse[0]
    assert reuse.where == "trace" and reuse.function == "two_draws"
    assert reuse.consumer == "jax.random.uniform"
    assert "jax.random.uniform(key)" in reuse.reused_at.code


def test_passing_a_consumed_key_to_a_jitted_function_names_the_argument():
    key = jax.random.key(3)
    noisy_step(jnp.zeros(3), key, jnp.float32(1.0))  # outside the probe: not tracked
    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            k = jax.random.key(4)
            noisy_step(jnp.zeros(3), k, jnp.float32(1.0))
            noisy_step(jnp.zeros(3), k, jnp.float32(2.0))
    reuse = report.reuse[0]
    assert (reuse.consumer, reuse.index, reuse.argument) == ("noisy_step", 1, "key")


def test_legacy_keys_are_listed_and_followed_by_their_data():
    with probes.keys() as report:
        raw = jax.random.PRNGKey(0)
        a, b = jax.random.normal(raw, (3,)), jax.random.normal(raw, (3,))
    assert bool(jnp.all(a == b))  # reused without any error from JAX's checker
    assert [(u.api, u.count) for u in report.legacy] == [("normal", 2)]
    assert report.legacy[0].line.function == "test_legacy_keys_are_listed_and_followed_by_their_data"
    [draw] = report.repeated_draws
    assert (draw.api, draw.calls, draw.distinct, draw.legacy) == ("normal", 2, 1, True)
    assert report.status.value == "problem" and "same legacy uint32 key data" in report.summary


# -- shapes from public issue threads: legacy PRNGKey code, eager reuse per epoch -------------


@jax.jit
def dropout_step(w, key):
    keep = jax.random.bernoulli(key, 0.5, w.shape)
    return jnp.where(keep, w, 0.0)


def test_legacy_key_passed_to_a_jitted_function_every_step_is_followed():
    # most public code: `rng = jax.random.PRNGKey(0)` then `train_step(state, batch, rng)` every step
    with probes.keys(record=True) as report:
        rng = jax.random.PRNGKey(0)
        w = jnp.ones(4)
        for _ in range(4):
            w = dropout_step(w, rng)
    flow = report.flow("dropout_step")
    assert flow.legacy and (flow.calls, flow.distinct, flow.repeated_times) == (4, 1, 4)
    assert flow.argument == "key"
    assert report.status.value == "problem"
    assert "`dropout_step` received 1 distinct legacy uint32 key(s) in 4 calls (argument `key`)" in report.summary


def test_legacy_keys_split_every_step_are_fine():
    with probes.keys(record=True) as report:
        rng = jax.random.PRNGKey(0)
        w = jnp.ones(4)
        for _ in range(4):
            rng, sub = jax.random.split(rng)
            w = dropout_step(w, sub)
    assert report.flow("dropout_step").distinct == 4
    assert report.repeated_draws == [] and report.status.value == "ok"
    assert "No key was reused" in report.summary


def test_fold_in_with_the_step_is_not_a_reuse():
    with probes.keys(record=True) as report:
        base = jax.random.PRNGKey(0)
        for step in range(3):
            jax.random.normal(jax.random.fold_in(base, step), (2,))
    assert report.repeated_draws == [] and report.status.value == "ok"


def test_eager_permutation_every_epoch_with_a_key_never_advanced():
    # the classic data-loader bug: the same shuffle every epoch
    with probes.keys(record=True, check_calls=False, only_user_calls=True) as report:  # the doctor's settings
        key = jax.random.key(0)
        for _epoch in range(3):
            perm = jax.random.permutation(key, 10)
    assert perm.shape == (10,)
    [draw] = report.repeated_draws
    assert (draw.api, draw.calls, draw.distinct, draw.legacy) == ("permutation", 3, 1, False)
    assert draw.line.code == "perm = jax.random.permutation(key, 10)"
    assert "in 3 of its 3 calls" in report.summary


def unpacked_split_loop(n, advance):
    """``a, b = jax.random.split(key)`` unstacks the keys: JAX learns which outputs are fresh keys
    by tracing the unstack, a signature the probe traces once and reuses at every later call."""
    key = jax.random.key(3)
    for _ in range(n):
        if advance:
            key, sub = jax.random.split(key)
        else:
            sub, _ = jax.random.split(key)
        jax.random.normal(sub, (2,))


def test_unpacked_split_signatures_reused_across_calls_and_blocks():
    for _ in range(2):  # the second block reuses the signatures the first one traced
        with probes.keys(record=True) as report:
            unpacked_split_loop(4, advance=True)
        assert report.reuse == []
        with probes.keys(record=True) as report:
            unpacked_split_loop(4, advance=False)
        assert [r.consumer for r in report.reuse] == ["random_split"]
        assert report.reuse[0].count == 3 and report.reuse[0].same_line
