# %% [markdown]
# # 01 · Seeing values inside compiled code
#
# A plain `print` inside a jitted function runs once, while JAX traces it, and shows a tracer, not a
# number. To see the values a compiled program computes, JAX has four tools:
#
# | Tool | Good for | Cost | jaxmagic |
# |---|---|---|---|
# | `jax.debug.print` | a few intermediate values | one host callback; the compiled numbers are unchanged | `%%jax_print` groups the lines by print and by call |
# | `jax.debug.callback` | handing values to any Python function (statistics, logs, host-side checks) | the same | `%%jax_print` lists each call with its arguments |
# | `jax.debug.breakpoint` | stopping and looking around interactively | needs stdin: dead in Jupyter (jax#11880) | `%%jax_debug` reads its commands in the notebook; without input it records every hit |
# | `jax.disable_jit()` | running the whole thing as plain Python, with `print`, `pdb` and `if` | slow; `vmap` still traces | `%jax_bisect` runs a call jitted, op by op and in float64 |
#
# This notebook goes through them in the chapter's order (its section 1) and checks every statement
# with `assert`.

# %% [markdown]
# ### This machine and the chapter
#
# The chapter ran on macOS arm64 with Python 3.14; this notebook runs on **Linux x86_64 with Python
# 3.13**, with the same JAX/jaxlib 0.12.0.1 on CPU. Everything below behaves as the chapter describes,
# with one exception, said again where it matters: the chapter's section 1.4 uses a CPU miscompile
# (a weight matrix captured by a `jit` closure, then `W @ x`, then a sum) as its example of "jit wrong,
# eager right". That miscompile is seen on Apple Silicon only; it **does not happen here**, so the
# bisection below finds float32 rounding instead - and `%jax_bisect` still points at the captured
# matrix as the trap. The idea of the bisection does not depend on the platform.

# %%
# %load_ext jaxmagic

import io, json, logging, sys
from functools import partial
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

from _demo_helpers import (capture_stdout, capture_jax_logs, run_py, result_lines, to64, config_changes,
                           strip_ansi)

CONFIG_AT_START = dict(jax.config.values)   # the last cell checks that nothing was left switched on
print("JAX", jax.__version__, "| backend", jax.default_backend(), "| Python", sys.version.split()[0], sys.platform)


# %% [markdown]
# ## 1.1 `jax.debug.print`
#
# **Formatting.** The format string follows `str.format`: `{m:.3f}`, positional `{}` and keyword
# `{name}` fields all work. Formatting happens on the host, at run time, with concrete numbers.
# `capture_stdout` (from the shared helpers) waits for the asynchronous prints with
# `jax.effects_barrier()` before reading them.

# %%
@jax.jit
def stats(x):
    jax.debug.print("mean={m:.3f}  max={mx:.2f}  size={n}", m=x.mean(), mx=x.max(), n=x.size)
    jax.debug.print("positional: first={} last={}", x[0], x[-1])
    return x * 2

out = capture_stdout(lambda: stats(jnp.array([1.0, 2.0, 4.5])))
print(out)
assert "mean=2.500" in out and "max=4.50" in out and "size=3" in out
assert "positional: first=1.0 last=4.5" in out


# %% [markdown]
# **An f-string is wrong here**: Python formats it while JAX traces, so it prints the tracer, and
# every later run prints that same line again.

# %%
@jax.jit
def fstring_print(x):
    jax.debug.print(f"x = {x}")      # wrong: formatted at trace time
    return x

@jax.jit
def good_print(x):
    jax.debug.print("x = {x}", x=x)  # right: a plain string, the value as an argument
    return x

try:
    out_bad = capture_stdout(lambda: fstring_print(jnp.float32(3.0)))
except Exception as e:              # a tracer whose text holds braces would even fail to format
    out_bad = f"{type(e).__name__}: {e}"
out_good = capture_stdout(lambda: good_print(jnp.float32(3.0)))
print("f-string :", out_bad.strip())
print("argument :", out_good.strip())
assert "Tracer" in out_bad and "3.0" not in out_bad
assert out_good.strip() == "x = 3.0"

