# %% [markdown]
# # 04 · Tracer errors: what they mean, which argument caused them, how to fix them
#
# Inside `jax.jit`, `jax.vmap` or `lax.scan`, a function does not receive numbers. It receives
# *tracers*: stand-ins that know a shape and a dtype but no values. Any Python operation that needs
# a value then fails: an `if`, a `range()`, `float()`, a NumPy function, an output shape that
# depends on data. These are the first errors almost every JAX user meets.
#
# | You wrote | JAX raises | Standard fixes |
# |---|---|---|
# | `if x > 0:`, `while x > 1:`, `and` / `or` | `TracerBoolConversionError` | `jnp.where`, `lax.cond`, `lax.while_loop` |
# | `range(n)`, `[a, b, c][i]` (`__index__`) | `TracerIntegerConversionError` | `static_argnames`; `lax.fori_loop`; `jnp.asarray(list)[i]` |
# | `np.sin(x)`, `np.asarray(x)` (`__array__`) | `TracerArrayConversionError` | the `jnp` twin; `jax.pure_callback` when you really need NumPy |
# | `float(x)`, `int(x)`, `x.item()`, `jnp.arange(n)`, `jnp.nonzero(x)` | `ConcretizationTypeError` | static arguments; a fixed size and a mask; `jnp.nonzero(x, size=k)` |
# | `x[x > 0]` (boolean mask) | `NonConcreteBooleanIndexError` (an `IndexError`) | `jnp.where(mask, x, 0)` and a masked sum |
# | `jnp.zeros(n)`, `x.reshape(n, -1)` with a traced `n` | plain `TypeError`: "Shapes must be 1D sequences of concrete values" | make the shape argument static |
# | `x[i:i+2]` with a traced `i` | plain `IndexError` | `lax.dynamic_slice(x, (i,), (2,))` |
#
# jaxmagic helps in three ways:
#
# * **The explainer is on as soon as the extension is loaded.** When a cell raises one of these
#   errors (or an `UnexpectedTracerError`, a `KeyReuseError`, or the "Leaked trace" error of leak
#   checking), a short report appears *above* the normal traceback. It names the traced function,
#   the argument(s) the value depends on, your line, and the fixes from the table above, with your
#   names filled in. Every other exception is shown exactly as before. `%jax_explain off` turns it
#   off and puts back whatever handler IPython had before.
# * `%jax_explain` explains the last exception, or `%jax_explain err` a caught one, and `-o NAME`
#   stores the report so the next cell can assert on it.
# * `%%jax_leaks` runs a cell with tracer-leak checking. It makes every function in the cell trace
#   again, so a cached trace cannot hide a leak, and it names the variable that holds each leaked
#   tracer: `leaked[0]`, `cache.store['h']`, `m_leak.last_hidden`.
#
# Cells that are meant to fail carry the `raises-exception` tag, so the notebook still runs from
# top to bottom. The cell after each one asserts on the stored report and on the exception, which
# IPython keeps as `sys.last_value`.

# %% [markdown]
# ### This machine and the chapter
#
# The chapter was run on macOS arm64 with Python 3.14. This notebook runs on **Linux x86_64 with
# Python 3.13**, with the same JAX/jaxlib 0.12.0.1 on CPU. The error classes, their messages and the
# leak-checking behaviour are the same here; every assertion of the chapter's section holds
# unchanged. Object ids in JAX's leak messages differ from run to run, which is one reason
# `%%jax_leaks` replaces them with names.

# %%
# %load_ext jaxmagic

import re, sys, json, traceback
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

import jaxmagic.probes
from _demo_helpers import show_error, run_py, result_lines, config_changes, pop_last_error, CompileCounter

E = jax.errors
CONFIG_AT_START = dict(jax.config.values)   # the last cell checks that nothing was left switched on
print("JAX", jax.__version__, "| backend", jax.default_backend(), "| Python", sys.version.split()[0], "|", sys.platform)

