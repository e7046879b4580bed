# %% [markdown]
# # 00 · Symptoms first, then tools — and the common set-up
#
# This is the first of the jaxmagic demo notebooks. Each one follows a section of a chapter on
# debugging JAX 0.12.0.1 programs, re-does its demonstrations here and checks each one with `assert`.
# When this notebook runs headless, any claim that no longer holds makes a cell fail.
#
# Debugging goes fastest if you start from what you *see* and pick the tool that fits. The table below
# gives, for each symptom, the cheapest first check, the tool to use next, and the jaxmagic magic
# that sets that tool up for a single cell. Every magic in that column exists in this build (✅); the
# first code cell below checks that each one is registered. When you see several symptoms at once, or
# do not know where to start, `%%jax_doctor` runs a cell under all the probes and ranks what it finds.

# %% [markdown]
# ### What you should be able to do after the chapter
#
# 1. Go from a symptom (NaN, wrong numbers, repeated compiling, a tracer error, growing memory, a slow
#    step, devices that disagree) straight to the first tool to try.
# 2. See runtime values inside `jit`, `vmap` and `grad` with `jax.debug.print`, `jax.debug.callback`,
#    `jax.debug.breakpoint` and `jax.disable_jit()`, and know what each does under each transformation.
# 3. See the program itself (jaxpr, StableHLO, optimized HLO) and find your own code in the HLO with
#    `jax.named_scope`.
# 4. Catch numerical problems with `jax_debug_nans`, `checkify` and `check_grads`, and work around the
#    case where `jax_debug_nans` misses a NaN in 0.12.0.1.
# 5. Recognise each tracer error and its standard fix, and catch leaked tracers with the leak checker.
# 6. Read a JAX traceback, switch `JAX_TRACEBACK_FILTERING`, and inspect the current configuration.
# 7. Track memory with `memory_analysis`, `live_arrays`, `delete` and `clear_caches`, and multi-device
#    problems with `jax.typeof` and the sharding inspectors.
#
# Notebook 10 closes with the chapter's summary and a quick-reference table of the APIs.

# %% [markdown]
# | Symptom | Do this first | Then reach for | jaxmagic | Section |
# |---|---|---|---|---|
# | NaN or inf in the output | On the host, check after every step that the loss is finite | `checkify` with `float_checks` names the primitive. Or re-run the bad step inside `with jax.debug_nans(True):`. If you switch it on globally with `config.update`, call `jax.clear_caches()` first | ✅ `%%jax_nans [--infs]` · ✅ `%jax_check` | §3, §9 |
# | An error inside `jit` and no values to look at (a NaN, a failed check, an index out of range) | Re-run the failing call without `jit` and look at its values | `jax.debug.breakpoint()` (its `jdb` needs stdin: dead in a notebook), or `jax.disable_jit()` over the whole program (slow) | ✅ `%jax_debug` (after the failed cell) · ✅ `%%jax_debug` (breakpoints) | §1.3, §3 |
# | Wrong numbers, no error | Compare with a NumPy float64 reference | Bisect with `jax.disable_jit()`: right when eager, wrong under `jit` → a compilation problem. Then read the jaxpr / HLO | ✅ `%jax_bisect` · ✅ `%%jax_print` · ✅ `%jax_hlo` | §1.4, §2 |
# | Slow, or compiles again and again | Count the compilations | `jax_log_compiles` shows the shapes, `jax_explain_cache_misses` the reason, `f._cache_size()` the cache entries | ✅ `%%jax_compiles [--budget N]` | §5 |
# | A tracer error (`ConcretizationTypeError`, `TracerBoolConversionError`, …) | Read the sentence "…while tracing the function f … argument x" | Rewrite the line: `jnp.where`, `lax.cond`, a static argument, `size=` | ✅ `%jax_explain` (on by default) · ✅ `%jax_traceback` | §4, §6 |
# | `UnexpectedTracerError` | Look for an intermediate value stored outside the function | `jax.checking_leaks()` names the leaked tracer and who holds it, at the end of tracing | ✅ `%%jax_leaks` | §4.6 |
# | Out of memory | Estimate with `compile().memory_analysis()` | `jax.live_arrays()` shows what was not freed. Then `x.delete()`, `jax.clear_caches()`. `save_device_memory_profile` shows where arrays were allocated | ✅ `%jax_memory` / `%%jax_memory` (what fills the peak by line, ways down compiled; an out-of-memory error explained by the explainer) · ✅ `%jax_live` / `%%jax_live` · ✅ `%jax_hlo` | §7 |
# | Slow, though compiled once | Time with `block_until_ready()` | `jax.stages` times compiling and running separately, `jax.transfer_guard` catches hidden host↔device copies, then the profiler | ✅ `%jax_stages` · ✅ `%%jax_transfers` · ✅ `%%jax_profile` | §5.5 |
# | Devices disagree | Look at `jax.typeof(x)` (the sharding is part of the type) | Compare `x.addressable_shards`. Use `jax.debug.print` inside `shard_map` to see each device's block | ✅ `%jax_sharding` · ✅ `%%jax_per_device` · ✅ `%jax_devices` | §8 |
# | Randomness is wrong (the same dropout mask every step) | Print the `key_data` of every step's key | `jax_debug_key_reuse` raises at the first reused key | ✅ `%%jax_keys` | §9 |
# | A debugging switch left on; a bug report to write | List the flags that differ from the defaults | `jax.config.values`, `jax.print_environment_info()` | ✅ `%jax_config` · ✅ `%jax_env` | §6 |
# | Several of the above at once, or no idea where to start | Run the cell once under every probe | NaN first, then errors, then speed and memory, then silent logic bugs | ✅ `%%jax_doctor` | §9 |
# | A problem in a cell you did not suspect (step 30,000 of a loop) | Leave a cheap watch on | NaN in jitted results, recompilation, per-call transfers, growing memory, reused keys, told under the cell | ✅ `%jax_watch` | §9 |
# | One process of a multi-process job misbehaves (a NaN from its shard, a ragged batch that hangs the collectives) | Run the same check on every process and compare | `%%px` on ipyparallel engines, one per `jax.distributed` process | ✅ `%jax_gather` | §8 |
#
# Each magic is shown at work in the notebook of its section: 01 (values), 02 (programs), 03 (numerical
# problems), 04 (tracer errors), 05 (compilation and speed), 06 (errors and configuration), 07 (memory),
# 08 (multiple devices) and 09 (the training-script drill, with `%%jax_doctor`).

