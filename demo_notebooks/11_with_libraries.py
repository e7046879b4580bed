# %% [markdown]
# # 11 · With Flax, Optax, Equinox and NumPyro
#
# Almost nobody debugs bare `jax.jit` code: they debug a Flax or Equinox model trained with Optax, a
# NumPyro model, a Haiku network. The libraries put their own layers between your code and JAX: a jit
# wrapper around your step function (`nnx.jit`, `eqx.filter_jit`), your state inside their structures
# (an NNX graph, an Equinox module, an Optax state), their own functions between your line and the
# operation that failed. The chapter does not cover them; the magics do.
#
# Each section below is one short training loop with one real bug, in the shape of a bug report from
# that library's issue threads, found with the magic a user would reach for. Every claim is asserted.
# Cells that are *meant* to fail have the `raises-exception` tag: the magic shows its report, then the
# error is raised unchanged, as it would be without jaxmagic.
# The versions are those `pyproject.toml`'s test extra pins (the notebook runs with them installed).

# %%
# %load_ext jaxmagic

import dataclasses
import jax
import jax.numpy as jnp
import flax
from flax import nnx
import optax
import equinox as eqx
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
import haiku as hk

from _demo_helpers import pop_last_error

CONFIG_AT_START = dict(jax.config.values)   # the last cell checks that nothing was left switched on
print("JAX", jax.__version__, "| flax", flax.__version__, "| optax", optax.__version__,
      "| equinox", eqx.__version__, "| numpyro", numpyro.__version__, "| haiku", hk.__version__)

# %% [markdown]
# ## Flax NNX: a step that compiles at every run (`%%jax_compiles`)
#
# A model is built for each run with its configuration object on it. `nnx.jit` puts every attribute
# that is not an array into the *graph definition*, which is part of the cache key; an object without
# `__eq__` is compared by identity, so each new `Config` compiles the step again. JAX's own
# explanation names the library's private structure (`_graphdef`, `NodeDef`); the report names your
# attribute, `model.cfg`.

# %%
class Config:                       # a plain class: compared by identity
    def __init__(self, scale):
        self.scale = scale


class Model(nnx.Module):
    def __init__(self, cfg, rngs):
        self.linear = nnx.Linear(3, 3, rngs=rngs)
        self.cfg = cfg


@nnx.jit
def predict(model, x):
    return model.linear(x) * model.cfg.scale


x3 = jnp.ones(3)

# %%
# %%jax_compiles -o rep_nnx
for run in range(4):
    predict(Model(Config(0.5), nnx.Rngs(run)), x3)

# %%
print(rep_nnx.summary)
step_nnx = rep_nnx.function("predict")
assert step_nnx.count == 4 and step_nnx.kind == "user"              # your function, not the wrapper
examples = rep_nnx.to_dict()["functions"][0]["change_examples"]["pytree_identity"]
assert examples[0].startswith("`model.cfg` (Model.cfg) is a new Config")
assert "_graphdef" not in rep_nnx.summary and "NodeDef" not in rep_nnx.summary
fix_nnx = rep_nnx.to_dict()["functions"][0]["field_fixes"]["pytree_identity"]
assert "frozen dataclass" in fix_nnx
print("fix:", fix_nnx)

# %% [markdown]
# The fix the report offers, run: a frozen dataclass compares by value, so equal configurations share
# one compilation.

# %%
@dataclasses.dataclass(frozen=True)
class FrozenConfig:
    scale: float

# %%
# %%jax_compiles -o rep_nnx_fixed
for run in range(4):
    predict(Model(FrozenConfig(0.5), nnx.Rngs(run)), x3)

# %%
assert rep_nnx_fixed.function("predict").count == 1
print(rep_nnx_fixed.summary)

# %% [markdown]
# ## Optax: a masked cross-entropy that is NaN (`%%jax_nans`)
#
# Padding classes are masked with `-jnp.inf` before `optax.softmax_cross_entropy`. The one-hot label is
# 0 there, and inside the loss `0 * -inf` is NaN. Which operation *made* the NaN? Not the `where` on your
# line: it only put your `-inf` in place. The report names the `mul` inside the library function your
# line called, keeps the line that wrote the `-inf`, says it is a value of the loss itself (not of its
# gradient, although it was found under `jax.grad`: the loss alone was evaluated to tell), and offers
# Optax's own remedy, its `where=` argument.