shell = get_ipython()
assert shell.custom_exceptions == (Exception,), "the explainer is installed by %load_ext"

# %% [markdown]
# ## The exception classes, as they really are
#
# It is tempting to think that all tracer errors derive from `ConcretizationTypeError` and can be
# caught together. In 0.12.0.1 only `TracerBoolConversionError` does. `TracerIntegerConversionError`
# and `TracerArrayConversionError` derive directly from `JAXTypeError`, which is a `TypeError`;
# the boolean-index error is an `IndexError`. To catch the whole family, catch
# `jax.errors.JAXTypeError` (or `TypeError`) and `IndexError`.

# %%
for cls in [E.ConcretizationTypeError, E.TracerBoolConversionError, E.TracerIntegerConversionError,
            E.TracerArrayConversionError, E.NonConcreteBooleanIndexError, E.UnexpectedTracerError]:
    print(f"  {cls.__name__:30s} -> {[c.__name__ for c in cls.__mro__[1:4]]}")

assert issubclass(E.TracerBoolConversionError, E.ConcretizationTypeError)
assert not issubclass(E.TracerIntegerConversionError, E.ConcretizationTypeError)
assert not issubclass(E.TracerArrayConversionError, E.ConcretizationTypeError)
assert all(issubclass(c, E.JAXTypeError) and issubclass(c, TypeError) for c in
           [E.ConcretizationTypeError, E.TracerIntegerConversionError, E.TracerArrayConversionError,
            E.UnexpectedTracerError])
assert issubclass(E.NonConcreteBooleanIndexError, IndexError)


# %% [markdown]
# ## Reading a tracer error: two sentences matter
#
# The message is long, but two sentences carry the diagnosis:
#
# 1. the first line says which conversion failed ("Attempted boolean conversion of traced array
#    with shape bool[]");
# 2. "The error occurred while tracing the function *f* at *file:line* for jit. This concrete value
#    was not available in Python because it depends on the value of the argument *x*." With several
#    arguments it reads "the values of the arguments x and limit".
#
# The fix is then one of two things: make that argument static, or replace the Python control
# flow that needs its value with a JAX primitive. Here is the sentence extracted by hand, the way
# the chapter does it:

# %%
def clip_positive(x, limit):
    if x > limit:                  # needs the values of x and limit
        return limit
    return x

e_clip = show_error(lambda: jax.jit(clip_positive)(jnp.float32(3.0), 1.0))
msg = " ".join(str(e_clip).split())                 # the message wraps lines: make it one line first
m = re.search(r"The error occurred while tracing the function (\S+) at \S+ for jit\..*?"
              r"depends on the values? of the arguments? (.+?)\.", msg)
print("function:", m.group(1), "| argument(s):", m.group(2))
assert isinstance(e_clip, E.TracerBoolConversionError)
assert m.group(1) == "clip_positive" and m.group(2) == "x and limit"   # both take part in the comparison

# %% [markdown]
# `%jax_explain e_clip` does the same reading for any tracer error, and adds what the message
# does not say: which names on your line were tracers (here both, and `limit` arrived as a Python
# float, a *weakly typed* tracer, so it is the natural candidate for `static_argnames`), and the
# fixes for this kind of error.

# %%
# %jax_explain e_clip -o rep_clip

# %%
assert rep_clip.error_kind == "bool" and rep_clip.traced_function == "clip_positive"
assert rep_clip.depends_on == ["x", "limit"] and rep_clip.depends_text == "x and limit"   # the chapter's sentence
assert rep_clip.failing_line.code.startswith("if x > limit:")
assert [(t.name, t.weak_type) for t in rep_clip.traced_names] == [("x", False), ("limit", True)]
# the fixes are written with your code: the `if` only chooses between `limit` and `x`, and each
# rewrite was traced by jaxmagic on the shapes of your values
assert [f.use for f in rep_clip.fixes][:2] == ["jnp.where(x > limit, limit, x)", "lax.cond(x > limit, lambda: limit, lambda: x)"]
assert rep_clip.fixes[0].checked.startswith("checked: traces with limit: float32[], x: float32[]")
assert "jax.jit(clip_positive, static_argnames=('limit',))" in [f.use for f in rep_clip.fixes]
print(rep_clip.summary)