# %% [markdown]
# ### The same prints through `%%jax_print`
#
# `%%jax_print` runs the cell and catches every `jax.debug.print`, `jax.debug.log` and
# `jax.debug.callback` line. Each line is kept with the print that made it (its format string and
# your line) and with the call during which it arrived: after each call of a jitted function the
# magic waits for that call's prints, so a line can never turn up in a later cell's output. The lines
# go into the report instead of the cell's output; an ordinary `print` in the cell is left alone.
#
# Both prints of `stats` are *unordered*: XLA may run them in any order. On this machine they come
# out in reverse order, as in the chapter; the magic notices, because it knows the program order of
# the two prints, and says so.

# %%
# %%jax_print -o pr_stats
print("an ordinary print: not captured")
stats(jnp.array([1.0, 2.0, 4.5]))
stats(jnp.array([0.0, 1.0, 2.0]))

# %%
assert pr_stats.lines_of("mean={m:.3f}  max={mx:.2f}  size={n}") == ["mean=2.500  max=4.50  size=3",
                                                                     "mean=1.000  max=2.00  size=3"]
assert pr_stats.lines_of("positional: first={} last={}") == ["positional: first=1.0 last=4.5",
                                                             "positional: first=0.0 last=2.0"]
assert [c.function for c in pr_stats.calls] == ["stats", "stats"]     # two calls, told apart
site = pr_stats.site_of("positional: first={} last={}")
assert site.line.code == 'jax.debug.print("positional: first={} last={}", x[0], x[-1])'

# Did the first line of each call arrive in program order? The report's verdict must match the arrival.
first_lines = [pr_stats.texts[0], pr_stats.texts[2]]
reversed_calls = sum(t.startswith("positional") for t in first_lines)
print("calls whose prints came out reversed:", reversed_calls, "| reported:", len(pr_stats.out_of_order))
assert len(pr_stats.out_of_order) == reversed_calls
assert pr_stats.out_of_order, "the prints came out in program order: the text above says they do not here"
d = pr_stats.out_of_order[0]
assert d.function == "stats" and d.program[0].startswith("mean=") and d.arrived[0].startswith("positional")
assert "out of program order" in pr_stats.summary

# %% [markdown]
# ### The two-call form and `ordered=True`
#
# JAX 0.12 recommends passing options and format arguments in two calls:
# `jax.debug.print(ordered=True)("step {i}", i=i)`. (Mixing `ordered=` with the format arguments in one
# call is soft-deprecated and gives no warning yet.) `ordered=True` chains the prints with an implicit
# token, so they come out in program order - also across several jitted calls - at the price of one
# serial dependency. Below, `log_order` is made in one cell and used in jitted functions of the next.

# %%
log_order = jax.debug.print(ordered=True)     # first call: the options only; gives a print function

@jax.jit
def stage_a(x):
    for i in range(3):                         # a Python loop: unrolled into three prints while tracing
        log_order("A{i}", i=i)
    return x + 1

@jax.jit
def stage_b(x):
    log_order("B x={x}", x=x)
    return x * 2

out = capture_stdout(lambda: stage_b(stage_a(jnp.float32(1.0))))
print(out)
assert out.split() == ["A0", "A1", "A2", "B", "x=2.0"]

# %%
# %%jax_print -o pr_ordered
stage_b(stage_a(jnp.float32(1.0)))

# %%
assert pr_ordered.texts == ["A0", "A1", "A2", "B x=2.0"]
assert pr_ordered.site_of("A{i}").ordered and pr_ordered.count("A{i}") == 3   # one site, three lines
assert pr_ordered.out_of_order == [] and pr_ordered.status.value == "ok"
assert [c.function for c in pr_ordered.calls] == ["stage_a", "stage_b"]

# %% [markdown]
# ### `jax.debug.log`
#
# Same signature as `debug.print`, but the line goes to Python `logging` (logger
# `jax._src.debugging`, level INFO) instead of stdout: in a training script whose logging is set up,
# debug output then lands next to the other log lines, with timestamps, and can be switched off by
# level. The logger's default level drops INFO, so we raise it for one block.

# %%
dbg_logger = logging.getLogger("jax._src.debugging")
old_level = dbg_logger.level
dbg_logger.setLevel(logging.INFO)
try:
    with capture_jax_logs() as logs:
        jax.block_until_ready(jax.jit(lambda x: (jax.debug.log("loss = {x:.2f}", x=x), x * 2)[1])(jnp.float32(0.25)))
        jax.effects_barrier()
finally:
    dbg_logger.setLevel(old_level)