# %%
@jax.jit
def masked_loss(w, x, labels, valid):
    logits = x @ w
    masked = jnp.where(valid, logits, -jnp.inf)
    return optax.softmax_cross_entropy(masked, labels).mean()


w = jnp.full((4, 3), 0.1)
x = jnp.arange(8.0).reshape(2, 4)
labels = jax.nn.one_hot(jnp.array([1, 0]), 3)
valid = jnp.array([[True, True, False], [True, True, True]])

# %% tags=["raises-exception"]
# %%jax_nans -o rep_optax
grads = jax.grad(masked_loss)(w, x, labels, valid)

# %%
err = pop_last_error()
assert isinstance(err, FloatingPointError)
p = rep_optax.producer
print(rep_optax.summary)
assert (p.primitive, p.library_function) == ("mul", "optax.softmax_cross_entropy")
assert p.written_inf.code == "masked = jnp.where(valid, logits, -jnp.inf)"        # written, not made
assert p.derivative is False and p.phase == "forward"
assert "where=valid" in rep_optax.fix
print("fix:", rep_optax.fix)

# %% [markdown]
# The remedy, run: with the mask given to Optax and the logits left finite, loss and gradient are finite.

# %%
@jax.jit
def masked_loss_fixed(w, x, labels, valid):
    return optax.softmax_cross_entropy(x @ w, labels, where=valid).mean()


assert bool(jnp.isfinite(masked_loss_fixed(w, x, labels, valid)))
assert bool(jnp.isfinite(jax.grad(masked_loss_fixed)(w, x, labels, valid)).all())

# %% [markdown]
# ## Equinox: a NaN under `eqx.filter_jit`, found by the doctor (`%%jax_doctor`)
#
# A distance loss, `jnp.linalg.norm(x - w)`, trained with Optax under `eqx.filter_jit`. One sample sits
# exactly on `w`: the norm's gradient there is 0/0. `eqx.filter_jit` calls JAX's jit from inside
# Equinox, not from your line; the doctor watches the calls such a wrapper makes at the line of yours
# that called it, so the NaN is found (earlier versions said `[OK]`), and named in `jnp.linalg.norm`,
# the function your line called - not `make_step`, the function Equinox wrapped.

# %%
class Distance(eqx.Module):
    w: jax.Array

    def __call__(self, x):
        return jnp.linalg.norm(x - self.w, axis=-1)


points = jnp.array([[1.0, 2.0], [0.0, 1.0]])          # the first point equals w
optimizer = optax.sgd(0.1)


@eqx.filter_jit
def make_step(model, opt_state, x):
    loss, grads = eqx.filter_value_and_grad(lambda m: m(x).mean())(model)
    updates, opt_state = optimizer.update(grads, opt_state)
    return eqx.apply_updates(model, updates), opt_state, loss


distance = Distance(jnp.array([1.0, 2.0]))
opt_state = optimizer.init(eqx.filter(distance, eqx.is_array))

# %%
# %%jax_doctor -o doc_eqx
for _step in range(3):
    distance, opt_state, loss = make_step(distance, opt_state, points)

# %%
print(doc_eqx.summary)
assert bool(jnp.isnan(distance.w).any())                   # the bug is real: the weights are NaN
assert doc_eqx.areas[0] == "NaN" and doc_eqx.status.value == "problem"
assert doc_eqx.nans.producer.library_function == "jnp.linalg.norm"
assert "inside `make_step`" not in doc_eqx.summary
nan_finding = doc_eqx.findings[0]
assert nan_finding.line.code.startswith("return jnp.linalg.norm(x - self.w, axis=-1)")

