# %% [markdown]
# # 03 · Numerical problems: NaN, inf, out-of-bounds indices, division by zero, wrong gradients
#
# JAX gives you three tools for numerical bugs. They work in different ways:
#
# | Tool | How it works | Use it when |
# |---|---|---|
# | `jax_debug_nans` / `jax_debug_infs` | After each computation JAX checks the output. On a NaN/inf it re-runs the computation primitive by primitive and raises `FloatingPointError` at the primitive that made it | You are debugging: switch it on briefly and re-run the step that went bad |
# | `jax.experimental.checkify` | Compiles checks into the program. The program returns an error value, and you decide when to raise it | A check that stays in the code. It composes with `jit` / `vmap` / `grad`, and it also catches out-of-bounds indexing and division by zero |
# | `jax.test_util.check_grads` | Compares JVPs/VJPs against finite differences | After you write a `custom_jvp` / `custom_vjp` or a hand-made gradient |
#
# jaxmagic packages the first two for a single cell or call:
#
# * `%%jax_nans [--infs] [-o NAME]` runs the cell with NaN (and inf) checking switched on for that
#   cell only. When a NaN appears, the cell still fails with JAX's own `FloatingPointError`. Above the
#   error a report names the primitive, the pass (forward or backward), your line, and which leaves
#   of the failing call's arguments or result are non-finite.
# * `%jax_check CALL [--errors user,nan,div,index,float,all] [-o NAME]` runs one call under
#   `jax.jit(checkify.checkify(f, errors=...))` and lists **every** error found, with its kind
#   and your line.
# * `%jax_debug [--no-stop] [-o NAME] [--ns NAME]`, run after a cell failed, re-runs only the failing
#   call and stops at your line, in the failing loop iteration, with concrete values (§3.1, in a `scan`).
#
# Cells that are *meant* to fail have the `raises-exception` tag. The notebook shows the error and
# keeps going, so it still runs from top to bottom. The cell after each one asserts on the stored
# report, and on the exception itself, which IPython keeps as `sys.last_value`.

# %% [markdown]
# ### This machine and the chapter
#
# The chapter was run on macOS arm64 with Python 3.14. This notebook runs on **Linux x86_64 with
# Python 3.13**, with the same JAX/jaxlib 0.12.0.1 on CPU. Every assertion in this section holds
# here unchanged, including the two subprocess tables of §3.1. So the `jax_debug_nans` problem after
# `vmap` is not specific to macOS: it also shows up on Linux. Error messages match word for word,
# apart from the text of the chapter's own `check` messages, which are in English here.

# %%
# %load_ext jaxmagic

import os, sys, json, traceback
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import checkify
import jax.test_util                      # needed explicitly: plain `import jax` has no jax.test_util
from jax.test_util import check_grads

import jaxmagic.probes
from _demo_helpers import (to64, show_error, run_py, result_lines, config_changes, pop_last_error)

CONFIG_AT_START = dict(jax.config.values)   # the last cell checks nothing was left switched on
print("JAX", jax.__version__, "| backend", jax.default_backend(), "| Python", sys.version.split()[0], "|", sys.platform)

# %% [markdown]
# ## 3.1 `jax_debug_nans` / `jax_debug_infs`
#
# ### Scoped, not global
#
# `jax.debug_nans` and `jax.debug_infs` are context managers. The switch goes back to its old value
# when the `with` block ends, even if the block raises. That is harder to get wrong than
# `jax.config.update(...)` followed by a `finally`. As shown below, the scoped form is also
# **not** affected by the `vmap` problem.
#
# Each caught NaN first prints JAX's note "Invalid nan value encountered in the output of a jax.jit
# function. Calling the de-optimized version.": JAX found the value in a compiled function's output
# and re-runs that function op by op to find the primitive responsible.

# %%
with jax.debug_nans(True):
    print("inside the block:", jax.config.jax_debug_nans)
    e_nan = show_error(lambda: jax.jit(lambda x: jnp.log(x))(jnp.array(-1.0)))
with jax.debug_infs(True):
    e_inf = show_error(lambda: jax.jit(lambda x: 1.0 / x)(jnp.array(0.0)))
print("after the blocks:", jax.config.jax_debug_nans, jax.config.jax_debug_infs)

assert isinstance(e_nan, FloatingPointError) and str(e_nan) == "invalid value (nan) encountered in log"
assert isinstance(e_inf, FloatingPointError) and str(e_inf) == "invalid value (inf) encountered in div"
assert jax.config.jax_debug_nans is False and jax.config.jax_debug_infs is False

# %% [markdown]
# ### The same with `%%jax_nans`
#
# The magic puts the whole cell inside `jax.debug_nans(True)` (and `jax.debug_infs(True)` with
# `--infs`). The cell fails with the same `FloatingPointError` as above. Above the error you get
# a report that also says which of your lines produced the value and which values are non-finite.

# %% tags=["raises-exception"]
# %%jax_nans -o rep_log
log_jit = jax.jit(lambda x: jnp.log(x))
log_jit(jnp.array(-1.0))

# %%
err = pop_last_error()                     # the FloatingPointError the cell above raised
assert isinstance(err, FloatingPointError) and str(err) == rep_log.message
assert rep_log.found and rep_log.value == "nan" and rep_log.primitive == "log" and rep_log.phase == "forward"
assert rep_log.where_line.code == "log_jit = jax.jit(lambda x: jnp.log(x))"   # your line that called log
assert rep_log.call_path[0].code == "log_jit(jnp.array(-1.0))"                 # ...reached from this call
assert jax.config.jax_debug_nans is False and jax.config.jax_debug_infs is False
print(rep_log.summary)