print("logging received:", logs.messages)
assert logs.messages == ["loss = 0.25"]

# %% [markdown]
# Under `%%jax_print` a log line is listed under its site like a print, and the record still goes to
# `logging` as it would without the magic (here it is dropped by the logger's default level).

# %%
# %%jax_print -o pr_log
jax.jit(lambda x: (jax.debug.log("loss = {x:.2f}", x=x), x * 2)[1])(jnp.float32(0.25))

# %%
log_site = pr_log.site_of("loss = {x:.2f}")
assert log_site.api == "log" and pr_log.lines_of("loss = {x:.2f}") == ["loss = 0.25"]
assert dbg_logger.level == old_level


# %% [markdown]
# ### Under transformations
#
# | Situation | What `jax.debug.print` does |
# |---|---|
# | `vmap` | prints once per sample, with that sample's value |
# | `grad` / `jit(grad)` | runs in the forward pass only: primal values; the gradient is never printed |
# | `lax.cond` | prints only in the branch that runs |
# | `lax.cond` under `vmap` | `vmap` turns the cond into a `select`: both branches run, each prints once per sample |
# | `vmap` + `ordered=True` | works in 0.12 |
#
# First the chapter's check, with `capture_stdout`:

# %%
def body(x):
    jax.debug.print("sees x = {x}", x=x)
    return jnp.sin(x) * x

def branchy(x):
    return lax.cond(x > 0,
                    lambda x: (jax.debug.print("positive branch {x}", x=x), x)[1],
                    lambda x: (jax.debug.print("negative branch {x}", x=x), -x)[1], x)

out_v = capture_stdout(lambda: jax.vmap(body)(jnp.array([1.0, 2.0, 3.0])))
out_g = capture_stdout(lambda: jax.grad(body)(2.0))
out_jg = capture_stdout(lambda: jax.jit(jax.grad(body))(2.0))
out_c = capture_stdout(lambda: jax.jit(branchy)(jnp.float32(1.0)))
out_vc = capture_stdout(lambda: jax.vmap(branchy)(jnp.array([1.0, -1.0])))
out_vo = capture_stdout(lambda: jax.vmap(lambda x: (jax.debug.print(ordered=True)("ordered {x}", x=x), x)[1])(jnp.arange(2.0)))
for name, o in [("vmap", out_v), ("grad", out_g), ("jit(grad)", out_jg), ("cond", out_c),
                ("vmap(cond)", out_vc), ("vmap + ordered", out_vo)]:
    print(f"{name:15s}", o.strip().replace("\n", " | "))

assert out_v.splitlines() == ["sees x = 1.0", "sees x = 2.0", "sees x = 3.0"]
assert out_g.splitlines() == ["sees x = 2.0"] and out_jg.splitlines() == ["sees x = 2.0"]
assert out_c.splitlines() == ["positive branch 1.0"]
assert sorted(out_vc.splitlines()) == sorted(["positive branch 1.0", "positive branch -1.0",
                                              "negative branch 1.0", "negative branch -1.0"])
assert out_vo.splitlines() == ["ordered 0.0", "ordered 1.0"]

# %% [markdown]
# The same table in one `%%jax_print` cell. A print used under several transformations is one site
# per transformation, each with a note on what the transformation does to its output - the "both
# branches, every sample" of a cond under vmap included.

# %%
# %%jax_print -o pr_table
jax.vmap(body)(jnp.array([1.0, 2.0, 3.0]))
jax.grad(body)(2.0)
jax.jit(jax.grad(body))(2.0)
jax.jit(branchy)(jnp.float32(1.0))
jax.vmap(branchy)(jnp.array([1.0, -1.0]))
jax.vmap(lambda x: (jax.debug.print(ordered=True)("ordered {x}", x=x), x)[1])(jnp.arange(2.0))


# %%
def lines_by_context(report):
    table = {}
    for s in report.sites:
        table.setdefault((s.fmt, " > ".join(s.context)), []).extend(
            line.text for line in report.lines if line.site == s.key)
    return table

table = lines_by_context(pr_table)
for (fmt, context), lines in table.items():
    print(f"{context:12s} {fmt:24s} {lines}")
