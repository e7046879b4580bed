"""Write demo_notebooks/02_seeing_the_program.ipynb and 07_memory.ipynb (without outputs).

    .venv/bin/python tools/build_notebooks_02_07.py

02 reproduces chapter section 2 (what JAX traced and compiled: baked-in
constants in the jaxpr, jax.named_scope in jaxpr / StableHLO / optimized HLO,
the jax.stages objects) with %jax_hlo; 07 reproduces section 7 (memory:
memory_analysis with ShapeDtypeStruct, the device memory profile, live arrays
and the leak, x.delete(), jax.clear_caches freeing a baked global) with
%jax_hlo --sweep and %jax_live / %%jax_live. Every magic cell stores its
report with -o and the next cell asserts on it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
RAISES = {"tags": ["raises-exception"]}


class Notebook:
    def __init__(self, name: str):
        self.path = ROOT / "demo_notebooks" / name
        self.cells: list[tuple] = []

    def md(self, text: str) -> None:
        self.cells.append(("markdown", text.strip("\n")))

    def code(self, text: str, metadata: dict | None = None) -> None:
        self.cells.append(("code", text.strip("\n"), metadata or {}))

    def write(self) -> None:
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.metadata["language_info"] = {"name": "python"}
        for cell in self.cells:
            if cell[0] == "markdown":
                nb.cells.append(nbformat.v4.new_markdown_cell(cell[1]))
            else:
                nb.cells.append(nbformat.v4.new_code_cell(cell[1], metadata=cell[2]))
            nb.cells[-1].id = f"{self.path.stem[:2]}-{len(nb.cells):03d}"  # stable ids: rebuilding changes nothing
        nbformat.write(nb, self.path)
        print(f"wrote {self.path.relative_to(ROOT)} ({len(self.cells)} cells)")


# =============================================================================
# 02 · Seeing the program
# =============================================================================

nb2 = Notebook("02_seeing_the_program.ipynb")

nb2.md("""
# 02 · Seeing the program: what JAX traced and what XLA compiled

When the numbers look fine but the result is wrong or slow, look at the program itself. One call of a
jitted function passes through three representations, and each can be printed:

| Stage | How to get it | What it tells you |
|---|---|---|
| jaxpr | `jax.make_jaxpr(f)(*args)`, `jax.jit(f).trace(*args).jaxpr` | What JAX thinks it must compute: which values were baked in as constants, whether loops were unrolled, what a transformation added |
| StableHLO | `jax.jit(f).lower(*args).as_text()` | The program handed to XLA; with `debug_info=True`, each operation's source location and name |
| optimized HLO | `jax.jit(f).lower(*args).compile().as_text()` | What XLA will actually run: fusions, layouts, constants; `metadata={op_name=...}` leads back to your code |

This notebook covers the two moves used most while debugging: spotting a value that was **baked in
as a constant**, and finding **your own code** in all three stages with `jax.named_scope`.

jaxmagic does both with one line magic, `%jax_hlo [SCOPE] EXPR`. It traces, lowers and compiles
the call `EXPR` ahead of time, and never runs it. With a SCOPE it lists that scope's operations in
each stage side by side, with your lines and the kernels XLA runs them in. Without one it shows the
tree of named scopes. Either way it reports globals baked in as literals, captured arrays, and the
compiled program's memory and cost.
""")

nb2.md("""
### This machine and the chapter

The chapter was run on macOS arm64 with Python 3.14. This notebook runs on **Linux x86_64 with
Python 3.13**, with the same JAX/jaxlib 0.12.0.1 on CPU. The jaxpr text, the name stacks and the
StableHLO locations come out as in the chapter. The optimized HLO is XLA's own choice for this CPU:
the same operations of the `encoder` scope are there, but XLA numbers and fuses instructions its own
way, so some instruction names differ from the chapter's list (here, for instance, the relu's
broadcast is `%broadcast.4`, not `%broadcast.2`). The assertions check what the chapter checks, and
compare jaxmagic's findings with the hand-written search on the same text.
""")

nb2.code("""
%load_ext jaxmagic

import re, sys
import numpy as np
import jax
import jax.numpy as jnp

import jaxmagic.probes
from _demo_helpers import strip_ansi, to64, config_changes

