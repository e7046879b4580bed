"""A key made from constants inside a jitted function (or closed over): the same draw at every call.

``key = jax.random.PRNGKey(0)`` inside the train step, or Flax's ``rngs={"dropout": jax.random.key(0)}``
written in the step: every step gets the same dropout mask. JAX's key-reuse checker is silent (each call
consumes its key once), so ``%%jax_keys`` and the doctor said OK. The shape of flax#1455 / jax#9950-style
threads ("dropout mask identical every step", "same noise each iteration under jit"), written small.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes

GLOBAL_KEY = jax.random.key(3)


@jax.jit
def seeded_inside(w, x):
    key = jax.random.PRNGKey(0)
    mask = jax.random.bernoulli(key, 0.5, x.shape)
    return w - 0.1 * jnp.mean(x * mask)


@jax.jit
def closes_over_a_key(w, x):
    return w + jax.random.normal(GLOBAL_KEY, x.shape).sum()


@jax.jit
def key_given(w, x, key):
    return w - 0.1 * jnp.mean(x * jax.random.bernoulli(key, 0.5, x.shape))


def _run(step, calls: int, *extra):
    w, x = jnp.ones(()), jnp.ones((8,))
    with probes.keys(record=True) as report:
        for _step in range(calls):
            w = step(w, x, *extra)
    return report


def test_a_key_made_from_a_seed_inside_the_step_is_the_same_at_every_call():
    report = _run(seeded_inside, 3)
    [draw] = report.repeated_constant_draws
    assert draw.function == "seeded_inside" and draw.api == "jax.random.bernoulli" and draw.calls == 3
    assert draw.key_line is not None and draw.key_line.code == "key = jax.random.PRNGKey(0)"
    assert draw.line is not None and draw.line.code == "mask = jax.random.bernoulli(key, 0.5, x.shape)"
    assert report.status.value == "problem"
    assert report.summary.startswith("`jax.random.bernoulli` at ")
    assert "from constants (`key = jax.random.PRNGKey(0)`" in report.summary and "3 calls here" in report.summary
    assert "jax.random.split(key)" in draw.fix


def test_called_once_a_fixed_seed_is_just_a_seed():
    report = _run(seeded_inside, 1)
    assert report.constant_draws and not report.repeated_constant_draws
    assert report.status.value == "ok"


def test_a_key_the_function_closes_over_is_named_so():
    report = _run(closes_over_a_key, 2)
    [draw] = report.repeated_constant_draws
    assert draw.key_line is None and "a key `closes_over_a_key` closes over" in draw.text


def test_a_key_given_as_an_argument_and_split_outside_is_fine():
    key = jax.random.key(0)
    w, x = jnp.ones(()), jnp.ones((8,))
    with probes.keys(record=True) as report:
        for _step in range(3):
            key, sub = jax.random.split(key)
            w = key_given(w, x, sub)
    assert not report.constant_draws and report.status.value == "ok"


def test_flax_dropout_given_a_key_made_in_the_step():
    nn = pytest.importorskip("flax.linen")

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.Dense(4)(x)
            return nn.Dropout(0.5, deterministic=not train)(x)

    net = Net()
    x = jnp.ones((2, 3))
    params = net.init(jax.random.key(1), x, False)

    @jax.jit
    def step(params, x):
        return net.apply(params, x, True, rngs={"dropout": jax.random.key(0)}).sum()

    with probes.keys(record=True) as report:
        for _step in range(3):
            step(params, x)
    [draw] = report.repeated_constant_draws
    assert draw.api == "flax.linen.Dropout.__call__" and draw.calls == 3
    assert draw.key_line is not None and 'rngs={"dropout": jax.random.key(0)}' in draw.key_line.code


def test_the_doctor_names_it_where_it_said_nothing_found(ip):
    ip.run_cell(
        "@jax.jit\n"
        "def noisy(w, x):\n"
        "    return w + 0.01 * jax.random.normal(jax.random.key(7), x.shape).mean()\n"
        "w_, x_ = jnp.ones(()), jnp.ones((8,))\n"
    )
    ip.run_cell("%%jax_doctor -o doc_const\nfor i in range(3):\n    w_ = noisy(w_, x_)\n")
    doctor = ip.user_ns["doc_const"]
    assert doctor.status.value == "problem" and doctor.areas[0] == "random keys", doctor.summary
    assert "`jax.random.normal` with the same key at every call of `noisy`" in doctor.summary