assert table[("sees x = {x}", "vmap")] == ["sees x = 1.0", "sees x = 2.0", "sees x = 3.0"]
assert table[("sees x = {x}", "grad")] == ["sees x = 2.0"] and table[("sees x = {x}", "jit > grad")] == ["sees x = 2.0"]
assert table[("positive branch {x}", "jit > cond")] == ["positive branch 1.0"]
assert sorted(table[("positive branch {x}", "vmap > cond")] + table[("negative branch {x}", "vmap > cond")]) == \
       sorted(["positive branch 1.0", "positive branch -1.0", "negative branch 1.0", "negative branch -1.0"])
assert table[("ordered {x}", "vmap")] == ["ordered 0.0", "ordered 1.0"]
vmap_cond = next(s for s in pr_table.sites if s.context == ["vmap", "cond"])
assert any("BOTH branches" in note for note in pr_table.notes_of(vmap_cond))
grad_site = next(s for s in pr_table.sites if s.context == ["grad"])
assert any("primal" in note for note in pr_table.notes_of(grad_site))

# %% [markdown]
# ### Seeing a gradient: a `custom_vjp` tap
#
# A print in the forward code only ever shows primal values. To see the gradient an intermediate
# value receives, route it through an identity function whose backward rule hands the cotangent to
# the host with `jax.debug.callback`. It changes neither the forward value nor the gradient; it only
# listens. Below the tap's records are compared with the analytic $\partial L/\partial h = 2h$.

# %%
GRAD_TAPS = []

@partial(jax.custom_vjp, nondiff_argnums=(1,))
def grad_tap(x, name):
    """The identity; on the way back, the cotangent it receives is recorded on the host."""
    return x

def _grad_tap_fwd(x, name):
    return x, None

def _grad_tap_bwd(name, _, g):
    jax.debug.callback(lambda g: GRAD_TAPS.append((name, np.asarray(g))), g)
    return (g,)

grad_tap.defvjp(_grad_tap_fwd, _grad_tap_bwd)

def tap_loss(w, x):
    h = grad_tap(jnp.tanh(w * x), "h")
    return jnp.sum(h ** 2)

w_t, x_t = jnp.array([1.0, 2.0]), jnp.array([0.5, 0.1])

# %%
# %%jax_print -o pr_tap
g_w = jax.jit(jax.grad(tap_loss))(w_t, x_t)

# %%
name, g_h = GRAD_TAPS[-1]
print(f"{name} received the gradient", g_h, "| gradient w.r.t. w:", g_w)
h64 = np.tanh(to64(w_t) * to64(x_t))
assert name == "h" and np.allclose(g_h, 2 * h64, atol=1e-6)                        # dL/dh = 2h
assert np.allclose(g_w, 2 * h64 * (1 - h64 ** 2) * to64(x_t), atol=1e-6)           # the tap changes nothing
tap_site = next(s for s in pr_tap.sites if s.api == "callback")
assert "backward" in tap_site.context and len(pr_tap.lines_of(tap_site.fmt)) == 1
print("the report lists the tap as", tap_site.fmt, "under", tap_site.context)


# %% [markdown]
# ## 1.2 `jax.debug.callback`: an activation logger
#
# `debug.print` is `debug.callback` plus formatting. With `callback` the values (NumPy arrays on the
# host) go to any Python function, which must return `None` (to send results back to the device,
# use `jax.pure_callback`). It takes the same two-call form, `jax.debug.callback(ordered=True)(fn, *args)`.
#
# An activation logger that records mean, standard deviation and the share of dead ReLUs of each
# layer inside a jitted forward pass is more useful than printing whole arrays when training diverges.

# %%
class ActivationLog:
    """Records statistics of each layer's activations from inside jit, via jax.debug.callback."""
    def __init__(self):
        self.records = []

    def record(self, name, x):
        def _host(m, s, frac_dead):              # runs on the host, with NumPy arrays
            self.records.append({"layer": name, "mean": float(m), "std": float(s), "dead": float(frac_dead)})
        jax.debug.callback(_host, x.mean(), x.std(), jnp.mean(x <= 0))
        return x

act_log = ActivationLog()

def mlp_forward(params, x):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = act_log.record(f"relu{i}", jax.nn.relu(x))
    return x

k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
params_cb = [(jax.random.normal(k1, (8, 16)) / jnp.sqrt(8.0), jnp.zeros(16)),
             (jax.random.normal(k2, (16, 16)) / 4.0, jnp.zeros(16)),
             (jax.random.normal(k3, (16, 1)) / 4.0, jnp.zeros(1))]
