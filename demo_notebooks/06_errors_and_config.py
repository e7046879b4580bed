# %% [markdown]
# # 06 · Reading errors, checking the configuration
#
# A `jit` call passes through dozens of JAX's own functions before your code runs, and a debugging
# switch left on can quietly slow everything down. This notebook covers the three tools for that:
#
# * `%jax_traceback [MODE]` shows how JAX filters its frames out of tracebacks
#   (`jax_traceback_filtering`, five modes), switches the mode for the next cells when given one,
#   and summarises the last exception: your frames only, with their lines, and how many frames were
#   JAX's.
# * `%jax_config [--all] [PATTERN]` lists the JAX flags that differ from a fresh process's defaults
#   (read once from a subprocess and cached), with both values and what set them.
# * `%jax_env [--show-host]` is `jax.print_environment_info()` ready to paste into an issue, with
#   the host name hidden unless you ask for it.

# %% [markdown]
# ### This machine and the chapter
#
# The chapter was run on macOS arm64 with Python 3.14; this notebook runs on **Linux x86_64 with
# Python 3.13**, JAX/jaxlib 0.12.0.1 on CPU. The frame counts of the five traceback modes measured
# here are the chapter's (11, 11, 11, 6, 6), the flag count is the same (144), and the environment
# info names Linux and Python 3.13 instead of Darwin and 3.14.

# %%
# %load_ext jaxmagic

import os, re, sys, json, traceback
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

import jaxmagic.probes
from _demo_helpers import show_error, run_py, result_lines, config_changes, pop_last_error, CompileCounter

E = jax.errors
CONFIG_AT_START = dict(jax.config.values)   # the last cell checks that nothing was left switched on
print("JAX", jax.__version__, "| backend", jax.default_backend(), "| Python", sys.version.split()[0], "|", sys.platform)

# %% [markdown]
# ## 6.1 `jax_traceback_filtering`: how many of JAX's frames a traceback shows
#
# The valid values, read from JAX itself (an invalid value makes `jax.config.update` list them):

# %%
try:
    jax.config.update("jax_traceback_filtering", "bogus")
except ValueError as e:
    valid = re.search(r"must be in (\[.*?\])", str(e)).group(1)
MODES_HERE = sorted(eval(valid))
print("valid modes:", MODES_HERE)
assert MODES_HERE == sorted(["off", "tracebackhide", "remove_frames", "quiet_remove_frames", "auto"])
assert jax.config.jax_traceback_filtering == "auto"        # the failed update changed nothing

# %% [markdown]
# `%jax_traceback` explains each mode and says which one `auto` means here: in IPython >= 7.17 it
# is `tracebackhide` (frames are kept but marked, and IPython folds them into
# "[... skipping hidden N frame]"); in a plain Python process it is `quiet_remove_frames`.

# %%
# %jax_traceback -o tb_modes

# %%
assert tb_modes.mode == "auto" and tb_modes.resolved == "tracebackhide"
from jaxmagic.probes._tracebacks import MODES
assert sorted(MODES) == MODES_HERE


# %% [markdown]
# The mode is read when an exception is raised, so it can be switched at any time. The same error
# under each of the five modes, counting the frames in the traceback, JAX's own frames among them,
# the `__cause__` and the notes JAX attaches; the last column is what the `%jax_traceback` probe
# counts as your frames.

# %%
def inner_reshape(x):
    return x.reshape(3, 5)            # 4 elements into 3x5: fails

outer_jit = jax.jit(lambda x: inner_reshape(x) * 2)

def tb_profile(mode):
    jax.config.update("jax_traceback_filtering", mode)
    try:
        outer_jit(jnp.ones(4))
    except Exception as e:
        frames = traceback.extract_tb(e.__traceback__)
        view = jaxmagic.probes.traceback_view(e)
        return {"frames": len(frames),
                "jax": sum("/jax/_src/" in f.filename for f in frames),
                "cause": type(e.__cause__).__name__ if e.__cause__ else "-",
                "notes": len(getattr(e, "__notes__", [])),
                "user": [f.name for f in frames
                         if "site-packages" not in f.filename and os.path.dirname(jax.__file__) not in f.filename],
                "view": view}
    finally:
        jax.config.update("jax_traceback_filtering", "auto")

