# %% [markdown]
# # 02 · Seeing the program: what JAX traced and what XLA compiled
#
# When the numbers look fine but the result is wrong or slow, look at the program itself. One call of a
# jitted function passes through three representations, and each can be printed:
#
# | Stage | How to get it | What it tells you |
# |---|---|---|
# | jaxpr | `jax.make_jaxpr(f)(*args)`, `jax.jit(f).trace(*args).jaxpr` | What JAX thinks it must compute: which values were baked in as constants, whether loops were unrolled, what a transformation added |
# | StableHLO | `jax.jit(f).lower(*args).as_text()` | The program handed to XLA; with `debug_info=True`, each operation's source location and name |
# | optimized HLO | `jax.jit(f).lower(*args).compile().as_text()` | What XLA will actually run: fusions, layouts, constants; `metadata={op_name=...}` leads back to your code |
#
# This notebook covers the two moves used most while debugging: spotting a value that was **baked in
# as a constant**, and finding **your own code** in all three stages with `jax.named_scope`.
#
# jaxmagic does both with one line magic, `%jax_hlo [SCOPE] EXPR`. It traces, lowers and compiles
# the call `EXPR` ahead of time, and never runs it. With a SCOPE it lists that scope's operations in
# each stage side by side, with your lines and the kernels XLA runs them in. Without one it shows the
# tree of named scopes. Either way it reports globals baked in as literals, captured arrays, and the
# compiled program's memory and cost.

# %% [markdown]
# ### This machine and the chapter
#
# The chapter was run on macOS arm64 with Python 3.14. This notebook runs on **Linux x86_64 with
# Python 3.13**, with the same JAX/jaxlib 0.12.0.1 on CPU. The jaxpr text, the name stacks and the
# StableHLO locations come out as in the chapter. So does the optimized HLO of the `encoder` scope:
# the same five instructions under the same names as the chapter's list (the relu's broadcast is
# `%broadcast.2` here too), which the cell of §2.2 asserts. The assertions check what the chapter
# checks, and compare jaxmagic's findings with the hand-written search on the same text.

# %%
# %load_ext jaxmagic

import re, sys
import numpy as np
import jax
import jax.numpy as jnp

import jaxmagic.probes
from _demo_helpers import strip_ansi, to64, config_changes

CONFIG_AT_START = dict(jax.config.values)   # the last cell checks that nothing was left switched on
print("JAX", jax.__version__, "| backend", jax.default_backend(), "| Python", sys.version.split()[0], "|", sys.platform)

# %% [markdown]
# ## 2.1 The jaxpr: which values became constants
#
# "I changed the setting and nothing happened" is a quiet kind of bug. A jitted function that reads a
# global variable reads it **once, while tracing**, and writes its value into the program as a literal.
# Changing the global later neither recompiles nor changes the result. The jaxpr shows it directly:
# the value appears inside an equation as `2.0:f32[]`, not as an input variable.

# %%
SCALE = 2.0                                  # a module-level "setting"

def scaled(x):
    return x * SCALE

jaxpr_txt = strip_ansi(str(jax.make_jaxpr(scaled)(1.0)))
print(jaxpr_txt)
assert "mul a 2.0:f32[]" in jaxpr_txt        # SCALE appears as a literal: it was baked in

# %% [markdown]
# `%jax_hlo` reads the same jaxpr and goes one step further: for each literal it looks at your line,
# finds the global (or closure variable, attribute, dict entry) that holds exactly that value, and
# names it. `--stage jaxpr` stops after tracing: nothing is lowered or compiled.

# %%
# %jax_hlo scaled(1.0) --stage jaxpr -o rep_scale

# %%
(lit,) = rep_scale.literals
assert (lit.name, lit.kind, lit.value) == ("SCALE", "global", "2.0:f32[]")
assert "mul" in lit.equation and lit.line.code == "return x * SCALE"
assert rep_scale.status.value == "problem" and "SCALE" in rep_scale.summary
assert rep_scale.stages == ["jaxpr"] and rep_scale.memory is None    # traced only
print(rep_scale.summary)

# %% [markdown]
# ### ❌ The wrong way: a setting in a global, changed after jit
#
# The jitted function keeps using the value it saw while tracing. There is no error and no warning.