x_cb = jax.random.normal(jax.random.key(1), (32, 8))

# %%
# %%jax_print -o pr_cb
jax.block_until_ready(jax.jit(mlp_forward)(params_cb, x_cb))
jax.block_until_ready(jax.vmap(mlp_forward, in_axes=(None, 0))(params_cb, x_cb[:4]))

# %%
for r in act_log.records[:2]:
    print(f"  {r['layer']}: mean={r['mean']:.3f} std={r['std']:.3f} dead={r['dead']:.2f}")
h0 = np.maximum(to64(x_cb) @ to64(params_cb[0][0]), 0)        # the first layer again, in NumPy float64
assert [r["layer"] for r in act_log.records[:2]] == ["relu0", "relu1"]
tol = 1e-5 if jax.default_backend() == "cpu" else 1e-2  # a TPU multiplies float32 in bfloat16 passes by default
assert abs(act_log.records[0]["mean"] - h0.mean()) < tol and abs(act_log.records[0]["std"] - h0.std()) < tol
# under vmap the callback runs per sample: 4 samples x 2 layers = 8 records after the 2 of the jit call
assert len(act_log.records) == 2 + 8

cb_sites = [s for s in pr_cb.sites if s.api == "callback"]
# count the report's lines per site (the format string is shared by the jit and the vmap site)
calls_per_context = {" > ".join(s.context): len([l for l in pr_cb.lines if l.site == s.key]) for s in cb_sites}
print("callback site:", cb_sites[0].fmt, "| calls per context:", calls_per_context)
assert {s.fmt for s in cb_sites} == {"ActivationLog.record._host"}
assert calls_per_context == {"jit": 2, "vmap": 8}, calls_per_context     # 2 layers; 4 samples x 2 layers

# %% [markdown]
# ## 1.3 `jax.debug.breakpoint`
#
# `jax.debug.breakpoint()` stops the compiled program at run time and opens a debugger, `jdb`, in
# which the variables of the current frame are concrete values. Its commands: `p expr` / `pp expr`
# (print / pretty-print), `u` / `d` (up / down the stack), `l` / `w` (list source / where),
# `c` (continue), `q` (quit, which aborts the program with an exception).
#
# `jdb` reads its commands from the process's `sys.stdin`. In a terminal that is the keyboard; in a
# Jupyter kernel it is not connected to anything you can type into, so a plain breakpoint in a
# notebook cell hangs or ends at once without ever showing a prompt (jax#11880; the same in Colab,
# jax#16187). First the plain `jdb`, where it works: the same code runs in a fresh Python process,
# as the chapter does, and gets `p y`, `p x` and `c` on its stdin.

# %%
BP_SCRIPT = '''
import jax, jax.numpy as jnp

@jax.jit
def f(x):
    y = jnp.sin(x) * 2
    jax.debug.breakpoint()
    return y + 1

print("RESULT", f(jnp.arange(3.0)).tolist())
'''
proc = run_py(BP_SCRIPT, stdin="p y\np x\nc\n")
print(proc.stdout)
assert proc.returncode == 0, proc.stderr[-2000:]
assert "Entering jdb" in proc.stdout and "(jdb)" in proc.stdout
assert "1.6829419" in proc.stdout                                  # p y: sin(1) * 2, a concrete value
assert "Array([0., 1., 2.], dtype=float32)" in proc.stdout         # p x
res = json.loads(result_lines(proc)[0])                            # after c, the program ran to the end
assert np.allclose(res, np.sin(np.arange(3.0)) * 2 + 1, atol=1e-6)

# %% [markdown]
# ### The notebook way: `%%jax_debug`
#
# Put the same code in a cell that starts with `%%jax_debug`. For that cell jaxmagic registers its
# own debugger backend in front of JAX's, and it reads the commands through the kernel, the way
# IPython's `%debug` does. In JupyterLab, when the breakpoint is hit, the cell's output shows where
# it stopped (the cell and line, and the batch element under `vmap`) and an input box opens under
# the cell. You type into that box:
#
# * `p y` or `pp y` prints a value of the stopped frame; `l` lists the source around the line;
# * `u` and `d` move up and down through *your* frames only (JAX's internals are skipped), and `w`
#   lists them;
# * any other line runs as Python in the frame's values (`z = y * 0`, then `p z.sum()`), which
#   `jdb` cannot do (jax#18059);
# * `c` continues to the next hit or the end of the cell; `q` ends the cell there, without an error.
#
# This notebook runs headless (nbclient), with no one to type. Then the cell does not wait: every hit
# is recorded in the report - the line, the values of the frame, the lines that called it - and
# the program runs on. `-o NAME` binds that report, and the cells below assert on it.

