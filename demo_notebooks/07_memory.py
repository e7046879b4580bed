# %% [markdown]
# # 07 · Memory: estimate it, find who holds it, free it
#
# Memory problems come in two kinds, and they need different tools:
#
# | Problem | Tool |
# |---|---|
# | One computation is too big: the compiled program needs more temporary buffers than the device has | before running: `compile().memory_analysis()`; to lower the peak: `jax.checkpoint`, chunking, `donate_argnums` |
# | Live arrays pile up (a leak) | `jax.live_arrays()` to see what is alive; `save_device_memory_profile` to see where it was allocated; `x.delete()` to free at once; `jax.clear_caches()` for arrays the jit cache keeps as constants |
#
# jaxmagic covers both sides:
#
# * `%jax_hlo EXPR --sweep B=64,256,1024` compiles the call once per value of `B` (arguments may be
#   `jax.ShapeDtypeStruct`s, so nothing is allocated) and tabulates `memory_analysis()`;
# * `%jax_live [--top N] [--profile PATH]` groups the live arrays by shape, dtype and placement and
#   **names their holders**: your variables and what they contain a few levels down
#   (`debug_cache[0..9]`, `hist['acts'][3]`, `trainer.history[0]`), IPython's output cache
#   (`Out[12]`, `_`), the traceback of the last error, and the jit cache;
# * `%%jax_live` runs a cell and reports the arrays it created that are still alive afterwards
#   (the cell's own displayed result aside), with their holders;
# * `%jax_memory CALL` / `%%jax_memory` say **what fills a program's peak, by your line** (XLA's
#   buffer assignment and live ranges) and try ways down by compiling them (donation, `jax.checkpoint`,
#   the batch gradient, blocks of rows); a real out-of-memory error is explained by the
#   explainer wherever it surfaces.
#
# Neither magic keeps an array alive itself: snapshots are ids and weak references, reports hold
# strings and numbers.

# %% [markdown]
# ### This machine and the chapter
#
# The chapter was run on macOS arm64 with Python 3.14. This notebook runs on **Linux x86_64 with
# Python 3.13**, with the same JAX/jaxlib 0.12.0.1 on CPU. Most of the chapter's figures come out the
# same: the `memory_analysis` sizes, the leak of ten `(64, 512)` arrays plus one scalar, the
# 4,000,000 bytes freed by `delete()`, and the one old table kept by the jit cache. Two figures differ:
#
# * In §7.4 the live totals before and after `delete()` are smaller here than in the chapter
#   (about 4.10 -> 0.28 MiB against the chapter's 4.36 -> 0.54 MiB): fewer other arrays are alive in
#   this notebook at that point. The drop between them, exactly 4,000,000 bytes, is the same, and that
#   is what the cell asserts; the totals are only printed.
# * The size of the memory profile in bytes depends on the Python stacks that allocated the arrays.
#   Only how it changes is asserted.

# %%
# %load_ext jaxmagic

import gc, gzip, os, sys, tempfile
from collections import Counter
import numpy as np
import jax
import jax.numpy as jnp

import jaxmagic.probes
from _demo_helpers import show_error, pop_last_error, config_changes

CONFIG_AT_START = dict(jax.config.values)   # the last cell checks that nothing was left switched on
print("JAX", jax.__version__, "| backend", jax.default_backend(), "| Python", sys.version.split()[0], "|", sys.platform)
print("memory_stats() of the first device:", jax.devices()[0].memory_stats())
ON_CPU = jax.default_backend() == "cpu"
assert (jax.devices()[0].memory_stats() is None) == ON_CPU   # None on CPU; GPU/TPU: bytes_in_use, peak_bytes_in_use, ...


# %% [markdown]
# On CPU, `jax.devices()[0].memory_stats()` returns `None`. On GPU and TPU it returns `bytes_in_use`,
# `peak_bytes_in_use` and more, the most direct view of device memory. `%jax_live` shows them where
# they exist, and says so where they do not.

# %% [markdown]
# ## 7.1 `memory_analysis()`: how much memory, before anything runs
#
# A typical way to run out of memory: per-example gradients. The output of `vmap(grad)` holds
# B × P numbers, one gradient per example, where the batch-mean gradient holds P. `memory_analysis()`
# of the compiled program gives exact byte counts, and it needs no real data: inputs described by
# `jax.ShapeDtypeStruct` are enough. That makes it the right tool to check, before allocating
# anything, whether a bigger batch will still fit.