# %% [markdown]
# ### Where this machine differs from the chapter
#
# The chapter was run on macOS arm64 with Python 3.14. This notebook runs on Linux x86_64 with
# Python 3.13, with the same JAX/jaxlib 0.12.0.1 on CPU. Two differences matter for the set-up:
#
# * The chapter passes every weight matrix as a function argument. It does so because of a CPU
#   miscompile that it reports only on Apple Silicon: a constant matrix captured in a `jit` closure,
#   then `W @ x`, then a sum. That miscompile does not happen here. Passing weights as arguments is
#   still a good habit, and the chapter's other conclusions hold on this machine.
# * The environment lines printed below name Linux and Python 3.13.

# %% [markdown]
# ## Common set-up
#
# Load the extension **first**. Loading jaxmagic must not start a JAX backend. Some settings
# (`XLA_FLAGS`, for example fake CPU devices, or `jax_num_cpu_devices`) only take effect if they are
# set before the backend starts, so `%load_ext` has to leave the backend alone.

# %%
# %load_ext jaxmagic

from jax._src import xla_bridge   # private, but the only direct way to ask "has a backend started?"

assert not xla_bridge.backends_are_initialized(), "%load_ext jaxmagic must not start a JAX backend"
shell = get_ipython()
# every magic of the table's jaxmagic column is registered
LINE_MAGICS = ["jax_bisect", "jax_check", "jax_config", "jax_debug", "jax_devices", "jax_env", "jax_explain", "jax_gather",
               "jax_hlo", "jax_live", "jax_memory", "jax_sharding", "jax_stages", "jax_traceback", "jax_watch"]
CELL_MAGICS = ["jax_compiles", "jax_debug", "jax_doctor", "jax_keys", "jax_leaks", "jax_live", "jax_memory", "jax_nans", "jax_per_device",
               "jax_print", "jax_profile", "jax_transfers"]
missing = [f"%{m}" for m in LINE_MAGICS if shell.find_line_magic(m) is None] + \
          [f"%%{m}" for m in CELL_MAGICS if shell.find_cell_magic(m) is None]
