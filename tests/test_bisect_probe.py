"""%jax_bisect's probe: verdicts on constructed cases, the float64 reference and the closure-constant flag."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxmagic import probes
from jaxmagic._jax.restore import take_snapshot


def to64(a):
    return np.asarray(a, dtype=np.float64)


W = jax.random.normal(jax.random.key(1), (64, 64)) / 8.0
X = jax.random.normal(jax.random.key(2), (20, 64))
REF = (to64(W) @ to64(X).T).sum(0)


def test_float32_precision_and_the_captured_constant():
    def closure_version(x):
        return jax.vmap(lambda row: jnp.sum(W @ row))(x)

    report = probes.bisect(closure_version, X, ref=REF, call_text="closure_version(X)", namespace=globals())
    assert report.verdict == "precision" and report.status.value == "ok"
    assert 0 < report.jit.max_rel_error < 1e-5 and 0 < report.eager.max_rel_error < 1e-5
    assert [c.name for c in report.captured] == ["W"] and report.captured[0].shape == (64, 64)
    assert "captures `W` by closure" in report.summary

    def param_version(w, x):
        return jax.vmap(lambda row: jnp.sum(w @ row))(x)

    clean = probes.bisect(param_version, W, X, ref=REF)
    assert clean.verdict == "precision" and clean.captured == []


def test_jit_wrong_eager_right_is_the_compilation_layer():
    def miscompiled(x):  # stands in for a compiler bug: the traced program computes something else
        if isinstance(x, jax.core.Tracer):
            return x * 2.0 + 0.5
        return x * 2.0

    x = jnp.arange(4.0)
    report = probes.bisect(miscompiled, x, ref=to64(x) * 2)
    assert report.verdict == "compilation" and report.status.value == "problem"
    assert report.eager.equal and report.jit.max_abs_error == 0.5
    assert "%jax_hlo" in report.summary
    # without a reference: jit and eager disagree
    assert probes.bisect(miscompiled, x).verdict in ("jit_differs", "compilation")


def test_both_wrong_is_the_algorithm_and_eager_only_wrong_is_named():
    def mean_off_by_one(x):
        return jnp.sum(x) / (x.size + 1)

    x = jnp.arange(1.0, 5.0)
    report = probes.bisect(mean_off_by_one, x, ref=np.mean(to64(x)))
    assert report.verdict == "algorithm" and report.jit.max_rel_error > 0.1

    def eager_only_wrong(x):
        if isinstance(x, jax.core.Tracer):
            return x + 1.0
        return x + 1.5

    assert probes.bisect(eager_only_wrong, x, ref=to64(x) + 1).verdict == "eager_differs"


def test_automatic_float64_reference_only_when_sound():
    def unstable_variance(x):  # fine in float64, cancels catastrophically in float32
        return jnp.mean(x**2) - jnp.mean(x) ** 2

    x = jnp.array([1e4 + 1, 1e4 + 2, 1e4 + 3], dtype=jnp.float32)
    report = probes.bisect(unstable_variance, x)
    assert report.reference_kind == "float64" and report.reference.leaves == ["() float64"]
    assert report.verdict == "algorithm"
    assert abs(float(np.var(to64(x))) - 2 / 3) < 1e-9  # what the float64 run computed is the truth

    casting = probes.bisect(lambda v: v.astype(jnp.float32) * 2, x)
    assert casting.reference_kind == "none" and "float32" in casting.reference_note
    assert casting.verdict == "agree"
    random = probes.bisect(lambda k: jax.random.normal(k, (3,)), jax.random.key(0))
    assert random.reference_kind == "none" and "random" in random.reference_note
    assert jax.config.jax_enable_x64 is False


def test_pytrees_static_arguments_and_failures():
    def scaled(params, mode):
        factor = 2.0 if mode == "double" else 1.0
        return {"w": params["w"] * factor, "b": params["b"] + 1}

    params = {"w": jnp.ones(3), "b": jnp.zeros(2)}
    report = probes.bisect(scaled, params, "double")
    assert report.verdict == "precision" or report.verdict == "ok"
    assert "static arguments 1" in report.jit.how
    assert report.jit.leaves == ["(2,) float32", "(3,) float32"]

    before = take_snapshot()
    failed = probes.bisect(lambda v: v.reshape(7), jnp.ones(3))
    assert failed.verdict == "failed" and failed.jit.error.startswith("TypeError") and failed.status.value == "error"
    assert take_snapshot().differences(before) == []
    wrong_shape = probes.bisect(lambda v: v * 2, jnp.ones(3), ref=np.ones(4))
    assert wrong_shape.verdict == "failed" and "shape" in wrong_shape.jit.error


def test_a_second_run_reads_the_same_trace_and_holds_nothing_alive():
    import gc
    import weakref

    def closure_version(x):
        return jax.vmap(lambda row: jnp.sum(W @ row))(x)

    traces = []

    def on_duration(event, *args, **kwargs):
        if "jaxpr_trace" in event:
            traces.append(event)

    first = probes.bisect(closure_version, X, ref=REF, namespace=globals())
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    try:
        second = probes.bisect(closure_version, X, ref=REF, namespace=globals())
    finally:
        jax.monitoring.unregister_event_duration_listener(on_duration)
    assert [c.name for c in first.captured] == [c.name for c in second.captured] == ["W"]
    assert second.jit.max_abs_error == first.jit.max_abs_error
    assert traces == []  # the captured arrays were read from the trace JAX had cached at the first run

    held = weakref.ref(closure_version)
    del closure_version, first, second
    gc.collect()
    assert held() is None