# %%
def per_example_loss(w, x, y):
    return (jnp.dot(x, w) - y) ** 2

P_dim = 4096
spec_w = jax.ShapeDtypeStruct((P_dim,), jnp.float32)          # describes a shape, allocates nothing
batch_grad = jax.jit(jax.grad(lambda w, x, y: jnp.mean(jax.vmap(per_example_loss, (None, 0, 0))(w, x, y))))
per_ex_grad = jax.jit(jax.vmap(jax.grad(per_example_loss), in_axes=(None, 0, 0)))
rows = []
for B in [64, 256, 1024]:
    spec_x, spec_y = jax.ShapeDtypeStruct((B, P_dim), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.float32)
    ma_b = batch_grad.lower(spec_w, spec_x, spec_y).compile().memory_analysis()
    ma_p = per_ex_grad.lower(spec_w, spec_x, spec_y).compile().memory_analysis()
    rows.append((B, ma_b.output_size_in_bytes, ma_p.output_size_in_bytes, ma_p.temp_size_in_bytes))
    print(f"  B={B:5d} | mean gradient output {ma_b.output_size_in_bytes / 2**10:8.1f} KiB | "
          f"per-example output {ma_p.output_size_in_bytes / 2**20:6.1f} MiB | temporaries {ma_p.temp_size_in_bytes / 2**20:5.1f} MiB")
for B, out_b, out_p, _ in rows:
    assert out_b == P_dim * 4                 # mean gradient: P float32s, whatever B is
    assert out_p == B * P_dim * 4             # per-example gradients: B x P float32s

# %% [markdown]
# ### The same with `%jax_hlo --sweep`
#
# `--sweep B=64,256,1024` evaluates the call once for each value of `B` (a name the call uses) and
# compiles it, then puts the memory figures side by side in one table. The rest of the report
# describes the first value. The loop above already traced, lowered and compiled that call for
# B=64, so the report's trace, lower and compile times say `cached`: what they measure is JAX's
# cache look-up, not a compilation (`%jax_stages` times a fresh one).

# %%
# %jax_hlo per_ex_grad(spec_w, jax.ShapeDtypeStruct((B, P_dim), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.float32)) --sweep B=64,256,1024 -o rep_sweep

# %%
assert [p.value for p in rep_sweep.sweep] == ["64", "256", "1024"]
assert [p.memory.output_bytes for p in rep_sweep.sweep] == [out_p for _, _, out_p, _ in rows]
assert [p.memory.temp_bytes for p in rep_sweep.sweep] == [t for *_, t in rows]
# the arguments w, x, y: (P + B*P + B) float32s - on the CPU exactly; a TPU pads an array to its tiles (y of 64
# float32s takes 512 bytes there, 128 lanes), so there the figure is at least that
arguments = [p.memory.argument_bytes for p in rep_sweep.sweep]
by_hand = [(P_dim + B * P_dim + B) * 4 for B in (64, 256, 1024)]
assert arguments == by_hand if ON_CPU else all(a >= h for a, h in zip(arguments, by_hand)), (arguments, by_hand)
assert rep_sweep.memory.output_bytes == 64 * P_dim * 4       # the report's own figures: the first value
assert rep_sweep.cached == ["trace", "lower", "compile"]      # B=64 was compiled in the loop above
assert B == 1024                            # the loop's B above: --sweep binds B for the magic only
print(rep_sweep.sweep[-1])

# %%
# %jax_hlo batch_grad(spec_w, jax.ShapeDtypeStruct((B, P_dim), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.float32)) --sweep B=64,256,1024 -o rep_mean

# %%
assert [p.memory.output_bytes for p in rep_mean.sweep] == [P_dim * 4] * 3     # does not grow with B
assert [p.memory.output_bytes for p in rep_mean.sweep] == [out_b for _, out_b, _, _ in rows]


