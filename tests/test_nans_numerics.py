"""Numerics the NaN search misread (issue 52, item 5): what the value was, and a fix tried on it.

Every path words the NaN probe's answer (``nans.sighting.nan_finding_text``), so each case is checked under
``%%jax_nans`` (the probe) and under the doctor and the watch where the answer is new.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmagic import probes


def _nans(run):
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            run()
    return report, report.to_dict()


def _by_key(data) -> dict:
    return {fix["key"]: fix for fix in data["fixes"]}


def _watched(run) -> str:
    from jaxmagic.probes._watch import Watch

    watch = Watch()
    watch.begin_cell("a watched cell")
    try:
        run()
        cell = watch.end_cell()
    finally:
        watch.close()
    (finding,) = [f for f in cell.findings if f.area == "NaN"]
    return " ".join(str(value) for value in dataclasses.asdict(finding).values())


# -- a variance that rounded below 0, an epsilon added to it ------------------------------------------


def _layer_norm(x, scale):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x), axis=-1, keepdims=True) - jnp.square(mean)
    y = (x - mean) * jax.lax.rsqrt(var + 1e-5)
    return y * scale


def _ln_loss(scale, x):
    return jnp.sum(_layer_norm(x, scale).astype(jnp.float32))


_ln_step = jax.jit(jax.grad(_ln_loss))


def _ln_values():
    """Rows of activations near 10 with a spread of 0.1, in bfloat16: E[x**2] - E[x]**2 rounds to -0.5."""
    x = jnp.asarray(10 + 0.1 * np.random.default_rng(0).normal(size=(8, 64)), jnp.bfloat16)
    return jnp.ones(64, jnp.bfloat16), x


def test_a_bfloat16_layer_norm_in_a_training_step_gets_the_variance_clamped_before_its_epsilon():
    """google/flax#1491 ("Variance can be negative in BatchNorm computation, leading to NaN's": var = mean2 -
    mean**2 rounds below 0 and swamps the epsilon; fixed by jnp.maximum(0.0, mean2 - mean**2)) and
    patrick-kidger/equinox#314 (LayerNorm's rsqrt NaN under jax_debug_nans while training). Under a jitted
    gradient the forward rsqrt was read as "the derivative" (it runs under jvp) and no fix was offered; the
    naive candidates clamp rsqrt's input `var + 1e-5`, not the variance. Now: the value reaches the loss
    jax.grad computes and drops, so it is forward; the fix clamps `var` before the epsilon, tried by
    evaluating the step again with that add clamped."""
    report, data = _nans(lambda: _ln_step(*_ln_values()))
    producer = data["producer"]
    assert producer["primitive"] == "rsqrt" and producer["operands"][0]["dtype"] == "bfloat16"
    assert (producer["phase"], producer["derivative"]) == ("forward", False)
    assert producer["operands"][0]["value"] == "-0.5"
    before = _by_key(data)["clamp_before"]
    assert (before["code"], before["tried"], before["result"], before["call_result"], before["offered"]) == (
        "jnp.maximum(var, 0.0) + 1e-5",
        True,
        "finite",
        "finite",
        True,
    )
    assert [f["key"] for f in data["fixes"] if f["offered"]] == ["clamp_before"]
    fix = " ".join(data["fix"].split())
    assert "Clamp it at 0 before the epsilon: `jnp.maximum(var, 0.0) + 1e-5` in place of `var + 1e-5`" in fix
    assert "the epsilon added to its input (`1e-5`) does not lift it" in fix
    assert "Tried on the values of" in fix and "`rsqrt` finite, and the call's outputs finite" in fix
    # the same answer on the other paths
    with probes.doctor() as doctor:
        _ln_step(*_ln_values())
    (finding,) = [f for f in doctor.to_dict()["findings"] if f["area"] == "NaN"]
    assert "`jnp.maximum(var, 0.0) + 1e-5` in place of `var + 1e-5`" in " ".join(finding["fix"].split())
    assert "`jnp.maximum(var, 0.0) + 1e-5` in place of `var + 1e-5`" in " ".join(
        _watched(lambda: _ln_step(*_ln_values())).split()
    )


def test_without_an_epsilon_the_rsqrt_input_is_clamped_with_one_as_before():
    """The same variance with no epsilon written (equinox#314's eps=0 shape): no add to clamp before, so the
    operation's own candidates speak - `jnp.maximum(v, 0.0) + 1e-06`, rsqrt(0) being inf."""

    @jax.jit
    def norm(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x), axis=-1, keepdims=True) - jnp.square(mean)
        return (x - mean) * jax.lax.rsqrt(var)

    _, data = _nans(lambda: norm(_ln_values()[1]))
    assert data["producer"]["added_epsilon"] is None and "clamp_before" not in _by_key(data)
    assert [f["key"] for f in data["fixes"] if f["offered"]] == ["clamp_eps"]