# %%
@jax.jit
def f_bp(x):
    y = jnp.sin(x) * 2
    jax.debug.breakpoint()
    return y + 1

# %%
# %%jax_debug -o dbg_plain
out_bp = f_bp(jnp.arange(3.0))

# %%
hit = dbg_plain.hits[0]
values = {v.name: v for v in hit.frame.values}
print(dbg_plain.summary)
assert dbg_plain.hit_count == 1 and not dbg_plain.interactive        # no stdin here: recorded, not asked
assert hit.frame.line.code == "jax.debug.breakpoint()"
assert hit.callers[-1].endswith("out_bp = f_bp(jnp.arange(3.0))")   # the call that reached it
assert values["x"].shape == [3] and values["x"].values == "[0. 1. 2.]"
assert values["y"].values == "[0.     1.6829 1.8186]"                # sin(x) * 2, concrete
assert np.allclose(out_bp, np.sin(np.arange(3.0)) * 2 + 1, atol=1e-6)  # the program ran to the end
assert "No input could be read here" in str(dbg_plain)

# %% [markdown]
# **A conditional breakpoint.** An unconditional breakpoint stops at every step of a training loop.
# More useful: stop only when a NaN appears, by putting the breakpoint in one branch of `lax.cond`.
# Pass the variables you want to look at *as arguments of the branch function*: the debugger stops
# in the branch's frame, and a value the branch only closes over is not visible there (`p y` would
# be a `NameError`).

# %%
def stop_if_nan(x, y):            # the values to inspect come in as arguments
    jax.debug.breakpoint()

@jax.jit
def f_cond(x):
    y = jnp.log(x)
    lax.cond(jnp.any(jnp.isnan(y)), stop_if_nan, lambda x, y: None, x, y)
    return y

# %%
# %%jax_debug -o dbg_cond
ok_run = f_cond(jnp.array([1.0, 2.0]))       # no NaN: the branch with the breakpoint is not taken
nan_run = f_cond(jnp.array([1.0, -2.0]))     # a NaN: it stops (here: the hit is recorded)

# %%
print(dbg_cond.summary)
assert dbg_cond.hit_count == 1                                        # only the run with a NaN stopped
hit = dbg_cond.hits[0]
values = {v.name: v for v in hit.frame.values}
assert hit.frame.line.code == "jax.debug.breakpoint()" and hit.batch_index == []
assert hit.callers[-1].endswith("lax.cond(jnp.any(jnp.isnan(y)), stop_if_nan, lambda x, y: None, x, y)")
assert values["x"].values == "[ 1. -2.]" and values["x"].minimum == -2.0
assert values["y"].values == "[ 0. nan]" and values["y"].nan_count == 1
assert np.isnan(nan_run[1]) and not np.isnan(ok_run).any()            # both calls computed as usual

# %% [markdown]
# **Under `vmap`** (jax#22693: `jdb` fails there) the breakpoint stops once per batch element, and
# each stop says which element it is, with that element's values, unbatched. One caution, which the
# report makes visible: `vmap` turns a `lax.cond` on a batched predicate into a `select` that runs
# *both* branches for every element, so under `vmap` the breakpoint in the NaN branch is hit for
# every element, not only the one whose value is NaN. Look at the batch element and its values to
# find the bad one.

# %%
# %%jax_debug -o dbg_vmap
def log_each(x):
    y = jnp.log(x)
    lax.cond(jnp.isnan(y), stop_if_nan, lambda x, y: None, x, y)
    return y

vm_out = jax.vmap(log_each)(jnp.array([1.0, -2.0, 3.0]))