# %%
scaled_jit = jax.jit(scaled)
before = float(scaled_jit(1.0))
SCALE = 10.0
after = float(scaled_jit(1.0))
print(f"before changing SCALE: {before}, after: {after} (no error, but still the old value)")
assert before == after == 2.0


# %% [markdown]
# ### ✅ The right way: pass the setting as an argument
#
# Now the jaxpr has a second input `b` and multiplies by it. `%jax_hlo` finds no baked-in value.

# %%
def scaled_ok(x, scale):
    return x * scale

ok_txt = strip_ansi(str(jax.make_jaxpr(scaled_ok)(1.0, SCALE)))
print(ok_txt)
scaled_ok_jit = jax.jit(scaled_ok)
assert float(scaled_ok_jit(1.0, 2.0)) == 2.0 and float(scaled_ok_jit(1.0, 10.0)) == 10.0
assert "mul a b" in ok_txt
SCALE = 2.0

# %%
# %jax_hlo scaled_ok(1.0, SCALE) --stage jaxpr -o rep_ok

# %%
assert rep_ok.literals == [] and rep_ok.constants == [] and rep_ok.status.value == "ok"
assert rep_ok.inputs == ["x: f32[]", "scale: f32[]"]


# %% [markdown]
# The same holds for a value captured by a closure or read through an attribute or a dict: each one
# is frozen at trace time. A number written in the code itself (`+ 7.0` below) is not a setting, and
# is not flagged. A value that Python computes from a setting before JAX sees it (`1 - cfg.decay`) is
# baked in just the same, but no name holds exactly that number, so only the jaxpr shows it.

# %%
class Config:
    def __init__(self):
        self.decay = 0.01

cfg = Config()
SETTINGS = {"lr": 0.5}

def make_step(momentum):
    def step(w, g):
        return w * momentum - SETTINGS["lr"] * g * cfg.decay + 7.0
    return step

step = make_step(0.9)

# %%
# %jax_hlo step(jnp.ones(3), jnp.ones(3)) --stage jaxpr -o rep_closure

# %%
found = {(lit.name, lit.kind): lit.value for lit in rep_closure.literals}
assert found == {("momentum", "closure"): "0.9:f32[]", ("SETTINGS['lr']", "global"): "0.5:f32[]",
                 ("cfg.decay", "global"): "0.01:f32[]"}, found
print(rep_closure.summary)


# %% [markdown]
# ## 2.2 `jax.named_scope`: labels that survive into every stage
#
# A large model compiles to thousands of HLO lines, and it is hard to tell which instructions belong
# to "my layer". `with jax.named_scope("name"):` puts the name on the name stack of every operation
# inside it, and the name travels all the way:
#
# 1. into `source_info.name_stack` of each jaxpr equation;
# 2. into the StableHLO locations (printed only with `as_text(debug_info=True)`);
# 3. into `metadata={op_name="jit(f)/name/..."}` of every optimized-HLO instruction;
# 4. into the operation names of a profiler trace (visible on GPU/TPU).
#
# We label the two layers of a small network and look for `encoder` by hand in all three stages, as
# the chapter does. Then `%jax_hlo` does the same search.

# %%
def scoped_mlp(params, x):
    with jax.named_scope("encoder"):
        h = jax.nn.relu(x @ params["w1"])
    with jax.named_scope("head"):
        out = h @ params["w2"]
        loss = jnp.mean(out ** 2)
    return loss

p_ns = {"w1": jnp.ones((4, 8)) * 0.1, "w2": jnp.ones((8, 2)) * 0.1}
x_ns = jnp.ones((3, 4))
jf_ns = jax.jit(scoped_mlp)

# (1) jaxpr: the name stack of each equation
traced = jf_ns.trace(p_ns, x_ns)
stacks = [str(e.source_info.name_stack) for e in traced.jaxpr.jaxpr.eqns]
print("(1) jaxpr name stacks:", stacks)

# (2) StableHLO: the default text has no names; debug_info=True has them
lowered = traced.lower()
plain, dbg = lowered.as_text(), lowered.as_text(debug_info=True)
print("(2) 'encoder' in the default StableHLO text?", "encoder" in plain, "| with debug_info=True:",
      [l.strip() for l in dbg.splitlines() if "encoder/" in l][:2])

