"""A key a library keeps in its own state with a counter (Flax NNX's random streams): its jit, not split (issue 52.4).

google/flax#4539 ("Jitting a dropout module yields a constant value"): an ``nnx.Dropout`` called through plain
``jax.jit`` gives the same mask at every call - its stream draws with ``fold_in(key, count)`` and advances the
count in place, which jax.jit does not carry out of the call. The answer in the thread is ``nnx.jit``. The
keys finding was right, but its only fix was ``jax.random.split`` of a key the user never holds; and a correct
``nnx.jit`` loop (the base key stays, the count goes up) was reported as "the same key" too.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes

nnx = pytest.importorskip("flax.nnx")


class _Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(4, 4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.linear(x))


def _plain_jit():
    @jax.jit
    def forward(model, x):
        return model(x)

    return forward, _Block(nnx.Rngs(0)), jnp.ones((2, 4))


def _nnx_jit():
    @nnx.jit
    def forward(model, x):
        return model(x)

    return forward, _Block(nnx.Rngs(0)), jnp.ones((2, 4))


def test_a_dropout_stream_through_plain_jax_jit_gets_nnx_jit_tried_not_split():
    forward, model, x = _plain_jit()
    with probes.keys() as report:
        outs = [forward(model, x) for _ in range(3)]
    assert all(bool((o == outs[0]).all()) for o in outs)  # the thread's symptom: the same mask every call
    (flow,) = report.repeated_flows
    assert (flow.function, flow.calls, flow.distinct) == ("forward", 3, 1)
    assert flow.folded_with == ["model.drop.rngs.count.value"]  # the count folded in, the same every call
    fix = " ".join(flow.fix.split())
    assert fix.startswith("`model.drop.rngs` (flax.nnx.RngStream) keeps this key with a count")
    assert "its program computes the next count and drops it" in fix
    assert "Use `nnx.jit` in place of `jax.jit` on `forward`" in fix and "nnx.split(model)" in fix
    assert "Tried: `forward` traced under `nnx.jit` on this call's arguments - the count comes back out" in fix
    assert "`jax.random.split` is not yours to call on it" in fix
    # the trial traced under nnx.jit, which writes its state back: the user's stream is as the calls left it
    assert int(model.drop.rngs.count[...]) == 0
    # the same finding, and fix, on the other paths
    forward, model, x = _plain_jit()
    with probes.doctor() as doctor:
        for _ in range(3):
            forward(model, x)
    (finding,) = [f for f in doctor.to_dict()["findings"] if f["area"] == "random keys"]
    assert "Use `nnx.jit` in place of `jax.jit` on `forward`" in " ".join(finding["fix"].split())


def test_the_watch_gives_the_same_fix_for_the_dropout_stream():
    from jaxmagic.probes._watch import Watch

    forward, model, x = _plain_jit()
    watch = Watch()
    watch.begin_cell("nnx dropout under jax.jit")
    try:
        for _ in range(3):
            forward(model, x)
        cell = watch.end_cell()
    finally:
        watch.close()
    (finding,) = [f for f in cell.findings if f.area == "random keys"]
    text = " ".join(" ".join(str(value) for value in dataclasses.asdict(finding).values()).split())
    assert "Use `nnx.jit` in place of `jax.jit` on `forward`" in text


def test_a_correct_nnx_jit_loop_is_no_same_key_the_base_key_stays_and_the_count_advances():
    forward, model, x = _nnx_jit()
    with probes.keys() as report:
        outs = [forward(model, x) for _ in range(3)]
    assert not bool((outs[1] == outs[0]).all())  # nnx.jit carries the count out: a new mask each call
    assert not report.repeated_flows and report.status.value == "ok", report.summary
    (flow,) = [f for f in report.flows if f.calls == 3]
    assert flow.distinct == 3 and flow.folded_with  # the same base key, counted with its count
    with probes.doctor() as doctor:
        for _ in range(3):
            forward(model, x)
    assert not [f for f in doctor.to_dict()["findings"] if f["area"] == "random keys"]


def test_a_users_own_fold_in_of_a_step_is_no_reuse_but_a_constant_step_is():
    """jax.random.fold_in(key, step) with one base key and a new step per call (JAX's key-reuse rules: fold_in
    only makes a key) is no reuse; the same step every call is, and its fix stays the general one."""

    @jax.jit
    def noisy(x, key, step):
        return x + jax.random.normal(jax.random.fold_in(key, step), x.shape)

    key, x = jax.random.key(0), jnp.zeros(3)
    with probes.keys() as report:
        for step in range(3):
            noisy(x, key, jnp.uint32(step))
    assert not report.repeated_flows, report.summary
    with probes.keys() as report:
        for _ in range(3):
            noisy(x, key, jnp.uint32(0))
    (flow,) = report.repeated_flows
    assert flow.folded_with == ["step"] and flow.fix == ""  # no library state: the general fix


def test_a_library_jit_whose_trace_keeps_no_program_is_not_tried_and_does_not_raise(monkeypatch):
    """The docstring's "never raises": a flax.nnx whose ``jit(f).trace`` gives an object with no jaxpr (another
    version's shape) was read as a program outside the try and raised AttributeError (found by typing it)."""
    import sys
    import types

    from jaxmagic.probes._keys import library_state

    class _Traced:  # no .jaxpr, no .traced
        pass

    fake = types.ModuleType("flax.nnx")
    fake.jit = lambda fun: types.SimpleNamespace(trace=lambda *a, **k: _Traced())  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flax.nnx", fake)
    worked, why = library_state.tried_under_state_jit("nnx.jit", lambda x: x, (1,), {})
    assert (worked, why) == (False, "not tried: tracing under nnx.jit gave no program to read")
