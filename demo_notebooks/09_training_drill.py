# %% [markdown]
# # 09 · The drill: a training script with three hidden bugs
#
# A perfectly ordinary-looking training script: binary classification data, a three-layer MLP with
# dropout, a small L2 penalty on the norm of the biases, a learning rate that decays with the step.
# It has three bugs. We pretend not to know where they are, start from what we can *see*, find each
# one with the magics, fix it, and pin the fix down with `assert`s before moving on. Then we run the
# original script once more under a single `%%jax_doctor` cell, which finds all three at once.
#
# Then come the chapter's four exercises (each with an answer area and a self-check), its six-question
# quiz (every answer that is a checkable fact is checked by code), and an appendix with the reference
# answers, where each exercise's self-check runs again and passes.
#
# ### This machine and the chapter
#
# The chapter ran on macOS arm64 with Python 3.14; this notebook runs on **Linux x86_64 with Python
# 3.13** and the same JAX/jaxlib 0.12.0.1 on CPU. All of the chapter's assertions hold here; timings
# differ and are printed, never asserted. As in the chapter, weights and data are passed to jitted
# functions as arguments.

# %%
# %load_ext jaxmagic

import re, gc, time, functools
from functools import partial
from collections import Counter
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import checkify

import jaxmagic.probes
from _demo_helpers import (to64, capture_stdout, capture_jax_logs, CompileCounter, run_py, result_lines,
                           config_changes, pop_last_error, show_error)

CONFIG_AT_START = dict(jax.config.values)   # the last cell checks that nothing was left switched on
print("JAX", jax.__version__, "| backend", jax.default_backend())


# %% [markdown]
# ## The script, version 0 (kept as it is: do not look for the bugs yet)

# %%
def make_data(key, n=512, d=16):
    kx, kw = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    w_true = jax.random.normal(kw, (d,))
    return X, (X @ w_true > 0).astype(jnp.int32)

def init_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [{"w": jax.random.normal(k, (m, n)) * jnp.sqrt(2.0 / m), "b": jnp.zeros(n)}
            for k, m, n in zip(keys, sizes[:-1], sizes[1:])]

def forward(params, x, key=None, rate=0.2):
    for i, layer in enumerate(params):
        x = x @ layer["w"] + layer["b"]
        if i < len(params) - 1:
            x = jax.nn.relu(x)
            if key is not None:                                    # dropout while training
                keep = jax.random.bernoulli(jax.random.fold_in(key, i), 1 - rate, x.shape)
                x = jnp.where(keep, x / (1 - rate), 0.0)
    return x

def cross_entropy(params, x, y, key):
    logits = forward(params, x, key)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

def loss_v0(params, x, y, key):
    reg = sum(jnp.linalg.norm(layer["b"]) for layer in params)     # L2 norm of the biases
    return cross_entropy(params, x, y, key) + 1e-3 * reg

def make_train_step_v0(loss_fn):
    @partial(jax.jit, static_argnames=("step",))
    def train_step(params, x, y, key, step):
        lr = 0.5 * 0.98 ** step                                     # learning rate decays with the step
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, key)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss
    return train_step

def train_v0(step_fn, params, X, Y, n_steps, seed=0):
    key = jax.random.key(seed)
    losses = []
    for step in range(n_steps):
        step_key = jax.random.split(key)[0]                         # a sub-key for this step's dropout
        params, loss = step_fn(params, X, Y, step_key, step)
        losses.append(float(loss))
    return params, losses

def accuracy(params, X, Y):
    return float(jnp.mean(jnp.argmax(forward(params, X), axis=-1) == Y))

X_tr, Y_tr = make_data(jax.random.key(42))
params0 = init_params(jax.random.key(1), [16, 64, 64, 2])
print("data:", X_tr.shape, "| positive share:", float(Y_tr.mean()),
      "| parameters:", [jax.tree.map(jnp.shape, l) for l in params0])
assert X_tr.shape == (512, 16) and abs(float(Y_tr.mean()) - 0.55078125) < 1e-9

# %% [markdown]
# ## 9.0 Run it once and write down the symptoms

# %%
N_DRILL = 8
step_v0 = make_train_step_v0(loss_v0)
t0 = time.perf_counter()
with CompileCounter("train_step") as cc_v0:
    _, losses_v0 = train_v0(step_v0, params0, X_tr, Y_tr, N_DRILL)
print(f"loss: {[round(l, 4) for l in losses_v0]}")
t_drill = time.perf_counter() - t0                # measured: used again in 9.2 to estimate 60 steps
print(f"{N_DRILL} steps in {t_drill:.2f} s, train_step compiled {cc_v0.count} times")
assert np.isfinite(losses_v0[0]) and all(np.isnan(l) for l in losses_v0[1:])   # symptom 1: NaN from step 2 on
assert cc_v0.count == N_DRILL                                                   # symptom 2: a compilation per step

# %% [markdown]
# Two symptoms are plain: the loss is NaN from the second step on, and every step compiles. The third
# bug makes no visible symptom - the script "trains" - and we will need a dedicated tool for it.
#
# ## 9.1 Symptom 1: NaN
#
# The first loss is finite and the second is NaN, so the first parameter update brought the NaN in:
# the suspect is the gradient. `%%jax_nans` runs step 0 with NaN checking scoped to the cell. It stops
# at the NaN with JAX's `FloatingPointError` (this cell is expected to fail), and the report above the
# error says where it came from.

# %% tags=["raises-exception"]
# %%jax_nans -o nan_step0
k_dbg = jax.random.key(123)
step_v0(params0, X_tr, Y_tr, k_dbg, 0)

# %%
error = pop_last_error()
assert isinstance(error, FloatingPointError)
print(nan_step0.summary)
assert nan_step0.found and nan_step0.primitive == "mul" and nan_step0.phase == "backward"
origin = nan_step0.where_line
print("your line:", origin.where, "|", origin.code)
assert "jnp.linalg.norm(layer[\"b\"])" in origin.code and origin.function in ("loss_v0", "<genexpr>")
bad_leaves = sorted({leaf.name.split(")")[-1] for leaf in nan_step0.nonfinite})
print("non-finite leaves:", bad_leaves)
assert bad_leaves == ["[1][0]['b']", "[1][1]['b']", "[1][2]['b']"]   # the gradients of the three biases only

# %%
# The operation itself: the producer search evaluated step_v0's program (forward and backward) op by op
p = nan_step0.producer
print("producer:", p.description, "| inside", p.library_function, "| then", f"`{p.nan_maker}`", p.nan_maker_values)
assert p.primitive == "div" and p.library_function == "jnp.linalg.norm" and p.phase == "backward"
assert [op.value for op in p.operands] == ["0.5", "0.0"]      # d sqrt(s)/ds = 0.5 / sqrt(s), at s = 0
assert p.nan_maker == "mul" and "inf" in p.nan_maker_values     # then 0 * inf = NaN
assert p.line.code == origin.code and p.calls == ["train_step"]

# %% [markdown]
# The chapter reaches the same diagnosis by hand: `checkify` on the forward pass and on the gradient,
# then a leaf-by-leaf look at the gradient, then the loss split in its two terms. `%jax_check` does the
# first step for both (it lists every error, not only the first):

# %%
# %jax_check loss_v0(params0, X_tr, Y_tr, k_dbg) --errors nan -o chk_fwd

# %%
# %jax_check jax.grad(loss_v0)(params0, X_tr, Y_tr, k_dbg) --errors nan -o chk_bwd

# %%
assert chk_fwd.errors == []                                              # the forward pass is clean
assert chk_bwd.kinds == ["nan"] and "nan generated by primitive: mul" in chk_bwd.errors[0].message

