# %% [markdown]
# # 10 · Summary and quick reference
#
# The chapter closes with a summary of what each section established and a table of the APIs it used.
# Both are here in our own words, with one more column: the jaxmagic magic that runs the API for one
# cell and reports what it found. The two code cells check that every magic and every API the table
# names exists in this build, so a renamed or removed one makes this notebook fail.

# %% [markdown]
# ## Summary
#
# 1. **Start from the symptom.** NaN: check the loss on the host after each step, then re-run the bad
#    step under `checkify` or `with jax.debug_nans(True):`. Wrong numbers: compare with a float64
#    reference, then bisect with `disable_jit`. Repeated compiling: count the compilations, then read the
#    compile log and the cache-miss explanations.
# 2. **Seeing values.** `jax.debug.print` takes `str.format` syntax; the two-step form
#    `jax.debug.print(ordered=True)(fmt, ...)` is the recommended one. Under `vmap` it prints once per
#    sample, under `grad` only primal values (use a `custom_vjp` probe to see gradients), and inside
#    `vmap` both branches of a `cond` print. `jax.debug.callback` hands NumPy arrays to any Python
#    function. `jax.debug.breakpoint` needs a stdin; for a conditional breakpoint pass the variables into
#    the branch as operands. `disable_jit` turns `jit`, `scan`, `fori_loop` and `cond` into plain Python,
#    but `vmap` still traces.
# 3. **Seeing the program.** A literal in the jaxpr means a value was baked in as a constant. A
#    `jax.named_scope` name shows up in the jaxpr's name stack, in StableHLO (with `debug_info=True`)
#    and in the `op_name` of the optimized HLO.
# 4. **Numerics.** `jax.debug_nans` / `jax.debug_infs` work as context managers. In 0.12.0.1, switched
#    on globally with `config.update`, they stop checking computations that were already cached once a
#    `vmap` has been traced (the `with` form is not affected). A NaN in the backward pass: the message
#    names only the primitive; for a `jax.grad` taken outside `jit` the error's `__cause__`
#    (`JaxStackTraceBeforeTransformation`) holds your forward line, with traceback filtering `auto`
#    or `off`; inside a jitted function there is no `__cause__`. `checkify` has four kinds of check: your own assertions, NaN, division by
#    zero and out-of-bounds indices (which JAX otherwise clamps silently). `vmap(checkify)` reports every
#    failing sample, `checkify(vmap)` only one; `float_checks` does not catch inf. `check_grads` on a
#    `custom_vjp` function works only with `modes=["rev"]`.
# 5. **Tracer errors.** Only `TracerBoolConversionError` subclasses `ConcretizationTypeError`. The
#    message's "depends on the value of the argument …" names the argument. The leak checker
#    (`jax.checking_leaks()`) runs only while tracing, so clear the caches first.
# 6. **Compilation and speed.** One compilation writes 4 log lines. When a static argument's value
#    changes, the cache-miss explanation is "explanation unavailable". `_cache_size()` is private and
#    shared by every `jit` wrapper of the same Python function. `transfer_guard("disallow")` catches
#    implicit host-to-device copies.
# 7. **Errors and configuration.** `JAX_TRACEBACK_FILTERING` has five values; `auto` means
#    `tracebackhide` in Jupyter and `quiet_remove_frames` in a script. Read settings with
#    `jax.config.<name>` or `jax.config.values`, not `config.read`.
# 8. **Memory.** `memory_analysis()` with `ShapeDtypeStruct` inputs estimates memory without allocating
#    any. Snapshots of `live_arrays()` before and after find a leak. `x.delete()` frees at once (using
#    `x` afterwards raises `RuntimeError`, its repr does not). An old global array that a `jit` cache
#    holds as a constant is freed only by `clear_caches()`.
# 9. **Multiple devices.** `jax.typeof` shows the sharding in the type, e.g. `float32[8@data,4@model]`.
#    `visualize_array_sharding` needs rich (installed here); without it, a replacement built on
#    `devices_indices_map` draws the same layout. A `shard_map` with `check_vma=False` can return
#    "replicas" that differ between devices: compare `addressable_shards` one by one.
# 10. **Random numbers.** `jax_debug_key_reuse` catches a reused typed key; old-style `PRNGKey` keys are
#     not checked.