# %% [markdown]
# ### The explainer at work
#
# Nothing needs to be typed for the explanation to appear: the next cell simply fails, and the
# report shows above IPython's usual traceback, which is unchanged (the hidden-frame folding, the
# message, `sys.last_value` for `%debug` all work as usual). `%jax_explain` with no argument
# explains the last exception again, and stores it.

# %% tags=["raises-exception"]
jax.jit(clip_positive)(jnp.float32(3.0), 1.0)

# %%
# %jax_explain -o rep_last

# %%
err = pop_last_error()
assert isinstance(err, E.TracerBoolConversionError)
assert rep_last.depends_on == ["x", "limit"] and rep_last.failing_line.code.startswith("if x > limit:")


# %% [markdown]
# ## 4.1 `TracerBoolConversionError`
#
# A Python `if` on a traced value. Elementwise, `jnp.where` computes both sides and picks;
# `lax.cond` runs only one branch (the predicate must be a scalar).

# %%
# wrong: a Python if on a traced value
@jax.jit
def relu_if(x):
    if x > 0:
        return x
    return 0.0 * x

e_bool = show_error(lambda: relu_if(jnp.float32(2.0)))
rep = jaxmagic.probes.explain(e_bool)
print("   explainer:", rep.summary)
assert isinstance(e_bool, E.TracerBoolConversionError)
assert rep.traced_function == "relu_if" and rep.depends_on == ["x"] and rep.fixes[0].use.startswith("jnp.where")


# %%
# right: jnp.where elementwise, lax.cond when only one branch may run
@jax.jit
def relu_where(x):
    return jnp.where(x > 0, x, 0.0)

@jax.jit
def relu_cond(x):
    return lax.cond(x > 0, lambda x: x, lambda x: 0.0 * x, x)

xs = jnp.array([-2.0, 0.0, 3.0])
print("jnp.where:", relu_where(xs), "| lax.cond:", [float(relu_cond(v)) for v in xs])
assert np.array_equal(relu_where(xs), [0.0, 0.0, 3.0])
assert [float(relu_cond(v)) for v in xs] == [0.0, 0.0, 3.0]


# %% [markdown]
# Under plain `jax.grad` (no `jit`) the Python `if` does **not** fail, because grad's tracers carry
# values. The same function fails as soon as it goes through `vmap` or `jit`, so an eager test with
# `grad` can fool you. Under `vmap`, JAX's message names no argument; the explainer reads the tracers on
# the failing line instead, and names `x`: a parameter of the failing function, a tracer there.

# %%
def relu_plain(x):
    if x > 0:
        return x
    return 0.0 * x

print("grad, eager:", jax.grad(relu_plain)(2.0))
e_vmap = show_error(lambda: jax.vmap(relu_plain)(jnp.array([1.0, -1.0])))
rep = jaxmagic.probes.explain(e_vmap)
print("   explainer:", rep.summary)
assert float(jax.grad(relu_plain)(2.0)) == 1.0
assert isinstance(e_vmap, E.TracerBoolConversionError)
assert rep.transformation == "vmap" and rep.depends_on == ["x"] and [t.name for t in rep.traced_names] == ["x"]


# %% [markdown]
# ## 4.2 `TracerIntegerConversionError`
#
# `range(n)` and list indexing call `__index__`, which needs a concrete integer. If the number
# decides the program's structure, make it static (one compilation per value); if it is data,
# `lax.fori_loop` takes a traced trip count; a Python list indexed by a tracer must become an array.
# The explainer puts the fix that matches the line first.

