"""No compile-size finding without evidence: a block of equations repeated is a Python loop unrolled only
when the repeats come from a line of the user's in the body of one of the user's own ``for``/``while``
loops; a compilation that is merely slow (a first compile of library code on a busy machine) is a note with
its stage times, never a finding, and never carries a fix nobody tried.

Shapes from public threads, with the real Flax and Optax: the issue's Flax Linen + Optax step that compiled
once (Optax's ``tree.map`` over the parameters repeats one block per leaf, jax#16084 "Very slow compile for
tree-map over large number of leaves", jax#4667 "Slow compilation for functions acting on PyTrees"), and
flax#1966 ("Flax much slower than pure Jax?"), whose ``EigenNet`` stacks layers in a ``for`` - a loop of the
user's, unrolled. Asserts on ``to_dict()`` fields; how long a compilation took is never asserted.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic.probes._compiles.cost_sections import cost_concerns, cost_findings, is_big

nn = pytest.importorskip("flax.linen")
optax = pytest.importorskip("optax")


def _examined(run) -> tuple:
    """The compile report of ``run()`` and its slowest compilation (a cell that asks: examined, slow or not)."""
    with probes.compiles() as report:
        run()
    assert report.sizes, "the slowest compilation is always examined for a cell that asks"
    return report, report.sizes[0]


def test_a_flax_optax_step_compiled_once_is_no_unrolled_loop_and_gets_no_untried_fix():
    class Block(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            h = nn.Dense(self.features)(h)
            h = nn.gelu(h)
            return x + nn.Dense(x.shape[-1])(h)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(64)(x)
            x = Block(128)(x)
            x = Block(128)(x)
            x = Block(128)(x)
            x = Block(128)(x)
            x = Block(128)(x)
            x = Block(128)(x)
            x = nn.LayerNorm()(x)
            return nn.Dense(10)(x)

    model = Net()
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 32)))
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=1e-4))
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state, x, y):
        def loss_fn(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss

    x, y = jnp.ones((64, 32)), jnp.zeros((64,), jnp.int32)
    report, size = _examined(lambda: train_step(params, opt_state, x, y))
    data = report.to_dict()["sizes"][0]
    # Optax's per-leaf blocks repeat (42 leaves), but no loop of the user's is around them
    assert size.unrolled is None and not is_big(size)
    assert data["fix"] == "" and data["fix_trial"] == ""
    assert "fori_loop" not in report.first_fix and "unrolled" not in report.summary
    # the equations are counted at the user's lines inside train_step, not lost to the library's files
    top = data["lines"][0]
    assert top["line"]["code"] == "updates, opt_state = tx.update(grads, opt_state, params)"
    assert top["loop"] == ""
    assert data["provenance"]["made_at"]["code"] == top["line"]["code"]
    assert data["provenance"]["unknown"] == ""
    # as a busy machine would make it: slow. Still no finding for the doctor and the watch, only a note.
    size.slow = True
    assert cost_findings([size], [], []) == []
    (concern,) = cost_concerns([size], [], [])
    assert concern.severity.name == "NOTE" and "nothing found to fix" in concern.text
    assert "trace " in concern.text and "XLA compile " in concern.text  # the stage times


def test_flax_layers_stacked_in_a_for_of_the_users_are_a_loop_unrolled_also_under_grad():
    # flax#1966: `for feat in self.features[1:-1]: x = nn.Dense(feat)(x)`, differentiated in a train step
    class EigenNet(nn.Module):
        features: Sequence[int]

        @nn.compact
        def __call__(self, x_in):
            x = nn.Dense(self.features[0], use_bias=False)(x_in)
            x = nn.sigmoid(x)
            for feat in self.features[1:-1]:
                x = nn.Dense(feat, use_bias=False)(x)
                x = nn.sigmoid(x)
            return nn.Dense(self.features[-1], use_bias=False)(x)

    model = EigenNet([16] * 40 + [1])
    params = model.init(jax.random.PRNGKey(0), jnp.ones((4, 16)))
    tx = optax.sgd(1e-2)
    opt_state = tx.init(params)

    def train_step(params, opt_state, x):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    report, size = _examined(lambda: jax.jit(train_step)(params, opt_state, jnp.ones((4, 16))))
    loop = size.unrolled
    assert loop is not None and loop.line is not None
    assert loop.line.code == "x = nn.Dense(feat, use_bias=False)(x)"
    assert loop.loop == "for feat in self.features[1:-1]"
    # forward blocks then backward blocks: 39 iterations, each its forward and backward equations
    assert loop.iterations == 39 and loop.per_iteration * 39 == loop.equations
    assert "for feat in self.features[1:-1]" in size.fix and size.fix_trial.startswith("Not tried")
    # Optax's per-leaf lines repeat too, outside any loop: not what the finding names
    tx_line = next(line for line in size.lines if line.line and "tx.update" in line.line.code)
    assert tx_line.iterations == 41 and tx_line.loop == "" and not tx_line.unrolled


def test_a_users_tree_map_over_many_leaves_is_no_loop():
    # jax#16084 / jax#4667: one line mapping over a big pytree repeats a block per leaf, with no loop
    def scale_all(tree):
        return jax.tree.map(lambda leaf: jnp.tanh(leaf) * 2.0 + 1.0, tree)

    tree = {f"w{i}": jnp.ones(3) for i in range(60)}
    report, size = _examined(lambda: jax.jit(scale_all)(tree))
    top = size.lines[0]
    assert top.iterations == 60 and top.equations >= 100  # the repetition is there ...
    assert top.loop == "" and size.unrolled is None and size.fix == ""  # ... but no loop of the user's


def test_a_loop_that_defines_the_function_does_not_repeat_its_lines():
    def build():
        made = []
        for scale in (2.0,):

            def step(x):
                return jax.tree.map(lambda v: jnp.sin(v) * scale + 1.0, x)  # noqa: B023 - one iteration

            made.append(step)
        return made[0]

    tree = [jnp.ones(2) for _ in range(50)]
    report, size = _examined(lambda: jax.jit(build())(tree))
    assert size.lines[0].loop == "" and size.unrolled is None