# %% [markdown]
# ## Quick reference
#
# | API | What it does | jaxmagic |
# |---|---|---|
# | `jax.debug.print("x={x:.3f}", x=x)` | print at run time (`str.format` syntax, never an f-string) | `%%jax_print` groups the lines by call site and transformation |
# | `jax.debug.print(ordered=True)(fmt, ...)` | the recommended two-step form; `ordered=True` keeps several prints in order | `%%jax_print` |
# | `jax.debug.log(fmt, ...)` | like `debug.print`, but to Python `logging` (logger `jax._src.debugging`, INFO) | `%%jax_print` |
# | `jax.debug.callback(fn, *args)` | hand runtime values (NumPy arrays) to a host function that returns `None` | `%%jax_print` |
# | `jax.debug.breakpoint()` | stop at run time in jdb (`p pp u d l w c q`) | — (needs an interactive stdin) |
# | `jax.effects_barrier()` | wait until every dispatched callback or print has run | done by `%%jax_print` |
# | `with jax.disable_jit():` | run `jit`, `scan`, `fori_loop`, `cond` as Python (not `vmap`) | `%jax_bisect` |
# | `jax.make_jaxpr(f)(*a)` / `jit(f).trace(*a).jaxpr` | the jaxpr; `eqn.source_info.name_stack` is the name stack | `%jax_hlo` |
# | `jit(f).lower(*a).as_text(debug_info=True)` | StableHLO with source locations and named scopes | `%jax_hlo` |
# | `jit(f).lower(*a).compile().as_text()` | optimized HLO, `metadata={op_name=...}` | `%jax_hlo` |
# | `jax.stages` Traced / Lowered / Compiled | the three stage objects | `%jax_stages` times each stage |
# | `with jax.named_scope("name"):` | prefix the ops inside, to find them in HLO or a trace | `%jax_hlo SCOPE`, `%%jax_profile` |
# | `with jax.debug_nans(True):` / `jax.debug_infs(True)` | raise `FloatingPointError` on NaN / inf in the block | `%%jax_nans [--infs]` |
# | `jax.clear_caches()` | empty the compile caches (global `debug_nans` gap, leak checks, cached constants) | not called by the magics: `%%jax_nans` uses the `with` form, which has no gap; `%%jax_leaks` traces afresh under a cache key of its own (`jax.make_user_context`) and leaves your caches as they were |
# | `checkify.checkify(f, errors=...)` | functional checks, returns `(err, out)`; `err.get()` / `err.throw()` | `%jax_check` |
# | `checkify.check(pred, "msg {v}", v=x)` | your own runtime assertion (must be under `checkify`) | `%jax_check` |
# | `checkify.user_checks` / `nan_checks` / `div_checks` / `index_checks` / `float_checks` / `all_checks` | error sets, combined with `\|` | `%jax_check --errors` |
# | `checkify.debug_check(...)` | a no-op when not under `checkify` | `%jax_check` |
# | `jax.test_util.check_grads(f, args, order, modes)` | finite-difference gradient check; `custom_vjp` needs `modes=["rev"]` | — |
# | `jax.errors.TracerBoolConversionError`, … | the tracer errors; catch them all with `jax.errors.JAXTypeError` | `%jax_explain` (on by default) |
# | `with jax.checking_leaks():` / `jax.check_tracer_leaks(True)` | check for leaked tracers at the end of tracing, with the reference chain | `%%jax_leaks` |
# | `with jax.log_compiles():` | 4 log lines per compilation (shapes, time) | `%%jax_compiles` |
# | `with jax.explain_cache_misses():` | why the cache missed | `%%jax_compiles` |
# | `jit_f._cache_size()` | private: number of cache entries (shared by all wrappers of one function) | — (`%%jax_compiles` does not read it: it counts `jax.monitoring`'s backend-compile events) |
# | `jax.monitoring.register_event_duration_secs_listener` | the base of the chapter's `CompileCounter` (`/jax/core/compile/backend_compile_duration`) | `%%jax_compiles --budget N` |
# | `with jax.transfer_guard("disallow"):` | an implicit host ↔ device copy raises | `%%jax_transfers` |
# | `JAX_TRACEBACK_FILTERING=off` (or `tracebackhide`, `remove_frames`, `quiet_remove_frames`, `auto`) | how much of JAX's own stack a traceback shows; also `jax.config.update("jax_traceback_filtering", ...)` | `%jax_traceback` |
# | `jax.config.jax_debug_nans` / `jax.debug_nans.value` / `jax.config.values` | read the configuration | `%jax_config` |
# | `jax.print_environment_info(return_string=True)` | versions and devices, for a bug report | `%jax_env` |
# | `compiled.memory_analysis()` | argument / output / temporary / peak bytes | `%jax_hlo` (memory before running) |
# | `jax.profiler.save_device_memory_profile(path)` / `device_memory_profile()` | live buffers summed by allocation site (pprof) | `%%jax_live` |
# | `jax.live_arrays()` | every live `jax.Array` | `%jax_live` / `%%jax_live` |
# | `x.delete()` / `x.is_deleted()` | free the device buffer now / has it been freed | `%jax_live` names what holds the rest |
# | `device.memory_stats()` | live memory statistics on GPU/TPU (`None` on CPU) | — |
# | `jax.typeof(x)` | the abstract type, sharding included (`float32[8@data,4@model]`) | `%jax_sharding` |
# | `x.sharding.devices_indices_map(x.shape)` | the slice each device holds | `%jax_sharding` |
# | `jax.debug.visualize_array_sharding(x)` | draw the layout (needs rich) | `%jax_sharding` draws it |
# | `jax.debug.inspect_array_sharding(x, callback=...)` | the sharding the compiler chose, inside `jit` | `%jax_sharding` |
# | `x.addressable_shards` | the data on each local device (are the replicas equal?) | `%jax_sharding`, `%%jax_per_device` |
# | `with jax.debug_key_reuse(True):` | a reused typed key raises `jax.errors.KeyReuseError` | `%%jax_keys` |
# | `jax.random.key_data(key)` | the raw data of a key (to compare two keys) | `%%jax_keys` |
#
# When you do not know which row applies, `%%jax_doctor` runs the cell under every probe and ranks
# what it finds.