# %%
def repeat_add(x, n):
    for _ in range(n):
        x = x + 1.0
    return x

def pick(i):
    return [10.0, 20.0, 30.0][i]

reports_int = {}
for name, fn in [("range(n)", lambda: jax.jit(repeat_add)(1.0, 3)), ("list[i]", lambda: jax.jit(pick)(1))]:
    print(name)
    e = show_error(fn)
    assert isinstance(e, E.TracerIntegerConversionError)
    reports_int[name] = jaxmagic.probes.explain(e)
    print("   first fix:", reports_int[name].fixes[0].use)

assert reports_int["range(n)"].depends_on == ["n"] and reports_int["range(n)"].fixes[0].use.startswith("lax.fori_loop")
assert reports_int["list[i]"].depends_on == ["i"] and reports_int["list[i]"].fixes[0].use == "jnp.asarray([10.0, 20.0, 30.0])[i]"

# %%
# right: static argument, fori_loop, or an array instead of a list
repeat_static = jax.jit(repeat_add, static_argnames="n")
repeat_fori = jax.jit(lambda x, n: lax.fori_loop(0, n, lambda _, v: v + 1.0, x))
pick_arr = jax.jit(lambda i: jnp.asarray([10.0, 20.0, 30.0])[i])
print("static:", repeat_static(1.0, n=3), "| fori_loop:", repeat_fori(1.0, 3), "| array index:", pick_arr(1))
assert float(repeat_static(1.0, n=3)) == 4.0 and float(repeat_fori(1.0, 3)) == 4.0 and float(pick_arr(1)) == 20.0


# %% [markdown]
# ## 4.3 `TracerArrayConversionError`
#
# A NumPy function converts its argument with `__array__`, which a tracer cannot do. Use the
# `jax.numpy` twin; when you really need NumPy or another library, `jax.pure_callback` calls it from
# the compiled program, with the result's shape and dtype declared up front.

# %%
@jax.jit
def np_inside(x):
    return np.sin(x) * 2

e_arr = show_error(lambda: np_inside(jnp.ones(3)))
rep = jaxmagic.probes.explain(e_arr)
assert isinstance(e_arr, E.TracerArrayConversionError)
assert rep.traced_function == "np_inside" and rep.fixes[0].use == "jnp.sin(x) * 2"
# your line with the jax.numpy twin, traced by jaxmagic on the shapes of your values: it works, so
# pure_callback (for a function JAX does not have, e.g. scipy.special.kv) is not offered
assert rep.fixes[0].checked.startswith("checked: traces with x: float32[3]")
assert not any("pure_callback" in f.use for f in rep.fixes)

@jax.jit
def jnp_inside(x):
    return jnp.sin(x) * 2

@jax.jit
def via_callback(x):
    out_type = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jax.pure_callback(lambda v: (np.sin(v) * 2).astype(v.dtype), out_type, x)

ref = np.sin(np.ones(3)) * 2
print("jnp:", jnp_inside(jnp.ones(3)), "| pure_callback:", via_callback(jnp.ones(3)))
assert np.allclose(jnp_inside(jnp.ones(3)), ref) and np.allclose(via_callback(jnp.ones(3)), ref)

# %% [markdown]
# ## 4.4 `ConcretizationTypeError` (the base class itself)
#
# `float()`, `.item()`, and functions whose output size depends on values. JAX adds one sentence
# saying where the value was needed ("It arose in the jnp.arange argument 'stop'"); the explainer
# keeps it as `jax_hint` and picks the matching fix.