assert missing == [], f"not registered: {missing}"
# ... and the table names every magic jaxmagic registers (a new magic without a row fails here)
from jaxmagic.ipython.magics import JaxMagics
assert sorted(JaxMagics.magics["line"]) == sorted(LINE_MAGICS), sorted(JaxMagics.magics["line"])
assert sorted(JaxMagics.magics["cell"]) == sorted(CELL_MAGICS), sorted(JaxMagics.magics["cell"])
print(f"jaxmagic loaded: {len(LINE_MAGICS)} line and {len(CELL_MAGICS)} cell magics;",
      "JAX backend started:", xla_bridge.backends_are_initialized())

# %% [markdown]
# This is why it matters. A fresh Python process loads the extension into an IPython shell and only
# *then* asks for four fake CPU devices. The request still takes effect.

# %%
from _demo_helpers import run_py, result_lines

AFTER_LOAD = '''
import os
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "jaxmagic")
from jax._src import xla_bridge
print("RESULT backend-started", xla_bridge.backends_are_initialized())
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"   # set *after* loading
import jax
print("RESULT devices", len(jax.devices()))
'''
proc = run_py(AFTER_LOAD)
print(result_lines(proc))
assert proc.returncode == 0, proc.stderr[-2000:]
assert result_lines(proc) == ["backend-started False", "devices 4"]

# %% [markdown]
# Now the imports used throughout the notebooks. We take a snapshot of the whole JAX configuration
# **before** any demonstration runs. The last cell of each notebook checks that no debugging switch
# was left on.
#
# The helpers live in `_demo_helpers.py` next to the notebooks, so that every notebook uses the
# same code:
#
# * `show_error(fn)` runs `fn`. If it raises, it prints `Type: first line` and returns the exception
#   for the next `assert`. Otherwise it returns `None`.
# * `capture_stdout(fn)` returns what `fn` printed, including the asynchronous `jax.debug.print`
#   output (it waits on `jax.effects_barrier()`).
# * `capture_jax_logs` collects the `jax` logger's messages for one `with` block.
# * `CompileCounter` counts XLA compilations through `jax.monitoring` events.
# * `run_py(code, *args)` runs a script in a brand-new Python process, in an environment
#   cleaned of `XLA_FLAGS` and `JAX_*`. Some settings and some global state can only be shown
#   cleanly in a fresh process.
# * `result_lines(proc)` keeps only what follows `RESULT ` on the child's stdout. Everything else
#   the child prints (JAX warnings, a debugger prompt) is ignored.
# * `config_changes(before)` lists the JAX config values that differ from a snapshot.

# %%
import os, sys, io, re, gc, time, json, logging, subprocess, textwrap, traceback, contextlib, functools, warnings
from functools import partial
from collections import Counter

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
import jax.monitoring as monitoring
from jax.experimental import checkify
import jax.test_util                      # must be imported explicitly: `import jax` alone has no jax.test_util
from jax.test_util import check_grads

from _demo_helpers import (to64, show_error, capture_stdout, capture_jax_logs, CompileCounter,
                           run_py, result_lines, config_changes, strip_ansi)

CONFIG_AT_START = dict(jax.config.values)   # compared with the config in the last cell
assert not xla_bridge.backends_are_initialized(), "the imports alone must not start the backend either"

# %%
print("JAX", jax.__version__, "| backend", jax.default_backend(), "| devices", jax.devices(),
      "| Python", sys.version.split()[0], "|", sys.platform)
assert jax.__version__ == "0.12.0.1"   # the chapter's backend is the CPU; the accelerator lane runs this on a TPU
assert xla_bridge.backends_are_initialized()      # asking for the devices is what started it

# %% [markdown]
# The helpers are short; here is the code of the three the notebooks use most, as it is in
# `_demo_helpers.py`:

# %%
import inspect
import _demo_helpers
for helper in (_demo_helpers.show_error, _demo_helpers.capture_stdout, _demo_helpers.CompileCounter):
    print(inspect.getsource(helper))
assert show_error is _demo_helpers.show_error and CompileCounter is _demo_helpers.CompileCounter

# %% [markdown]
# ### The helpers at work
#
# Each helper is checked once here, so later notebooks can rely on it.