# %%
# %load_ext jaxmagic
import jax
import jax.test_util
from jax.experimental import checkify

shell = get_ipython()
# every magic the jaxmagic column names
LINE_MAGICS = ["jax_bisect", "jax_check", "jax_config", "jax_env", "jax_explain", "jax_hlo", "jax_live",
               "jax_sharding", "jax_stages", "jax_traceback"]
CELL_MAGICS = ["jax_compiles", "jax_doctor", "jax_keys", "jax_leaks", "jax_live", "jax_nans", "jax_per_device",
               "jax_print", "jax_profile", "jax_transfers"]
missing = [f"%{m}" for m in LINE_MAGICS if shell.find_line_magic(m) is None] + \
          [f"%%{m}" for m in CELL_MAGICS if shell.find_cell_magic(m) is None]
assert missing == [], f"not registered: {missing}"
print(f"{len(LINE_MAGICS)} line and {len(CELL_MAGICS)} cell magics of the table are registered")

# %%
# every public API the table names exists under that name in this JAX
APIS = {
    jax: ["effects_barrier", "disable_jit", "make_jaxpr", "jit", "named_scope", "debug_nans", "debug_infs",
          "clear_caches", "checking_leaks", "check_tracer_leaks", "log_compiles", "explain_cache_misses",
          "transfer_guard", "print_environment_info", "live_arrays", "typeof", "debug_key_reuse"],
    jax.debug: ["print", "log", "callback", "breakpoint", "visualize_array_sharding", "inspect_array_sharding"],
    jax.stages: ["Traced", "Lowered", "Compiled"],
    checkify: ["checkify", "check", "debug_check", "user_checks", "nan_checks", "div_checks", "index_checks",
               "float_checks", "all_checks"],
    jax.test_util: ["check_grads"],
    jax.errors: ["TracerBoolConversionError", "JAXTypeError", "KeyReuseError"],
    jax.monitoring: ["register_event_duration_secs_listener"],
    jax.profiler: ["save_device_memory_profile", "device_memory_profile"],
    jax.random: ["key_data"],
}
absent = [f"{mod.__name__}.{name}" for mod, names in APIS.items() for name in names if not hasattr(mod, name)]
assert absent == [], f"not in JAX {jax.__version__}: {absent}"
assert jax.__version__ == "0.12.0.1"
assert set(jax.config.values) >= {"jax_debug_nans", "jax_debug_infs", "jax_traceback_filtering",
                                  "jax_log_compiles", "jax_explain_cache_misses", "jax_debug_key_reuse"}