g_ce = jax.grad(cross_entropy)(params0, X_tr, Y_tr, k_dbg)
g_reg = jax.grad(lambda p: sum(jnp.linalg.norm(l["b"]) for l in p))(params0)
finite = lambda t: all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(t))
print("cross-entropy gradient finite?", finite(g_ce), "| penalty gradient finite?", finite(g_reg),
      "| the biases start at:", params0[0]["b"][:4])
assert finite(g_ce) and not finite(g_reg)


# %% [markdown]
# **Diagnosis.** The forward pass is fine; the NaN is in the gradient, only for the biases, and it
# comes from the penalty. The biases start at zero, and $\nabla_b \lVert b\rVert = b / \lVert b\rVert$
# is $0/0$ at $b = 0$. Here the gradient is taken inside the jitted `train_step`, and then
# `jax_debug_nans` alone names only the primitive (`mul`): unlike the un-jitted `jax.grad` of
# notebook 03, whose error carries the penalty line in its `__cause__`, this error has no
# `__cause__`, and its traceback ends at the `value_and_grad` line of `train_step` (checked below).
# `%%jax_nans` evaluated the step's program op by op and named the operation: `div` computing
# 0.5/0.0 inside `jnp.linalg.norm` (the derivative of its `sqrt` at 0), which `mul` then turns into
# NaN (0 * inf), at the penalty line.

# %%
# JAX's own error (the one %%jax_nans re-raised): its message names `mul`, and nothing in it names the penalty line
import os, traceback
JAX_DIR = os.path.dirname(jax.__file__) + os.sep                 # JAX's own package (not always in site-packages)
error_frames = [f for f in traceback.extract_tb(error.__traceback__)
                if "site-packages" not in f.filename and not f.filename.startswith(JAX_DIR)]
print(f"{type(error).__name__}: {error} | __cause__: {error.__cause__!r} | traceback ends at:",
      error_frames[-1].name, "|", error_frames[-1].line)
assert str(error) == "invalid value (nan) encountered in mul"
assert error.__cause__ is None                                   # inside jit: no JaxStackTraceBeforeTransformation
assert (error_frames[-1].name, error_frames[-1].line) == (
    "train_step", "loss, grads = jax.value_and_grad(loss_fn)(params, x, y, key)")
assert not any("jnp.linalg.norm" in (f.line or "") for f in error_frames)

# %% [markdown]
# **Fix:** a norm whose value and gradient are 0 at 0, with the double `where`.

# %%
def safe_norm(v):
    """||v||; value 0 and gradient 0 at v = 0 (double where)."""
    ss = jnp.sum(v ** 2)
    ok = ss > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, ss, 1.0)), 0.0)

def loss_v1(params, x, y, key):
    reg = sum(safe_norm(layer["b"]) for layer in params)
    return cross_entropy(params, x, y, key) + 1e-3 * reg

# proof 1: gradient 0 at 0; the same gradient as jnp.linalg.norm elsewhere; the whole loss has a finite gradient
v_test = jnp.array([3.0, -4.0])
assert np.array_equal(jax.grad(safe_norm)(jnp.zeros(3)), np.zeros(3))
assert np.allclose(jax.grad(safe_norm)(v_test), jax.grad(jnp.linalg.norm)(v_test)) and float(safe_norm(v_test)) == 5.0
err_v1, g_v1 = jax.jit(checkify.checkify(jax.grad(loss_v1), errors=checkify.nan_checks))(params0, X_tr, Y_tr, k_dbg)
assert err_v1.get() is None and finite(g_v1)

# proof 2: training has no NaN any more (the two other bugs are still there)
step_v1 = make_train_step_v0(loss_v1)
with CompileCounter("train_step") as cc_v1:
    _, losses_v1 = train_v0(step_v1, params0, X_tr, Y_tr, N_DRILL)
print("loss after the NaN fix:", [round(l, 4) for l in losses_v1], "| compilations:", cc_v1.count)
assert all(np.isfinite(losses_v1)) and losses_v1[-1] < losses_v1[0]
assert cc_v1.count == N_DRILL                    # symptom 2 is still there

# %% [markdown]
# ## 9.2 Symptom 2: it compiles at every step
#
# `%%jax_compiles` counts each compilation, shows the argument types of each and says why the cache
# missed. Where JAX itself only says "explanation unavailable", it compares the static arguments of
# the calls.

# %%
# %%jax_compiles -o comp_v1
step_dbg = make_train_step_v0(loss_v1)
p_ = params0
for s in range(3):
    p_, _ = step_dbg(p_, X_tr, Y_tr, jax.random.key(s), s)

# %%
ts = comp_v1.function("train_step")
print(comp_v1.summary)
assert comp_v1.count("train_step") == 3 and ts.distinct_argument_types == 1   # same shapes, three compilations
assert ts.main_cause == "static" and ts.static_values["step"][:3] == ["0", "1", "2"]
assert step_dbg._cache_size() == 3                                            # private API, as in the chapter


# %% [markdown]
# **Diagnosis.** The shapes never change; the static argument `step` does. It only feeds the learning
# rate, it does not shape the computation: it should be an ordinary (traced) argument, and always a
# strongly typed `int32` array, so that a Python `int` in one call and an array in the next do not
# compile twice either.

# %%
def make_train_step_v2(loss_fn):
    @jax.jit
    def train_step(params, x, y, key, step):          # step is no longer static
        lr = 0.5 * 0.98 ** step
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, key)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss
    return train_step

def train_v2(step_fn, params, X, Y, n_steps, seed=0):
    key = jax.random.key(seed)
    losses = []
    for step in range(n_steps):
        step_key = jax.random.split(key)[0]
        params, loss = step_fn(params, X, Y, step_key, jnp.int32(step))   # always an int32 array
        losses.append(float(loss))
    return params, losses

step_v2 = make_train_step_v2(loss_v1)
N_LONG = 60

# %%
# %%jax_compiles --budget 1 --fn train_step -o comp_v2
params_v2, losses_v2 = train_v2(step_v2, params0, X_tr, Y_tr, N_LONG)

# %%
# The chapter compares all 60 steps with the static-step version. That version compiles at every step,
# so its 60 steps would cost 60 / N_DRILL times the N_DRILL steps timed in 9.0 (the estimate is printed
# below) for no new information. We compare with the N_DRILL steps it ran in 9.1 instead (same data,
# same keys, same NaN fix), which the fixed version must reproduce step by step.
print(f"static-step version: {N_DRILL} steps took {t_drill:.1f} s here, so {N_LONG} would take about "
      f"{t_drill * N_LONG / N_DRILL:.0f} s")
diff = np.abs(np.array(losses_v2[:N_DRILL]) - losses_v1).max()
print(f"{N_LONG} steps, {comp_v2.count('train_step')} compilation | largest loss difference to the static-step "
      f"version over its {N_DRILL} steps: {diff:.2e}")
assert comp_v2.count("train_step") == 1 and comp_v2.over_budget == []    # the fix works: one compilation
assert np.allclose(losses_v2[:N_DRILL], losses_v1, atol=1e-5)             # the same mathematics as before
assert losses_v2[-1] < losses_v2[N_DRILL - 1]                            # and it keeps training

# %% [markdown]
# ## 9.3 Bug 3: a reused random key
#
# With two bugs fixed, training "looks fine". But does dropout really draw a new mask every step?
# Such a bug raises nothing; it only weakens the regularisation. Two tools:
#
# 1. `jax_debug_key_reuse`: a typed key (`jax.random.key`) is marked when it is consumed; using it
#    again raises `jax.errors.KeyReuseError`, naming the function and the argument index. Legacy raw
#    `PRNGKey` (uint32) keys are not checked - one more reason to use `jax.random.key`.
# 2. Listening in: record the `key_data` of the key each step receives and see whether they differ.
#
# `%%jax_keys` does both for one cell, without changing the code: the checker is on for the cell only,
# and the keys reaching each jitted function are counted from their data. Here the checker stops the
# cell (expected to fail) at the second `split` of the same `key`.