CONFIG_AT_START = dict(jax.config.values)   # the last cell checks that nothing was left switched on
print("JAX", jax.__version__, "| backend", jax.default_backend(), "| Python", sys.version.split()[0], "|", sys.platform)
""")

nb2.md("""
## 2.1 The jaxpr: which values became constants

"I changed the setting and nothing happened" is a quiet kind of bug. A jitted function that reads a
global variable reads it **once, while tracing**, and writes its value into the program as a literal.
Changing the global later neither recompiles nor changes the result. The jaxpr shows it directly:
the value appears inside an equation as `2.0:f32[]`, not as an input variable.
""")

nb2.code("""
SCALE = 2.0                                  # a module-level "setting"

def scaled(x):
    return x * SCALE

jaxpr_txt = strip_ansi(str(jax.make_jaxpr(scaled)(1.0)))
print(jaxpr_txt)
assert "mul a 2.0:f32[]" in jaxpr_txt        # SCALE appears as a literal: it was baked in
""")

nb2.md("""
`%jax_hlo` reads the same jaxpr and goes one step further: for each literal it looks at your line,
finds the global (or closure variable, attribute, dict entry) that holds exactly that value, and
names it. `--stage jaxpr` stops after tracing: nothing is lowered or compiled.
""")

nb2.code("""
%jax_hlo scaled(1.0) --stage jaxpr -o rep_scale
""")

nb2.code("""
(lit,) = rep_scale.literals
assert (lit.name, lit.kind, lit.value) == ("SCALE", "global", "2.0:f32[]")
assert "mul" in lit.equation and lit.line.code == "return x * SCALE"
assert rep_scale.status.value == "problem" and "SCALE" in rep_scale.summary
assert rep_scale.stages == ["jaxpr"] and rep_scale.memory is None    # traced only
print(rep_scale.summary)
""")

nb2.md("""
### ❌ The wrong way: a setting in a global, changed after jit

The jitted function keeps using the value it saw while tracing. There is no error and no warning.
""")

nb2.code("""
scaled_jit = jax.jit(scaled)
before = float(scaled_jit(1.0))
SCALE = 10.0
after = float(scaled_jit(1.0))
print(f"before changing SCALE: {before}, after: {after} (no error, but still the old value)")
assert before == after == 2.0
""")

nb2.md("""
### ✅ The right way: pass the setting as an argument

Now the jaxpr has a second input `b` and multiplies by it. `%jax_hlo` finds no baked-in value.
""")

nb2.code("""
def scaled_ok(x, scale):
    return x * scale

ok_txt = strip_ansi(str(jax.make_jaxpr(scaled_ok)(1.0, SCALE)))
print(ok_txt)
scaled_ok_jit = jax.jit(scaled_ok)
assert float(scaled_ok_jit(1.0, 2.0)) == 2.0 and float(scaled_ok_jit(1.0, 10.0)) == 10.0
assert "mul a b" in ok_txt
SCALE = 2.0
""")

nb2.code("""
%jax_hlo scaled_ok(1.0, SCALE) --stage jaxpr -o rep_ok
""")

nb2.code("""
assert rep_ok.literals == [] and rep_ok.constants == [] and rep_ok.status.value == "ok"
assert rep_ok.inputs == ["x: f32[]", "scale: f32[]"]
""")

nb2.md("""
The same holds for a value captured by a closure or read through an attribute or a dict: each one
is frozen at trace time. A number written in the code itself (`+ 7.0` below) is not a setting, and
is not flagged. A value that Python computes from a setting before JAX sees it (`1 - cfg.decay`) is
baked in just the same, but no name holds exactly that number, so only the jaxpr shows it.
""")

nb2.code("""
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
""")

nb2.code("""
%jax_hlo step(jnp.ones(3), jnp.ones(3)) --stage jaxpr -o rep_closure
""")

nb2.code("""
found = {(lit.name, lit.kind): lit.value for lit in rep_closure.literals}
assert found == {("momentum", "closure"): "0.9:f32[]", ("SETTINGS['lr']", "global"): "0.5:f32[]",
                 ("cfg.decay", "global"): "0.01:f32[]"}, found