# %% [markdown]
# An inf is not a NaN, so `1/0` passes `jax_debug_nans`. Use `--infs` to stop at it too:

# %% tags=["raises-exception"]
# %%jax_nans --infs -o rep_inf
jax.jit(lambda x: 1.0 / x)(jnp.array(0.0))

# %%
err = pop_last_error()
assert isinstance(err, FloatingPointError) and str(err) == "invalid value (inf) encountered in div"
assert rep_inf.found and rep_inf.value == "inf" and rep_inf.primitive == "div" and rep_inf.checks == ["nan", "inf"]
assert jax.config.jax_debug_nans is False and jax.config.jax_debug_infs is False   # both restored

# %% [markdown]
# ### ⚠️ The global switch stops checking old computations once a `vmap` has been traced
#
# This is a known problem in this environment. The global switch
# `jax.config.update("jax_debug_nans", True)` misses NaNs in computations that have already run,
# as soon as the process has traced any `vmap`. We reproduce it exactly, in a fresh process per
# scenario. In every scenario checking is on from the very start. A jitted function and an eager
# `log` each run once on a good input. Then comes a NaN-producing input, in four scenarios:
#
# * **none**: the process never used `vmap`;
# * **vmap**: an unrelated `vmap` ran in between;
# * **clear**: the same `vmap`, followed by `jax.clear_caches()`;
# * **with**: checking switched on with the scoped `jax.debug_nans(True)` instead of
#   `config.update` (as if the whole script sat in a `with` block), plus the same `vmap`.
#
# The first three scenarios switch checking on globally with `config.update`.

# %%
NAN_PROBE = '''
import sys, jax, jax.numpy as jnp
mode = sys.argv[1]
if mode == "with":
    jax.debug_nans(True).__enter__()               # the same as putting everything below in a with block
else:
    jax.config.update("jax_debug_nans", True)
f_old = jax.jit(lambda x: jnp.log(x))
f_old(jnp.array(2.0)).block_until_ready()          # runs once, on a good input
jnp.log(jnp.array(2.0))                            # the eager log runs once too
if mode in ("vmap", "clear", "with"):
    jax.vmap(lambda x: x * 2)(jnp.ones(3))         # an unrelated vmap
if mode == "clear":
    jax.clear_caches()                             # the workaround
cases = {
    "jit fn, already run": lambda: f_old(jnp.array(-1.0)),
    "eager log, already run": lambda: jnp.log(jnp.array(-1.0)),
    "eager sqrt, first use": lambda: jnp.sqrt(jnp.array(-1.0)),
    "new jit fn": lambda: jax.jit(lambda x: jnp.arccos(x))(jnp.array(3.0)),
}
for name, fn in cases.items():
    try:
        fn(); print("RESULT", name, "missed")
    except FloatingPointError:
        print("RESULT", name, "caught")
'''
MODES = ["none", "vmap", "clear", "with"]
nan_table = {}
for mode in MODES:
    proc = run_py(NAN_PROBE, mode)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in result_lines(proc):
        name, verdict = line.rsplit(" ", 1)
        nan_table.setdefault(name, {})[mode] = verdict

print(f"{'computation':24s}" + "".join(f"{m:>9s}" for m in MODES))
for name, row in nan_table.items():
    print(f"{name:24s}" + "".join(f"{row[m]:>9s}" for m in MODES))

assert len(nan_table) == 4 and all(len(row) == 4 for row in nan_table.values())
assert all(row["none"] == row["clear"] == row["with"] == "caught" for row in nan_table.values())
assert nan_table["jit fn, already run"]["vmap"] == "missed"
assert nan_table["eager log, already run"]["vmap"] == "missed"
assert nan_table["eager sqrt, first use"]["vmap"] == "caught" and nan_table["new jit fn"]["vmap"] == "caught"

# %% [markdown]
# What the table shows: with the global switch, once a `vmap` has been traced, computations that
# already ran are no longer checked. Eager primitives count as already run, because each one runs
# through a cached jit inside JAX. Computations compiled for the first time are still checked.
# `jax.clear_caches()` throws the cached executables away, so they are compiled again with checks,
# and checking works again. The scoped `with jax.debug_nans(True):` form is not affected at all:
# all four computations are caught.
#
# Workarounds, best first:
# 1. wrap the step you want to check in `with jax.debug_nans(True):` (or a `%%jax_nans` cell);
# 2. if it must be global, call `jax.clear_caches()` right after switching it on;
# 3. for checks that stay in the code, use `checkify` (§3.2).
#
# #### What triggers it: *tracing* a `vmap`, not running one
#
# Next, each operation is tried once in its own fresh process, between the first run of a jitted
# `log` and the NaN input. One `make_jaxpr(vmap(...))`, which only traces and never runs anything, is
# already enough. `grad`, `scan`, `checkify`, a plain `make_jaxpr`, or switching the flag on a second
# time do not trigger it. So the problem lies in some global state that tracing a `vmap` changes and
# the jit cache depends on, not in running a `vmap`. In practice: if anything in the process, a
# library included, has traced a `vmap`, assume the global switch no longer checks old cached
# computations.