# %% tags=["raises-exception"]
# %%jax_keys -o keys_v2
train_v2(step_v2, params0, X_tr, Y_tr, 4)

# %%
e_reuse = pop_last_error()
print("jax_debug_key_reuse:", type(e_reuse).__name__, "->", str(e_reuse).splitlines()[0])
assert isinstance(e_reuse, jax.errors.KeyReuseError) and "random_split" in str(e_reuse)
reuse = keys_v2.reuse[0]
assert (reuse.consumer, reuse.index) == ("random_split", 0)
assert reuse.reused_at.function == "train_v2" and "jax.random.split(key)[0]" in reuse.reused_at.code
assert reuse.same_line                      # first consumed on the same line, one pass of the loop earlier
assert "key, sub = jax.random.split(key)" in str(keys_v2)

# %% [markdown]
# The chapter's second tool by hand: a spy around the step function records the data of every key it
# receives. Five steps, one distinct key. And the legacy `PRNGKey`: the same reuse goes unnoticed by
# the checker - `%%jax_keys` follows those keys by their data instead: the same key data reaching
# `jax.random.normal` in 2 of its 2 calls is the same finding as for a typed key.

# %%
seen_keys = []
def spy(params, x, y, key, step):
    seen_keys.append(tuple(np.asarray(jax.random.key_data(key)).tolist()))
    return step_v2(params, x, y, key, step)

train_v2(spy, params0, X_tr, Y_tr, 5)
print("distinct dropout keys in 5 steps:", len(set(seen_keys)))
assert len(set(seen_keys)) == 1                                   # every step used the same key

# %%
# %%jax_keys -o keys_legacy
raw = jax.random.PRNGKey(0)
same = bool(jnp.all(jax.random.normal(raw, (3,)) == jax.random.normal(raw, (3,))))

# %%
print("PRNGKey used twice: no error, identical draws =", same)
assert same and keys_legacy.reuse == []
assert [(u.api, u.count) for u in keys_legacy.legacy] == [("normal", 2)]
[draw] = keys_legacy.repeated_draws                                  # followed by its key data
assert (draw.api, draw.calls, draw.distinct, draw.legacy) == ("normal", 2, 1, True)
assert keys_legacy.status.value == "problem" and "same legacy uint32 key data" in keys_legacy.summary


# %% [markdown]
# **Diagnosis.** `train_v2` splits the same `key` at every step and keeps only `split(key)[0]`; `key`
# itself never changes, so every step gets the same sub-key and the same dropout mask. **Fix:**
# `key, step_key = jax.random.split(key)` at every step, carrying the new `key` forward.

# %%
def train_v3(step_fn, params, X, Y, n_steps, seed=0):
    key = jax.random.key(seed)
    losses = []
    for step in range(n_steps):
        key, step_key = jax.random.split(key)                     # advance the key every step
        params, loss = step_fn(params, X, Y, step_key, jnp.int32(step))
        losses.append(float(loss))
    return params, losses


# %%
# %%jax_keys -o keys_v3
params_k3, losses_k3 = train_v3(step_v2, params0, X_tr, Y_tr, 5)    # assigned: no echo of the parameters

# %%
assert keys_v3.reuse == [] and keys_v3.status.value == "ok"          # the checker finds nothing now
flow = keys_v3.flow("train_step")
print(f"train_step received {flow.distinct} distinct keys in {flow.calls} calls")
assert (flow.calls, flow.distinct) == (5, 5)
seen_keys.clear()
train_v3(spy, params0, X_tr, Y_tr, 5)
assert len(set(seen_keys)) == 5                                      # and the chapter's spy agrees

with CompileCounter("train_step") as cc_v3:
    params_v3, losses_v3 = train_v3(step_v2, params0, X_tr, Y_tr, N_LONG)
acc_v2, acc_v3 = accuracy(params_v2, X_tr, Y_tr), accuracy(params_v3, X_tr, Y_tr)
print(f"final version: {N_LONG} steps, {cc_v3.count} compilations (step_v2 compiled already) | "
      f"loss {losses_v3[0]:.3f} -> {losses_v3[-1]:.3f}")
print(f"training accuracy: fixed mask {acc_v2:.3f} | a new mask every step {acc_v3:.3f}")
assert cc_v3.count == 0 and all(np.isfinite(losses_v3)) and losses_v3[-1] < 0.5 * losses_v3[0]
assert acc_v3 > 0.9

# %% [markdown]
# ## 9.4 Summary of the drill
#
# | Bug | Symptom | Found with | Fix | Proof |
# |---|---|---|---|---|
# | gradient of a norm at zero | NaN loss from step 2 | `%%jax_nans` (primitive, backward, your line), `%jax_check` | `safe_norm` with a double `where` | gradient 0 at 0, same gradient as `jnp.linalg.norm` elsewhere, training finite |
# | `step` a static argument | a compilation per step | `%%jax_compiles` (same shapes, `step` 0 → 1 → 2) | `step` as a traced `int32` | 60 steps, one compilation, the same losses step by step |
# | the key never advances | none (weaker dropout) | `%%jax_keys` (`KeyReuseError` at `random_split`, one distinct key per step) | `key, sub = split(key)` | no reuse, 5 keys in 5 steps |
#
# Mind the order: NaN first (it makes every other symptom meaningless), then speed, then the logic
# bugs that raise nothing. Pin each fix with an assert so the next one cannot undo it.
#
# ## The same script in one cell: `%%jax_doctor`
#
# `%%jax_doctor` runs a cell once under all the probes together and ranks what they find in that
# order. It does not stop at the first NaN or at the first reused key (that would hide everything
# after step 0): it notes the first call that produced a NaN and, after the cell, runs only that call
# again under the NaN probe to name the primitive and the line; it records reused keys and counts the
# keys each jitted function receives. Here it is on the original script, with a new step function so
# that nothing is cached from above:

# %%
# %%jax_doctor -o doc_v0
step_v0_again = make_train_step_v0(loss_v0)
_, losses_doctor = train_v0(step_v0_again, params0, X_tr, Y_tr, N_DRILL)

# %%
print(doc_v0.summary)
assert doc_v0.areas == ["NaN", "recompilation", "random keys"]                   # all three, in the order to fix them
assert len(losses_doctor) == len(losses_v0) == N_DRILL                           # the cell ran to its end
assert list(np.isnan(losses_doctor)) == [False] + [True] * (N_DRILL - 1)          # finite, then NaN from step 2
np.testing.assert_allclose(losses_doctor, losses_v0, rtol=1e-6)                  # the same losses (NaN where NaN)
assert not any("switched jax.debug_nans" in note for note in doc_v0.notes)       # the cell never touches it
nan_f, comp_f, key_f = doc_v0.findings
assert doc_v0.nans.primitive == "mul" and doc_v0.nans.phase == "backward" and "jnp.linalg.norm" in nan_f.line.code
assert doc_v0.nans.producer.library_function == "jnp.linalg.norm" and "`div`: 0.5/0.0" in nan_f.evidence   # the producer, as in 9.1
assert doc_v0.nan_sighting.function == "train_step" and doc_v0.nan_sighting.call_number == 1
assert doc_v0.compiles.count("train_step") == N_DRILL and "static" in comp_f.title and "`step`" in comp_f.title
assert f"same key in {N_DRILL} of its {N_DRILL} calls" in key_f.title and key_f.next_magic == "%%jax_keys"
assert [(f.function, f.calls) for f in doc_v0.keys.flows if f.function == "train_step"] == [("train_step", N_DRILL)]
assert "7 later call(s) returned NaN too" in nan_f.evidence                      # every call was watched
assert [f.next_magic.split()[0] for f in doc_v0.findings] == ["%%jax_nans", "%%jax_compiles", "%%jax_keys"]