# (3) optimized HLO: the op_name in each instruction's metadata
compiled = lowered.compile()
def hlo_ops_in_scope(hlo_text, scope):
    """(instruction name, op_name) of the optimized-HLO instructions whose op_name contains /scope/."""
    pat = re.compile(r"%([\w.\-]+) = .*?op_name=\"([^\"]*/" + re.escape(scope) + r"/[^\"]*)\"")
    return [m.groups() for m in pat.finditer(hlo_text)]
enc_ops = hlo_ops_in_scope(compiled.as_text(), "encoder")
print("(3) optimized-HLO instructions of encoder:")
for name, op in enc_ops:
    print(f"     %{name:26s} <- {op}")

assert stacks.count("encoder") >= 2 and stacks.count("head") >= 3
assert "encoder" not in plain and "jit(scoped_mlp)/encoder/dot_general" in dbg
assert any(op.endswith("encoder/dot_general") for _, op in enc_ops)
# the instruction names of the chapter's list, in its order - XLA:CPU's: XLA:TPU names the same scope's
# instructions convolution.13, broadcast.5, max.8, convolution_maximum_fusion.clone.5 (a TPU v5e, JAX 0.12)
ON_CPU = jax.default_backend() == "cpu"
assert not ON_CPU or [name for name, _ in enc_ops] == ["dot_general.1", "broadcast.2", "max.2", "ynn_fusion.1",
                                         "broadcast_maximum_fusion"], enc_ops
assert np.isclose(float(compiled(p_ns, x_ns)),
                  float(np.mean((np.maximum(to64(x_ns) @ to64(p_ns["w1"]), 0) @ to64(p_ns["w2"])) ** 2)),
                  rtol=1e-5 if ON_CPU else 1e-2)  # a TPU multiplies float32 in bfloat16 passes by default

# %% [markdown]
# ### The same with `%jax_hlo encoder ...`
#
# The scope comes first, then the call. The report puts the three stages side by side, one row per
# operation of the scope, with the line of yours that made it. It reads the jaxpr's name stacks and
# the StableHLO locations as structured objects (the StableHLO module through the MLIR Python
# bindings that JAX ships), and it reads the optimized HLO from its text, since JAX offers nothing
# else there. The *Kernels* section says which fused instruction runs each HLO operation. This
# matters because a profiler shows time per kernel, under the kernel's own label.

# %%
# %jax_hlo encoder scoped_mlp(p_ns, x_ns) -o rep_enc

# %%
# Every stage has the scope's operations, on the line that made them
print("operations of `encoder` per stage:", dict(rep_enc.counts))
assert rep_enc.counts["jaxpr"] == 2 and rep_enc.counts["stablehlo"] == 4 and rep_enc.counts["hlo"] == 3
assert {op.op for op in rep_enc.ops_in("jaxpr")} == {"dot_general", "max"}      # max: inside jax.nn.relu
assert {op.line.code for op in rep_enc.ops} == {'h = jax.nn.relu(x @ params["w1"])'}

# The jaxpr part agrees with the name stacks read by hand (the relu's max sits inside its custom_jvp call)
assert stacks.count("encoder") == 2

# The StableHLO part: the location names that debug_info=True prints
assert any(op.full_name == "jit(scoped_mlp)/encoder/dot_general" for op in rep_enc.ops_in("stablehlo"))
assert all(op.full_name.split("/jit(relu)")[0] in dbg for op in rep_enc.ops_in("stablehlo"))

# The optimized-HLO part: the same instructions as the regular expression above, found without
# a regular expression on the whole text. Operations and the kernels that run them are reported
# separately; together they are exactly the chapter's list.
by_hand = {"%" + name for name, _ in enc_ops}
found = {op.name for op in rep_enc.ops_in("hlo")} | {"%" + k.name for k in rep_enc.kernels if k.in_scope}
assert any(op.full_name.endswith("encoder/dot_general") for op in rep_enc.ops_in("hlo"))
if ON_CPU:
    assert found == by_hand, (found, by_hand)
    assert rep_enc.fused_away == []        # every kernel running encoder is labelled encoder
