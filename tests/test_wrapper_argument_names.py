"""A library's jit wrapper's arguments are named as the user's call passed them, in every probe (issue 52,
item 2; ``probes/_support/calls/call_names.py``).

``eqx.filter_jit`` hands jax.jit ``(dynamic_donate, dynamic_nodonate, static)`` and ``nnx.jit`` each graph
node as its ``NodeStates``, so JAX's names for the leaves are the library's: the NumPy batches of an
Equinox training step were ``dynamic_nodonate['rest'][13]`` and ``[14]``, an NNX ``Rngs`` key
``rngs.states[0][1]``. Shapes of real threads: NumPy batches from a data loader handed to a
``filter_jit`` step (patrick-kidger/equinox#248: the JAX docs' ``NumpyLoader`` feeding
``make_step(model, x, y, opt_state)``; equinox#137, "Best Dataloader practices"); a dropout key kept as a
module attribute, the same mask every call (equinox#498: "It means you'll get the exact same dropout mask
every time"); ``Dropout``'s ``rngs`` (google/flax#3815) given to an ``nnx.jit`` function.
"""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
eqx = pytest.importorskip("equinox")
nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")

import numpy as np  # noqa: E402

from jaxmagic import probes  # noqa: E402
from tests.test_transfers_everywhere import findings_of_each, through_all_three  # noqa: E402

EQUINOX_STEP = """
import equinox as eqx, optax
X = np.random.rand(20, 32, 4).astype(np.float32)
Y = np.random.rand(20, 32, 1).astype(np.float32)
model = eqx.nn.MLP(4, 1, 16, 2, key=jax.random.PRNGKey(0))
optim = optax.adam(1e-3)
opt_state = optim.init(eqx.filter(model, eqx.is_array))

@eqx.filter_jit
def make_step(model, opt_state, xb, yb):
    def loss(m):
        return jnp.mean((jax.vmap(m)(xb) - yb) ** 2)
    value, grads = eqx.filter_value_and_grad(loss)(model)
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, value
"""


def test_numpy_batches_of_a_filter_jit_step_are_named_by_the_users_call_in_transfers_doctor_and_watch(ip):
    loop = "for i in range(20):\n    xb, yb = X[i], Y[i]\n    model, opt_state, value = make_step(model, opt_state, xb, yb)"
    transfers, doctor, watch = through_all_three(ip, EQUINOX_STEP, loop)
    told, doctor_uses, _, watch_findings = findings_of_each(transfers, doctor, watch)
    line = "model, opt_state, value = make_step(model, opt_state, xb, yb)"
    assert told == doctor_uses == {("xb", 20, line), ("yb", 20, line)}
    assert transfers["summary"].startswith("`make_step` was given a NumPy array (f32[32,4], argument `xb`) in 20 calls")
    assert not any("dynamic_" in text for text, _ in watch_findings)


def test_an_expression_the_line_passed_names_the_batch_as_written():
    """``make_step(model, opt_state, X_host[i], ...)``: named by what the line wrote, as for jax.jit."""
    model = eqx.nn.MLP(4, 1, 8, 1, key=jax.random.PRNGKey(0))

    @eqx.filter_jit
    def predict(model, xb):
        return jax.vmap(model)(xb)

    X_host = np.random.rand(3, 16, 4).astype(np.float32)
    with probes.transfers() as report:
        for i in range(3):
            predict(model, X_host[i])
    assert [(t["argument"], t["count"]) for t in report.to_dict()["transfers"] if t["function"]] == [("X_host[i]", 3)]


def test_a_dict_batch_of_an_nnx_jit_train_step_keeps_its_keys():
    """Flax's NNX MNIST tutorial: ``train_step(model, optimizer, batch)`` with ``batch`` a dict of NumPy
    arrays from ``tfds...as_numpy_iterator()``."""

    class CNN(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(6, 3, rngs=rngs)

        def __call__(self, x):
            return self.linear(x)

    model = CNN(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, batch):
        def loss_fn(model):
            logits = model(batch["image"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    batches = [{"image": np.ones((8, 6), np.float32), "label": np.zeros(8, np.int32)} for _ in range(3)]
    with probes.transfers() as report:
        for batch in batches:
            train_step(model, optimizer, batch)
    named = sorted(t["argument"] for t in report.to_dict()["transfers"] if t["function"])
    assert named == ["batch['image']", "batch['label']"]


class Net(eqx.Module):
    """equinox#498: the dropout key kept as an attribute, so every call draws the same mask."""

    linear: eqx.nn.Linear
    dropout: eqx.nn.Dropout
    key: jax.Array

    def __init__(self, key):
        k1, self.key = jax.random.split(key)
        self.linear = eqx.nn.Linear(4, 4, key=k1)
        self.dropout = eqx.nn.Dropout(0.5)

    def __call__(self, x):
        return self.dropout(self.linear(x), key=self.key)


def test_a_key_kept_in_an_equinox_module_is_named_by_its_attribute_when_reused():
    @eqx.filter_jit
    def loss(model, x):
        return jnp.sum(jax.vmap(model)(x) ** 2)

    model, x = Net(jax.random.key(0)), jnp.ones((8, 4))
    with pytest.raises(Exception, match="already consumed|Previously-consumed"):
        with probes.keys() as report:
            for _ in range(3):
                loss(model, x)
    reuse = report.reuse[0]
    assert (reuse.consumer, reuse.argument) == ("loss", "model.key")
    assert "dynamic_" not in str(report)


def test_the_keys_of_an_nnx_rngs_given_to_nnx_jit_are_named_by_the_rngs_path():
    """``nnx.Rngs`` made again at every call: the same key and count each time, named by its stream."""

    @nnx.jit
    def noisy(x, rngs):
        return x + jax.random.normal(rngs.noise(), x.shape)

    x = jnp.ones(3)
    with probes.keys() as report:
        for _ in range(3):
            noisy(x, nnx.Rngs(noise=0))
    arguments = {flow.argument for flow in report.flows}
    assert "rngs.noise.key.value" in arguments
    assert not any(".states[" in argument for argument in arguments)


def test_a_compile_cause_jax_named_by_the_wrappers_packing_is_told_in_the_users_names(monkeypatch):
    """A model with more leaves than the compile probe records of the user's arguments: the cause comes from
    JAX's cache-miss explanation, whose paths are ``eqx.filter_jit``'s (``dynamic_nodonate['rest'][0]``)."""
    from jaxmagic.probes._compiles import user_arguments

    monkeypatch.setattr(user_arguments, "MAX_LEAVES", 3)  # the MLP's 6 leaves stand for a large model's
    model = eqx.nn.MLP(4, 1, 16, 2, key=jax.random.PRNGKey(0))

    @eqx.filter_jit
    def loss(model, xb, yb):
        return jnp.mean((jax.vmap(model)(xb) - yb) ** 2)

    X, Y = jnp.ones((100, 4)), jnp.ones((100, 1))
    with probes.compiles() as report:
        for i in range(0, 100, 32):  # the last batch is smaller
            loss(model, X[i : i + 32], Y[i : i + 32])
    again = report.function("loss").again
    assert again.kind == "types"
    assert "xb: f32[32,4] -> f32[4,4]" in report.summary and "yb: f32[32,1] -> f32[4,1]" in report.summary
    assert "dynamic_" not in report.summary