# %% [markdown]
# And on the fixed script it finds nothing:

# %%
# %%jax_doctor -o doc_fixed
params_fixed, losses_fixed = train_v3(make_train_step_v2(loss_v1), params0, X_tr, Y_tr, N_DRILL)

# %%
print(doc_fixed.summary)
assert doc_fixed.findings == [] and doc_fixed.status.value == "ok"
assert np.allclose(losses_fixed, losses_v3[:N_DRILL], atol=1e-6)   # the doctor changed no result


# %% [markdown]
# ## Leave a watch on: `%jax_watch`
#
# The doctor needs you to suspect the cell first. `%jax_watch` watches every later cell with the
# doctor's cheap mechanisms - the hook JAX calls after each jitted call on its fast path, the compile
# log, counters - until `%jax_watch off`. A clean cell prints nothing; a new problem is told once,
# under the cell that caused it, with its line and the magic to look closer with; the same problem
# in a later cell is counted, not told again. The first NaN-making call alone is repeated after the
# cell under `jax.debug_nans`, as the doctor does, to name the operation. On loops of very short steps
# the watch looks at a share of the calls only, to cost a few percent (every call is counted, so call
# numbers stay exact); `watch_log.coverage` says how many it looked at.
#
# `--panel` adds one panel for the whole session under this cell. While the watched cells below run,
# it grows by a line each time a new problem is told (its cell, area, line, how often it was seen and
# the magic to look closer with) - here, after the next cell, the NaN, the recompilation and the
# reused key - and choosing a line shows that finding's details and fix, so the findings of a long
# session stay in one place while you scroll on. (A saved notebook keeps a line saying to run the cell
# again instead: a widget needs the kernel.)

# %%
# %jax_watch on --panel -o watch_log

# %%
step_v0_watched = make_train_step_v0(loss_v0)
_, losses_watched = train_v0(step_v0_watched, params0, X_tr, Y_tr, N_DRILL)

# %% [markdown]
# The fixed script, watched as well: nothing appears under it.

# %%
_, losses_watched_fixed = train_v3(make_train_step_v2(loss_v1), params0, X_tr, Y_tr, N_DRILL)

# %%
# %jax_watch off

# %%
found = watch_log.to_dict()["findings"]
print(watch_log.summary)
print(watch_log.coverage)
assert [f["area"] for f in found] == ["NaN", "recompilation", "random keys"]   # the three bugs, in the doctor's order
assert len({f["cell"] for f in found}) == 1                                      # all under the first watched cell
nan_w, comp_w, key_w = found
assert nan_w["function"] == "train_step" and nan_w["call"] == 1                   # call 1 made it (its gradient)
assert "jnp.linalg.norm" in nan_w["line"]["code"] and nan_w["next_magic"] == "%%jax_nans"
assert comp_w["function"] == "train_step" and comp_w["count"] == N_DRILL          # over the budget of 2
assert key_w["function"] == "train_step" and f"same key in {N_DRILL} of its {N_DRILL} calls" in key_w["summary"]
np.testing.assert_allclose(losses_watched, losses_v0, rtol=1e-6)                 # watched: the same losses, NaN included
np.testing.assert_allclose(losses_watched_fixed, losses_v3[:N_DRILL], atol=1e-6)
assert watch_log.on is False and watch_log.calls_looked_at == watch_log.calls_counted == 2 * N_DRILL


# %% [markdown]
# ## Exercises
#
# | # | Topic | Section |
# |---|---|---|
# | 1 | Four tracer errors: see what each raises, then make it jit | §4 |
# | 2 | A `nan_guard` decorator built on `checkify` | §3.2, §5.4 |
# | 3 | A leak detector with `jax.live_arrays()` | §7.3 |
# | 4 | Find the first NaN step, and the primitive, automatically | §3.1, §9 |
#
# Each exercise is laid out as in the chapter: the task, the problem code, an answer area, and a
# self-check. The self-check says "not answered yet" (and returns `False`) until the names the task
# asks for exist; then it tries them on inputs they have not seen, so a wrong answer fails one of its
# asserts. The reference answers, and the magics that diagnose each problem, are in the appendix at
# the end: running the notebook top to bottom shows the four "not answered yet" lines here, then
# runs every self-check again there, where it must pass.
#
# ### Exercise 1: four tracer errors
#
# The four functions work eagerly but fail under `jax.jit`. (1) Record the exception class of
# `jax.jit(f)(*args)` for each; (2) write a version of each that compiles, called the same way;
# (3) check the results against NumPy float64. Interface for the self-check: `ex1_errors`
# (`{name: exception class name}`) and `fixed` (`{name: jitted function}`).

# %%
def ex1_normalize(x, mode):            # mode is "l1" or "l2"
    if mode == "l1":
        n = jnp.sum(jnp.abs(x))
    else:
        n = jnp.sqrt(jnp.sum(x ** 2))
    return x / n

def ex1_topk_mean(x, k):               # mean of the k largest values
    return jnp.mean(jnp.sort(x)[::-1][:k])

def ex1_count_pos(x):                  # how many values are positive
    return x[x > 0].shape[0]

def ex1_clip_by_norm(x, max_norm):     # scale x down when its norm exceeds max_norm
    n = jnp.linalg.norm(x)
    if n > max_norm:
        x = x * max_norm / n
    return x

ex1_x = jnp.array([3.0, -1.0, 4.0, -1.5, 5.0])
ex1_calls = {"ex1_normalize": (ex1_normalize, (ex1_x, "l1")), "ex1_topk_mean": (ex1_topk_mean, (ex1_x, 2)),
             "ex1_count_pos": (ex1_count_pos, (ex1_x,)), "ex1_clip_by_norm": (ex1_clip_by_norm, (ex1_x, 2.0))}

# %%
# ✍️ Answer area: exercise 1
# Write your code here, then run the self-check below. The reference answer is in the appendix at the end.

# %%
# 🧪 Self-check: exercise 1 (the chapter's, on new inputs)
def ex1_self_check():
    """True when ex1_errors and fixed pass; False while they are not defined yet; AssertionError when wrong."""
    try:
        ex1_errors, fixed
    except NameError as e:
        print(f"⏳ exercise 1 not answered yet: {e}")
        return False
    assert ex1_errors == {"ex1_normalize": "TypeError", "ex1_topk_mean": "IndexError",
                          "ex1_count_pos": "NonConcreteBooleanIndexError",
                          "ex1_clip_by_norm": "TracerBoolConversionError"}, f"wrong exception classes: {ex1_errors}"
    missing = set(ex1_calls) - set(fixed)
    assert not missing, f"missing from fixed: {sorted(missing)}"
    for name in ex1_calls:
        assert hasattr(fixed[name], "lower"), f"fixed['{name}'] should be a jax.jit function"
    x = jnp.array([-2.0, 0.5, 7.0, 1.0, -3.0, 2.5])
    x64 = to64(x)
    cases = [("ex1_normalize", (x, "l1"), x64 / np.abs(x64).sum()),
             ("ex1_normalize", (x, "l2"), x64 / np.linalg.norm(x64)),
             ("ex1_topk_mean", (x, 3), np.sort(x64)[::-1][:3].mean()),
             ("ex1_count_pos", (x,), 4), ("ex1_count_pos", (-jnp.abs(x),), 0),
             ("ex1_clip_by_norm", (x, 1.0), x64 / np.linalg.norm(x64)),
             ("ex1_clip_by_norm", (x, 100.0), x64)]
    for name, args, ref in cases:
        out = fixed[name](*args)
        assert np.allclose(to64(out), ref, atol=1e-5), f"{name}: got {np.asarray(out)}, expected {ref}"
    print("✅ exercise 1 self-check passed")
    return True

ex1_self_check()


