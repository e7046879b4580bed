"""The producer search runs equations ahead of its listener and checks each value once (``finite_flags``).

What it reports must be what the one-equation-at-a-time walk reported: the same producer, values and
fixes. These compare the two on programs in the shape of real reports, and check that a value is
read on the host once, not at every question asked of it, and that a host callback is not run ahead.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmagic import probes
from jaxmagic._jax import finite_flags, jaxpr_eval
from jaxmagic.probes._nans.search import given, host_values


def caught(thunk):
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            thunk()
    return report


def one_at_a_time(monkeypatch):
    """The walk as it was: no run-ahead, no flags kept (every question reads the value on the host)."""
    monkeypatch.setattr(jaxpr_eval, "AHEAD", 1)
    monkeypatch.setattr(finite_flags, "_active", [])
    monkeypatch.setattr(finite_flags, "checking", lambda: __import__("contextlib").nullcontext())


# The gradient of a squared norm at a zero vector (https://github.com/jax-ml/jax/issues/4177), deep in a
# small training step: a NaN only in the backward pass, found after many finite equations.


def block(p, h):
    mu = h.mean(-1, keepdims=True)
    z = (h - mu) @ p["w"] * jnp.linalg.norm(p["gate"]) ** 2
    return h + jax.nn.gelu(z)


def loss(params, x):
    for p in params:
        x = block(p, x)
    return jnp.mean(x**2)


@jax.jit
def train_step(params, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), value


def step_args():
    params = [{"w": jnp.eye(8) * (i + 1.0), "gate": jnp.zeros(2) if i == 3 else jnp.full(2, 0.5)} for i in range(5)]
    return params, jnp.linspace(-1.0, 1.0, 32).reshape(4, 8)


def run_step():
    return train_step(*step_args())


def test_backward_nan_is_reported_as_by_the_one_at_a_time_walk(monkeypatch):
    ahead = caught(run_step).to_dict()
    assert ahead["producer"]["primitive"] == "div" and ahead["producer"]["phase"] == "backward"
    with monkeypatch.context() as patched:
        one_at_a_time(patched)
        before = caught(run_step).to_dict()
    assert json.dumps(ahead, sort_keys=True, default=str) == json.dumps(before, sort_keys=True, default=str)


def test_the_check_made_where_an_accelerators_arrays_live_gives_the_same_report(monkeypatch):
    # this machine has no accelerator: its arrays are checked by the compiled check as a GPU's would be
    ahead = caught(run_step).to_dict()
    with monkeypatch.context() as patched:
        patched.setattr(finite_flags, "checked_on_host", lambda array: False)
        on_device = caught(run_step).to_dict()
    assert json.dumps(ahead, sort_keys=True, default=str) == json.dumps(on_device, sort_keys=True, default=str)


def test_each_value_is_read_on_the_host_once_not_at_every_question(monkeypatch):
    reads: list[int] = []
    original = host_values.host_array

    def counted(value):
        if isinstance(value, jax.Array):
            reads.append(id(value))
        return original(value)

    monkeypatch.setattr(host_values, "host_array", counted)
    monkeypatch.setattr(given, "host_array", counted)
    ahead = caught(run_step)
    with monkeypatch.context() as patched:
        one_at_a_time(patched)
        count_ahead = len(reads)
        reads.clear()
        before = caught(run_step)
    assert ahead.producer.description == before.producer.description
    # the questions left for the host are those about the non-finite values (the flags say "some"; where
    # is read from the array): a fraction of the checks of every equation's every value
    assert count_ahead * 4 < len(reads)


# A host callback after the operation that makes the NaN, inside a nested jitted function: once the
# search has found the producer inside, it leaves the function; the callback is not run ahead of it.

calls: list[float] = []


def record(value):
    calls.append(float(np.asarray(value).sum()))
    return np.asarray(value)


@jax.jit
def outer(x):
    @jax.jit
    def inner(x):
        y = jnp.log(x)
        z = jax.pure_callback(record, jax.ShapeDtypeStruct(x.shape, x.dtype), y)
        return z + 1.0

    return inner(x) * 2.0


def run_outer():
    return outer(jnp.array([1.0, -1.0]))


def test_a_host_callback_is_not_run_ahead_of_the_listener(monkeypatch):
    calls.clear()
    ahead = caught(run_outer).to_dict()
    ran_ahead = len(calls)
    calls.clear()
    with monkeypatch.context() as patched:
        one_at_a_time(patched)
        before = caught(run_outer).to_dict()
    assert ahead["producer"]["primitive"] == "log"
    assert ran_ahead == len(calls)
    assert json.dumps(ahead, sort_keys=True, default=str) == json.dumps(before, sort_keys=True, default=str)