# %%
print(dbg_vmap.summary)
assert dbg_vmap.hit_count == 3                                        # vmap ran the branch for all 3
assert [hit.batch_index for hit in dbg_vmap.hits] == [[0], [1], [2]]
per_element = [{v.name: v for v in hit.frame.values} for hit in dbg_vmap.hits]
assert [e["x"].shape for e in per_element] == [[], [], []]             # one element at a time
assert [e["x"].values for e in per_element] == ["[1.]", "[-2.]", "[3.]"]
assert [e["y"].nan_count for e in per_element] == [0, 1, 0]            # element 1 is the NaN
assert "batch element 1" in str(dbg_vmap)

# %% [markdown]
# ## 1.4 `jax.disable_jit()`: a debugging aid and a bisection tool
#
# Under `jax.disable_jit()`:
#
# * a function wrapped in `jax.jit` runs as plain Python on concrete arrays: Python `if`, `print` and
#   `pdb` work;
# * `lax.scan`, `lax.fori_loop` and `lax.cond` fall back to Python too: the body runs step by step
#   with concrete values, and `fori_loop`'s index is even a Python `int`;
# * but `vmap` still traces: inside it the function sees a `BatchTracer`, and a Python `if` on a
#   value still fails.

# %%
seen = []
with jax.disable_jit():
    @jax.jit
    def jitted_branch(x):
        seen.append(("argument inside jit", type(x).__name__))
        return x if x > 0 else -x                       # a Python if: legal only under disable_jit
    r1 = jitted_branch(jnp.array(-3.0))
    lax.scan(lambda c, x: (seen.append(("scan carry", type(c).__name__)) or (c + x, c)), jnp.float32(0), jnp.arange(2.0))
    lax.fori_loop(0, 2, lambda i, v: (seen.append(("fori index", type(i).__name__)) or v + i), 0)
    jax.vmap(lambda x: seen.append(("argument inside vmap", type(x).__name__)) or x)(jnp.arange(2.0))
for s in seen:
    print("  ", *s)
kinds = dict(seen)
assert float(r1) == 3.0 and kinds["argument inside jit"] == "ArrayImpl"
assert kinds["scan carry"] == "ArrayImpl"
assert kinds["fori index"] == "int" and kinds["argument inside vmap"] == "BatchTracer"


# %% [markdown]
# **Bisecting wrong numbers.** When a result looks wrong and nothing raises, compute the same function
# three times: jitted, under `disable_jit`, and as a NumPy float64 reference.
#
# * jit wrong, `disable_jit` right: the compilation layer (fusion, constant folding, a backend bug);
#   look at the HLO next (notebook 02);
# * both wrong: your algorithm or your data;
# * both right but a little off the reference: most likely float32 precision.
#
# The chapter's example is the miscompile of a weight matrix captured by a `jit` closure. First by
# hand, as the chapter does:

# %%
def bisect_numeric(fn, *args, ref):
    """Run fn jitted and under disable_jit; return the largest absolute error of each against ref."""
    # Full float32 matmuls: a TPU's default bfloat16 passes are 0.06 off here both ways (a TPU v5e), which would
    # read as "both wrong"; "highest" changes nothing on a CPU.
    with jax.default_matmul_precision("highest"):
        err_jit = float(np.abs(to64(jax.jit(fn)(*args)) - ref).max())
        with jax.disable_jit():
            err_eager = float(np.abs(to64(fn(*args)) - ref).max())
    print(f"    jit error = {err_jit:.3g} | disable_jit error = {err_eager:.3g}")
    return err_jit, err_eager

W_bug = jax.random.normal(jax.random.key(1), (128, 128)) / jnp.sqrt(128.0)
X_bug = jax.random.normal(jax.random.key(2), (50, 128))
ref_bug = (to64(W_bug) @ to64(X_bug).T).sum(0)                    # NumPy float64 reference

def closure_version(X):          # the weights are captured by the closure: constants of the program
    return jax.vmap(lambda x: jnp.sum(W_bug @ x))(X)

err_jit, err_eager = bisect_numeric(closure_version, X_bug, ref=ref_bug)
assert err_eager < 1e-3
import platform
if sys.platform == "darwin" and platform.machine() == "arm64":     # where the chapter saw the miscompile
    assert err_jit > 1.0, "no miscompile on macOS arm64: perhaps fixed in a newer jaxlib"
print("jit wrong, eager right: the compilation layer" if err_jit > 1.0 else
      "No miscompile on this machine: jit is right too (the chapter saw it on Apple Silicon only).")