# %% [markdown]
# ### Exercise 2: a `nan_guard` decorator
#
# Write a decorator `nan_guard(fn)` that
#
# 1. compiles `jax.jit(checkify.checkify(fn, errors=...))`, checking NaNs, divisions by zero and
#    `fn`'s own `checkify.check`s;
# 2. when a check fails, raises `FloatingPointError` whose message starts with `"<fn name>: "`,
#    followed by checkify's message; otherwise returns `fn`'s output;
# 3. on `ex2_layer` below: returns the right result for good input, reports the NaN of `log` for
#    a negative input and the custom check for `scale = 0`;
# 4. compiles once for five same-shaped calls, the failing ones included (check it with
#    `CompileCounter`).
#
# Interface for the self-check: `nan_guard(fn)` returns a function called like `fn`.

# %%
def ex2_layer(x, scale):
    checkify.check(scale != 0, "scale must not be 0")
    return jnp.log(x) * scale

# %%
# ✍️ Answer area: exercise 2
# Write your code here, then run the self-check below. The reference answer is in the appendix at the end.

# %%
# 🧪 Self-check: exercise 2 (the chapter's, on a function the answer has not seen)
def ex2_self_check():
    """True when nan_guard passes; False while it is not defined yet; AssertionError when wrong."""
    try:
        nan_guard
    except NameError as e:
        print(f"⏳ exercise 2 not answered yet: {e}")
        return False

    def probe(x, s):
        checkify.check(s > 0, "s must be positive")
        return jnp.sqrt(x) * s

    guarded = nan_guard(probe)
    good, bad = jnp.array([1.0, 4.0, 9.0]), jnp.array([1.0, -4.0, 9.0])
    results = []
    with CompileCounter() as cc:
        for x, s in [(good, 2.0), (bad, 2.0), (good, -1.0), (good, 3.0), (bad, 3.0)]:
            try:
                results.append(("ok", guarded(x, jnp.float32(s))))
            except FloatingPointError as e:
                results.append(("err", str(e)))
    kinds = [k for k, _ in results]
    assert kinds == ["ok", "err", "err", "ok", "err"], f"which calls fail: {kinds} (expected ok/err/err/ok/err)"
    assert np.allclose(to64(results[0][1]), [2.0, 4.0, 6.0]) and np.allclose(to64(results[3][1]), [3.0, 6.0, 9.0]), \
        "good input should return fn's output"
    assert results[1][1].startswith("probe: ") and "nan" in results[1][1] and "sqrt" in results[1][1], \
        f"the NaN message should start with 'probe: ' and name sqrt: {results[1][1]!r}"
    assert results[2][1].startswith("probe: ") and "s must be positive" in results[2][1], \
        f"wrong message for the custom check: {results[2][1]!r}"
    assert cc.count == 1, f"five same-shaped calls should compile once, they compiled {cc.count} times"
    print("✅ exercise 2 self-check passed")
    return True

ex2_self_check()


# %% [markdown]
# ### Exercise 3: a leak detector
#
# Write `track_new_arrays(fn, *args)`: it runs `fn(*args)` and returns `(result, Counter)`, the
# counter holding, by `(shape, dtype)`, the arrays the call created that are still alive afterwards -
# the result itself not counted. Hint: note the ids of `jax.live_arrays()` before and after, and do not
# let your own snapshot keep arrays alive. Then:
#
# 1. on `ex3_Trainer(...).run(5)` below, find the five leaked `(32, 16)` arrays (held by `self.history`);
# 2. write `ex3_TrainerFixed`, which records only the gradient norm as a Python float: nothing leaks,
#    and both versions end with the same parameters.
#
# Interface for the self-check: `track_new_arrays(fn, *args)` as above, the counter's keys
# `(shape tuple, dtype)`; `ex3_TrainerFixed(w, x)` built and run like `ex3_Trainer`, with Python floats
# in `history`.

# %%
@jax.jit
def ex3_step(w, x):
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.1 * g, g

class ex3_Trainer:
    def __init__(self, w, x):
        self.w, self.x, self.history = w, x, []

    def run(self, n):
        for _ in range(n):
            self.w, g = ex3_step(self.w, self.x)
            self.history.append(g)            # kept "for later analysis"
        return self.w

ex3_w0 = jax.random.normal(jax.random.key(30), (32, 16)) / 6.0
ex3_x = jax.random.normal(jax.random.key(31), (8, 32))

# %%
# ✍️ Answer area: exercise 3
# Write your code here, then run the self-check below. The reference answer is in the appendix at the end.

# %%
# 🧪 Self-check: exercise 3 (the chapter's, on a new leaky function and new weights)
def ex3_self_check():
    """True when track_new_arrays and ex3_TrainerFixed pass; False while not defined yet; AssertionError when wrong."""
    try:
        track_new_arrays, ex3_TrainerFixed
    except NameError as e:
        print(f"⏳ exercise 3 not answered yet: {e}")
        return False
    by_shape = lambda c: Counter({(tuple(k[0]), str(k[1])): v for k, v in c.items()})
    keep = []

    def leaky(n):
        for i in range(n):
            keep.append(jnp.ones((3, i + 1)))                   # kept outside: alive after the call
            tmp = jnp.zeros((5,)) + i                           # temporary: freed when the call ends
        return jnp.arange(7.0)

    out, counted = track_new_arrays(leaky, 3)
    assert np.array_equal(np.asarray(out), np.arange(7.0)), "the first value returned should be fn's result"
    assert by_shape(counted) == Counter({((3, 1), "float32"): 1, ((3, 2), "float32"): 1, ((3, 3), "float32"): 1}), \
        f"wrong count: {dict(counted)} (expected one each of (3,1), (3,2), (3,3); not the result, not the temporaries)"
    _, counted = track_new_arrays(lambda: jnp.ones((4, 4)) * 2)
    assert not counted, f"nothing leaks here (the result does not count), got {dict(counted)}"
    keep.clear()
    w0 = jax.random.normal(jax.random.key(9030), (32, 16)) / 6.0
    x = jax.random.normal(jax.random.key(9031), (8, 32))
    trainer = ex3_TrainerFixed(w0, x)
    w_final, leaked = track_new_arrays(trainer.run, 3)
    assert not leaked, f"ex3_TrainerFixed still leaks: {dict(leaked)}"
    assert len(trainer.history) == 3 and all(isinstance(v, float) for v in trainer.history), \
        f"history should hold 3 Python floats, it holds {[type(v).__name__ for v in trainer.history]}"
    assert np.array_equal(np.asarray(w_final), np.asarray(ex3_Trainer(w0, x).run(3))), \
        "the fixed trainer should end with exactly the original's parameters"
    print("✅ exercise 3 self-check passed")
    return True

ex3_self_check()


# %% [markdown]
# ### Exercise 4: find the first NaN step automatically
#
# In the data stream `ex4_batches` of the jitted training step `ex4_step` below, batch 5 holds a
# negative number, which makes `log` produce a NaN. Write `first_nan_step(step_fn, w, batches)` that
#
# 1. trains normally (no `jax_debug_nans` all the time), checking the loss on the host after every step;
# 2. when a loss is not finite, re-runs *that* step alone - the parameters from before it, the same
#    batch - inside `with jax.debug_nans(True):`. The scoped form is not affected by the vmap problem of
#    this JAX version; switched on globally with `config.update`, it would need `jax.clear_caches()`
#    first in a process that has traced a `vmap` (§3.1);
# 3. returns `(step, primitive)`, the primitive parsed from the `FloatingPointError` message
#    "invalid value (nan) encountered in <primitive>", or `None` when no NaN appears;
# 4. gives `(5, "log")` here and leaves `jax_debug_nans` `False` afterwards.
#
# Interface for the self-check: `first_nan_step(step_fn, w, batches)`, where `step_fn(w, batch)`
# returns `(new parameters, loss)`.

