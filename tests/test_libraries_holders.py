"""Holders inside the structures of the libraries people train with, named as the user reaches them.

Flax NNX modules and their ``Variable``s, Optax states and chains, Equinox modules, Flax linen
parameters (``FrozenDict``, ``TrainState``) and Haiku's parameter dicts, called for real, in the
shapes of their public threads: an attribute set inside a method run under ``nnx.jit``
(google/flax#4695: NNX objects mutated across a jit boundary leak), optimizer moments kept alive
step after step (google-deepmind/optax#969: live buffers growing in a training loop), a model
that keeps its last activation (the Equinox/Haiku forms of the same leak). Every test uses array
shapes of its own so that arrays other tests left alive do not disturb it.
"""

from __future__ import annotations

import gc
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes

nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")
eqx = pytest.importorskip("equinox")


def _holders(report, shape: tuple) -> list[str]:
    return [h for g in report.to_dict()["groups"] if tuple(g["shape"]) == shape for h in g["holders"]]


def _no_private_step(path: str) -> bool:
    """No step of the path is a private field (``._tree``, ``._dict``, ``._pytree__state``)."""
    return "._" not in path and "<" not in path


# -- %%jax_leaks --------------------------------------------------------------------


class Recorder(nnx.Module):
    """An NNX module that keeps its last hidden activation, as a person would for a debug plot."""

    def __init__(self, rngs):
        self.linear = nnx.Linear(3, 4, rngs=rngs)
        self.last_hidden = None

    def __call__(self, x):
        h = jnp.tanh(self.linear(x))
        self.last_hidden = h
        return h.sum()


def test_nnx_jit_leak_names_the_module_attribute_and_the_line_that_stored_it():
    model = Recorder(nnx.Rngs(0))

    @nnx.jit
    def train_step(model, x):
        return model(x)

    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"model": model, "train_step": train_step}) as report:
            train_step(model, jnp.ones((2, 3)))
    first = report.to_dict()["leaked"][0]
    # nnx.jit keeps the tracer in its graph definition of the module's copy (JAX's chain ends at
    # "<FTPyTree>._tree"): it is named as the attribute of the user's module
    assert first["held_by"] == ["model.last_hidden"] and first["aval"] == "float32[2,4]"
    assert first["stored_at"]["code"] == "self.last_hidden = h"  # not __init__'s `self.last_hidden = None`
    assert first["provenance"]["made_at"]["code"] == "h = jnp.tanh(self.linear(x))"
    assert all(_no_private_step(path) for t in report.to_dict()["leaked"] for path in t["held_by"])
    assert "`model.last_hidden` holds a float32[2,4] tracer" in report.summary


def test_nnx_jit_leak_names_the_module_given_to_the_call_not_another_of_its_class():
    # google/flax#4695's leak with two modules of one class in the notebook (a teacher and a student): the
    # tracer is in nnx.jit's record of the module the call was given, `student`; `teacher` holds nothing.
    teacher, student = Recorder(nnx.Rngs(0)), Recorder(nnx.Rngs(1))

    @nnx.jit
    def train_step(model, x):
        return model(x)

    namespace = {"teacher": teacher, "student": student, "train_step": train_step}
    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace=namespace) as report:
            train_step(student, jnp.ones((5, 3)))
    first = report.to_dict()["leaked"][0]
    assert first["held_by"] == ["student.last_hidden"]
    assert teacher.last_hidden is None
    assert "`student.last_hidden` holds a float32[5,4] tracer" in report.summary


def test_nnx_grad_inside_jit_names_a_nested_module_attribute():
    class Block(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(3, 3, rngs=rngs)

        def __call__(self, x):
            y = self.linear(x)
            self.cache = [y]
            return y

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.block = Block(rngs)

        def __call__(self, x):
            return self.block(x).sum()

    def loss_fn(net, x):
        return net(x)

    @nnx.jit
    def train_step(net, x):
        return nnx.value_and_grad(loss_fn)(net, x)[0]

    net = Net(nnx.Rngs(0))
    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"net": net}) as report:
            train_step(net, jnp.ones(3))
    first = report.to_dict()["leaked"][0]
    assert first["held_by"] == ["net.block.cache[0]"] and first["stored_at"]["code"] == "self.cache = [y]"
    assert first["provenance"]["transforms"] == ["jit(train_step)", "grad"]