# %%
cases_bad = {
    "float(x)": lambda: jax.jit(lambda x: float(x) * 2)(jnp.float32(1.0)),
    "x.item()": lambda: jax.jit(lambda x: x.item())(jnp.float32(1.0)),
    "jnp.arange(n)": lambda: jax.jit(lambda n: jnp.arange(n))(3),
    "jnp.nonzero(x)": lambda: jax.jit(lambda x: jnp.nonzero(x)[0])(jnp.array([1.0, 0.0, 2.0])),
}
reports_conc = {}
for name, fn in cases_bad.items():
    print(name)
    e = show_error(fn)
    assert type(e) is E.ConcretizationTypeError
    reports_conc[name] = jaxmagic.probes.explain(e)
    print(f"   JAX adds: {reports_conc[name].jax_hint[:70]!r} | first fix: {reports_conc[name].fixes[0].use}")

assert reports_conc["jnp.arange(n)"].jax_hint == "It arose in the jnp.arange argument 'stop'"
assert reports_conc["jnp.arange(n)"].fixes[0].use == "static_argnames=('n',)"
assert reports_conc["jnp.nonzero(x)"].fixes[0].use.startswith("jnp.nonzero(x, size=k")
assert reports_conc["float(x)"].fixes[0].use.startswith("stay in JAX")
# x.item(): JAX adds no hint; the report names the argument; its fixes are this kind's, written with
# what the failing code does (`x.item()`, not float(x)); none for a size (no nonzero, no arange here)
item = reports_conc["x.item()"]
print("x.item():", item.summary)
assert item.jax_hint == "" and "the value depends on the argument `x`" in item.summary
assert item.fixes[0].use == "stay in JAX: x as an array instead of x.item() (.astype(...) for a dtype)"
assert not any("nonzero" in f.use for f in item.fixes)

# %%
# right: stay in JAX; a size that is a setting becomes static; otherwise give a fixed size
f_float = jax.jit(lambda x: x * 2)
f_arange = jax.jit(lambda n: jnp.arange(n), static_argnames="n")
f_nonzero = jax.jit(lambda x: jnp.nonzero(x, size=3, fill_value=-1)[0])
print("arange(static n):", f_arange(n=3), "| nonzero(size=3):", f_nonzero(jnp.array([1.0, 0.0, 2.0])))
assert float(f_float(jnp.float32(1.0))) == 2.0
assert f_arange(n=3).tolist() == [0, 1, 2]
assert f_nonzero(jnp.array([1.0, 0.0, 2.0])).tolist() == [0, 2, -1]

# %% [markdown]
# ## 4.5 Boolean masks, shapes and slices with tracers
#
# These three are not in the `ConcretizationTypeError` family, but the cause is the same: the
# output's shape would depend on values, and `jit` needs every shape while tracing. The shape and
# slice errors are a plain `TypeError` and a plain `IndexError`; the explainer recognises them by
# JAX's message.

# %%
cases_shape = {
    "x[x > 0]": (lambda: jax.jit(lambda x: x[x > 0].sum())(jnp.array([1.0, -1.0, 2.0])), E.NonConcreteBooleanIndexError),
    "jnp.zeros(n)": (lambda: jax.jit(lambda n: jnp.zeros(n))(3), TypeError),
    "x[i:i+2]": (lambda: jax.jit(lambda x, i: x[i:i + 2])(jnp.arange(5.0), 1), IndexError),
}
reports_shape = {}
for name, (fn, expected) in cases_shape.items():
    print(name)
    e = show_error(fn)
    assert isinstance(e, expected)
    reports_shape[name] = jaxmagic.probes.explain(e)
    print("   kind:", reports_shape[name].error_kind, "| first fix:", reports_shape[name].fixes[0].use)

assert [r.error_kind for r in reports_shape.values()] == ["bool_index", "shape", "slice"]
assert reports_shape["x[i:i+2]"].fixes[0].use == "lax.dynamic_slice_in_dim(x, i, 2, axis=0)"
assert reports_shape["jnp.zeros(n)"].depends_on == ["n"]