# %%
TRIGGER_PROBE = '''
import sys, jax, jax.numpy as jnp
from jax.experimental import checkify
jax.config.update("jax_debug_nans", True)
f = jax.jit(lambda x: jnp.log(x))
f(jnp.array(2.0)).block_until_ready()
m = sys.argv[1]
if m == "grad": jax.grad(lambda x: x * 2)(1.0)
if m == "scan": jax.lax.scan(lambda c, x: (c + x, x), 0.0, jnp.ones(3))
if m == "make_jaxpr": jax.make_jaxpr(lambda x: x * 2)(1.0)
if m == "checkify": checkify.checkify(lambda x: x * 2)(1.0)
if m == "config.update": jax.config.update("jax_debug_nans", True)
if m == "make_jaxpr(vmap)": jax.make_jaxpr(jax.vmap(lambda x: x * 2))(jnp.ones(3))
if m == "jit(vmap)": jax.jit(jax.vmap(lambda x: x * 2))(jnp.ones(3))
try:
    f(jnp.array(-1.0)); print("RESULT missed")
except FloatingPointError:
    print("RESULT caught")
'''
OPERATIONS = ["grad", "scan", "make_jaxpr", "checkify", "config.update", "make_jaxpr(vmap)", "jit(vmap)"]
trigger = {}
for op in OPERATIONS:
    proc = run_py(TRIGGER_PROBE, op)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [trigger[op]] = result_lines(proc)
for op, verdict in trigger.items():
    print(f"  {op:18s} before the NaN -> old jit function's NaN {verdict}")

assert [op for op, verdict in trigger.items() if verdict == "missed"] == ["make_jaxpr(vmap)", "jit(vmap)"]
assert all(trigger[op] == "caught" for op in OPERATIONS[:5])

# %% [markdown]
# #### `%%jax_nans` is immune
#
# The magic only ever uses the scoped form, so it does not need `jax.clear_caches()`. Here is the
# same situation in this kernel. A jitted function runs once normally, then a `vmap` is traced. With
# the global switch the old function's NaN slips through. The same call in a `%%jax_nans` cell is
# caught.

# %%
f_old = jax.jit(lambda x: jnp.log(x))
assert float(f_old(jnp.array(2.0))) == np.log(np.float32(2.0))     # "already executed"
jax.make_jaxpr(jax.vmap(lambda x: x * 2))(jnp.ones(3))              # trace a vmap, run nothing

jax.config.update("jax_debug_nans", True)                           # the global switch...
try:
    missed = f_old(jnp.array(-1.0))                                 # ...does not catch it
finally:
    jax.config.update("jax_debug_nans", False)
print("global switch, old jit function after a vmap trace:", missed)
assert np.isnan(missed)

# %% tags=["raises-exception"]
# %%jax_nans -o rep_vmap
f_old(jnp.array(-1.0))

# %%
err = pop_last_error()
assert isinstance(err, FloatingPointError) and "nan" in str(err)
assert rep_vmap.found and rep_vmap.primitive == "log" and rep_vmap.value == "nan" and rep_vmap.phase == "forward"
assert jax.config.jax_debug_nans is False


# %% [markdown]
# ### A NaN inside a `scan`: JAX names the loop, `%%jax_nans` names the operation
#
# Real JAX code is full of loops under `lax.scan` (RNNs, ODE solvers, simulations). When the NaN is
# made inside the loop body, `jax_debug_nans` can only name the outermost operation the NaN came out
# of: `scan`, at the `lax.scan(...)` line. Below, a tank level drains by 1 per step and the body takes
# its log; at step 2 the level is -0.5.

# %%
def drain_body(level, drain):
    level = level - drain
    return level, jnp.log(level)          # NaN once the level is below 0

@jax.jit
def simulate(level0, drains):
    return lax.scan(drain_body, level0, drains)

with jax.debug_nans(True):
    e_scan = show_error(lambda: simulate(jnp.float32(2.5), jnp.ones(5)))
assert str(e_scan) == "invalid value (nan) encountered in scan"      # only the loop is named

# %% [markdown]
# `%%jax_nans` then searches for the **producer**: it traces the failing call again with the same
# argument values and evaluates its program operation by operation, opening `scan`, `while`, `cond`,
# nested `jit`, `checkpoint` and custom-derivative rules. A loop is run once more compiled to find
# its first bad iteration; only that iteration is evaluated op by op. The producer is the first
# operation whose inputs were finite and whose output was not. The search costs nothing on a clean
# cell: it runs only after JAX raised.

# %% tags=["raises-exception"]
# %%jax_nans -o rep_scan
simulate(jnp.float32(2.5), jnp.ones(5))

# %%
err = sys.last_value              # kept (not popped yet): %jax_debug below debugs the last failed cell
assert str(err) == "invalid value (nan) encountered in scan" and rep_scan.primitive == "scan"   # JAX's words, kept
p = rep_scan.producer
print(rep_scan.summary)
print("values:", p.description)
assert p.primitive == "log" and p.phase == "forward"
assert p.line.function == "drain_body" and p.line.code == "return level, jnp.log(level)          # NaN once the level is below 0"
assert [(loop.primitive, loop.index) for loop in p.loops] == [("scan", 2)]      # the third step
assert [op.value for op in p.operands] == ["-0.5"]                                # what log got
assert jax.config.jax_debug_nans is False

# %% [markdown]
# ### Stopping at that line with `%jax_debug`
#
# The report names the operation and its operand. To look at everything else in that step, run
# `%jax_debug` right after the failed cell. It re-runs only the failing call, `simulate(...)`:
# the scan runs compiled once to find the first step whose carry or output is not finite, and only
# that step runs op by op under `jax.disable_jit()`, so it stops at your line in `drain_body` with
# concrete arrays. In JupyterLab IPython's debugger then opens in that frame (type `p level`, `u`
# to go up to `simulate`, `c` or `q` to leave). Here there is no one to type, and `--no-stop` asks
# for the report only: the line, the iteration, every local and argument of the frame, your frames
# above it. `-o dbg_scan` binds the report and `--ns dbg_vals` binds the frame's values as NumPy
# copies.