# %%
@jax.jit
def ex4_step(w, batch):
    loss = jnp.mean(jnp.log(batch) * w)
    return w - 0.01 * jax.grad(lambda w: jnp.mean(jnp.log(batch) * w))(w), loss

ex4_batches = [jnp.full(4, 1.0 + i) for i in range(8)]
ex4_batches[5] = jnp.array([1.0, 2.0, -3.0, 4.0])

# %%
# ✍️ Answer area: exercise 4
# Write your code here, then run the self-check below. The reference answer is in the appendix at the end.

# %%
# 🧪 Self-check: exercise 4 (the chapter's, on a new step whose NaN comes from sqrt)
def ex4_self_check():
    """True when first_nan_step passes; False while it is not defined yet; AssertionError when wrong."""
    try:
        first_nan_step
    except NameError as e:
        print(f"⏳ exercise 4 not answered yet: {e}")
        return False

    @jax.jit
    def probe_step(w, b):
        loss = jnp.mean(jnp.sqrt(b) * w)
        return w * 0.9 + 0.1, loss

    batches = [jnp.full(3, 1.0 + i) for i in range(6)]
    batches[3] = jnp.array([4.0, -1.0, 9.0])
    calls = []                                 # per call: was debug_nans on, and the parameter passed

    def spy(w, b):
        calls.append((bool(jax.config.jax_debug_nans), float(w)))
        return probe_step(w, b)

    result = first_nan_step(spy, jnp.float32(2.0), batches)
    assert result == (3, "sqrt"), f"expected (3, 'sqrt'), got {result} (a None primitive: was the step re-run?)"
    assert jax.config.jax_debug_nans is False, "jax_debug_nans should be False again afterwards"
    flags = [f for f, _ in calls]
    assert flags[:4] == [False] * 4 and len(flags) > 4 and all(flags[4:]), \
        f"the first 4 steps should run with debug_nans off, the re-run with it on; got {flags}"
    assert calls[-1][1] == calls[3][1], f"the re-run should use the parameter from before the step, {calls[3][1]}"
    assert first_nan_step(spy, jnp.float32(2.0), batches[:3]) is None, "no NaN at all should give None"
    print("✅ exercise 4 self-check passed")
    return True

ex4_self_check()

# %% [markdown]
# ## Quiz (six questions)
#
# Each answer is folded until you open it; each that is a checkable fact is checked by the code cell
# below the question.
#
# **1.** In JAX 0.12.0.1, which of these is a subclass of `jax.errors.ConcretizationTypeError`?
# A. `TracerIntegerConversionError` B. `TracerArrayConversionError` C. `TracerBoolConversionError`
# D. all three.
#
# <details><summary>Answer (click to open)</summary>
#
# **C.** Only `TracerBoolConversionError`; the other two derive from `JAXTypeError`
# directly. To catch them all, catch `jax.errors.JAXTypeError` (or `TypeError`).
#
# </details>

# %%
E = jax.errors
assert issubclass(E.TracerBoolConversionError, E.ConcretizationTypeError)
assert not issubclass(E.TracerIntegerConversionError, E.ConcretizationTypeError)
assert not issubclass(E.TracerArrayConversionError, E.ConcretizationTypeError)
assert all(issubclass(c, E.JAXTypeError) and issubclass(c, TypeError)
           for c in (E.TracerBoolConversionError, E.TracerIntegerConversionError, E.TracerArrayConversionError))


# %% [markdown]
# **2.** `jax.vmap(f)(jnp.array([1.0, -1.0]))`, where `f` calls `lax.cond(x > 0, branch_a, branch_b, x)`
# and each branch has one `jax.debug.print`. How many lines are printed? A. 2 B. 4 C. 1 D. 0
#
# <details><summary>Answer (click to open)</summary>
#
# **B.** `vmap` turns the cond into a select: both branches run for both samples, 2 × 2 = 4 lines.
#
# </details>

# %%
# %%jax_print -o quiz2
def f_quiz(x):
    return lax.cond(x > 0, lambda x: (jax.debug.print("branch a {x}", x=x), x)[1],
                    lambda x: (jax.debug.print("branch b {x}", x=x), -x)[1], x)
jax.vmap(f_quiz)(jnp.array([1.0, -1.0]))

# %%
assert len(quiz2.texts) == 4 and sorted(quiz2.texts) == ["branch a -1.0", "branch a 1.0", "branch b -1.0", "branch b 1.0"]

# %% [markdown]
# **3.** In this environment the process has traced a `vmap` before; then you switch NaN checking on
# globally with `jax.config.update("jax_debug_nans", True)` and call a jitted function that has run
# before and now produces a NaN. What happens, and what do you do?
#
# * A. `FloatingPointError` is raised; nothing to do
# * B. NaN is returned silently; call `jax.clear_caches()` and re-run, or use `with jax.debug_nans(True):`
#   or `checkify`
# * C. `UnexpectedTracerError` is raised
# * D. the process crashes
#
#
# <details><summary>Answer (click to open)</summary>
#
# **B.** It silently returns NaN;
# call `jax.clear_caches()` first, or use the scoped `with jax.debug_nans(True):` or `checkify`.
# Checked in a fresh process, so this kernel's caches are not involved (the cell below).
#
# </details>

# %%
QUIZ3 = '''
import jax, jax.numpy as jnp
jax.vmap(lambda v: v * 2)(jnp.ones(3))          # any vmap traced in the process
f = jax.jit(lambda x: jnp.log(x))
f(jnp.array(1.0))                                 # runs once, fine
jax.config.update("jax_debug_nans", True)
print("RESULT global", float(f(jnp.array(-1.0))))   # no error: NaN returned
jax.config.update("jax_debug_nans", False)
try:
    with jax.debug_nans(True):
        f(jnp.array(-1.0))
    print("RESULT scoped none")
except FloatingPointError:
    print("RESULT scoped raised")
jax.config.update("jax_debug_nans", True)
jax.clear_caches()
try:
    f(jnp.array(-1.0))
    print("RESULT cleared none")
except FloatingPointError:
    print("RESULT cleared raised")
'''
proc = run_py(QUIZ3)
print(result_lines(proc))
assert proc.returncode == 0, proc.stderr[-2000:]
assert result_lines(proc) == ["global nan", "scoped raised", "cleared raised"]


# %% [markdown]
# **4.** With `jax_explain_cache_misses` on, the log says only "cache miss explanation unavailable",
# and `jax_log_compiles` shows the same argument shapes every time. The most likely cause?
# A. the input dtype changes B. the value of a static argument changes C. the pytree structure
# changes D. `jax_debug_nans` is on.
#
# <details><summary>Answer (click to open)</summary>
#
# **B.** A static argument's value changes. (`%%jax_compiles` named it in section 9.2; here JAX's own
# words.)
#
# </details>

# %%
@partial(jax.jit, static_argnames=("n",))
def quiz4(x, n):
    return x * n

with capture_jax_logs() as logs, jax.log_compiles(), jax.explain_cache_misses():
    for n in (1, 2, 3):
        quiz4(jnp.ones(3), n)
misses = [m for m in logs.messages if "TRACING CACHE MISS" in m and "quiz4" in m]
shapes = {m.split("with global shapes and types")[1].split(". Argument")[0]
          for m in logs.messages if m.startswith("Compiling jit(quiz4)")}
assert len(shapes) == 1 and len(misses) == 3
assert all("explanation unavailable" in m for m in misses[1:])

# %% [markdown]
# **5.** You suspect a tracer leak, wrap the call in `with jax.checking_leaks():` and nothing is
# raised. The most likely reason?
#
# * A. `jax.checking_leaks` was removed in 0.12 and does nothing
# * B. the function was already called with the same input signature: this call hit the cache and was
#   not traced again, and the leak check only runs when a trace ends
# * C. the leak check only works under `vmap`
# * D. the leak check only works on GPU
#
#
# <details><summary>Answer (click to open)</summary>
#
# **B.** The function had been traced before with the same input
# types: the call hit the cache, nothing was traced, and leaks are only checked when a trace ends.
# (`%%jax_leaks` traces afresh under a cache key of its own.)
#
# </details>