tb = {mode: tb_profile(mode) for mode in ["auto", "tracebackhide", "off", "remove_frames", "quiet_remove_frames"]}
for mode, r in tb.items():
    print(f"  {mode:20s} frames {r['frames']:2d} | JAX's {r['jax']:2d} | __cause__ {r['cause']:20s} | notes {r['notes']}"
          f" | yours: {[f.function for f in r['view'].your_frames]}")

assert tb["auto"]["frames"] == tb["tracebackhide"]["frames"] == tb["off"]["frames"]   # in Jupyter auto = tracebackhide
assert tb["remove_frames"]["frames"] < tb["off"]["frames"]
assert tb["remove_frames"]["cause"] == "UnfilteredStackTrace" and tb["quiet_remove_frames"]["notes"] == 1
assert all("inner_reshape" in r["user"] for r in tb.values())                       # your frames always stay
assert [r["frames"] for r in tb.values()] == [11, 11, 11, 6, 6]                     # the chapter's counts, here too
for r in tb.values():                                                                 # the probe counts the same
    assert r["view"].frames_total == r["frames"] and r["view"].your_frames[-1].function == "inner_reshape"
assert jax.config.jax_traceback_filtering == "auto"

# %% [markdown]
# ### Switching with the magic, and reading your frames
#
# `%jax_traceback off` switches filtering off for the following cells (what you want before filing
# a bug report with JAX). The failing cell then shows every frame; `%jax_traceback` afterwards
# summarises the last error: your frames, with the line of each, outermost first. Under `jit` your
# code appears twice: where the jitted function was called, and inside the traced function.

# %%
# %jax_traceback off -o tb_off

# %%
assert jax.config.jax_traceback_filtering == "off" and tb_off.previous_mode == "auto"

# %% tags=["raises-exception"]
outer_jit(jnp.ones(4))

# %%
# %jax_traceback auto -o tb_last

# %%
err = pop_last_error()
assert isinstance(err, TypeError) and str(err).startswith("cannot reshape array of shape (4,)")
assert jax.config.jax_traceback_filtering == "auto" and tb_last.previous_mode == "off"
assert tb_last.error.startswith("TypeError: cannot reshape array of shape (4,) (size 4) into shape (3, 5)")
assert [f.function for f in tb_last.your_frames] == ["<module>", "<lambda>", "inner_reshape"]
assert tb_last.your_frames[-1].code == "return x.reshape(3, 5)            # 4 elements into 3x5: fails"
assert tb_last.frames_total == tb["off"]["frames"] and tb_last.frames_jax == tb["off"]["jax"]   # mode off: all 11
print(tb_last.summary)

# %% [markdown]
# ### In a plain Python process
#
# Outside IPython, `auto` means `quiet_remove_frames`: the traceback ends with a short note saying
# that JAX removed its frames. `JAX_TRACEBACK_FILTERING=off` in the environment keeps them all, and
# an invalid value makes `import jax` itself fail.

# %%
TB_SCRIPT = """
import jax, jax.numpy as jnp
jax.jit(lambda x: x.reshape(3, 5))(jnp.ones(4))
"""
tb_auto = run_py(TB_SCRIPT).stderr
tb_off_env = run_py(TB_SCRIPT, env={"JAX_TRACEBACK_FILTERING": "off"}).stderr
tb_bad = run_py("import jax", env={"JAX_TRACEBACK_FILTERING": "bogus"}).stderr
print("end of the auto traceback:\n   ", "\n    ".join(tb_auto.strip().splitlines()[-3:]))
print(f"stderr lines: auto {len(tb_auto.splitlines())}, off {len(tb_off_env.splitlines())}")
print("invalid value:", tb_bad.strip().splitlines()[-1])
assert "JAX has removed its internal frames" in tb_auto and "JAX has removed" not in tb_off_env
assert len(tb_off_env.splitlines()) > len(tb_auto.splitlines())
assert 'Invalid value "bogus" for JAX flag jax_traceback_filtering' in tb_bad