else:
    # XLA:TPU (a TPU v5e) fuses the whole network into one kernel labelled head/dot_general; encoder's part is
    # a fusion nested inside it (convolution_maximum_fusion.clone.5): the regular expression finds it, but it
    # is no kernel of its own - a profile shows encoder's time under the outer kernel, as the report says.
    assert found <= by_hand and all("fusion" in name for name in by_hand - found), (found, by_hand)
    assert rep_enc.fused_away and not any(k.in_scope for k in rep_enc.kernels)
print(rep_enc.summary)


# %% [markdown]
# ### Without a scope: which scopes exist
#
# `%jax_hlo EXPR` alone shows the tree of named scopes with the number of operations in each stage,
# and how many kernels XLA labels with each scope. Nested scopes are written `outer/inner`, and
# a nested scope can be asked for by its path. Below is a two-block encoder with an attention part and
# an MLP part in each block.

# %%
def block(p, x):
    with jax.named_scope("attn"):
        scores = jax.nn.softmax((x @ p["q"]) @ (x @ p["k"]).T / 4.0)
        x = x + scores @ (x @ p["v"])
    with jax.named_scope("mlp"):
        x = x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]
    return x

def encoder(params, x):
    with jax.named_scope("encoder"):
        for i, p in enumerate(params):
            with jax.named_scope(f"block{i}"):
                x = block(p, x)
    with jax.named_scope("head"):
        return jnp.mean(x ** 2)

keys = jax.random.split(jax.random.key(0), 5)
blocks = [{n: jax.random.normal(k, (16, 16)) / 4 for n, k in zip(["q", "k", "v", "w1", "w2"], keys)}
          for _ in range(2)]
tokens = jnp.ones((8, 16))

# %%
# %jax_hlo encoder(blocks, tokens) -o rep_tree

# %%
assert rep_tree.scope_paths == ["encoder", "encoder/block0", "encoder/block0/attn", "encoder/block0/mlp",
                                "encoder/block1", "encoder/block1/attn", "encoder/block1/mlp", "head"]
tree = {node.path: node.counts for node in rep_tree.tree}
for stage in ("jaxpr", "stablehlo", "hlo"):
    # a scope's count includes its nested scopes
    assert tree["encoder"][stage] == tree["encoder/block0"][stage] + tree["encoder/block1"][stage]
    assert tree["encoder/block1"][stage] == tree["encoder/block1/attn"][stage] + tree["encoder/block1/mlp"][stage]
assert tree["encoder/block0/attn"]["jaxpr"] == tree["encoder/block1/attn"]["jaxpr"]   # two identical blocks
print({path: counts["jaxpr"] for path, counts in tree.items()})

# %% [markdown]
# With `--explore` an explorer follows the report (ipywidgets): the same tree, and a scope chosen shows its
# jaxpr, StableHLO and optimized-HLO lines side by side with your line of each. It lives while the kernel
# runs (a saved notebook shows a line saying to run the cell); the report records every operation by scope
# for it (`scope_ops`).

# %%
# %jax_hlo encoder(blocks, tokens) --explore -o rep_explore

# %%
ops_mlp = [op for op in rep_explore.scope_ops if op.inner == "encoder/block1/mlp"]
assert {op.stage for op in ops_mlp} == {"jaxpr", "stablehlo", "hlo"}
assert len([op for op in ops_mlp if op.stage == "jaxpr"]) == tree["encoder/block1/mlp"]["jaxpr"]
assert rep_tree.scope_ops == []   # recorded only when an explorer asks

# %%
# %jax_hlo block1/mlp encoder(blocks, tokens) -o rep_mlp

# %%
assert rep_mlp.scope_found and {op.inner for op in rep_mlp.ops} == {""}
assert rep_mlp.counts["jaxpr"] == tree["encoder/block1/mlp"]["jaxpr"]
assert all("/block1/mlp/" in op.full_name for op in rep_mlp.ops)
assert {op.line.code for op in rep_mlp.ops_in("jaxpr")} == {'x = x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]'}