# %%
# right: a masked sum, a static shape, a dynamic slice of fixed length
pos_sum = jax.jit(lambda x: jnp.sum(jnp.where(x > 0, x, 0.0)))
zeros_n = jax.jit(lambda n: jnp.zeros(n), static_argnums=0)
window = jax.jit(lambda x, i: lax.dynamic_slice(x, (i,), (2,)))
print("masked sum:", pos_sum(jnp.array([1.0, -1.0, 2.0])), "| dynamic_slice:", window(jnp.arange(5.0), 1))
assert float(pos_sum(jnp.array([1.0, -1.0, 2.0]))) == 3.0
assert zeros_n(3).shape == (3,)
assert window(jnp.arange(5.0), 1).tolist() == [1.0, 2.0]

# %% [markdown]
# ### The seven kinds at a glance, from the explainer
#
# All wrong cells above, collected: each error's class, the kind the explainer gave it and the fix
# it lists first. Every row of the table at the top of this notebook is covered.

# %%
collected = {"if x > limit": rep_clip, "if x > 0": jaxmagic.probes.explain(e_bool), **reports_int,
             "np.sin(x)": jaxmagic.probes.explain(e_arr), **reports_conc, **reports_shape}
print(f"{'code':16s} {'exception':30s} {'kind':11s} first fix")
for code_text, r in collected.items():
    print(f"{code_text:16s} {r.error_type:30s} {r.error_kind:11s} {r.fixes[0].use}")
assert {r.error_kind for r in collected.values()} == {"bool", "int", "array", "concrete", "bool_index", "shape", "slice"}


# %% [markdown]
# ## 4.6 `UnexpectedTracerError`: a leaked tracer
#
# A traced function that stores an intermediate value outside itself (a global list, an
# attribute, a mutable container in a closure) leaks a tracer. The call itself succeeds; the error
# comes later, wherever the stored value is *used*, which can be far from where it leaked.

# %%
# wrong: the jitted function stores an intermediate on the object
class Model:
    def __call__(self, x):
        h = jnp.tanh(x)
        self.last_hidden = h                 # the leak: h is a tracer
        return h * 2

m_leak = Model()
jax.jit(m_leak)(jnp.ones(3))                 # no error here

# %% [markdown]
# Using the value raises. With the explainer on, the report above the traceback says where it was
# used, where it was computed (inside `Model.__call__`, during the earlier trace), and which of your
# variables still holds it. Running the same cell under `%%jax_leaks` gives the same facts as a
# stored report.

# %% tags=["raises-exception"]
# %%jax_leaks -o rep_use
jnp.sum(m_leak.last_hidden)                  # used much later

# %%
err = pop_last_error()
assert isinstance(err, E.UnexpectedTracerError)
u = rep_use.unexpected
assert u.held_by == ["m_leak.last_hidden"] and u.aval == "float32[3]"
assert u.used_at.code == "jnp.sum(m_leak.last_hidden)                  # used much later"
assert u.created_at.code == "h = jnp.tanh(x)" and u.created_at.function == "Model.__call__"
print(rep_use.summary)


# %%
# right: return what you need
class ModelOK:
    def __call__(self, x):
        h = jnp.tanh(x)
        return h * 2, h                      # (output, auxiliary value)

out, hidden = jax.jit(ModelOK())(jnp.ones(3))
print("hidden, returned:", hidden)
assert np.allclose(hidden, np.tanh(1.0)) and np.allclose(out, 2 * np.tanh(1.0))
del m_leak                                   # the old tracer goes with it

# %% [markdown]
# ### Leak checking: the error at the moment of the leak
#
# JAX can check for leaks when a trace ends. There are three equivalent switches in 0.12:
#
# | Form | What it is |
# |---|---|
# | `with jax.checking_leaks():` | `functools.partial(jax.check_tracer_leaks, True)`, the shortest |
# | `with jax.check_tracer_leaks(True):` | the context manager of the `jax_check_tracer_leaks` option |
# | `jax.config.update("jax_check_tracer_leaks", True)` | global |
#
# When a trace ends with a tracer still referenced from outside, JAX raises a plain `Exception`
# whose message lists each leaked tracer and a chain of referrers: which tracer, held by what.
# It turns some caching off, so use it only while debugging.