# %% [markdown]
# ## Equinox: a Module given to `jax.jit` (the explainer, on by default)
#
# `eqx.nn.MLP` keeps its activation, `jax.nn.relu`, as a field: a function among the arrays. `jax.jit`
# traces every leaf of its arguments as an array and stops with "Error interpreting argument ... as
# an abstract array" (Equinox's FAQ, and many of its threads). The explainer names every such leaf and
# tries the fixes on this call by tracing `mlp_loss` again (nothing compiles): `eqx.filter_jit` alone
# for the loss, and `eqx.filter_jit(eqx.filter_grad(...))` for `jax.jit(jax.grad(...))`, where
# `filter_jit` alone fails when tried.

# %%
mlp = eqx.nn.MLP(2, 1, 8, 2, key=jax.random.key(0))
xs = jnp.ones((4, 2))


def mlp_loss(model, x):
    return jnp.mean(jax.vmap(model)(x) ** 2)


# %% tags=["raises-exception"]
jax.jit(jax.grad(mlp_loss))(mlp, xs)

# %%
err_mlp = pop_last_error()
# %jax_explain err_mlp -o rep_mlp
del err_mlp
print(rep_mlp.summary)
assert rep_mlp.leaves == {"model.activation": "a function (`relu`)", "model.final_activation": "a function (`<lambda>`)"}
assert rep_mlp.fixes[0].use == "eqx.filter_jit(eqx.filter_grad(mlp_loss))"
assert rep_mlp.fixes[0].checked.startswith("checked: `mlp_loss` traces with this call's arguments")
assert eqx.filter_jit(eqx.filter_grad(mlp_loss))(mlp, xs).layers[0].weight.shape == (8, 2)   # and it runs

# %% [markdown]
# ## NumPyro: the same key given to the seed handler at every step (`%%jax_keys`)
#
# `handlers.seed(model, rng_seed=key)` in a loop with one key: every pass draws the same numbers. The
# draws happen inside NumPyro (`numpyro.sample` splits the key), so the line that consumed the key is
# NumPyro's; the report names the library function and *your* line that handed it the key.

# %%
def coin():
    return numpyro.sample("x", dist.Normal(0.0, 1.0))


key = jax.random.PRNGKey(0)

# %%
# %%jax_keys -o rep_numpyro
draws = [handlers.seed(coin, rng_seed=key)() for _ in range(4)]

# %%
print(rep_numpyro.summary)
assert len({float(d) for d in draws}) == 1                 # the bug is real: four equal draws
assert "inside `numpyro.sample`" in rep_numpyro.summary
assert "given its key by your line" in rep_numpyro.summary

# %% [markdown]
# ## Haiku: `LayerNorm(eps=0)` on a padding row (`%%jax_nans`)
#
# A padding row of zeros has variance 0; with `eps=0.0` the layer computes `rsqrt(0) = inf`, then NaN.
# The operation is inside Haiku's layer, reached through Haiku's method wrappers; the report names
# `haiku.LayerNorm.__call__`, and the fix is the layer's own `eps` (read from its signature, with its
# default), tried on the value `rsqrt` got - not a clamp of the variance, which would leave `rsqrt(0)`.

# %%
def net(x):
    return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, eps=0.0)(x)


transformed = hk.without_apply_rng(hk.transform(net))
rows = jnp.ones((3, 4)).at[2].set(0.0)                      # the last row is padding
hk_params = transformed.init(jax.random.key(0), rows)
apply = jax.jit(transformed.apply)

# %% tags=["raises-exception"]
# %%jax_nans -o rep_haiku
normalised = apply(hk_params, rows)

# %%
err = pop_last_error()
assert isinstance(err, FloatingPointError)
print(rep_haiku.summary)
assert rep_haiku.producer.library_function == "haiku.LayerNorm.__call__"
assert "pass a positive `eps` (its default: 1e-05)" in rep_haiku.fix
assert "Tried on the values of" in rep_haiku.fix and "jnp.maximum" not in rep_haiku.fix
assert [f.code for f in rep_haiku.fixes if f.offered] == ["v + 1e-06"]   # tried on the values, then offered
print("fix:", rep_haiku.fix)

# %%
# Every magic restored what it switched on.
assert dict(jax.config.values) == CONFIG_AT_START
print("nothing left switched on")