# %%
# %jax_debug --no-stop -o dbg_scan --ns dbg_vals

# %%
err = pop_last_error()
stopped = dbg_scan.stopped
print(dbg_scan.summary)
assert stopped.line.function == "drain_body"
assert stopped.line.code == "return level, jnp.log(level)          # NaN once the level is below 0"
assert [(step.kind, step.index, step.size) for step in dbg_scan.steps] == [("scan", 2, 5)]   # the third step
assert dbg_scan.compiled_runs == 1                  # the loop ran compiled once; only step 2 op by op
assert dbg_scan.rerun_error == "FloatingPointError: invalid value (nan) encountered in log"
values = {v.name: v for v in stopped.values}
assert values["level"].minimum == -0.5 and values["drain"].minimum == 1.0      # the level went negative
assert stopped.is_argument == ["level", "drain"]   # names of the arguments; `level` shows its value now, after
                                                    # `level = level - drain` (it came in as 0.5)
assert [frame.line.function for frame in dbg_scan.callers][-1] == "simulate"
assert dbg_scan.reran_user_code and not dbg_scan.interactive
assert isinstance(dbg_vals.level, np.ndarray) and float(dbg_vals.level) == -0.5
assert float(dbg_vals.drain) == 1.0
assert jax.config.jax_debug_nans is False


# %% [markdown]
# ### A NaN in the backward pass: JAX's message names only the primitive
#
# A classic source is the gradient of `jnp.linalg.norm` at the zero vector. There
# $\nabla\lVert b\rVert = b/\lVert b\rVert = 0/0$. Below, the bias `b` starts at zero, and the loss
# has a small norm penalty on it.
#
# With plain `jax.debug_nans`, the error message only says `invalid value (nan) encountered in mul`.
# The failing `mul` is in gradient code that JAX generated, and the error's own traceback
# (`err.__traceback__`) has no frame inside `reg_loss`. But JAX 0.12 chains a second exception to
# it: `err.__cause__` is a `JaxStackTraceBeforeTransformation` ("The preceding stack trace is the
# source of the JAX operation that, once transformed by JAX, triggered the following exception"),
# and its traceback ends in `reg_loss`, at the penalty line - the forward line whose derivative
# failed. It is there with `JAX_TRACEBACK_FILTERING` left at `auto` and with it set to `off` (the
# cell below checks both). That is for a `jax.grad` called outside `jit`: when the gradient is taken
# inside a jitted function (`jax.jit(jax.grad(reg_loss))`, or notebook 09's `train_step`) the error
# has no `__cause__`, and nothing in it names your line. Which parameter's gradient is broken it does not say: for that you look
# at the gradient leaf by leaf. Note that no `jax.clear_caches()` is needed here: the `with` form is
# immune to the problem above.

# %%
def reg_loss(p, x):
    return jnp.sum((x @ p["w"] + p["b"]) ** 2) + 1e-3 * jnp.linalg.norm(p["b"])   # b starts at 0

p_reg = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
x_reg = jnp.ones((4, 3))
with jax.debug_nans(True):
    err = show_error(lambda: jax.grad(reg_loss)(p_reg, x_reg))
user_frames = [f for f in traceback.extract_tb(err.__traceback__) if "site-packages" not in f.filename]
print("your frames in the traceback:", [(f.name, f.line) for f in user_frames])


def cause_frames(error):
    """The frames of this cell's file (function, line within reg_loss, code) in ``error.__cause__``'s traceback."""
    return [(f.name, f.lineno - reg_loss.__code__.co_firstlineno + 1, f.line)
            for f in traceback.extract_tb(error.__cause__.__traceback__)
            if f.filename == reg_loss.__code__.co_filename]


print("err.__cause__:", type(err.__cause__).__name__)
print("innermost frame of err.__cause__ (filtering auto):", cause_frames(err)[-1])
filtering_before = jax.config.jax_traceback_filtering
jax.config.update("jax_traceback_filtering", "off")
try:
    with jax.debug_nans(True):
        err_off = show_error(lambda: jax.grad(reg_loss)(p_reg, x_reg))
finally:
    jax.config.update("jax_traceback_filtering", filtering_before)
print("innermost frame of err.__cause__ (filtering off):", cause_frames(err_off)[-1])
with jax.debug_nans(True):
    err_jit = show_error(lambda: jax.jit(jax.grad(reg_loss))(p_reg, x_reg))
print("jit(grad): err.__cause__ =", repr(err_jit.__cause__))

# leaf by leaf: which parameter's gradient holds a NaN?
grads = jax.grad(reg_loss)(p_reg, x_reg)
bad_leaves = [jax.tree_util.keystr(path) for path, g in jax.tree_util.tree_leaves_with_path(grads)
              if not bool(jnp.all(jnp.isfinite(g)))]
print("gradient leaves with a NaN:", bad_leaves)

assert isinstance(err, FloatingPointError) and str(err) == "invalid value (nan) encountered in mul"
assert "reg_loss" not in [f.name for f in user_frames]       # the error's own traceback: not inside reg_loss
assert filtering_before == "auto"
for e in (err, err_off):                                      # its __cause__ ends in reg_loss, line 2 of it
    assert type(e.__cause__).__name__ == "JaxStackTraceBeforeTransformation"
    assert str(e) == "invalid value (nan) encountered in mul"
    name, line_in_function, code = cause_frames(e)[-1]
    assert (name, line_in_function) == ("reg_loss", 2) and "jnp.linalg.norm(p[\"b\"])" in code