def test_equinox_module_keeping_activations_in_a_static_list_names_the_field():
    class Model(eqx.Module):
        linear: eqx.nn.Linear
        seen: list = eqx.field(static=True)

        def __init__(self, key):
            self.linear = eqx.nn.Linear(3, 2, key=key)
            self.seen = []

        def __call__(self, x):
            act = jax.nn.relu(self.linear(x))
            self.seen.append(act)
            return act.sum()

    model = Model(jax.random.key(0))
    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"model": model}) as report:
            eqx.filter_jit(lambda m, x: m(x))(model, jnp.ones(3))
    first = report.to_dict()["leaked"][0]
    assert first["held_by"] == ["model.seen[0]"]
    assert first["stored_at"]["code"] == "self.seen.append(act)"
    model.seen.clear()


def test_a_tracer_left_on_an_nnx_module_after_the_step_is_named_and_traced_to_its_line():
    model = Recorder(nnx.Rngs(1))

    @nnx.jit
    def forward(model, x):
        return model(x)

    forward(model, jnp.ones((5, 3)))  # no leak checking: nnx copies the attribute back onto `model`
    with probes.leaks(namespace={"model": model}) as report:
        pass
    [held] = report.to_dict()["held"]
    assert held["path"] == "model.last_hidden" and held["stored_at"]["code"] == "self.last_hidden = h"
    assert held["provenance"]["made_at"]["code"] == "h = jnp.tanh(self.linear(x))"
    model.last_hidden = None


# -- %jax_live ----------------------------------------------------------------------


def test_optax_moments_deep_in_a_multisteps_state_are_named_not_held_elsewhere():
    params = {"w1": jnp.ones((1531,)), "w2": jnp.ones((1543, 2))}
    opt = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4)
    opt_state = opt.init(params)
    del params
    report = probes.live(namespace={"opt_state": opt_state, "opt": opt})
    holders = _holders(report, (1531,))
    assert holders == [
        "opt_state.inner_opt_state[0].mu['w1']",
        "opt_state.inner_opt_state[0].nu['w1']",
        "opt_state.acc_grads['w1']",
    ]
    group = report.group((1543, 2), "float32")
    assert group.elsewhere == 0 and group.held_by_names == 3
    # a chain of transformations: the index of each link, as optax.chain's state is a tuple
    chained = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3)).init({"w": jnp.ones((1553,))})
    report = probes.live(namespace={"opt_state": chained})
    assert _holders(report, (1553,)) == ["opt_state[1][0].mu['w']", "opt_state[1][0].nu['w']"]


def test_nnx_model_and_optimizer_are_named_through_their_variables():
    class Net(nnx.Module):
        def __init__(self, rngs):
            self.encoder = nnx.Linear(1567, 3, rngs=rngs)
            self.blocks = nnx.List([nnx.Linear(3, 1571, rngs=rngs)])

    model = Net(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    report = probes.live(namespace={"model": model, "optimizer": optimizer})
    kernel = _holders(report, (1567, 3))
    assert "model.encoder.kernel.value" in kernel and "model.blocks[0].bias.value" in _holders(report, (1571,))
    # the optimizer's moments, by the same path below its state
    assert "optimizer.opt_state[0].mu['encoder']['kernel'].value" in kernel
    assert all(_no_private_step(path) for path in kernel + _holders(report, (1571,)))
    assert report.group((1567, 3), "float32").elsewhere == 0


def test_nnx_variables_outside_a_pytree_module_are_named_by_value_not_by_private_field():
    class Legacy(nnx.Module, pytree=False):  # a module JAX does not flatten: walked attribute by attribute
        def __init__(self, rngs):
            self.layers = [nnx.Linear(2, 1637, rngs=rngs)]

    class Holder:
        def __init__(self):
            self.w = nnx.Param(jnp.ones((1657,)))

    report = probes.live(namespace={"legacy": Legacy(nnx.Rngs(0)), "holder": Holder()})
    assert _holders(report, (1637,)) == ["legacy.layers[0].bias.value"]  # three steps, then the Linear's leaves
    assert _holders(report, (1657,)) == ["holder.w.value"]  # not `holder.w._raw_value`


def test_equinox_module_leaves_at_any_depth():
    class Block(eqx.Module):
        mlp: eqx.nn.MLP

    class Model(eqx.Module):
        blocks: list

    key = jax.random.key(0)
    model = Model([Block(eqx.nn.MLP(1579, 2, width_size=1583, depth=1, key=key))])
    report = probes.live(namespace={"model": model})
    # five steps down: model.blocks[0].mlp.layers[0].weight
    assert _holders(report, (1583, 1579)) == ["model.blocks[0].mlp.layers[0].weight"]
    assert report.group((1583, 1579), "float32").elsewhere == 0


def test_flax_linen_params_and_train_state_without_private_fields():
    linen = pytest.importorskip("flax.linen")
    train_state = pytest.importorskip("flax.training.train_state")
    from flax.core import freeze

    model = linen.Dense(1597)
    variables = freeze(model.init(jax.random.key(0), jnp.ones((1, 1601))))
    state = train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optax.adam(1e-3))
    report = probes.live(namespace={"variables": variables, "state": state})
    holders = _holders(report, (1601, 1597))
    assert {"variables['params']['kernel']", "state.params['kernel']", "state.opt_state[0].mu['kernel']"} <= set(
        holders
    )
    assert all(_no_private_step(path) for path in holders)