# %% [markdown]
# ### The same bisection with `%jax_bisect`
#
# `%jax_bisect CALL --ref EXPR` does the three runs and says which layer is wrong, with the largest
# absolute and relative errors of each run. It also looks at the traced program for arrays the
# function captures by closure - the pattern behind the chapter's miscompile - and names them.
# (An `--ref` expression with spaces goes in quotes.) On a TPU, float32 matrix products run in bfloat16
# passes by default, and both runs miss a float64 reference alike; before calling that "the algorithm",
# the probe runs them again under `jax.default_matmul_precision("highest")` and, when that puts them
# right, says the precision is the cause (the hand-made bisection above asks for "highest" itself).

# %%
# %jax_bisect closure_version(X_bug) --ref ref_bug -o bis_closure

# %%
print(bis_closure.verdict, "| jit", bis_closure.jit.max_abs_error, "| eager", bis_closure.eager.max_abs_error)
assert [c.name for c in bis_closure.captured] == ["W_bug"] and bis_closure.captured[0].shape == (128, 128)
assert "captures `W_bug` by closure" in bis_closure.summary
if err_jit > 1.0:                                  # the miscompile (Apple Silicon)
    assert bis_closure.verdict == "compilation"
elif jax.default_backend() == "cpu":               # here: both runs are right up to float32 rounding
    assert bis_closure.verdict == "precision" and bis_closure.jit.max_rel_error < 1e-4
    assert bis_closure.eager.max_rel_error < 1e-4
else:  # a TPU: both 0.06 off at its default bfloat16 passes; the probe ran them again at "highest", right there
    assert bis_closure.verdict == "matmul_precision" and bis_closure.matmul_precision.explains


# %% [markdown]
# The fix the chapter recommends: pass the weights as an argument. No constant is captured any more.
# Without `--ref`, `%jax_bisect` builds its own reference when it can do so soundly: the same function,
# op by op, with every float input upcast to float64 under `jax.enable_x64` - here it can.

# %%
def param_version(W, X):
    return jax.vmap(lambda x: jnp.sum(W @ x))(X)

err_jit, err_eager = bisect_numeric(param_version, W_bug, X_bug, ref=ref_bug)
assert err_jit < 1e-3 and err_eager < 1e-3

# %%
# %jax_bisect param_version(W_bug, X_bug) -o bis_param

# %%
assert bis_param.captured == [] and bis_param.reference_kind == "float64"
if jax.default_backend() == "cpu":
    assert bis_param.verdict == "precision"
    assert abs(bis_param.jit.max_abs_error - err_jit) < 1e-6      # the same error the hand-made bisection found
else:                                                             # a TPU's default bfloat16 passes, as above
    assert bis_param.verdict == "matmul_precision", bis_param.summary


# %% [markdown]
# The other two verdicts, on code that is wrong for other reasons. A variance computed as
# `mean(x**2) - mean(x)**2` cancels catastrophically in float32 for data far from zero: jit and eager
# are both wrong against the float64 run, so the algorithm is to blame. And a function that behaves
# differently when traced stands in for a compiler bug: jit wrong, eager right.

# %%
def variance_by_moments(x):
    return jnp.mean(x ** 2) - jnp.mean(x) ** 2

x_far = jnp.array([1e4 + 1, 1e4 + 2, 1e4 + 3], dtype=jnp.float32)

def stand_in_for_a_miscompile(x):
    if isinstance(x, jax.core.Tracer):           # only the traced (compiled) program computes this
        return x * 2.0 + 0.5
    return x * 2.0


# %%
# %jax_bisect variance_by_moments(x_far) -o bis_var

# %%
# %jax_bisect stand_in_for_a_miscompile(jnp.arange(4.0)) --ref "np.arange(4.0) * 2" -o bis_mis

# %%
assert bis_var.verdict == "algorithm" and bis_var.reference_kind == "float64"
assert abs(np.var(to64(x_far)) - 2 / 3) < 1e-9                  # what the float64 run computed
assert bis_mis.verdict == "compilation" and bis_mis.eager.equal and bis_mis.jit.max_abs_error == 0.5
assert "%jax_hlo" in bis_mis.document().fix                      # the next step, under the headline

# %% [markdown]
# ## Nothing left switched on
#
# Every magic above switched its tools on for its own cell only. The configuration must be what it
# was at the start.

# %%
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert dict(jax.config.values) == CONFIG_AT_START
print("JAX config unchanged since the start ✔")