# %%
quiz5_box = []                     # the function appends to it while tracing: its length counts traces
@jax.jit
def quiz5(x):
    quiz5_box.append(x)            # leaks the tracer
    return x + 1

def leak_error_of(call):
    """The exception `call()` raises under jax.checking_leaks(), or None."""
    try:
        with jax.checking_leaks():
            call()
    except Exception as e:
        return e
    return None

quiz5(jnp.ones(2))                                          # traced once, without leak checking
error_when_cached = leak_error_of(lambda: quiz5(jnp.ones(2)))
traces_when_cached = len(quiz5_box)
jax.clear_caches()
error_after_clear = leak_error_of(lambda: quiz5(jnp.ones(2)))
traces_after_clear = len(quiz5_box)
quiz5_box.clear()
print(f"cached call: {error_when_cached!r}, traces so far {traces_when_cached} | after clear_caches: "
      f"{type(error_after_clear).__name__}, traces so far {traces_after_clear}")
assert error_when_cached is None and traces_when_cached == 1     # the cached call was not traced, so not checked
assert traces_after_clear == 2 and "Leaked" in str(error_after_clear)   # traced again: the leak is found

# %% [markdown]
# **6.** About `JAX_TRACEBACK_FILTERING`'s default `auto`: A. In Jupyter (IPython ≥ 7.17) it means
# `tracebackhide`, in a plain Python script `quiet_remove_frames` B. always `off` C. always
# `remove_frames`, the full stack in `__cause__` D. it only affects `jax.grad`'s errors.
#
# <details><summary>Answer (click to open)</summary>
#
# **A.**
#
# </details>

# %%
import traceback as _tb
assert jax.config.jax_traceback_filtering == "auto"
# this kernel (Jupyter): JAX keeps every frame but marks its own with __tracebackhide__
try:
    jax.jit(lambda x: x.reshape(3, 5))(jnp.ones(4))
except Exception as e:
    quiz6_frames = [f for f, _ in _tb.walk_tb(e.__traceback__)]
quiz6_hidden = [f for f in quiz6_frames if f.f_locals.get("__tracebackhide__")]
print(f"in this kernel: {len(quiz6_frames)} frames, {len(quiz6_hidden)} of them marked __tracebackhide__")
assert 0 < len(quiz6_hidden) < len(quiz6_frames)
assert all(f.f_code.co_filename.startswith(JAX_DIR) for f in quiz6_hidden)
del quiz6_frames, quiz6_hidden
# a script: JAX removes its frames and says so; with filtering off they are all there
QUIZ6 = "import sys, jax, jax.numpy as jnp\nif sys.argv[1:]: jax.config.update('jax_traceback_filtering', 'off')\n" \
        "jax.jit(lambda x: x.reshape(3, 5))(jnp.ones(4))"
tb_auto, tb_off = run_py(QUIZ6).stderr, run_py(QUIZ6, "off").stderr
n_auto, n_off = tb_auto.count('  File "'), tb_off.count('  File "')
print(f"in a script: {n_auto} frames with auto, {n_off} with off")
assert "JAX has removed its internal frames" in tb_auto and "JAX has removed" not in tb_off
assert n_auto < n_off

# %% [markdown]
# ## Appendix: reference answers
#
# Try each exercise in its answer area first and check it with its self-check; come here once it
# passes, or when you are stuck. The answers below run in order and replace anything of the same name
# that you defined in an answer area. Each one ends by running its exercise's self-check, which must
# pass.

# %% [markdown]
# ### Exercise 1
#
# The task is in the exercise 1 section above. The explainer that jaxmagic installs (`%jax_explain`)
# names the kind of each tracer error, the argument it depends on and the standard fix;
# `explain_any` is the same as a function.
# The fixes: a string or a shape-deciding integer becomes a static argument; a boolean index becomes
# a masked sum; a value-dependent `if` becomes `jnp.where`.

# %%
# Reference answer: exercise 1
ex1_errors, explained = {}, {}
for name, (fn, args) in ex1_calls.items():
    try:
        jax.jit(fn)(*args)
        ex1_errors[name] = None
    except Exception as e:
        ex1_errors[name] = type(e).__name__
        report = jaxmagic.probes.explain_any(e)
        explained[name] = report.error_kind if report is not None else "(not a tracer error)"
print("exceptions:", ex1_errors)
print("explainer's kinds:", explained)
assert ex1_errors == {"ex1_normalize": "TypeError", "ex1_topk_mean": "IndexError",
                      "ex1_count_pos": "NonConcreteBooleanIndexError", "ex1_clip_by_norm": "TracerBoolConversionError"}
assert explained["ex1_count_pos"] == "bool_index" and explained["ex1_clip_by_norm"] == "bool"
assert explained["ex1_topk_mean"] == "slice"
# the string "l1" given to jit is not a tracer error but the explainer names it too, and the fix it tried
assert explained["ex1_normalize"] == "non_array"

fixed = {
    "ex1_normalize": jax.jit(ex1_normalize, static_argnames="mode"),
    "ex1_topk_mean": jax.jit(ex1_topk_mean, static_argnames="k"),
    "ex1_count_pos": jax.jit(lambda x: jnp.sum(x > 0)),
    "ex1_clip_by_norm": jax.jit(lambda x, max_norm: x * jnp.minimum(1.0, max_norm / jnp.linalg.norm(x))),
}
x64 = to64(ex1_x)
refs = {"ex1_normalize": x64 / np.abs(x64).sum(), "ex1_topk_mean": np.sort(x64)[::-1][:2].mean(),
        "ex1_count_pos": (x64 > 0).sum(), "ex1_clip_by_norm": x64 * min(1.0, 2.0 / np.linalg.norm(x64))}
for name, (_, args) in ex1_calls.items():
    out = fixed[name](*args)
    print(f"  {name:17s} -> {np.round(np.asarray(out), 4)}")
    assert np.allclose(out, refs[name], atol=1e-6)
assert np.allclose(fixed["ex1_normalize"](ex1_x, "l2"), x64 / np.linalg.norm(x64), atol=1e-6)   # the other branch
assert np.allclose(fixed["ex1_clip_by_norm"](ex1_x, 100.0), x64)           # no scaling needed: x comes back as it is

# %%
assert ex1_self_check(), "exercise 1's self-check must pass with the reference answer"


# %% [markdown]
# ### Exercise 2
#
# The task is in the exercise 2 section above. `checkify.float_checks` is `nan_checks | div_checks`:
# NaN and division by zero, not inf (`exp(1000.)` passes it, checked below); `user_checks` the
# function's own `checkify.check`s. Wrapping the checkified function in
# `jax.jit` once, outside the wrapper, is what makes the five calls compile once.

# %%
# Reference answer: exercise 2
def nan_guard(fn):
    checked = jax.jit(checkify.checkify(fn, errors=checkify.float_checks | checkify.user_checks))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        err, out = checked(*args, **kwargs)
        msg = err.get()
        if msg is not None:
            raise FloatingPointError(f"{fn.__name__}: {msg.strip()}")
        return out
    wrapper.checked = checked
    return wrapper

guarded = nan_guard(ex2_layer)
good_x, bad_x = jnp.array([1.0, 2.0, 4.0]), jnp.array([1.0, -2.0, 4.0])
s1, s0 = jnp.float32(2.0), jnp.float32(0.0)
outcomes = []
with CompileCounter() as cc_ex2:
    for x, s in [(good_x, s1), (bad_x, s1), (good_x, s0), (good_x, s1), (bad_x, s1)]:
        try:
            outcomes.append(("ok", guarded(x, s)))
        except FloatingPointError as e:
            outcomes.append(("err", str(e)))