AUTO_OUTSIDE = "from jaxmagic.probes._tracebacks import resolved_mode\nprint('RESULT', resolved_mode())"
assert result_lines(run_py(AUTO_OUTSIDE)) == ["quiet_remove_frames"]


# %% [markdown]
# ### How to read a JAX traceback (from the bottom up)
#
# 1. The last line: the exception and its message. For a tracer error, look for "The error occurred
#    while tracing the function ... argument ..." (notebook 04; the explainer says it in one line).
# 2. Going up, the first frame of your own file is the line that failed. Under `jit` your frames
#    appear twice: at the call of the jitted function and inside the traced function
#    (`inner_reshape` above).
# 3. The `jax/_src/...` frames in between can usually be skipped; "[... skipping hidden N frame]"
#    is what `tracebackhide` folded away.
# 4. Runtime errors (`JaxRuntimeError`, `XlaRuntimeError`) happen inside the compiled program: the
#    stack shows only the call, not the lines inside. Narrow them down with `checkify`
#    (`%jax_check`) or `jax.debug.print`.
# 5. Use `JAX_TRACEBACK_FILTERING=off` only when you suspect JAX itself and need to give its
#    maintainers the full picture.
#
# The chapter's small helper that keeps only your frames, and the magic's view of the same error,
# agree:

# %%
JAX_DIR = os.path.dirname(jax.__file__)   # JAX's frames, wherever it is installed (not always site-packages)

def user_frames(exc, skip=("site-packages", "<frozen", JAX_DIR)):
    """The frames of an exception's traceback that are not third-party code: [(function, line, code)]."""
    return [(f.name, f.lineno, (f.line or "").strip()) for f in traceback.extract_tb(exc.__traceback__)
            if not any(s in f.filename for s in skip)]

try:
    outer_jit(jnp.ones(4))
except Exception as e:
    uf = user_frames(e)
    view = jaxmagic.probes.traceback_view(e)
for name, lineno, line in uf:
    print(f"  {name:15s} line {lineno}: {line}")
assert uf[-1][0] == "inner_reshape" and "reshape(3, 5)" in uf[-1][2]
assert [(f.function, f.code) for f in view.your_frames] == [(name, line) for name, _, line in uf]
del view

# %% [markdown]
# ## 6.2 What is `jax.config` set to?
#
# A debugging switch left on is a common cause of "the code got slow for no reason"
# (`jax_debug_nans` and `jax_check_tracer_leaks` both switch some caching off). Ways to read the
# configuration:
#
# | Form | Note |
# |---|---|
# | `jax.config.jax_debug_nans` | the usual way, attribute access |
# | `jax.debug_nans.value` | works for every option that has a context manager of the same name |
# | `jax.config.values` | a dict of all options (144 in 0.12.0.1) |
# | `jax.config.read("jax_debug_nans")` | ⚠️ raises `AttributeError` for options with a context manager: avoid |
# | environment variables such as `JAX_DEBUG_NANS=1` | read when the process starts; same effect as `config.update` |
#
# The chapter writes `nondefault_flags()`: read the defaults once in a clean subprocess, then
# compare. `%jax_config` is that function as a magic, with the same values (as `repr` strings).

# %%
_DEFAULTS_SCRIPT = """
import jax, json
print("RESULT " + json.dumps({k: repr(v) for k, v in jax.config.values.items()}))
"""
DEFAULT_FLAGS = json.loads(result_lines(run_py(_DEFAULTS_SCRIPT, opens_device=False))[0])   # reads options only

def nondefault_flags():
    """Options of this process that differ from the defaults: {name: (default, current)}."""
    return {k: (DEFAULT_FLAGS.get(k), repr(v)) for k, v in jax.config.values.items() if DEFAULT_FLAGS.get(k) != repr(v)}

print("number of options:", len(jax.config.values))
print("attribute / .value:", jax.config.jax_debug_nans, jax.debug_nans.value)
e_read = show_error(lambda: jax.config.read("jax_debug_nans"))
with jax.debug_nans(True), jax.log_compiles(True):
    inside = nondefault_flags()
    # %jax_config -o cfg_inside
