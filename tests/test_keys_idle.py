"""A key a jitted program carries through without drawing from it is no repeated draw (``_keys/idle_keys.py``).

The shape: an eval step given the whole train state - its dropout key with it - gets the same key at every call
and never draws from it; "`eval_step` got the same key in 20 of its 20 calls" named a cause nobody observed.
A key the program touches in any way is still followed: a train step that draws from its state's key without
updating it is the real bug, found as before - with Flax's ``TrainState`` and Optax, called for real.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic.probes import Watch
from jaxmagic.probes._keys.idle_keys import idle_inputs


def _jaxpr(f, *args):
    return jax.make_jaxpr(f)(*args).jaxpr


KEY = jax.random.key(0)
W = jnp.ones(3)


@pytest.mark.parametrize(
    ("f", "idle"),
    [
        (lambda k, w: w * 2, {0}),  # not used at all
        (lambda k, w: (k, w * 2), {0}),  # returned as it came in
        (lambda k, w: (jax.jit(lambda k: k)(k), w), {0, 1}),  # through a nested jit that returns it (w: as is)
        (lambda k, w: jax.random.normal(jax.jit(lambda k: k)(k), (3,)) + w, set()),  # ... then drawn from
        (lambda k, w: jax.jit(lambda k, w: (k, jax.random.normal(k, (3,)) + w))(k, w), set()),  # drawn inside
        (lambda k, w: jax.random.split(k)[0], {1}),  # split: a use (w unused)
        (lambda k, w: jax.random.fold_in(k, 3), {1}),  # fold_in: a use
        (lambda k, w: jax.random.key_data(k).sum() + w, set()),  # its data read: a use
        (lambda k, w: jax.lax.scan(lambda c, _: (c, None), k, None, length=2)[0], {1}),  # given to a loop: a use
    ],
)
def test_a_key_is_idle_only_when_the_program_returns_it_as_it_came_in_or_never_reads_it(f, idle):
    assert idle_inputs(_jaxpr(f, KEY, W)) == idle


@jax.jit
def eval_step(state, x):
    return jnp.sum(state["w"] * x), state  # the key rides along in the state, never drawn from


@jax.jit
def train_step(state, x):
    mask = jax.random.bernoulli(state["key"], 0.9, x.shape)  # the bug: the state's key is never advanced
    return {"w": state["w"] - 0.1 * mask * x, "key": state["key"]}


def _loop(step, calls=20):
    state = {"w": jnp.ones(3), "key": jax.random.key(1)}
    for _ in range(calls):
        out = step(state, jnp.ones(3))
        state = out if isinstance(out, dict) else out[1]
    return state


def test_an_eval_step_carrying_the_train_states_key_is_no_repeated_key_and_a_train_step_drawing_from_it_is():
    with probes.keys(record=True) as report:
        _loop(eval_step)
    assert not report.repeated_flows and not report.concerns(), report.summary
    # the OK says what it did not count, and why
    assert (
        report.summary
        == "No key was reused (`eval_step`'s `state['key']`: carried through without a draw, not counted)."
    )
    with probes.keys(record=True) as report:
        _loop(train_step)
    (flow,) = report.repeated_flows
    assert flow.function == "train_step" and "in 20 of its 20 calls" in flow.headline


def test_the_watch_says_nothing_of_a_carried_key_and_finds_the_drawn_one():
    watch = Watch(only=["random keys"])
    for cell, step in (("In [1]", eval_step), ("In [2]", train_step)):
        watch.begin_cell(cell)
        try:
            _loop(step)
        finally:
            found = [f.to_dict() for f in watch.end_cell().findings]
        if step is eval_step:
            assert found == []
        else:
            assert [f["function"] for f in found] == ["train_step"]


def test_flax_train_states_key_given_to_an_eval_step_is_not_a_repeated_key():
    # Flax's TrainState with a dropout key field (the Linen examples' shape), Optax's optimizer, called for real:
    # the eval step takes the whole state and runs the model deterministically; the train step forgets to advance
    # the key it draws its dropout from.
    nn = pytest.importorskip("flax.linen")
    optax = pytest.importorskip("optax")
    from flax.training import train_state

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool):
            x = nn.Dense(4)(x)
            return nn.Dropout(0.5, deterministic=not train)(x)

    class State(train_state.TrainState):
        key: jax.Array

    model = Model()
    params = model.init(jax.random.key(0), jnp.ones((2, 3)), train=False)["params"]
    state = State.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1), key=jax.random.key(1))

    @jax.jit
    def evaluate(state, x):
        return state.apply_fn({"params": state.params}, x, train=False).sum()

    @jax.jit
    def train(state, x):
        def loss(p):
            return state.apply_fn({"params": p}, x, train=True, rngs={"dropout": state.key}).sum()

        return state.apply_gradients(grads=jax.grad(loss)(state.params))  # state.key never advanced: the bug

    x = jnp.ones((2, 3))
    with probes.keys(record=True) as report:
        for _ in range(5):
            evaluate(state, x)
    assert not report.repeated_flows and "`evaluate`'s" in report.summary and "not counted" in report.summary
    with probes.keys(record=True) as report:
        s = state
        for _ in range(5):
            s = train(s, x)
    assert [f.function for f in report.repeated_flows] == ["train"], report.summary