print(rep_closure.summary)
""")

nb2.md("""
## 2.2 `jax.named_scope`: labels that survive into every stage

A large model compiles to thousands of HLO lines, and it is hard to tell which instructions belong
to "my layer". `with jax.named_scope("name"):` puts the name on the name stack of every operation
inside it, and the name travels all the way:

1. into `source_info.name_stack` of each jaxpr equation;
2. into the StableHLO locations (printed only with `as_text(debug_info=True)`);
3. into `metadata={op_name="jit(f)/name/..."}` of every optimized-HLO instruction;
4. into the operation names of a profiler trace (visible on GPU/TPU).

We label the two layers of a small network and look for `encoder` by hand in all three stages, as
the chapter does. Then `%jax_hlo` does the same search.
""")

nb2.code("""
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
    \"\"\"(instruction name, op_name) of the optimized-HLO instructions whose op_name contains /scope/.\"\"\"
    pat = re.compile(r"%([\\w.\\-]+) = .*?op_name=\\"([^\\"]*/" + re.escape(scope) + r"/[^\\"]*)\\"")
    return [m.groups() for m in pat.finditer(hlo_text)]
enc_ops = hlo_ops_in_scope(compiled.as_text(), "encoder")
print("(3) optimized-HLO instructions of encoder:")
for name, op in enc_ops:
    print(f"     %{name:26s} <- {op}")

assert stacks.count("encoder") >= 2 and stacks.count("head") >= 3
assert "encoder" not in plain and "jit(scoped_mlp)/encoder/dot_general" in dbg
assert any(op.endswith("encoder/dot_general") for _, op in enc_ops)
assert np.isclose(float(compiled(p_ns, x_ns)),
                  float(np.mean((np.maximum(to64(x_ns) @ to64(p_ns["w1"]), 0) @ to64(p_ns["w2"])) ** 2)))
""")

nb2.md("""
### The same with `%jax_hlo encoder ...`

The scope comes first, then the call. The report puts the three stages side by side, one row per
operation of the scope, with the line of yours that made it. It reads the jaxpr's name stacks and
the StableHLO locations as structured objects (the StableHLO module through the MLIR Python
bindings that JAX ships), and it reads the optimized HLO from its text, since JAX offers nothing
else there. The *Kernels* section says which fused instruction runs each HLO operation. This
matters because a profiler shows time per kernel, under the kernel's own label.
""")

nb2.code("""
%jax_hlo encoder scoped_mlp(p_ns, x_ns) -o rep_enc
""")

nb2.code("""
# Every stage has the scope's operations, on the line that made them
assert rep_enc.counts["jaxpr"] == 2 and rep_enc.counts["stablehlo"] >= 2 and rep_enc.counts["hlo"] >= 2
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
assert found == by_hand, (found, by_hand)
assert any(op.full_name.endswith("encoder/dot_general") for op in rep_enc.ops_in("hlo"))
assert rep_enc.fused_away == []        # every kernel running encoder is labelled encoder
print(rep_enc.summary)
""")

nb2.md("""
### Without a scope: which scopes exist

`%jax_hlo EXPR` alone shows the tree of named scopes with the number of operations in each stage,
and how many kernels XLA labels with each scope. Nested scopes are written `outer/inner`, and
a nested scope can be asked for by its path. Below is a two-block encoder with an attention part and
an MLP part in each block.
""")

nb2.code("""
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
""")

nb2.code("""
%jax_hlo encoder(blocks, tokens) -o rep_tree
""")

nb2.code("""
assert rep_tree.scope_paths == ["encoder", "encoder/block0", "encoder/block0/attn", "encoder/block0/mlp",
                                "encoder/block1", "encoder/block1/attn", "encoder/block1/mlp", "head"]
tree = {node.path: node.counts for node in rep_tree.tree}
for stage in ("jaxpr", "stablehlo", "hlo"):
    # a scope's count includes its nested scopes
    assert tree["encoder"][stage] == tree["encoder/block0"][stage] + tree["encoder/block1"][stage]
    assert tree["encoder/block1"][stage] == tree["encoder/block1/attn"][stage] + tree["encoder/block1/mlp"][stage]