# %% [markdown]
# ### `%jax_memory`: what fills the peak, and a way down that was tried
#
# The totals say *how much*; they do not say *which line*. `%jax_memory CALL` compiles the call once
# more with XLA's dumps on (never runs it: `ShapeDtypeStruct`s are fine) and reads XLA's live ranges:
# the buffers live at the peak, each with its shape, the operation and your line that made it, and
# what it is for - an argument, an output, a temporary, or an activation saved for the backward pass.
# Then it tries ways down **by compiling** them and shows the new peak beside the old: here the
# gradient of the mean instead of one gradient per example. Donating `x`, whose buffer the per-example
# output could take, is tried too but not offered: donation deletes `x`, and the call's line does not
# show that you no longer need it.

# %%
# %jax_memory per_ex_grad(spec_w, jax.ShapeDtypeStruct((1024, P_dim), jnp.float32), jax.ShapeDtypeStruct((1024,), jnp.float32)) -o rep_mem

# %%
[prog] = rep_mem.programs
assert prog.buffers[0].role == "output" and prog.buffers[0].shape == f"f32[1024,{P_dim}]", prog.buffers[:3]
offered = {w.kind: w for w in prog.offered}
assert offered["batch_gradient"].peak_after < prog.peak_bytes            # compiled, measured, lower
assert "jnp.mean(jax.vmap(per_example_loss" in offered["batch_gradient"].code
print(rep_mem.fix)

# %% [markdown]
# ### A real out-of-memory error, explained
#
# Nearest neighbours of 2^17 points by sorting all pairwise distances: the program needs one
# `f32[131072,131072]` buffer, 64 GiB. On CPU, XLA allocates from the host and raises the same
# `RESOURCE_EXHAUSTED` error a GPU does - but not on the call: JAX dispatches asynchronously, the call
# returns at once, and the error surfaces where the result is first read (`print(nn[:3])`). (A TPU
# refuses the program earlier, when compiling it: `CompileTimeHbmOom`, explained the same way.) The
# explainer (on by default) follows the array read back to the call that made it, names the line
# whose buffer filled the peak, and computes the results a block of rows at a time - the block size found by
# compiling the blocked program.

# %% tags=["raises-exception"]
@jax.jit
def nearest(x):
    d = jnp.abs(x[:, None] - x[None, :])
    return jnp.sort(d, axis=0)[1]

nn = nearest(jnp.linspace(0.0, 1.0, 2 ** 17))
print(nn[:3])

# %%
err = pop_last_error()
oom = jaxmagic.probes.explain_out_of_memory(err)      # the explainer's report, kept on the exception
if ON_CPU:  # the allocator refused 64 GiB when the result was read
    assert oom.asked == 2**34 * 4 and oom.read == "nn"
    assert oom.program.buffers[0].shape == "f32[131072,131072]" and oom.program.buffers[0].operation == "sort"
    assert "jnp.sort(d, axis=0)" in oom.program.buffers[0].made_at.code
else:  # a TPU refuses the program when compiling it (CompileTimeHbmOom, 128 GiB of temporaries): its largest
    # buffer there is the sort's s32 indices (an iota), then the f32 distances (a TPU v5e)
    assert oom.program.compile_error is not None and "CompileTimeHbmOom" in str(err)
    assert any("jnp.sort(d, axis=0)" in b.made_at.code for b in oom.program.buffers[:2] if b.made_at is not None)
[rows] = [w for w in oom.program.offered if w.kind == "rows"]   # the results a block of rows at a time
assert rows.peak_after < oom.program.peak_bytes and "blocks of the traced program" in rows.how
del err, nn

# %% [markdown]
# **Where the chapter's table is not right for JAX 0.12 on CPU.** The quick reference lists
# `memory_analysis()` as giving the peak bytes. Its `peak_memory_in_bytes` leaves the temporaries out on
# this backend: for the program above it says about 1 MiB while its temporaries are 64 GiB. The peak
# `%jax_memory` shows is XLA's own, from the live ranges of the buffers.

# %%
if ON_CPU:  # (a TPU refuses to compile this program at all: above)
    ma = nearest.lower(jax.ShapeDtypeStruct((2**17,), jnp.float32)).compile().memory_analysis()
    print(f"peak_memory_in_bytes {ma.peak_memory_in_bytes / 2**20:.1f} MiB | temp_size_in_bytes {ma.temp_size_in_bytes / 2**30:.0f} GiB")
    assert ma.peak_memory_in_bytes < 2**21 and ma.temp_size_in_bytes == 2**36