assert str(err_jit) == "invalid value (nan) encountered in mul" and err_jit.__cause__ is None   # inside jit: none
del err_off, err_jit
assert bad_leaves == ["['b']"]

# %% [markdown]
# `%%jax_nans` does both steps for you. When the NaN comes from a backward pass, it reads the
# forward line from the error's `__cause__` (the stack JAX recorded before transforming), so it
# names **the line of yours whose gradient went wrong** without running anything again. Only when
# JAX attached no such line does it call the failing call once more under `jax.disable_jit()`, op
# by op, to find one; here it did not need to (`rep_grad.origin_by_rerun` is `False`). It then
# runs the call once more with checking off and scans the result for non-finite leaves, giving
# each one's key path.

# %% tags=["raises-exception"]
# %%jax_nans -o rep_grad
grads = jax.grad(reg_loss)(p_reg, x_reg)

# %%
err = sys.last_value              # kept (not popped yet): %jax_debug below debugs this failed cell too
assert isinstance(err, FloatingPointError) and str(err) == "invalid value (nan) encountered in mul"
assert rep_grad.phase == "backward" and rep_grad.primitive == "mul" and rep_grad.value == "nan"
assert rep_grad.failing_call == "jax.grad(reg_loss)(p_reg, x_reg)"
origin = rep_grad.origin_lines[-1]
assert origin.function == "reg_loss" and "jnp.linalg.norm(p[\"b\"])" in origin.code
assert any(leaf.path == "['b']" for leaf in rep_grad.nonfinite)
assert [leaf.name for leaf in rep_grad.nonfinite] == ["result of jax.grad(reg_loss)(p_reg, x_reg)['b']"]
assert rep_grad.origin_by_rerun is False                          # the line came from err.__cause__
assert not any("disable_jit" in note for note in rep_grad.notes)  # no op-by-op re-run was made
assert jax.config.jax_debug_nans is False
print(rep_grad.summary)

# %% [markdown]
# `%jax_debug` after this cell: the NaN was made in the backward pass, where no line of yours runs,
# so stopping "where it failed" would stop inside JAX. Instead it re-runs the forward function,
# `reg_loss`, op by op and stops **before the forward line whose derivative made the NaN**, with
# the forward values the derivative was taken at: there `p["b"]` is all zeros, and the derivative
# of `jnp.linalg.norm` at 0 is 0/0.

# %%
# %jax_debug --no-stop -o dbg_grad --ns grad_vals

# %%
err = pop_last_error()
print(dbg_grad.summary)
assert dbg_grad.stopped.line.function == "reg_loss" and "jnp.linalg.norm(p[\"b\"])" in dbg_grad.stopped.line.code
assert any("derivative JAX computed" in note for note in dbg_grad.notes)
assert float(np.abs(grad_vals.p["b"]).max()) == 0.0        # the norm's argument: all zeros
assert jax.config.jax_debug_nans is False


# %% [markdown]
# The fix is to keep the derivative finite at zero. This is the "double `where`": the inner `where`
# makes sure `sqrt` never sees 0, and the outer one picks the right value. The same cell now
# passes, and the report says so.

# %%
def safe_norm(v):
    ss = jnp.sum(v ** 2)
    return jnp.where(ss > 0, jnp.sqrt(jnp.where(ss > 0, ss, 1.0)), 0.0)

def reg_loss_fixed(p, x):
    return jnp.sum((x @ p["w"] + p["b"]) ** 2) + 1e-3 * safe_norm(p["b"])


# %%
# %%jax_nans -o rep_fixed
grads = jax.grad(reg_loss_fixed)(p_reg, x_reg)

# %%
assert not rep_fixed.found and rep_fixed.nonfinite == [] and rep_fixed.status.value == "ok"
assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))
assert float(reg_loss_fixed(p_reg, x_reg)) == float(reg_loss(p_reg, x_reg))      # same loss value


# %% [markdown]
# ## 3.2 `jax.experimental.checkify`
#
# `checkify` compiles the checks into the program. The program returns an `Error` value together
# with its normal output. It can check four kinds of thing, plus your own assertions written with
# `checkify.check`:
#
# | Error set | Raises | Catches |
# |---|---|---|
# | `checkify.user_checks` (default) | `FailedCheckError` | your `checkify.check(pred, msg, ...)` |
# | `checkify.nan_checks` | `NaNError` | any primitive producing a NaN (named) |
# | `checkify.div_checks` | `DivisionByZeroError` | a zero divisor (integer or float division) |
# | `checkify.index_checks` | `OOBError` | out-of-bounds indexing (which JAX otherwise **clamps silently**) |
# | `checkify.float_checks` | | NaN + division by zero |
# | `checkify.all_checks` | | all of the above |
#
# A `checkify.check` message can contain `{name}` fields. Pass the arrays as keyword arguments and
# they are filled in at run time. Here is one function run on four inputs, with each error set in
# turn:

# %%
def risky(x, i):
    checkify.check(jnp.all(x > 0), "x must be positive, min = {m}", m=jnp.min(x))
    y = jnp.log(x)                  # x <= 0 -> NaN
    z = x[i]                        # i out of bounds -> JAX clamps the index, no error
    w = 7 // i                      # i == 0 -> integer division by zero
    return y.sum() + z + w