def test_haiku_params_and_optax_state_of_a_transformed_network():
    hk = pytest.importorskip("haiku")

    def forward(x):
        return hk.nets.MLP([1607, 2])(x)

    net = hk.without_apply_rng(hk.transform(forward))
    params = net.init(jax.random.key(0), jnp.ones((1, 1613)))
    tx = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=2)
    opt_state = tx.init(params)
    report = probes.live(namespace={"params": params, "opt_state": opt_state, "net": net})
    holders = _holders(report, (1613, 1607))
    assert "params['mlp/~/linear_0']['w']" in holders
    assert "opt_state.inner_opt_state[0].mu['mlp/~/linear_0']['w']" in holders
    assert report.group((1613, 1607), "float32").elsewhere == 0


def test_a_pytree_registered_without_keys_is_walked_by_attribute():
    dist = pytest.importorskip("numpyro.distributions")
    prior = dist.Normal(jnp.ones((1663,)), 1.0)  # flattened by JAX as [<flat index 0>], [<flat index 1>]
    report = probes.live(namespace={"prior": prior})
    assert _holders(report, (1663,)) == ["prior.loc"]


# -- %%jax_doctor --------------------------------------------------------------------


def test_doctor_names_optimizer_states_piling_up_in_a_history_list():
    """optax#969's shape: the live buffers grow with every step; here each step's state is kept."""
    params = {"w": jnp.ones((1619,))}
    tx = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=2)
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state):
        grads = jax.tree.map(jnp.ones_like, params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    ns = {"params": params, "history": [opt_state]}
    del params, opt_state
    with probes.doctor(skip=["nans", "keys", "compiles", "transfers"], namespace=ns) as report:
        for _ in range(12):
            ns["params"], state = train_step(ns["params"], ns["history"][-1])
            ns["history"].append(state)
        del state
    live = report.to_dict()["live"]
    [group] = [g for g in live["groups"] if tuple(g["shape"]) == (1619,)]
    assert group["holders"][0] == "history[0..12].inner_opt_state[0].mu['w']"
    assert "history[0..12].acc_grads['w']" in group["holders"]
    assert group["by_kind"].get("elsewhere", 0) == 0
    title = report.finding("live").title
    assert "more `f32[1619]` alive after the cell" in title
    assert "held by `history[0..12].inner_opt_state[0].mu['w']`" in title
    ns.clear()
    gc.collect()


def test_nothing_of_a_library_is_imported_by_the_search():
    code = (
        "import sys, jax.numpy as jnp; from jaxmagic import probes\n"
        "class Box: pass\n"
        "box = Box(); box.items = {'w': [jnp.ones(3)]}\n"
        "probes.live(namespace={'box': box})\n"
        "with probes.leaks(namespace={'box': box}): pass\n"
        "print(sorted(m for m in ('flax', 'optax', 'equinox', 'haiku', 'numpyro', 'chex') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