# %% [markdown]
# ### Activations kept for the backward pass: `jax.checkpoint`, tried
#
# Under `jax.grad`, every intermediate the backward pass needs is kept until it is used. In a stack of
# MLP blocks with a 4x hidden layer, those hidden activations fill the peak. `%%jax_memory` runs the
# cell as it is, measures each jitted program it ran, and tries `jax.checkpoint` around the function
# whose activations fill the peak (in a copy of the module's globals: nothing of yours changes; your
# function is traced again, and the report says so) - with and without a policy that keeps the
# matrix products.

# %%
def block(p, x):
    h = jax.nn.gelu(x @ p["w1"])
    return x + h @ p["w2"]

def loss(params, x):
    for p in params:
        x = block(p, x)
    return jnp.mean(x ** 2)

@jax.jit
def train_step(params, x):
    grads = jax.grad(loss)(params, x)
    return jax.tree.map(lambda a, g: a - 0.01 * g, params, grads)

ks = jax.random.split(jax.random.key(0), 12)
params = [{"w1": jax.random.normal(ks[2 * i], (128, 512)) * 0.05,
           "w2": jax.random.normal(ks[2 * i + 1], (512, 128)) * 0.05} for i in range(6)]
xb = jax.random.normal(jax.random.key(1), (2048, 128))

# %%
# %%jax_memory -o rep_step
params = train_step(params, xb)

# %%
[prog] = rep_step.programs
saved = sum(b.bytes for b in prog.buffers if b.role == "saved for backward")
assert saved > prog.peak_bytes / 2                        # activations fill the peak
best = prog.offered[0]
assert best.kind == "checkpoint" and best.code == "block = jax.checkpoint(block)"
assert best.peak_after < prog.peak_bytes / 2 and best.traced_again

# %% [markdown]
# ### Scan over layers: the stacked residuals, by the body's line
#
# Large models stack their layers' weights and `jax.lax.scan` over them. Under `jax.grad` the scan keeps,
# for every layer, each value of the body the backward pass reads - stacked, one row per layer. XLA writes
# those stacks with a `dynamic_update_slice` on the scan's line; the report names the body's line that made
# each value instead, and tries `jax.checkpoint` on the scan's body - the code to paste - by compiling it
# (shapes only: nothing is allocated).

# %%
def layer(x, w):
    w1, w2 = w
    h = jnp.tanh(x @ w1)
    return x + h @ w2, None

def scan_loss(params, x):
    y, _ = jax.lax.scan(layer, x, params)
    return (y ** 2).mean()

scan_step = jax.jit(jax.grad(scan_loss))
stacked_w = jax.ShapeDtypeStruct((8, 512, 512), jnp.float32)

# %%
# %jax_memory scan_step((stacked_w, stacked_w), jax.ShapeDtypeStruct((1024, 512), jnp.float32)) -o rep_scan

# %%
[prog] = rep_scan.programs
stacks = [b for b in prog.buffers if b.stacked and b.role != "output"]  # the gradients are stacked too
assert {b.made_at.code for b in stacks} >= {"h = jnp.tanh(x @ w1)"}      # the body's line, not the scan's
assert all(b.stacked == 8 and b.role == "saved for backward" for b in stacks)
best = prog.offered[0]
assert best.code == "jax.lax.scan(jax.checkpoint(layer), x, params)" and best.peak_after < prog.peak_bytes

# %% [markdown]
# ### Exercise: donate what the update replaces
#
# An optimizer update makes new parameters as large as the old ones; without donation both are alive
# at the peak. Donating the old ones lets XLA write the new ones over them - and deletes them, so it
# is a way down only where your line no longer needs them: `params = update_jit(params, grads)` rebinds
# `params`, `new_params = update_jit(params, grads)` keeps it (reading it afterwards would fail with
# "Array has been deleted"). Measure both lines, take the way down offered, and measure again.

# %%
def update(params, grads):
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

update_jit = jax.jit(update)
params = {"w": jnp.ones((2048, 2048)), "b": jnp.ones((2048,))}
grads = jax.tree.map(jnp.ones_like, params)
big = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)

# %%
# %%jax_memory -o rep_kept
new_params = update_jit(params, grads)