# -- a half-precision overflow in the backward pass -----------------------------------------------------


def _log_softmax_loss(x):
    return jax.nn.log_softmax(x).sum()


_log_softmax_grad = jax.jit(jax.grad(_log_softmax_loss))


def _many_logits():
    """2**16 + 10 logits in float16, most far enough below the largest that exp() of them is 0 in float16."""
    return jnp.asarray(np.random.default_rng(0).uniform(-20, 0, size=(2**16 + 10,)), jnp.float16)


def test_a_float16_log_softmax_gradient_that_overflows_is_computed_in_float32_tried_on_the_program():
    """jax-ml/jax#40409 ("log_softmax gradient returns NaN on large float16 arrays despite finite forward pass";
    the pull request jax-ml/jax#40474 computes it in float32): the backward pass sums 65,546 cotangents in
    float16, which is above its 65,504, and inf * 0 is NaN. The report named the forward `.sum()`'s overflow
    (the first inf in program order, not the one the NaN was made of) and offered only the double where. Now:
    the derivative's `reduce_sum` inside jax.nn.log_softmax, and the line in float32, tried on the program with
    that line's operations (forward and derivative) in float32 and cast back where they leave it."""
    report, data = _nans(lambda: _log_softmax_grad(_many_logits()))
    producer = data["producer"]
    assert (producer["primitive"], producer["phase"], producer["library_function"]) == (
        "reduce_sum",
        "backward",
        "jax.nn.log_softmax",
    )
    assert producer["operands"][0]["dtype"] == "float16" and producer["nan_maker"] == "mul"
    assert producer["expression"] == "jax.nn.log_softmax(x)"
    (widened,) = [f for f in data["fixes"] if f["offered"]]
    assert (widened["key"], widened["code"], widened["tried"], widened["call_result"]) == (
        "line_float32",
        "jax.nn.log_softmax(x.astype(jnp.float32))",
        True,
        "finite",
    )
    fix = " ".join(data["fix"].split())
    assert fix.startswith("`reduce_sum` inside `jax.nn.log_softmax` overflowed float16 in the backward pass")
    assert (
        "above the largest float16 value (65504, `jnp.finfo(jnp.float16).max`)" in fix
        and "`mul` then made NaN of it" in fix
    )
    assert "Compute that line in float32: `jax.nn.log_softmax(x.astype(jnp.float32))`" in fix
    assert "its outputs finite" in fix and "double where" not in fix
    # the trial is the fix: the gradient of the line in float32 is finite, cast back to float16
    assert bool(jnp.isfinite(jax.grad(lambda x: jax.nn.log_softmax(x.astype(jnp.float32)).sum())(_many_logits())).all())
    with probes.doctor() as doctor:
        _log_softmax_grad(_many_logits())
    (finding,) = [f for f in doctor.to_dict()["findings"] if f["area"] == "NaN"]
    assert "Compute that line in float32: `jax.nn.log_softmax(x.astype(jnp.float32))`" in " ".join(
        finding["fix"].split()
    )