assert tree["encoder/block0/attn"]["jaxpr"] == tree["encoder/block1/attn"]["jaxpr"]   # two identical blocks
print({path: counts["jaxpr"] for path, counts in tree.items()})
""")

nb2.code("""
%jax_hlo block1/mlp encoder(blocks, tokens) -o rep_mlp
""")

nb2.code("""
assert rep_mlp.scope_found and {op.inner for op in rep_mlp.ops} == {""}
assert rep_mlp.counts["jaxpr"] == tree["encoder/block1/mlp"]["jaxpr"]
assert all("/block1/mlp/" in op.full_name for op in rep_mlp.ops)
assert {op.line.code for op in rep_mlp.ops_in("jaxpr")} == {'x = x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]'}
""")

nb2.md("""
### When fusion files your operation under another name

XLA fuses neighbouring element-wise operations into one kernel, and a fusion keeps a single
`op_name`, usually that of its last (root) operation. An operation of scope `a` fused into a kernel
whose root belongs to scope `b` therefore shows up under `b` in a profiler trace. The operation
itself keeps its `op_name` inside the fused computation. `%jax_hlo` finds it there and says which
kernel runs it, and that the kernel carries another label.
""")

nb2.code("""
def two_steps(x):
    with jax.named_scope("a"):
        y = jnp.sin(x)
    with jax.named_scope("b"):
        return y * 2

print([l.strip() for l in jax.jit(two_steps).lower(jnp.ones(8)).compile().as_text().splitlines()
       if "fusion(" in l])
""")

nb2.code("""
%jax_hlo a two_steps(jnp.ones(8)) -o rep_fused
""")

nb2.code("""
(sin,) = rep_fused.ops_in("hlo")
(kernel,) = rep_fused.fused_away
assert sin.op == "sin" and sin.kernel == kernel.name and not sin.kernel_in_scope
assert kernel.label == "jit(two_steps)/b/mul" and kernel.scope_ops == 1 and kernel.other_ops >= 1
assert "labels with another name" in rep_fused.summary
""")

nb2.md("""
## 2.3 `jax.stages`: the three stage objects

`jit(f).trace(...)` gives a `Traced`, `.lower()` a `Lowered`, `.compile()` a `Compiled`; all
three classes live in `jax.stages`. The attributes used most while debugging:

| Object | Attribute / method | Use |
|---|---|---|
| `Traced` | `.jaxpr`, `.out_info`, `.in_avals` | the jaxpr and the output shapes, without compiling |
| `Lowered` | `.as_text(debug_info=True)`, `.cost_analysis()` | the program handed to XLA, with source locations |
| `Compiled` | `.as_text()`, `.memory_analysis()`, `.cost_analysis()`, `.input_shardings` / `.output_shardings` | what XLA made of it: memory (notebook 07), shardings (notebook 08) |
""")

nb2.code("""
print("types:", type(traced).__name__, "->", type(lowered).__name__, "->", type(compiled).__name__)
print("Traced.out_info:", traced.out_info, "| keys of Compiled.input_shardings[0][0]:",
      sorted(compiled.input_shardings[0][0]))
assert isinstance(traced, jax.stages.Traced) and isinstance(lowered, jax.stages.Lowered)
assert isinstance(compiled, jax.stages.Compiled)
assert traced.out_info.shape == () and traced.out_info.dtype == jnp.float32
assert sorted(compiled.input_shardings[0][0]) == ["w1", "w2"]
""")

nb2.md("""
`%jax_hlo` goes through the same three objects. Its *Program* section lists the inputs and outputs
(from `Traced`), the time each stage took, and the compiled program's `memory_analysis()` and
`cost_analysis()`. Those figures match the ones read by hand from `compiled`.
""")

nb2.code("""
ma, ca = compiled.memory_analysis(), compiled.cost_analysis()
assert rep_enc.inputs == ["params['w1']: f32[4,8]", "params['w2']: f32[8,2]", "x: f32[3,4]"]
assert rep_enc.outputs == ["f32[]"] and set(rep_enc.seconds) == {"trace", "lower", "compile"}
assert rep_enc.memory.argument_bytes == ma.argument_size_in_bytes == (4 * 8 + 8 * 2 + 3 * 4) * 4
assert rep_enc.memory.output_bytes == ma.output_size_in_bytes == 4
assert rep_enc.memory.temp_bytes == ma.temp_size_in_bytes
assert rep_enc.cost["flops"] == ca["flops"]
print(f"arguments {ma.argument_size_in_bytes} B, outputs {ma.output_size_in_bytes} B, "
      f"temporaries {ma.temp_size_in_bytes} B, flops {ca['flops']:.0f}")