# %%
[prog] = rep_kept.programs
[kept] = [w for w in prog.ways_down if w.kind == "donate"]
assert kept.lowers and kept not in prog.offered                # measured lower, not offered:
print(kept.withheld)                                            # `params` may be used after the call

# %%
# %%jax_memory -o rep_upd
params = update_jit(params, grads)

# %%
[prog] = rep_upd.programs
[donate] = [w for w in prog.offered if w.kind == "donate"]
print(donate.title, "->", donate.effect)
update_donated = jax.jit(update, donate_argnums=(0,))         # the way down it offered: `params` only
after = jaxmagic.probes.memory_of_call(update_donated, (big, big)).programs[0]
assert after.peak_bytes == donate.peak_after < prog.peak_bytes
assert not [w for w in after.offered if w.kind == "donate"]   # nothing left to offer
del rep_mem, rep_step, rep_scan, rep_kept, rep_upd, prog, best, after, params, grads, new_params, xb, ks, stacks

# %% [markdown]
# ## 7.2 `jax.profiler.save_device_memory_profile`: who allocated the memory
#
# It sums the live device buffers by the Python stack that allocated them, and writes the result in
# pprof format (gzip-compressed protobuf). Open it with `pprof -http=:8080 FILE` for a flame graph.
# `jax.profiler.device_memory_profile()` returns the same content as bytes, without writing a file.
# It works on CPU too. We check one thing here: the more large arrays are alive, the bigger the
# snapshot, and it shrinks again once they are gone.

# %%
def profile_size():
    return len(gzip.decompress(jax.profiler.device_memory_profile()))

s0 = profile_size()
hogs = [jnp.ones((256, 256)) * i for i in range(20)]          # 20 arrays allocated on the same line
jax.block_until_ready(hogs)
s1 = profile_size()
mem_path = os.path.join(tempfile.mkdtemp(), "memory.prof")
jax.profiler.save_device_memory_profile(mem_path)

# %% [markdown]
# `%jax_live --profile PATH` saves the same profile next to its report. The report also shows which
# variable holds those twenty arrays.

# %%
# %jax_live --profile {mem_path}.live -o rep_prof

# %%
hog_group = rep_prof.group((256, 256), "float32")
assert hog_group.count == 20 and hog_group.holders == ["hogs[0..19]"] and hog_group.held_by_names == 20
assert rep_prof.profile_path == mem_path + ".live" and open(rep_prof.profile_path, "rb").read(2) == b"\x1f\x8b"
assert (rep_prof.devices[0].stats is None) == ON_CPU       # CPU: memory_stats() is None, and the report says so

del hogs; gc.collect()
s2 = profile_size()
print(f"profile size (decompressed): before {s0} bytes -> with 20 arrays {s1} -> after del {s2}; "
      f"file {os.path.getsize(mem_path)} bytes")
assert s1 > s0 and s2 < s1 and open(mem_path, "rb").read(2) == b"\x1f\x8b"


# %% [markdown]
# ## 7.3 `jax.live_arrays()`: finding arrays that were not freed
#
# `jax.live_arrays()` returns every `jax.Array` still alive in the process. Grouped by (shape, dtype)
# and taken before and after a training loop, it shows what piles up. One caution: a list that holds
# the result of `live_arrays()` keeps those arrays alive itself, so drop it straight away. The helper
# below returns counts only.

# %%
def live_summary():
    """Counter{(shape, dtype): count} of the live arrays, and their total bytes (keeps no reference)."""
    gc.collect()
    arrs = jax.live_arrays()
    summary = Counter((a.shape, str(a.dtype)) for a in arrs), sum(a.nbytes for a in arrs)
    del arrs
    return summary

def leak_report(before, after):
    """The arrays that appeared between two snapshots."""
    return {k: v for k, v in (after[0] - before[0]).items()}

@jax.jit
def fwd_step(w, x):
    h = jnp.tanh(x @ w)
    return h, (h ** 2).mean()

w7 = jax.random.normal(jax.random.key(7), (128, 512)) / 12.0
x7 = jax.random.normal(jax.random.key(8), (64, 128))

# %% [markdown]
# ### ❌ A debugging list that keeps every step's activations
#
# `%%jax_live` runs the cell, takes the same two snapshots, and names the holder of what is left. The
# chapter's hand-made snapshots run inside the same cell, so the two can be compared.