# %%
# show_error: returns the exception (or None) so that the next line can assert on it
e_shape = show_error(lambda: jnp.ones(3) + jnp.ones(4))
e_none = show_error(lambda: jnp.ones(3).sum())
assert isinstance(e_shape, TypeError) and "incompatible shapes" in str(e_shape)
assert e_none is None

# capture_stdout: jax.debug.print inside jit is asynchronous; the helper waits for it
out = capture_stdout(lambda: jax.jit(lambda x: (jax.debug.print("x = {x}", x=x), x * 2)[1])(3))
assert out.strip() == "x = 3", out

# capture_jax_logs + a scoped config switch: the compile log is collected, nothing printed
with capture_jax_logs() as logs, jax.log_compiles(True):
    jax.jit(lambda v: v + 1, inline=False)(jnp.arange(3.0))
assert any(m.startswith("Compiling jit(<lambda>)") for m in logs.messages), logs.messages
assert jax.config.jax_log_compiles is False        # the with block switched it off again


# %%
# CompileCounter: one compilation per new input shape, none for a repeated shape
@jax.jit
def scaled(x):
    return 2 * x

with CompileCounter(name="scaled") as cc:
    scaled(jnp.ones(3)); scaled(jnp.ones(3)); scaled(jnp.ones(4))
print("compilations of jit(scaled):", cc.count, cc.events)
assert cc.count == 2

# %%
# run_py: a fresh process, with XLA_FLAGS / JAX_* removed from its environment.
# result_lines: only the RESULT payloads, even right after a prompt such as "(jdb) ".
CHILD = '''
import os, sys, jax
print("some noise from the child")
print("(jdb) RESULT", sys.argv[1], sorted(k for k in os.environ if k.startswith("JAX_") or k == "XLA_FLAGS"))
print("RESULT x64", jax.config.jax_enable_x64)
'''
os.environ["JAX_ENABLE_X64"] = "1"                 # set in the kernel only for this demonstration
try:
    child = run_py(CHILD, "hello")
finally:
    del os.environ["JAX_ENABLE_X64"]
print(result_lines(child))
assert child.returncode == 0, child.stderr[-2000:]
# (where the kernel holds an accelerator its children are sent to the CPU: JAX_PLATFORMS, set on purpose)
put_back = "['JAX_PLATFORMS']" if os.environ.get("JAXMAGIC_CHILD_JAX_PLATFORMS") else "[]"
assert result_lines(child) == [f"hello {put_back}", "x64 False"]

# env= adds variables on purpose
child = run_py("import jax; print('RESULT', jax.config.jax_enable_x64)", env={"JAX_ENABLE_X64": "1"})
assert result_lines(child) == ["True"]

# %% [markdown]
# ### Two of the magics, on healthy code
#
# A magic that finds nothing says so in one line. `-o NAME` stores the report so that the next cell
# can assert on it. Notebook 03 shows both on real bugs.

# %%
# %%jax_nans -o healthy
y = jnp.log(jnp.arange(1.0, 4.0))
z = jax.grad(lambda v: jnp.sum(v ** 2))(y)

# %%
assert healthy.found is False and healthy.status.value == "ok" and healthy.nonfinite == []
# It says what was checked: the cell called no jitted function of its own, so every operation ran eagerly
assert healthy.summary.startswith("No NaN in what was checked: the output of each eager operation JAX checked")
assert "Not looked inside compiled code" in healthy.summary and "--inside" in healthy.summary
assert jax.config.jax_debug_nans is False          # the cell's checking ended with the cell


# %%
def safe_mean(x):
    checkify.check(x.size > 0, "empty input")
    return jnp.mean(x)

# %jax_check safe_mean(jnp.arange(4.0)) -o healthy_check


# %%
assert healthy_check.errors == [] and healthy_check.kinds == [] and healthy_check.status.value == "ok"
assert healthy_check.to_dict()["status"] == "ok"
for report in (healthy, healthy_check):                    # reports are plain, JSON-ready data
    assert json.loads(json.dumps(report.to_dict()))["kind"] == report.kind

# %% [markdown]
# ## Final check: nothing left switched on
#
# Every debugging switch above was scoped, either by a `with` block or by a magic. The
# configuration must be exactly what it was before the first demonstration.

# %%
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert dict(jax.config.values) == CONFIG_AT_START
print("JAX config unchanged since the start ✔")