x_ok = jnp.array([1.0, 2.0, 3.0])
x_neg = jnp.array([-1.0, 2.0, 3.0])
inputs = {"fine": (x_ok, 1), "x negative": (x_neg, 1), "index 5": (x_ok, 5), "i = 0": (x_ok, 0)}
sets = {"user": checkify.user_checks, "nan": checkify.nan_checks, "index": checkify.index_checks,
        "div": checkify.div_checks, "all": checkify.all_checks}
table = {}
for sname, errs in sets.items():
    checked = jax.jit(checkify.checkify(risky, errors=errs))
    for iname, args in inputs.items():
        err, _ = checked(*args)
        table[(sname, iname)] = err.get()

print(f"{'error set':10s}" + "".join(f"{n:>12s}" for n in inputs))
for sname in sets:
    print(f"{sname:10s}" + "".join(f"{'caught' if table[(sname, n)] else '-':>12s}" for n in inputs))
print("\nsample messages:")
for key in [("user", "x negative"), ("nan", "x negative"), ("index", "index 5"), ("div", "i = 0")]:
    print(f"  {key}: {table[key].strip()[:95]}")

assert all(table[(s, "fine")] is None for s in sets)
assert "x must be positive, min = -1.0" in table[("user", "x negative")]
assert "nan generated by primitive: log" in table[("nan", "x negative")]
assert "out-of-bounds" in table[("index", "index 5")] and table[("user", "index 5")] is None
assert "division by zero" in table[("div", "i = 0")]
assert all(table[("all", n)] is not None for n in inputs if n != "fine")
caught = {(s, n) for (s, n), msg in table.items() if msg is not None}
assert caught == {("user", "x negative"), ("nan", "x negative"), ("index", "index 5"), ("div", "i = 0"),
                  ("all", "x negative"), ("all", "index 5"), ("all", "i = 0")}

clamped = float(jax.jit(lambda x, i: x[i])(x_ok, 5))
print("\nwithout checks, x[5] gives:", clamped, "(the index was clamped to 2: a silent wrong result)")
assert clamped == 3.0

# %% [markdown]
# ### The same diagnosis with `%jax_check`
#
# `%jax_check risky(x_neg, 1)` checks everything by default (`--errors all`). It lists every error
# the call produced, and there can be more than one. `err.get()` only shows the first of them. Each
# error comes with its kind and the line of yours where it happened.

# %%
# %jax_check risky(x_neg, 1) -o r_neg

# %%
assert r_neg.kinds == ["user", "nan"]
assert "x must be positive, min = -1.0" in r_neg.errors[0].message
assert r_neg.errors[1].message == "nan generated by primitive: log."
assert [e.line.function for e in r_neg.errors] == ["risky", "risky"]
assert r_neg.errors[1].line.code.startswith("y = jnp.log(x)")

# %% [markdown]
# Limit the checks with `--errors`. A comma-separated list selects several sets at once. One input
# that is wrong in three ways shows the difference between the two approaches: `%jax_check` lists
# all three errors, while `err.get()` from plain `checkify` reports only the first.

# %%
# %jax_check risky(x_neg, 5) --errors nan,index -o r_two

# %%
assert r_two.kinds == ["nan", "index"] and r_two.error_sets == ["nan", "index"]

first_only = jax.jit(checkify.checkify(risky, errors=checkify.all_checks))(x_neg, 5)[0].get()
r_three = jaxmagic.probes.check(risky, x_neg, 5, errors="all")      # the probe, without the magic
print("err.get():", first_only.strip(), "| the probe's kinds:", r_three.kinds)
assert "x must be positive" in first_only and "out-of-bounds" not in first_only
assert r_three.kinds == ["user", "nan", "index"]

# %% [markdown]
# The probe behind `%jax_check` can be used directly (`jaxmagic.probes.check(fn, *args,
# errors=...)`), so scripts and tests get the same report. Running the error-set table through it
# gives the same verdicts as plain `checkify` above, with the kinds named:

# %%
probe_table = {(s, n): jaxmagic.probes.check(risky, *args, errors=s).kinds
               for s in sets for n, args in inputs.items()}
print(f"{'error set':10s}" + "".join(f"{n:>16s}" for n in inputs))
for s in sets:
    print(f"{s:10s}" + "".join(f"{','.join(probe_table[(s, n)]) or '-':>16s}" for n in inputs))

assert all(bool(probe_table[key]) == (table[key] is not None) for key in table)   # same verdicts
assert probe_table[("all", "x negative")] == ["user", "nan"]
assert probe_table[("all", "index 5")] == ["index"] and probe_table[("all", "i = 0")] == ["div"]


# %% [markdown]
# ### Silent clamping, caught
#
# Without checks, JAX clamps an out-of-bounds index to the last valid position and returns a value
# without any warning. `--errors index` turns that into an error:

# %%
def pick(x, i):
    return x[i]

print("pick(x_ok, 5) =", float(jax.jit(pick)(x_ok, 5)), "  (no error, and not x[5])")
assert float(jax.jit(pick)(x_ok, 5)) == float(x_ok[2])

# %%
# %jax_check pick(x_ok, 5) --errors index -o r_oob

# %%
assert r_oob.kinds == ["index"] and len(r_oob.errors) == 1
assert "index 5 is out of bounds for axis 0 with size 3" in r_oob.errors[0].message
assert r_oob.errors[0].line.code == "return x[i]"