# %%
# %%jax_live -o rep_leak
debug_cache = []
before = live_summary()
for _ in range(10):
    h, loss = fwd_step(w7, x7)
    debug_cache.append(h)                 # one more 64x512 array kept at every step
after = live_summary()
leaked = leak_report(before, after)
print("arrays that appeared:", leaked, f"| {(after[1] - before[1]) / 2**20:.2f} MiB more")

# %%
assert leaked.get(((64, 512), "float32"), 0) == 10
assert {(g.shape, g.dtype): g.count for g in rep_leak.groups} == leaked      # the same arrays as by hand
acts = rep_leak.group((64, 512), "float32")
assert acts.holders[0] == "debug_cache[0..9]" and "h" in acts.holders        # h is the last one, too
assert rep_leak.group((), "float32").holders == ["loss"]
assert rep_leak.status.value == "problem" and "debug_cache[0..9]" in rep_leak.summary
assert rep_leak.bytes == after[1] - before[1]
print(rep_leak.summary)

# %% [markdown]
# ### ✅ Keep numbers, not arrays
#
# Convert what you want to keep to Python numbers. An array nothing refers to any more is freed. The
# cell below empties the list and drops `h` and `loss`, so it frees the eleven arrays of the previous
# cell and leaves none of its own.

# %%
# %%jax_live -o rep_fixed
debug_cache.clear()
stats_log = []
before = live_summary()
for _ in range(10):
    h, loss = fwd_step(w7, x7)
    stats_log.append(float(loss))         # keep a Python float only
del h, loss
after = live_summary()
print("arrays that appeared:", leak_report(before, after), "| losses logged:", len(stats_log))

# %%
assert leak_report(before, after) == {} and len(stats_log) == 10
assert rep_fixed.groups == [] and rep_fixed.status.value == "ok"
assert rep_fixed.freed_arrays == 11          # the ten activations and the loss the previous cell left
print(rep_fixed.summary)

# %% [markdown]
# ### IPython's output cache keeps every displayed result
#
# A cell that ends in an expression displays it, and IPython stores it in `Out[n]` (and in `_`,
# unless the notebook has assigned `_` itself, as the `for _ in range(10)` loops above did), so it
# stays alive. `%jax_live` names that holder as the output cache, not as one of your variables.

# %%
jnp.ones((300, 300)) * 2

# %%
# %jax_live -o rep_out

# %%
shown = rep_out.group((300, 300), "float32")
assert shown.in_output_cache == 1 and shown.held_by_names == 0
assert [h for h in shown.holders if h.startswith("Out[")] == [f"Out[{len(In) - 3}]"]   # two cells up
# %reset -f out
gc.collect()
assert jaxmagic.probes.live(namespace=globals()).group((300, 300), "float32") is None


# %% [markdown]
# ### The last error's traceback keeps the failing frames
#
# A cell that fails leaves its traceback in `sys.last_traceback`, and IPython keeps a reference to
# the last traceback it printed. Every frame in it, with its local arrays, stays alive. `%jax_live`
# searches those frames too, and labels what it finds there as held by the traceback.

# %% tags=["raises-exception"]
def normalise(batch):
    norms = jnp.linalg.norm(batch, axis=1, keepdims=True)
    raise ValueError("a bad batch")           # fails after allocating

normalise(jnp.ones((700, 700)))

# %%
# %jax_live -o rep_tb

# %%
err = pop_last_error()                         # forgets sys.last_traceback (and its frames)
assert isinstance(err, ValueError)
held = rep_tb.group((700, 700), "float32")
assert held.by_kind == {"traceback": 1} and held.holders == ["traceback: normalise() batch"]
get_ipython().InteractiveTB.tb = None          # the copy IPython keeps
del err; gc.collect()
assert jaxmagic.probes.live(namespace=globals()).group((700, 700), "float32") is None

# %% [markdown]
# ## 7.4 `x.delete()`: free now, without waiting for the garbage collector
#
# `del x` only removes one name; if anything else still refers to the array (a list, a closure, a
# debugger), its buffer stays. `x.delete()` frees the device buffer at once, however many references
# remain. After that:
#
# * `x.is_deleted()` is `True`;
# * any use, through any alias (`y = x`), raises `RuntimeError: Array has been deleted with shape=...`;
# * but `print(x)` / `repr(x)` do not fail: they show `Array(shape=(...), dtype=...)`. Do not let that
#   fool you.