# %%
leaked = []
def leaky_fn(x):
    leaked.append(x)              # leaks into a global list
    return x + 1

jax.clear_caches()
try:
    with jax.checking_leaks():
        jax.jit(leaky_fn)(jnp.float32(1.0))
    leak_err = None
except Exception as e:
    leak_err = e
msg_lines = str(leak_err).splitlines()
print("type:", type(leak_err).__name__)
for line in msg_lines[:1] + [l for l in msg_lines if "referred to by" in l][:2]:
    print("   ", line[:120])
assert type(leak_err) is Exception and msg_lines[0].startswith("Leaked trace")
assert any("is referred to by" in l and "leaked" in l for l in msg_lines)
assert any(re.fullmatch(r"<list \d+> is referred to by __main__\.leaked", l) for l in msg_lines)
assert re.search(r"<list \d+>\[0\]", str(leak_err))          # ids, not names
leaked.clear()

# %% [markdown]
# `%%jax_leaks` runs a cell with the same checking and turns the chain into the names you used.
# The cell still fails with JAX's own exception, so nothing is hidden.

# %% tags=["raises-exception"]
# %%jax_leaks -o rep_leak
jax.jit(leaky_fn)(jnp.float32(1.0))

# %%
err = pop_last_error()
assert type(err) is Exception and str(err).startswith("Leaked trace DynamicJaxprTrace")
[tracer] = rep_leak.leaked
assert tracer.held_by == ["leaked[0]"] and tracer.aval == "float32[]"
assert tracer.function == "leaky_fn" and tracer.transformation == "jit" and tracer.depends_on == ["x"]
assert rep_leak.traced == ["leaky_fn"]
print(rep_leak.summary)
leaked.clear()


# %% [markdown]
# Leaks through a dictionary on an object, and through a variable captured by a closure, get their
# names the same way. Storing one intermediate also keeps alive every tracer its computation used:
# JAX lists those too, and the report marks them as kept alive *through* the stored one, so you
# know which single line to fix.

# %%
class Cache:
    pass

cache = Cache()
cache.store = {}

def remember(x):
    h = jnp.tanh(x)
    cache.store["h"] = h              # a dict on an object
    return h * 2

def make_step():
    history = []
    def step(x):
        history.append(x * 2)          # a list captured by a closure
        return x + 1
    return step

step = make_step()

# %% tags=["raises-exception"]
# %%jax_leaks -o rep_dict
jax.jit(remember)(jnp.ones(3))

# %%
err = pop_last_error()
first, second = rep_dict.leaked
assert first.held_by == ["cache.store['h']"] and first.created_at.code == 'h = jnp.tanh(x)'
assert second.held_by == [] and second.kept_alive_by == 1 and second.depends_on == ["x"]
cache.store.clear()

# %% tags=["raises-exception"]
# %%jax_leaks -o rep_closure
jax.jit(step)(jnp.ones(2))

# %%
err = pop_last_error()
assert rep_closure.leaked[0].held_by == ["history[0] (closed over by step)"]
assert rep_closure.leaked[0].created_at.code == "history.append(x * 2)          # a list captured by a closure"
step = make_step()                     # a fresh closure, without the dead tracer

# %% [markdown]
# ### Leak checking only happens while tracing
#
# If a function has already been traced and cached, calling it with checking on does **not** trace
# it again, and the leak goes unseen. The chapter's remedy is `jax.clear_caches()` first (or a new
# input signature).

# %%
leaked2 = []
def leaky_cached(x):
    leaked2.append(x)
    return x * 2