# %% [markdown]
# ### When fusion files your operation under another name
#
# XLA fuses neighbouring element-wise operations into one kernel, and a fusion keeps a single
# `op_name`, usually that of its last (root) operation. An operation of scope `a` fused into a kernel
# whose root belongs to scope `b` therefore shows up under `b` in a profiler trace. The operation
# itself keeps its `op_name` inside the fused computation. `%jax_hlo` finds it there and says which
# kernel runs it, and that the kernel carries another label.

# %%
def two_steps(x):
    with jax.named_scope("a"):
        y = jnp.sin(x)
    with jax.named_scope("b"):
        return y * 2

print([l.strip() for l in jax.jit(two_steps).lower(jnp.ones(8)).compile().as_text().splitlines()
       if "fusion(" in l])

# %%
# %jax_hlo a two_steps(jnp.ones(8)) -o rep_fused

# %%
(sin,) = rep_fused.ops_in("hlo")
(kernel,) = rep_fused.fused_away
assert sin.op == "sin" and sin.kernel == kernel.name and not sin.kernel_in_scope
assert kernel.label == "jit(two_steps)/b/mul" and kernel.scope_ops == 1 and kernel.other_ops >= 1
assert "labels with another name" in rep_fused.summary

# %% [markdown]
# ## 2.3 `jax.stages`: the three stage objects
#
# `jit(f).trace(...)` gives a `Traced`, `.lower()` a `Lowered`, `.compile()` a `Compiled`; all
# three classes live in `jax.stages`. The attributes used most while debugging:
#
# | Object | Attribute / method | Use |
# |---|---|---|
# | `Traced` | `.jaxpr`, `.out_info`, `.in_avals` | the jaxpr and the output shapes, without compiling |
# | `Lowered` | `.as_text(debug_info=True)`, `.cost_analysis()` | the program handed to XLA, with source locations |
# | `Compiled` | `.as_text()`, `.memory_analysis()`, `.cost_analysis()`, `.input_shardings` / `.output_shardings` | what XLA made of it: memory (notebook 07), shardings (notebook 08) |

# %%
print("types:", type(traced).__name__, "->", type(lowered).__name__, "->", type(compiled).__name__)
print("Traced.out_info:", traced.out_info, "| keys of Compiled.input_shardings[0][0]:",
      sorted(compiled.input_shardings[0][0]))
assert isinstance(traced, jax.stages.Traced) and isinstance(lowered, jax.stages.Lowered)
assert isinstance(compiled, jax.stages.Compiled)
assert traced.out_info.shape == () and traced.out_info.dtype == jnp.float32
assert sorted(compiled.input_shardings[0][0]) == ["w1", "w2"]

# %% [markdown]
# `%jax_hlo` goes through the same three objects. Its *Program* section lists the inputs and outputs
# (from `Traced`), the time each stage took, and the compiled program's `memory_analysis()` and
# `cost_analysis()`. Those figures match the ones read by hand from `compiled`.

# %%
ma, ca = compiled.memory_analysis(), compiled.cost_analysis()
assert rep_enc.inputs == ["params['w1']: f32[4,8]", "params['w2']: f32[8,2]", "x: f32[3,4]"]
assert rep_enc.outputs == ["f32[]"] and set(rep_enc.seconds) == {"trace", "lower", "compile"}
assert rep_enc.memory.argument_bytes == ma.argument_size_in_bytes
# the inputs' float32s - exactly on the CPU; a TPU pads each array to its tiles (x's 12 floats take 2 KiB there)
assert ma.argument_size_in_bytes == (4 * 8 + 8 * 2 + 3 * 4) * 4 if ON_CPU else ma.argument_size_in_bytes > 0
assert rep_enc.memory.output_bytes == ma.output_size_in_bytes == (4 if ON_CPU else ma.output_size_in_bytes)  # a TPU pads
assert rep_enc.memory.temp_bytes == ma.temp_size_in_bytes
assert rep_enc.cost["flops"] == ca["flops"]
print(f"arguments {ma.argument_size_in_bytes} B, outputs {ma.output_size_in_bytes} B, "
      f"temporaries {ma.temp_size_in_bytes} B, flops {ca['flops']:.0f}")

# %% [markdown]
# ### Nothing left switched on

# %%
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert jax.config.values == CONFIG_AT_START
print("JAX config unchanged since the start.")