# %% [markdown]
# ### A vmapped function through `%jax_check`
#
# `%jax_check` wraps the whole call in `checkify`. So `%jax_check jax.vmap(pos_log)(xs)` means
# `checkify(vmap(pos_log))`. As the composition table further down confirms, that form reports
# **one** failing sample and does not say which one. The report's `mapped_index` is therefore
# `None`.
#
# To check every sample, pass the *unbatched* function and let the magic do the batching:
# `%jax_check pos_log(xs) --vmap 0` runs `jit(vmap(checkify(pos_log), in_axes=0))`, which is the
# `vmap(checkify)` composition, and each error then carries the index of its sample.

# %%
def pos_log(x):
    checkify.check(x > 0, "x must be positive, got {v}", v=x)
    return jnp.log(x)

xs_mixed = jnp.array([1.0, -2.0, 3.0, -4.0])

# %%
# %jax_check jax.vmap(pos_log)(xs_mixed) -o r_vm

# %%
assert r_vm.kinds == ["user", "nan"]
assert all(e.mapped_index is None for e in r_vm.errors)              # checkify(vmap): no sample index
[user_error] = [e for e in r_vm.errors if e.kind == "user"]           # only one of the two bad samples
assert user_error.message == "x must be positive, got -4.0 (`check` failed)"

# %%
# %jax_check pos_log(xs_mixed) --vmap 0 -o r_samples

# %%
by_sample = {(tuple(e.mapped_index), e.kind) for e in r_samples.errors}
print(sorted(by_sample))
assert by_sample == {((1,), "user"), ((1,), "nan"), ((3,), "user"), ((3,), "nan")}   # samples 1 and 3 are negative
assert [e.message for e in r_samples.errors if e.kind == "user"] == [
    "x must be positive, got -2.0 (`check` failed)", "x must be positive, got -4.0 (`check` failed)"]

# plain JAX, the same composition: checkify inside the vmap
per_sample = jax.vmap(checkify.checkify(pos_log))(xs_mixed)[0].get()
assert "at mapped index 1" in per_sample and "at mapped index 3" in per_sample


# %% [markdown]
# ### `check` needs `checkify`, and what to do with the error value
#
# Calling `checkify.check` in a jitted function that is not wrapped in `checkify.checkify` fails at
# trace time with a `ValueError`:

# %%
# wrong: checkify.check under jit, without checkify.checkify around it
def check_only(x):
    checkify.check(x > 0, "x must be positive")
    return jnp.log(x)

raised = show_error(lambda: jax.jit(check_only)(1.0))
assert isinstance(raised, ValueError) and "not functionalized" in str(raised)
assert str(raised).startswith("Cannot abstractly evaluate a checkify.check which was not functionalized")

# %%
# right: checkify first, then jit. Look at the error with err.get(), or raise it with err.throw()
checked_only = jax.jit(checkify.checkify(check_only))
err_ok, _ = checked_only(1.0)
err_bad, _ = checked_only(-1.0)
print("good input:", err_ok.get(), "| bad input:", err_bad.get())
err_ok.throw()                                   # no error: does nothing
thrown = show_error(err_bad.throw)
print("raised", type(thrown).__name__, "- its classes:", [c.__name__ for c in type(thrown).__mro__[:3]])

assert err_ok.get() is None and "x must be positive" in err_bad.get()
assert isinstance(thrown, checkify.JaxRuntimeError) and isinstance(thrown, ValueError)

# %% [markdown]
# ### How `checkify` composes with `jit`, `vmap`, `grad` and `scan`
#
# | Composition | Behaviour |
# |---|---|
# | `jit(checkify(f))` vs `checkify(jit(f))` | the same result; the first is the usual spelling |
# | `vmap(checkify(f))` | a batched error; `get()` lists every failing sample (`at mapped index 1: ...`) |
# | `checkify(vmap(f))` | reports one failing sample, without saying which |
# | `checkify(grad(f), errors=nan_checks)` | catches NaNs made in the backward pass (e.g. the `mul` of a single-`where` `sqrt`) |
# | `grad(lambda x: checkify(f)(x)[1])` | differentiates fine, but the error is thrown away: check outside `grad` |
# | `check` in a `lax.scan` body | works, and reports the values of the first iteration that failed |
# | `float_checks` and inf | does not catch inf (`exp(1000.)` passes); check `jnp.isfinite` yourself |
# | `checkify.debug_check` | does nothing without `checkify` (no error, no check); under `checkify` it acts like `check` |
#
# The next cell checks every row of the table.

# %%
r = {}
r["jit(checkify)"] = jax.jit(checkify.checkify(pos_log))(jnp.float32(-1.0))[0].get()
r["checkify(jit)"] = checkify.checkify(jax.jit(pos_log))(jnp.float32(-1.0))[0].get()
r["vmap(checkify)"] = jax.vmap(checkify.checkify(pos_log))(xs_mixed)[0].get()
r["checkify(vmap)"] = checkify.checkify(jax.vmap(pos_log))(xs_mixed)[0].get()

one_where = lambda x: jnp.sum(jnp.where(x > 0, jnp.sqrt(x), 0.0))      # single where: NaN gradient at 0
r["checkify(grad)"] = checkify.checkify(jax.grad(one_where), errors=checkify.nan_checks)(jnp.array([0.0, 1.0]))[0].get()
g_inside = jax.grad(lambda x: checkify.checkify(pos_log)(x)[1])(jnp.float32(-1.0))

def scan_body(carry, x):
    total, step = carry
    checkify.check(x < 10, "step {i}: value too large: {x}", i=step, x=x)
    return (total + x, step + 1), None