leaky_cached_jit = jax.jit(leaky_cached)
leaky_cached_jit(jnp.float32(1.0))                         # called once without checks: now cached

def try_with_check():
    try:
        with jax.checking_leaks():
            leaky_cached_jit(jnp.float32(2.0))
        return "no error"
    except Exception as e:
        return f"error: {str(e).splitlines()[0]}"

r_cached = try_with_check()
jax.clear_caches()
r_cleared = try_with_check()
print("cached trace:       ", r_cached)
print("after clear_caches: ", r_cleared)
assert r_cached == "no error" and r_cleared.startswith("error: Leaked trace")
leaked2.clear()

# %% [markdown]
# `jax.clear_caches()` empties every cache of the process: afterwards every jitted function (and
# every eager operation) is traced and compiled again, in later cells too. `%%jax_leaks` needs
# neither: it runs the cell under a cache key of its own (`jax.make_user_context`, JAX's documented
# way to make caches miss), so everything in the cell traces afresh, and after the cell your cached
# traces are used again, untouched. Below, `leaky_cached_jit` is cached again first; the magic
# still catches its leak, and a cached function called after the magic does not compile again.

# %%
leaky_cached_jit(jnp.float32(1.0)); leaked2.clear()       # cached again, without checks

@jax.jit
def scale(x):
    return 3 * x

scale(jnp.ones(4))                                          # cached before the magic

# %% tags=["raises-exception"]
# %%jax_leaks -o rep_cached
scale(jnp.ones(4))
leaky_cached_jit(jnp.float32(2.0))

# %%
err = pop_last_error()
assert rep_cached.leaked[0].held_by == ["leaked2[0]"]
assert rep_cached.retrace_method == "user_context" and rep_cached.traced == ["scale", "leaky_cached"]
with CompileCounter(name="scale") as cc:
    scale(jnp.ones(4))                                      # after the magic: the old cached executable
print("compilations of jit(scale) after %%jax_leaks:", cc.count)
assert cc.count == 0
jax.clear_caches()
with CompileCounter(name="scale") as cc:
    scale(jnp.ones(4))
print("compilations of jit(scale) after jax.clear_caches():", cc.count)
assert cc.count == 1
leaked2.clear()

# %% [markdown]
# A clean cell gets a one-line report. The fixed functions leak nothing:

# %%
# %%jax_leaks -o rep_clean
out, hidden = jax.jit(ModelOK())(jnp.ones(3))
total = jax.jit(lambda x: jnp.sum(jnp.tanh(x)))(jnp.ones(3))

# %%
assert rep_clean.status.value == "ok" and rep_clean.leaked == [] and rep_clean.held == []
assert rep_clean.summary == "No tracer leaked."
assert jax.config.jax_check_tracer_leaks is False

# %% [markdown]
# ## Turning the explainer off and on
#
# `%jax_explain off` puts back the handler IPython had before (none, here); `%jax_explain on`
# installs the explainer again. `%unload_ext jaxmagic` removes it too.

# %%
# %jax_explain off
assert shell.custom_exceptions == ()
# %jax_explain on
assert shell.custom_exceptions == (Exception,)

# %%
# %unload_ext jaxmagic
assert shell.custom_exceptions == () and shell.find_line_magic("jax_explain") is None   # explainer and magics gone
# %load_ext jaxmagic
assert shell.custom_exceptions == (Exception,) and shell.find_line_magic("jax_explain") is not None

# %% [markdown]
# ## Final check: nothing left switched on
#
# Leak checking was switched on by `with` blocks and by the magics. `%jax_config` compares every
# JAX flag with a fresh process's defaults; nothing may differ, and the configuration must be
# exactly what it was at the start.

# %%
# %jax_config -o final_config

# %%
assert final_config.nondefault == {}, final_config.nondefault
assert config_changes(CONFIG_AT_START) == {} and dict(jax.config.values) == CONFIG_AT_START
print("JAX config unchanged since the start ✔")