# %%
big = jnp.ones((1000, 1000))
alias = big                                   # a second reference
n_before = live_summary()[1]
big.delete()
n_after = live_summary()[1]
print(f"live bytes before/after delete: {n_before / 2**20:.2f} MiB -> {n_after / 2**20:.2f} MiB")
print("is_deleted:", alias.is_deleted(), "| repr:", repr(alias))
e_del = show_error(lambda: alias + 1)
assert n_before - n_after == 1000 * 1000 * 4
assert alias.is_deleted() and isinstance(e_del, RuntimeError) and "deleted" in str(e_del)
assert repr(alias) == "Array(shape=(1000, 1000), dtype=float32)"

# %%
# %jax_live -o rep_del

# %%
# both names still exist, but the buffer is gone: it is not a live array any more
assert "big" in globals() and "alias" in globals()
assert rep_del.group((1000, 1000), "float32") is None
del big, alias

# %% [markdown]
# ## 7.5 `jax.clear_caches()`: arrays the jit cache keeps
#
# A jitted function that reads a global array keeps it as a constant of its program (section 2.1 of
# notebook 02). Once the global is rebound, no Python name refers to the old array, but the cached
# program still does, and `live_arrays()` still lists it. As long as the jitted function exists the
# old array is not freed; only `jax.clear_caches()` frees it. This is one more reason to pass large
# arrays as arguments.
#
# `%jax_hlo` warns about it before anything runs: a captured array is a constant of the program.

# %%
before = live_summary()
TABLE = jnp.ones((512, 512))                  # a global "lookup table"
def lookup(x):
    return (x + TABLE).sum()
lookup_jit = jax.jit(lookup)

# %%
# %jax_hlo lookup(jnp.float32(1.0)) --stage jaxpr -o rep_const

# %%
(table_const,) = rep_const.constants
assert (table_const.name, table_const.kind, table_const.shape) == ("TABLE", "global", (512, 512))
assert table_const.nbytes == 512 * 512 * 4 and table_const.line.code == "return (x + TABLE).sum()"
assert rep_const.status.value == "problem" and "jit cache keeps them alive" in rep_const.summary

# %%
lookup_jit(jnp.float32(1.0))                  # TABLE enters the compiled program as a constant
TABLE = jnp.zeros((256, 256))                 # rebound: no name refers to the old 512x512 any more
mid = live_summary()
key_old = ((512, 512), "float32")
print("old TABLEs still alive after rebinding:", mid[0][key_old] - before[0][key_old])
assert mid[0][key_old] - before[0][key_old] == 1

# %%
# %jax_live -o rep_cache

# %%
old = rep_cache.group((512, 512), "float32")
assert old.count == 1 and old.in_jit_cache == 1 and old.jit_functions == ["lookup"] and old.holders == []
assert rep_cache.group((256, 256), "float32").holders == ["TABLE"]
assert "clear_caches" in rep_cache.summary and rep_cache.status.value == "problem"
jax.clear_caches()
end = live_summary()
print("after clear_caches:", end[0][key_old] - before[0][key_old])
assert end[0][key_old] - before[0][key_old] == 0

# %%
# %jax_live -o rep_cleared

# %%
assert rep_cleared.group((512, 512), "float32") is None
assert rep_cleared.count_by_kind("jit cache") == 0
del TABLE

# %% [markdown]
# ### The magics keep nothing alive
#
# With `TABLE` deleted, two arrays are left (`w7` and `x7`). Two more `%jax_live` reports change
# nothing: the number of live arrays after them is the number before them. No report, snapshot or
# widget of jaxmagic holds an array.

# %%
gc.collect()
n_now = len(jax.live_arrays())
# %jax_live -o rep_last
# %jax_live -o rep_last
gc.collect()
assert len(jax.live_arrays()) == n_now
assert rep_last.total_arrays == n_now

# %% [markdown]
# ### Nothing left switched on

# %%
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert jax.config.values == CONFIG_AT_START
print("JAX config unchanged since the start.")