""")

nb2.md("""
### Nothing left switched on
""")

nb2.code("""
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert jax.config.values == CONFIG_AT_START
print("JAX config unchanged since the start.")
""")


# =============================================================================
# 07 · Memory
# =============================================================================

nb7 = Notebook("07_memory.ipynb")

nb7.md("""
# 07 · Memory: estimate it, find who holds it, free it

Memory problems come in two kinds, and they need different tools:

| Problem | Tool |
|---|---|
| One computation is too big: the compiled program needs more temporary buffers than the device has | before running: `compile().memory_analysis()`; to lower the peak: `jax.checkpoint`, chunking, `donate_argnums` |
| Live arrays pile up (a leak) | `jax.live_arrays()` to see what is alive; `save_device_memory_profile` to see where it was allocated; `x.delete()` to free at once; `jax.clear_caches()` for arrays the jit cache keeps as constants |

jaxmagic covers both sides:

* `%jax_hlo EXPR --sweep B=64,256,1024` compiles the call once per value of `B` (arguments may be
  `jax.ShapeDtypeStruct`s, so nothing is allocated) and tabulates `memory_analysis()`;
* `%jax_live [--top N] [--profile PATH]` groups the live arrays by shape, dtype and placement and
  **names their holders**: your variables and what they contain a few levels down
  (`debug_cache[0..9]`, `hist['acts'][3]`, `trainer.history[0]`), IPython's output cache
  (`Out[12]`, `_`), the traceback of the last error, and the jit cache;