r["scan"] = jax.jit(checkify.checkify(lambda xs: lax.scan(scan_body, (0.0, 0), xs)[0]))(jnp.array([1.0, 20.0, 30.0]))[0].get()

r["float_checks vs inf"] = checkify.checkify(jnp.exp, errors=checkify.float_checks)(jnp.float32(1000.0))[0].get()

@jax.jit
def dbg_fn(x):
    checkify.debug_check(x > 0, "debug_check failed: {x}", x=x)
    return x * 2
dbg_plain = float(dbg_fn(-1.0))
r["debug_check + checkify"] = checkify.checkify(dbg_fn)(-1.0)[0].get()

for k, v in r.items():
    print(f"  {k:24s} -> {v.strip() if v else None}".replace("\n", " | "))
print("  gradient through checkify(f)[1]:", g_inside, "| debug_check without checkify returns:", dbg_plain)

assert r["jit(checkify)"] == r["checkify(jit)"] and "-1.0" in r["jit(checkify)"]
assert "at mapped index 1" in r["vmap(checkify)"] and "at mapped index 3" in r["vmap(checkify)"]
assert "mapped index" not in r["checkify(vmap)"] and r["checkify(vmap)"].count("must be positive") == 1
assert "nan generated by primitive: mul" in r["checkify(grad)"]
assert float(g_inside) == -1.0                                   # differentiable, but the check is gone
assert "step 1: value too large: 20.0" in r["scan"]
assert r["float_checks vs inf"] is None
assert dbg_plain == -2.0 and "debug_check failed" in r["debug_check + checkify"]

# %% [markdown]
# #### Format arguments must be arrays
#
# Under `jit`, the `v=x` in `checkify.check(..., v=x)` is a tracer, so it always works. Called
# eagerly with a Python scalar, however, `checkify` raises `TypeError: Formatting arguments to
# checkify.check need to be PyTrees of arrays`. Writing `v=jnp.asarray(x)` covers both cases. (The
# probe behind `%jax_check` always runs the call under `jit`, so `%jax_check pos_log(-1.0)` does not
# hit this.)

# %%
e_py = show_error(lambda: checkify.checkify(pos_log)(-1.0))
e_arr, _ = checkify.checkify(pos_log)(jnp.asarray(-1.0))
assert isinstance(e_py, TypeError) and "PyTrees of arrays" in str(e_py)
assert "got -1.0" in e_arr.get()

r_scalar = jaxmagic.probes.check(pos_log, -1.0)                   # under jit: no TypeError
assert r_scalar.failure == "" and r_scalar.kinds == ["user", "nan"]


# %% [markdown]
# ## 3.3 Checking gradients: `jax.test_util.check_grads`
#
# `check_grads` compares automatic derivatives with finite differences. A few points for
# `custom_vjp` functions:
#
# * only `modes=["rev"]` applies. `modes=["fwd"]` raises `TypeError: can't apply forward-mode
#   autodiff (jvp) to a custom_vjp function`;
# * a mismatch raises `AssertionError`. The message mentions the `VJP cotangent projection` and
#   gives the actual and expected values;
# * in float32 the default tolerance is about 2e-3. Adjust it with `atol` / `rtol` / `eps`, or
#   check with float64 inputs inside `with jax.enable_x64(True):`.
#
# First, a backward rule with the wrong sign: the derivative of softplus is `sigmoid(x)`, not
# `sigmoid(-x)`.

# %%
@jax.custom_vjp
def softplus_bad(x):
    return jnp.logaddexp(x, 0.0)
softplus_bad.defvjp(lambda x: (softplus_bad(x), x), lambda x, g: (g * jax.nn.sigmoid(-x),))

x_cg = jnp.array([-1.0, 0.5, 2.0])
cg_err = show_error(lambda: check_grads(softplus_bad, (x_cg,), order=1, modes=["rev"]))
print("     next line of the message:", str(cg_err).strip().splitlines()[1].strip())
e_fwd = show_error(lambda: check_grads(softplus_bad, (x_cg,), order=1, modes=["fwd"]))

assert isinstance(cg_err, AssertionError) and "VJP" in str(cg_err)
assert isinstance(e_fwd, TypeError) and "custom_vjp" in str(e_fwd)


# %%
# fixed: the backward rule uses sigmoid(x); check_grads passes silently
@jax.custom_vjp
def softplus_ok(x):
    return jnp.logaddexp(x, 0.0)
softplus_ok.defvjp(lambda x: (softplus_ok(x), x), lambda x, g: (g * jax.nn.sigmoid(x),))

# eps=1e-3, not the float32 default 1e-4: a finite difference divides the function's rounding error by
# the step. A TPU computes exp and log to about 2e-5 (logaddexp here: 1.7e-5 on a TPU v5e, 8e-8 on the
# CPU), and at a step of 1e-4 this right rule failed there by 1.6% - at any matmul precision.
check_grads(softplus_ok, (x_cg,), order=1, modes=["rev"], eps=1e-3)   # raises nothing: the rule is right
assert np.allclose(jax.grad(lambda x: softplus_ok(x).sum())(x_cg), 1 / (1 + np.exp(-to64(x_cg))), atol=1e-6)
print("check_grads passed ✔")

# %% [markdown]
# ## Final check: nothing left switched on
#
# `debug_nans` / `debug_infs` were switched on by `with` blocks and by the magics, and once
# globally by hand inside a `try`/`finally`. The configuration must be exactly what it was at
# the start.

# %%
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert dict(jax.config.values) == CONFIG_AT_START
print("JAX config unchanged since the start ✔")