print("changed inside the with block:", inside)
print("outside:", nondefault_flags())
assert len(jax.config.values) == 144 and isinstance(e_read, AttributeError)
assert set(inside) == {"jax_debug_nans", "jax_log_compiles"} and nondefault_flags() == {}
assert cfg_inside.nondefault == inside                         # the magic and the chapter's function agree
assert {f.source for f in cfg_inside.changed} == {"set in this process"}

# %% [markdown]
# `%jax_config --all` lists every option with its value; a word instead lists the options whose
# name contains it, which is the quickest way to find the one you half remember.

# %%
# %jax_config debug -o cfg_debug

# %%
names = [f.name for f in cfg_debug.flags]
assert "jax_debug_nans" in names and "jax_debug_infs" in names and all("debug" in n for n in names)
assert cfg_debug.nondefault == {}
cfg_all = jaxmagic.probes.config_diff(all_flags=True)
assert len(cfg_all.flags) == cfg_all.total == 144

# %% [markdown]
# Environment variables have the same effect as `config.update`, but only when the process starts.
# A fresh process started with three of them set, and the same process asked through the
# `%jax_config` probe, which names the variable behind each change:

# %%
env_proc = run_py("""
import jax
print("RESULT", jax.config.jax_debug_nans, jax.config.jax_log_compiles, jax.config.jax_traceback_filtering)
from jaxmagic.probes import config_diff
for flag in config_diff().changed:
    print("RESULT", flag.name, flag.current, "|", flag.source)
""", env={"JAX_DEBUG_NANS": "1", "JAX_LOG_COMPILES": "true", "JAX_TRACEBACK_FILTERING": "off"}, opens_device=False)
lines = result_lines(env_proc)
print("\n".join(lines))
assert lines[0] == "True True off"
assert lines[1:] == ["jax_debug_nans True | environment variable JAX_DEBUG_NANS=1",
                     "jax_log_compiles True | environment variable JAX_LOG_COMPILES=true",
                     "jax_traceback_filtering 'off' | environment variable JAX_TRACEBACK_FILTERING=off"]

# %% [markdown]
# ## 6.3 `jax.print_environment_info()`
#
# The first thing to paste when you ask for help or file an issue. `return_string=True` returns the
# text instead of printing it. Its `platform` line contains the host name, which you may not want
# to publish; the chapter removes it with a regular expression:

# %%
env_info = jax.print_environment_info(return_string=True)
safe_info = re.sub(r"node='[^']*'", "node='<removed>'", env_info)
print(safe_info)
assert f"jax:    {jax.__version__}" in env_info and "jaxlib:" in env_info and "device info:" in env_info
assert "node='<removed>'" in safe_info

# %% [markdown]
# `%jax_env` does the same (and also replaces the host name wherever else it appears), lists the
# `JAX_*` / `XLA_*` environment variables of the process, and keeps the versions as fields.
# `--show-host` keeps the name.

# %%
# %jax_env -o env_rep

# %%
import platform
assert env_rep.versions["jax"] == jax.__version__ == "0.12.0.1" and env_rep.versions["jaxlib"] == "0.12.0.1"
# on a TPU v5e: "TPU v5 lite-1, 1 local devices"
assert env_rep.devices == f"{jax.devices()[0].device_kind}-1, 1 local devices" and env_rep.process_count == "1"
assert "node='<hidden>'" in env_rep.text and platform.node() not in env_rep.text
assert "system='Linux'" in env_rep.text           # the chapter's machine said Darwin
print(env_rep.summary)

# %% [markdown]
# ## Final check: nothing left switched on
#
# The traceback mode was switched by hand and by `%jax_traceback`, and debugging switches were on
# inside `with` blocks. Nothing may differ from a fresh process, and the configuration must be what
# it was at the start.

# %%
# %jax_config -o final_config

# %%
assert final_config.nondefault == {}, final_config.nondefault
assert config_changes(CONFIG_AT_START) == {} and dict(jax.config.values) == CONFIG_AT_START
print("JAX config unchanged since the start ✔")