* `%%jax_live` runs a cell and reports the arrays it created that are still alive afterwards
  (the cell's own displayed result aside), with their holders.

Neither magic keeps an array alive itself: snapshots are ids and weak references, reports hold
strings and numbers.
""")

nb7.md("""
### This machine and the chapter

The chapter was run on macOS arm64 with Python 3.14. This notebook runs on **Linux x86_64 with
Python 3.13**, with the same JAX/jaxlib 0.12.0.1 on CPU. All the chapter's figures come out the
same: the `memory_analysis` sizes, the leak of ten `(64, 512)` arrays plus one scalar, the
4,000,000 bytes freed by `delete()`, and the one old table kept by the jit cache. The only
exception is the size of the memory profile in bytes, which depends on the Python stacks that
allocated the arrays. Only how it changes is asserted.
""")

nb7.code("""
%load_ext jaxmagic

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
assert jax.devices()[0].memory_stats() is None     # on CPU; GPU/TPU return bytes_in_use, peak_bytes_in_use, ...
""")

nb7.md("""
On CPU, `jax.devices()[0].memory_stats()` returns `None`. On GPU and TPU it returns `bytes_in_use`,
`peak_bytes_in_use` and more, the most direct view of device memory. `%jax_live` shows them where
they exist, and says so where they do not.
""")

nb7.md("""
## 7.1 `memory_analysis()`: how much memory, before anything runs

A typical way to run out of memory: per-example gradients. The output of `vmap(grad)` holds
B × P numbers, one gradient per example, where the batch-mean gradient holds P. `memory_analysis()`
of the compiled program gives exact byte counts, and it needs no real data: inputs described by
`jax.ShapeDtypeStruct` are enough. That makes it the right tool to check, before allocating
anything, whether a bigger batch will still fit.
""")

nb7.code("""
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
""")

nb7.md("""
### The same with `%jax_hlo --sweep`

`--sweep B=64,256,1024` evaluates the call once for each value of `B` (a name the call uses) and
compiles it, then puts the memory figures side by side in one table. The rest of the report
describes the first value.
""")

nb7.code("""
%jax_hlo per_ex_grad(spec_w, jax.ShapeDtypeStruct((B, P_dim), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.float32)) --sweep B=64,256,1024 -o rep_sweep
""")

nb7.code("""
assert [p.value for p in rep_sweep.sweep] == ["64", "256", "1024"]
assert [p.memory.output_bytes for p in rep_sweep.sweep] == [out_p for _, _, out_p, _ in rows]
assert [p.memory.temp_bytes for p in rep_sweep.sweep] == [t for *_, t in rows]
assert [p.memory.argument_bytes for p in rep_sweep.sweep] == [(P_dim + B * P_dim + B) * 4 for B in (64, 256, 1024)]
assert rep_sweep.memory.output_bytes == 64 * P_dim * 4       # the report's own figures: the first value
assert B == 1024                            # the loop's B above: --sweep binds B for the magic only
print(rep_sweep.sweep[-1])
""")

nb7.code("""
%jax_hlo batch_grad(spec_w, jax.ShapeDtypeStruct((B, P_dim), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.float32)) --sweep B=64,256,1024 -o rep_mean
""")

nb7.code("""
assert [p.memory.output_bytes for p in rep_mean.sweep] == [P_dim * 4] * 3     # does not grow with B
assert [p.memory.output_bytes for p in rep_mean.sweep] == [out_b for _, out_b, _, _ in rows]
""")

nb7.md("""
## 7.2 `jax.profiler.save_device_memory_profile`: who allocated the memory

It sums the live device buffers by the Python stack that allocated them, and writes the result in
pprof format (gzip-compressed protobuf). Open it with `pprof -http=:8080 FILE` for a flame graph.
`jax.profiler.device_memory_profile()` returns the same content as bytes, without writing a file.
It works on CPU too. We check one thing here: the more large arrays are alive, the bigger the
snapshot, and it shrinks again once they are gone.
""")

nb7.code("""
def profile_size():
    return len(gzip.decompress(jax.profiler.device_memory_profile()))

s0 = profile_size()
hogs = [jnp.ones((256, 256)) * i for i in range(20)]          # 20 arrays allocated on the same line
jax.block_until_ready(hogs)
s1 = profile_size()
mem_path = os.path.join(tempfile.mkdtemp(), "memory.prof")
jax.profiler.save_device_memory_profile(mem_path)
""")

nb7.md("""
`%jax_live --profile PATH` saves the same profile next to its report. The report also shows which
variable holds those twenty arrays.
""")

nb7.code("""
%jax_live --profile {mem_path}.live -o rep_prof
""")

nb7.code("""
hog_group = rep_prof.group((256, 256), "float32")
assert hog_group.count == 20 and hog_group.holders == ["hogs[0..19]"] and hog_group.held_by_names == 20
assert rep_prof.profile_path == mem_path + ".live" and open(rep_prof.profile_path, "rb").read(2) == b"\\x1f\\x8b"
assert rep_prof.devices[0].stats is None                   # CPU: memory_stats() is None, and the report says so

del hogs; gc.collect()
s2 = profile_size()
print(f"profile size (decompressed): before {s0} bytes -> with 20 arrays {s1} -> after del {s2}; "
      f"file {os.path.getsize(mem_path)} bytes")
assert s1 > s0 and s2 < s1 and open(mem_path, "rb").read(2) == b"\\x1f\\x8b"
""")

nb7.md("""
## 7.3 `jax.live_arrays()`: finding arrays that were not freed

`jax.live_arrays()` returns every `jax.Array` still alive in the process. Grouped by (shape, dtype)
and taken before and after a training loop, it shows what piles up. One caution: a list that holds
the result of `live_arrays()` keeps those arrays alive itself, so drop it straight away. The helper
below returns counts only.
""")

nb7.code("""
def live_summary():
    \"\"\"Counter{(shape, dtype): count} of the live arrays, and their total bytes (keeps no reference).\"\"\"
    gc.collect()
    arrs = jax.live_arrays()
    summary = Counter((a.shape, str(a.dtype)) for a in arrs), sum(a.nbytes for a in arrs)
    del arrs
    return summary

def leak_report(before, after):
    \"\"\"The arrays that appeared between two snapshots.\"\"\"
    return {k: v for k, v in (after[0] - before[0]).items()}

@jax.jit
def fwd_step(w, x):
    h = jnp.tanh(x @ w)
    return h, (h ** 2).mean()

w7 = jax.random.normal(jax.random.key(7), (128, 512)) / 12.0
x7 = jax.random.normal(jax.random.key(8), (64, 128))
""")

nb7.md("""
### ❌ A debugging list that keeps every step's activations

`%%jax_live` runs the cell, takes the same two snapshots, and names the holder of what is left. The
chapter's hand-made snapshots run inside the same cell, so the two can be compared.
""")

nb7.code("""
%%jax_live -o rep_leak
debug_cache = []
before = live_summary()
for _ in range(10):
    h, loss = fwd_step(w7, x7)
    debug_cache.append(h)                 # one more 64x512 array kept at every step
after = live_summary()
leaked = leak_report(before, after)
print("arrays that appeared:", leaked, f"| {(after[1] - before[1]) / 2**20:.2f} MiB more")
""")

nb7.code("""
assert leaked.get(((64, 512), "float32"), 0) == 10
assert {(g.shape, g.dtype): g.count for g in rep_leak.groups} == leaked      # the same arrays as by hand
acts = rep_leak.group((64, 512), "float32")
assert acts.holders[0] == "debug_cache[0..9]" and "h" in acts.holders        # h is the last one, too
assert rep_leak.group((), "float32").holders == ["loss"]
assert rep_leak.status.value == "problem" and "debug_cache[0..9]" in rep_leak.summary
assert rep_leak.bytes == after[1] - before[1]
print(rep_leak.summary)
""")

nb7.md("""
### ✅ Keep numbers, not arrays

Convert what you want to keep to Python numbers. An array nothing refers to any more is freed. The
cell below empties the list and drops `h` and `loss`, so it frees the eleven arrays of the previous
cell and leaves none of its own.
""")

nb7.code("""
%%jax_live -o rep_fixed
debug_cache.clear()
stats_log = []
before = live_summary()
for _ in range(10):
    h, loss = fwd_step(w7, x7)
    stats_log.append(float(loss))         # keep a Python float only
del h, loss
after = live_summary()
print("arrays that appeared:", leak_report(before, after), "| losses logged:", len(stats_log))
""")

nb7.code("""
assert leak_report(before, after) == {} and len(stats_log) == 10
assert rep_fixed.groups == [] and rep_fixed.status.value == "ok"
assert rep_fixed.freed_arrays == 11          # the ten activations and the loss the previous cell left
print(rep_fixed.summary)
""")

nb7.md("""
### IPython's output cache keeps every displayed result

A cell that ends in an expression displays it, and IPython stores it in `Out[n]` (and in `_`,
unless the notebook has assigned `_` itself, as the `for _ in range(10)` loops above did), so it
stays alive. `%jax_live` names that holder as the output cache, not as one of your variables.
""")

nb7.code("""
jnp.ones((300, 300)) * 2
""")

nb7.code("""
%jax_live -o rep_out
""")

nb7.code("""
shown = rep_out.group((300, 300), "float32")
assert shown.in_output_cache == 1 and shown.held_by_names == 0
assert [h for h in shown.holders if h.startswith("Out[")] == [f"Out[{len(In) - 3}]"]   # two cells up
%reset -f out
gc.collect()
assert jaxmagic.probes.live(namespace=globals()).group((300, 300), "float32") is None
""")

nb7.md("""
### The last error's traceback keeps the failing frames

A cell that fails leaves its traceback in `sys.last_traceback`, and IPython keeps a reference to
the last traceback it printed. Every frame in it, with its local arrays, stays alive. `%jax_live`
searches those frames too, and labels what it finds there as held by the traceback.
""")

nb7.code(
    """
def normalise(batch):
    norms = jnp.linalg.norm(batch, axis=1, keepdims=True)
    raise ValueError("a bad batch")           # fails after allocating

normalise(jnp.ones((700, 700)))
""",
    RAISES,
)

nb7.code("""
%jax_live -o rep_tb
""")

nb7.code("""
err = pop_last_error()                         # forgets sys.last_traceback (and its frames)
assert isinstance(err, ValueError)
held = rep_tb.group((700, 700), "float32")
assert held.by_kind == {"traceback": 1} and held.holders == ["traceback: normalise() batch"]
get_ipython().InteractiveTB.tb = None          # the copy IPython keeps
del err; gc.collect()
assert jaxmagic.probes.live(namespace=globals()).group((700, 700), "float32") is None
""")

nb7.md("""
## 7.4 `x.delete()`: free now, without waiting for the garbage collector

`del x` only removes one name; if anything else still refers to the array (a list, a closure, a
debugger), its buffer stays. `x.delete()` frees the device buffer at once, however many references
remain. After that:

* `x.is_deleted()` is `True`;
* any use, through any alias (`y = x`), raises `RuntimeError: Array has been deleted with shape=...`;
* but `print(x)` / `repr(x)` do not fail: they show `Array(shape=(...), dtype=...)`. Do not let that
  fool you.
""")

nb7.code("""
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
""")

nb7.code("""
%jax_live -o rep_del
""")

nb7.code("""
# both names still exist, but the buffer is gone: it is not a live array any more
assert "big" in globals() and "alias" in globals()
assert rep_del.group((1000, 1000), "float32") is None
del big, alias
""")

nb7.md("""
## 7.5 `jax.clear_caches()`: arrays the jit cache keeps

A jitted function that reads a global array keeps it as a constant of its program (section 2.1 of
notebook 02). Once the global is rebound, no Python name refers to the old array, but the cached
program still does, and `live_arrays()` still lists it. As long as the jitted function exists the
old array is not freed; only `jax.clear_caches()` frees it. This is one more reason to pass large
arrays as arguments.

`%jax_hlo` warns about it before anything runs: a captured array is a constant of the program.
""")

nb7.code("""
before = live_summary()
TABLE = jnp.ones((512, 512))                  # a global "lookup table"
def lookup(x):
    return (x + TABLE).sum()
lookup_jit = jax.jit(lookup)
""")

nb7.code("""
%jax_hlo lookup(jnp.float32(1.0)) --stage jaxpr -o rep_const
""")

nb7.code("""
(table_const,) = rep_const.constants
assert (table_const.name, table_const.kind, table_const.shape) == ("TABLE", "global", (512, 512))
assert table_const.nbytes == 512 * 512 * 4 and table_const.line.code == "return (x + TABLE).sum()"
assert rep_const.status.value == "problem" and "jit cache keeps them alive" in rep_const.summary
""")

nb7.code("""
lookup_jit(jnp.float32(1.0))                  # TABLE enters the compiled program as a constant
TABLE = jnp.zeros((256, 256))                 # rebound: no name refers to the old 512x512 any more
mid = live_summary()
key_old = ((512, 512), "float32")
print("old TABLEs still alive after rebinding:", mid[0][key_old] - before[0][key_old])
assert mid[0][key_old] - before[0][key_old] == 1
""")

nb7.code("""
%jax_live -o rep_cache
""")

nb7.code("""
old = rep_cache.group((512, 512), "float32")
assert old.count == 1 and old.in_jit_cache == 1 and old.jit_functions == ["lookup"] and old.holders == []
assert rep_cache.group((256, 256), "float32").holders == ["TABLE"]
assert "clear_caches" in rep_cache.summary and rep_cache.status.value == "problem"
jax.clear_caches()
end = live_summary()
print("after clear_caches:", end[0][key_old] - before[0][key_old])
assert end[0][key_old] - before[0][key_old] == 0
""")

nb7.code("""
%jax_live -o rep_cleared
""")

nb7.code("""
assert rep_cleared.group((512, 512), "float32") is None
assert rep_cleared.count_by_kind("jit cache") == 0
del TABLE
""")

nb7.md("""
### The magics keep nothing alive

The number of live arrays now is the number before the last two reports, minus the table we just
deleted. No report, snapshot or widget of jaxmagic holds an array.
""")

nb7.code("""
gc.collect()
n_now = len(jax.live_arrays())
%jax_live -o rep_last
%jax_live -o rep_last
gc.collect()
assert len(jax.live_arrays()) == n_now
assert rep_last.total_arrays == n_now
""")

nb7.md("""
### Nothing left switched on
""")

nb7.code("""
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert jax.config.values == CONFIG_AT_START
print("JAX config unchanged since the start.")
""")


if __name__ == "__main__":
    nb2.write()
    nb7.write()