print(sum(map(len, APIS.values())), "APIs of the table exist in JAX", jax.__version__)

# %% [markdown]
# Three claims above about what JAX and the magics do, checked here: where a backward-pass NaN's line
# is; that `%%jax_nans` and `%%jax_leaks` never call `jax.clear_caches()`; that `%%jax_compiles` counts
# compilation events, not `_cache_size()`.

# %%
import pathlib, traceback
import jax.numpy as jnp
import jaxmagic
from jaxmagic.probes._compiles import EVENT_BACKEND_COMPILE

def norm_loss(b):
    return jnp.linalg.norm(b)                       # its gradient at 0 is 0/0

def nan_error(fn):
    with jax.debug_nans(True):
        try:
            fn(jnp.zeros(2))
        except FloatingPointError as e:
            return e
    raise AssertionError("no FloatingPointError")

err_grad, err_jit = nan_error(jax.grad(norm_loss)), nan_error(jax.jit(jax.grad(norm_loss)))
cause_names = [f.name for f in traceback.extract_tb(err_grad.__cause__.__traceback__)]
print(f"grad: {err_grad} | __cause__ {type(err_grad.__cause__).__name__} ends in {cause_names[-1]}")
print(f"jit(grad): {err_jit} | __cause__ {err_jit.__cause__!r}")
assert str(err_grad) == str(err_jit) == "invalid value (nan) encountered in mul"
assert type(err_grad.__cause__).__name__ == "JaxStackTraceBeforeTransformation" and cause_names[-1] == "norm_loss"
assert err_jit.__cause__ is None
del err_grad, err_jit

# count the calls of jax.clear_caches made by the two magics' cells (the next two cells)
cleared = []
real_clear_caches = jax.clear_caches
jax.clear_caches = lambda: (cleared.append(1), real_clear_caches())[1]

# %%
# %%jax_nans -o nans_10
jax.jit(lambda x: x * 2.0)(jnp.ones(3))

# %%
# %%jax_leaks -o leaks_10
jax.jit(lambda x: x * 3.0)(jnp.ones(3))

# %%
jax.clear_caches = real_clear_caches
print("jax.clear_caches() calls during %%jax_nans and %%jax_leaks:", len(cleared), "| leaks retraced by:",
      leaks_10.retrace_method)
assert cleared == [] and not nans_10.found and leaks_10.retrace_method == "user_context"
# the compile magic counts backend-compile events; nothing in jaxmagic reads _cache_size()
package = pathlib.Path(jaxmagic.__file__).parent
assert EVENT_BACKEND_COMPILE == "/jax/core/compile/backend_compile_duration"
assert not [p.name for p in package.rglob("*.py") if "_cache_size" in p.read_text()]

# %% [markdown]
# Last, the state this notebook leaves behind: `%jax_config` lists the JAX switches that differ from
# their defaults. None should: every magic switched its tool on for one cell only.

# %%
# %jax_config -o config_at_end

# %%
assert config_at_end.status.value == "ok", config_at_end.summary
print(config_at_end.summary)