for kind, v in outcomes:
    print(f"  {kind:3s} {v}")
print("compilations:", cc_ex2.count)
assert [k for k, _ in outcomes] == ["ok", "err", "err", "ok", "err"]
assert np.allclose(outcomes[0][1], np.log(to64(good_x)) * 2.0)
assert outcomes[1][1].startswith("ex2_layer: nan generated by primitive: log")
assert outcomes[2][1].startswith("ex2_layer: scale must not be 0")
assert cc_ex2.count == 1
assert checkify.float_checks == checkify.nan_checks | checkify.div_checks       # no inf check in it:
assert checkify.checkify(jnp.exp, errors=checkify.float_checks)(jnp.float32(1000.0))[0].get() is None  # inf passes

# %% [markdown]
# `%jax_check` gives the same errors for one call, all at once, with your line:

# %%
# %jax_check ex2_layer(bad_x, s0) -o chk_ex2

# %%
assert sorted(chk_ex2.kinds) == ["nan", "user"]
assert any("scale must not be 0" in e.message for e in chk_ex2.errors)

# %%
assert ex2_self_check(), "exercise 2's self-check must pass with the reference answer"


# %% [markdown]
# ### Exercise 3
#
# The task is in the exercise 3 section above. The snapshot keeps only ids: a list of the arrays
# themselves would keep every one of them alive, and the detector would find its own snapshot.

# %%
# Reference answer: exercise 3
def track_new_arrays(fn, *args):
    gc.collect()
    before_ids = {id(a) for a in jax.live_arrays()}          # ids only: no array is kept alive by us
    out = fn(*args)
    jax.block_until_ready(out)
    gc.collect()
    out_ids = {id(a) for a in jax.tree.leaves(out)}
    new = Counter((a.shape, str(a.dtype)) for a in jax.live_arrays()
                  if id(a) not in before_ids and id(a) not in out_ids)
    return out, new

class ex3_TrainerFixed(ex3_Trainer):
    def run(self, n):
        for _ in range(n):
            self.w, g = ex3_step(self.w, self.x)
            self.history.append(float(jnp.linalg.norm(g)))   # a Python float only
        return self.w

t_bad, t_ok = ex3_Trainer(ex3_w0, ex3_x), ex3_TrainerFixed(ex3_w0, ex3_x)
w_bad, leaks_bad = track_new_arrays(t_bad.run, 5)
w_ok, leaks_ok = track_new_arrays(t_ok.run, 5)
print("leaky version:", dict(leaks_bad))
print("fixed version:", dict(leaks_ok), "| gradient norms:", [round(v, 4) for v in t_ok.history])
assert leaks_bad == Counter({((32, 16), "float32"): 5})
assert leaks_ok == Counter() and len(t_ok.history) == 5
assert np.array_equal(w_bad, w_ok)

# %% [markdown]
# `%%jax_live` does the same for a cell, and also names the holder:

# %%
# %%jax_live -o live_ex3
t_bad2 = ex3_Trainer(ex3_w0, ex3_x)
w_bad2 = t_bad2.run(5)

# %%
g = live_ex3.group((32, 16), "float32")
print(live_ex3.summary)
print("holders:", g.holders)
assert g is not None and g.count == 6 and g.holders == ["t_bad2.history[0..4]", "t_bad2.w", "w_bad2"]
del t_bad2, w_bad2

# %%
assert ex3_self_check(), "exercise 3's self-check must pass with the reference answer"


# %% [markdown]
# ### Exercise 4
#
# The task is in the exercise 4 section above. The loop keeps the parameters from before each step,
# so the re-run sees exactly the inputs that produced the NaN.

# %%
# Reference answer: exercise 4
def first_nan_step(step_fn, w, batches):
    for i, batch in enumerate(batches):
        w_new, loss = step_fn(w, batch)
        if not np.isfinite(float(loss)):
            with jax.debug_nans(True):                     # scoped: not affected by the vmap problem
                try:
                    jax.block_until_ready(step_fn(w, batch))   # this step again, with the parameters before it
                    return i, None
                except FloatingPointError as e:
                    m = re.search(r"encountered in (\w+)", str(e))
                    return i, m.group(1) if m else str(e)
        w = w_new
    return None

result = first_nan_step(ex4_step, jnp.float32(1.0), ex4_batches)
print("first NaN:", result)
assert result == (5, "log") and jax.config.jax_debug_nans is False
assert first_nan_step(ex4_step, jnp.float32(1.0), ex4_batches[:5]) is None     # no NaN in the first 5 steps

# %% [markdown]
# `%%jax_doctor` finds the same step without the hand-written loop: it watches every call, notes the
# first whose result holds a NaN from arguments that held none, and re-runs just that call under the
# NaN probe. It reports two findings, in this order:
#
# 1. **NaN**: `log` in the forward pass of `ex4_step`, first in its sixth call (batch index 5), where
#    `log` got -3.0 at index [2];
# 2. **recompilation**: `ex4_step` compiled twice, the second time because of a weak type - the
#    changed argument is `batch`, `f32[4] weak -> f32[4]`. `jnp.full(4, 1.0 + i)` takes its dtype from
#    a Python float, so those batches are weakly typed arrays, while `jnp.array([1.0, 2.0, -3.0, 4.0])`
#    is a typed one; the cause's headline says "weakly typed vs typed argument" and its evidence line
#    names the argument. The first compilation is told as the doctor's own: `ex4_step` was compiled
#    before, outside the doctor, and the doctor's key-reuse checker is part of JAX's cache key - so
#    that one is jaxmagic's doing (cause `jaxmagic`), and the recompilation found is the data's.

# %%
# %%jax_doctor -o doc_ex4
w_ = jnp.float32(1.0)
for batch in ex4_batches:
    w_, loss_ = ex4_step(w_, batch)

# %%
print(doc_ex4.summary)
# the full list of findings, in order: which probe, which area, which magic looks closer
assert [(f.probe, f.area, f.next_magic) for f in doc_ex4.findings] == [
    ("nans", "NaN", "%%jax_nans"), ("compiles", "recompilation", "%%jax_compiles --budget 1 --fn ex4_step")]
nan_f, comp_f = doc_ex4.findings
s = doc_ex4.nan_sighting
assert s.function == "ex4_step" and s.call_number == 6                # the sixth call: batch index 5
assert (doc_ex4.nans.primitive, doc_ex4.nans.phase) == ("log", "forward")
assert "`log` got -3.0 at index [2]" in nan_f.evidence
# the recompilation: its causes and the one argument that changed
comp = doc_ex4.compiles.function("ex4_step")
assert comp.count == 2 and comp.causes == {"jaxmagic": 1, "weak_type": 1}, comp.causes
assert [c.changes for c in doc_ex4.compiles.compilations_of("ex4_step")] == [[], ["batch: f32[4] weak -> f32[4]"]]
assert comp_f.evidence == "batch: f32[4] weak -> f32[4]" and "weakly typed vs typed argument (weak type)" in comp_f.title
assert "jax_debug_key_reuse" not in comp.reason and "JAX setting" not in doc_ex4.summary
# and the data really is as the finding says
assert [b.weak_type for b in (ex4_batches[4], ex4_batches[5])] == [True, False]


# %%
assert ex4_self_check(), "exercise 4's self-check must pass with the reference answer"


# %% [markdown]
# ## Nothing left switched on
#
# The chapter's closing check: every debugging switch used in this notebook - by a magic or by a
# `with` block - is off again, and the configuration is exactly what it was at the start.

# %%
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert dict(jax.config.values) == CONFIG_AT_START
assert jax.config.jax_debug_nans is False and jax.config.jax_traceback_filtering == "auto"
print("JAX config unchanged since the start ✔")
