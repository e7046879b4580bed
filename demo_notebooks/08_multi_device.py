# %% [markdown]
# # 08 · Several devices: where each block of an array lives, and what each device computed
#
# With more than one device, two questions come up again and again: *where* does each piece of an
# array live, and *what* did each device compute? JAX answers both, with a few tools:
#
# | Tool | What it tells you | Catch |
# |---|---|---|
# | `jax.typeof(x)` | the abstract type; with explicit sharding it carries the layout, e.g. `float32[8@data,4@model]` | works while tracing, too |
# | `x.sharding`, `x.sharding.spec` | the sharding object and its `PartitionSpec` | |
# | `x.sharding.devices_indices_map(x.shape)` | which slice of the array each device holds | raw data: you draw the picture yourself |
# | `jax.debug.visualize_array_sharding(x)` | a drawing of the layout | needs `rich`, prints (returns nothing), rank 1 and 2 only |
# | `jax.debug.inspect_array_sharding(v, callback=...)` | the sharding the compiler chose for a value inside `jit` | the callback runs at compile time, once |
# | `x.addressable_shards` | the data each local device actually holds | the only way to see that "replicated" copies differ |
#
# jaxmagic puts these together:
#
# * `%jax_devices N` gives this kernel `N` fake CPU devices, when run before anything touched a device;
# * `%jax_sharding EXPR [--dims I,J] [--intermediates] [--collectives] [--no-check] [-o NAME]` shows the type, the mesh,
#   the `PartitionSpec`, a drawing with a colour per device (blocks held by several devices list every
#   holder, `CPU 0,2`), shard shapes and bytes per device, and compares the copies of replicated blocks.
#   For a call of a jitted function it lists the shardings the call was compiled with, and with
#   `--intermediates` the sharding the compiler chose for every value inside it, and with `--collectives`
#   every collective XLA inserted, by source line, with the sharding that made it necessary;
# * `%%jax_per_device` shows what each device printed inside a `shard_map`, grouped by device.
#
# Every demonstration below is asserted on the report that `-o NAME` stores.

# %% [markdown]
# ### This machine and the chapter
#
# The chapter ran every example of this section in a subprocess with 4 fake CPU devices, because its
# kernel had already started JAX with one device. Here the kernel gets its devices itself:
# `%jax_devices 8` right after `%load_ext jaxmagic`, before any JAX operation. The chapter's examples use
# a 2x2 or 4-device mesh made from the first four of the eight devices, so device numbers match the
# chapter's. This notebook runs on Linux x86_64 with Python 3.13 and JAX 0.12.0.1 (the chapter: macOS
# arm64, Python 3.14). `rich` is installed here as a dependency of jaxmagic itself (for terminal output),
# not of flax, which is not installed; the "without rich" case is simulated by blocking the import, as
# the chapter does.

# %%
# %load_ext jaxmagic
# %jax_devices 8 -o devices_report

# %%
import sys, json
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P, AxisType

from _demo_helpers import show_error, capture_stdout, strip_ansi, config_changes

assert devices_report.applied and not devices_report.backend_started
assert jax.device_count() == 8 and {d.platform for d in jax.devices()} == {"cpu"}
CONFIG_AT_START = dict(jax.config.values)   # the last cell checks nothing was left switched on
print("JAX", jax.__version__, "|", jax.device_count(), "devices:", jax.devices())

# %% [markdown]
# `%jax_devices` can only work before the backend starts. Run again now, with a different number, it
# does not pretend: the report says the backend already started with 8 devices and that the kernel must
# be restarted. Asking for the number that is already there is fine.

# %%
# %jax_devices 4 -o too_late

# %%
assert too_late.status.value == "problem" and too_late.cpu_devices == 8 and not too_late.applied
assert "Restart the kernel" in too_late.document().fix
# %jax_devices 8 -o same_again
assert same_again.status.value == "ok" and "already has 8 CPU devices" in same_again.summary

# %% [markdown]
# ## 8.1 `jax.typeof`, `visualize_array_sharding`, and a drawing that needs no `rich`
#
# The chapter's three layouts of an 8x4 array on a 2x2 mesh with axes `data` and `model`:
# `P("data", "model")` splits both dimensions (one block per device), `P(None, "model")` splits only the
# columns (each column block lives on two devices), and `P()` puts the whole array on every device.
# `jax.typeof` writes the layout into the type: `8@data` means dimension 0 is split along mesh axis
# `data`; a dimension without `@` is not split.

# %%
mesh = jax.make_mesh((2, 2), ("data", "model"), devices=jax.devices()[:4])
A = jnp.arange(32.0).reshape(8, 4)
x = jax.device_put(A, NamedSharding(mesh, P("data", "model")))
r = jax.device_put(A, NamedSharding(mesh, P()))                  # fully replicated
c = jax.device_put(A, NamedSharding(mesh, P(None, "model")))     # only the columns are split

types = [str(jax.typeof(v)) for v in (x, r, c, jnp.ones(3))]
print(types, "| spec:", x.sharding.spec, "| local block:", x.addressable_shards[0].data.shape)
assert types == ["float32[8@data,4@model]", "float32[8,4]", "float32[8,4@model]", "float32[3]"]
assert str(x.sharding.spec) == "P('data', 'model')" and x.addressable_shards[0].data.shape == (4, 2)

# %% [markdown]
# `%jax_sharding x` draws the first layout. Hover over a block for its index ranges, shape and bytes.

# %%
# %jax_sharding x -o rep_x

# %%
layout = rep_x.layout
assert layout.typeof == "float32[8@data,4@model]" and layout.spec == "P('data', 'model')"
assert layout.mesh.axis_names == ["data", "model"] and layout.mesh.axis_sizes == [2, 2]
assert [(b.index, b.holders) for b in layout.blocks] == [
    ([[0, 4], [0, 2]], [0]), ([[0, 4], [2, 4]], [1]), ([[4, 8], [0, 2]], [2]), ([[4, 8], [2, 4]], [3])]
assert set(layout.bytes_per_device().values()) == {4 * 2 * 4}       # a (4, 2) float32 block each
drawing = str(rep_x).splitlines()
start = drawing.index("         0:2     2:4")
print("\n".join(drawing[start:start + 6]))
assert drawing[start + 2] == "  0:4 | CPU 0 | CPU 1 |" and drawing[start + 4] == "  4:8 | CPU 2 | CPU 3 |"

# %% [markdown]
# The other two layouts. A block held by several devices lists every holder (`CPU 0,2`), and because
# those devices hold copies of the same data, the report compares the copies bit for bit.

# %%
# %jax_sharding c -o rep_c

# %%
# %jax_sharding r -o rep_r

# %%
from jaxmagic.probes._sharding.sharding_layout import layout_grids

def labels(report):
    grid = layout_grids(report.layout)[0][0]
    cells = [["" for _ in range(grid.cols)] for _ in range(grid.rows)]
    for cell in grid.cells:
        cells[cell.row][cell.col] = cell.label
    return cells

assert labels(rep_c) == [["CPU 0,2", "CPU 1,3"]] and labels(rep_r) == [["CPU 0,1,2,3"]]
assert rep_c.layout.replica_check == "consistent" and rep_c.layout.copies_compared == 4
assert rep_r.layout.replica_check == "consistent" and rep_r.layout.copies_compared == 4
assert rep_c.layout.typeof == "float32[8,4@model]" and rep_r.layout.typeof == "float32[8,4]"
print(labels(rep_x), labels(rep_c), labels(rep_r))

# %% [markdown]
# ### Without `rich`
#
# `jax.debug.visualize_array_sharding` draws with `rich`. Here `rich` is installed, so it works. Its
# drawing is shown below as plain text: JAX prints it on a rich console of its own, which in a notebook
# writes colours as terminal escape codes into the saved text output, so the cell takes the table JAX
# drew and prints it on a console without colour (`color_system=None`). To see what happens without
# `rich`, we block the import the way the chapter does: `sys.modules["rich"] = None` makes every
# `import rich` fail, as if it were not installed. JAX's drawing then fails with a `ValueError`;
# `%jax_sharding` draws the same picture as before, because the notebook view is jaxmagic's own HTML.

# %%
import io
import rich.console

drawn = []                                   # the table JAX hands to rich, kept instead of printed
_rich_print = rich.console.Console.print
def _keep(self, *objects, **kwargs):
    drawn.extend(objects)
rich.console.Console.print = _keep
try:
    jax.debug.visualize_array_sharding(x)   # rich is installed: JAX draws the layout
finally:
    rich.console.Console.print = _rich_print
plain = rich.console.Console(file=io.StringIO(), width=80, color_system=None, force_jupyter=False)
for obj in drawn:
    plain.print(obj)
drawing_text = plain.file.getvalue()
print(drawing_text)                          # JAX's drawing, without colour
assert drawn and "\x1b" not in drawing_text   # no terminal escape codes in the saved output
rows = [line for line in drawing_text.splitlines() if "CPU" in line]
assert rows == ["│ CPU 0 │ CPU 1 │", "│ CPU 2 │ CPU 3 │"], rows   # the same 2x2 layout as %jax_sharding
del drawn, plain

# %%
saved_rich = sys.modules.get("rich")
sys.modules["rich"] = None                  # from here on, "import rich" fails
try:
    e_norich = show_error(lambda: jax.debug.visualize_array_sharding(x))
finally:
    sys.modules["rich"] = saved_rich
assert isinstance(e_norich, ValueError)
assert str(e_norich) == "`visualize_sharding` requires `rich` to be installed."

# %% [markdown]
# The chapter's replacement needs no `rich`: `x.sharding.devices_indices_map(x.shape)` gives the slice
# each device holds, and a few lines turn it into the same grid.

# %%
def ascii_sharding(arr):
    """The layout of a 2-D array as rows of device labels, from devices_indices_map (no rich)."""
    index_map = arr.sharding.devices_indices_map(arr.shape)
    starts = [sorted({(sl[k].start or 0) for sl in index_map.values()}) for k in (0, 1)]
    grid = [[[] for _ in starts[1]] for _ in starts[0]]
    for device, (rows_sl, cols_sl) in index_map.items():
        grid[starts[0].index(rows_sl.start or 0)][starts[1].index(cols_sl.start or 0)].append(
            f"{device.platform.upper()} {device.id}")
    return [[",".join(cell) for cell in row] for row in grid]

for device, index in sorted(x.sharding.devices_indices_map(x.shape).items(), key=lambda kv: kv[0].id):
    print(f"  {device}: {index}")
grid = ascii_sharding(x)
for row in grid:
    print("  | " + " | ".join(row) + " |")
assert grid == labels(rep_x) == [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"]]   # the same layout as JAX and %jax_sharding

# %%
sys.modules["rich"] = None
try:
    get_ipython().run_line_magic("jax_sharding", "x -o rep_norich")
finally:
    sys.modules["rich"] = saved_rich
assert labels(rep_norich) == labels(rep_x) == [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"]]

# %% [markdown]
# ### More than two dimensions, and all eight devices
#
# `visualize_array_sharding` refuses arrays of rank 3 or more. `%jax_sharding` draws two dimensions (by
# default the split ones; choose with `--dims I,J`) and, when a third dimension is split too, one small
# grid per block of it. Here a (4, 6, 8) array on a 2x2x2 mesh, split along all three dimensions:

# %%
mesh3 = jax.make_mesh((2, 2, 2), ("a", "b", "c"))
t = jax.device_put(jnp.zeros((4, 6, 8)), NamedSharding(mesh3, P("a", "b", "c")))
print(jax.typeof(t))
e_rank3 = show_error(lambda: jax.debug.visualize_array_sharding(t))
assert str(e_rank3) == "`visualize_sharding` only works for shapes with 1 and 2 dimensions."

# %%
# %jax_sharding t -o rep_t

# %%
grids, _ = layout_grids(rep_t.layout, name="t")
assert [g.caption for g in grids] == ["t[0:2, :, :]", "t[2:4, :, :]"]     # one grid per block of dim 0
assert len(rep_t.layout.blocks) == 8 and rep_t.layout.typeof == "float32[4@a,6@b,8@c]"

# %%
# %jax_sharding t --dims 0,2 -o rep_t02

# %%
grids, _ = layout_grids(rep_t02.layout, rep_t02.dims, name="t")
assert [g.caption for g in grids] == ["t[:, 0:3, :]", "t[:, 3:6, :]"]     # now dim 1 is faceted
assert grids[0].row_labels == ["0:2", "2:4"] and grids[0].col_labels == ["0:4", "4:8"]

# %% [markdown]
# To look around instead of re-running with other `--dims`, `--explore` adds an explorer under the report
# (ipywidgets): choose the two dimensions drawn, slice the others, click a device to outline its blocks and
# mark the devices holding copies of them. It lives while the kernel runs; a saved or exported notebook
# shows, where it was, a line saying to run the cell again. The report above it is the same as without.

# %%
# %jax_sharding t --explore -o rep_t_explored

# %%
assert rep_t_explored.to_dict() == rep_t.to_dict()   # the report is untouched by the explorer

# %% [markdown]
# ## 8.2 Shardings inside `jit`
#
# Inside `jit` the compiler decides how intermediate values are laid out. With explicit sharding (the
# default axis type of `jax.make_mesh` in JAX 0.12) `jax.typeof` already shows the layout while tracing;
# `jax.debug.inspect_array_sharding(v, callback=...)` hands the sharding the compiler chose to a callback,
# at compile time. The chapter's example, run here in the kernel:

# %%
mesh_d = jax.make_mesh((4,), ("d",), devices=jax.devices()[:4])
x82 = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh_d, P("d")))
seen = {}
inspect_calls = []                                            # one entry per call of the callback

def on_sharding(s):
    inspect_calls.append(str(s.spec))
    seen["inspect"] = str(s.spec)

@jax.jit
def f(a):
    seen["trace_typeof"] = str(jax.typeof(a))                 # read while tracing
    b = jnp.sin(a) * 2
    jax.debug.inspect_array_sharding(b, callback=on_sharding)
    return b.sum(axis=1)

out = f(x82)
calls_after_first = len(inspect_calls)
for _ in range(3):
    jax.block_until_ready(f(x82))                             # the compiled f, called again
seen["out_typeof"] = str(jax.typeof(out))
seen["out_spec"] = str(out.sharding.spec)
for k, v in seen.items():
    print(f"  {k:13s} {v}")
assert seen["trace_typeof"] == "float32[8@d,2]" and seen["inspect"] == "P('d',)"
assert seen["out_typeof"] == "float32[8@d]" and seen["out_spec"] == "P('d',)"
print("callback calls: after the first call of f", calls_after_first, "| after three more", len(inspect_calls))
assert calls_after_first == 1 and inspect_calls == ["P('d',)"]   # once, at compile time; not at later calls

# %% [markdown]
# The callback ran once, when `f` was compiled; calling `f` three more times did not call it again. `%jax_sharding` on
# the call lists the shardings `f` was compiled with. `--intermediates` compiles an instrumented copy of
# `f` (it is not run) that calls `inspect_array_sharding` after every operation, so every value inside
# gets its compiler-chosen sharding, next to its type at trace time and your line. Your own
# `inspect_array_sharding` call is one of the rows.

# %%
# %jax_sharding f(x82) --intermediates -o rep82

# %%
call = rep82.call
assert [(i.path, i.spec, i.matches) for i in call.inputs] == [("x82", "P('d',)", True)]
assert [(o.path, o.typeof, o.spec) for o in call.outputs] == [("result", "float32[8@d]", "P('d',)")]
rows = {(r.op, r.spec) for r in call.intermediates}
assert rows == {("sin", "P('d',)"), ("mul", "P('d',)"), ("inspect_array_sharding", "P('d',)"), ("reduce_sum", "P('d',)")}
yours = [r for r in call.intermediates if r.yours]
assert len(yours) == 1 and yours[0].line.code.startswith("jax.debug.inspect_array_sharding(b")
assert rep82.layout.typeof == "float32[8@d]"          # the result, drawn

# %% [markdown]
# With `Auto` mesh axes the types carry no layout (`float32[8,4]`), so the compiler's choices are only
# visible this way. A matrix product of `x` split over both axes with `w` split over `b`:

# %%
mesh_auto = jax.make_mesh((2, 2), ("a", "b"), devices=jax.devices()[:4], axis_types=(AxisType.Auto,) * 2)
xa = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh_auto, P("a", "b")))
w = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh_auto, P("b", None)))

@jax.jit
def g(x, w):
    h = x @ w
    return jnp.tanh(h).T


# %%
# %jax_sharding g(xa, w) --intermediates -o rep_auto

# %%
chosen = {r.op: (r.typeof, r.spec) for r in rep_auto.call.intermediates}
print(chosen)
assert chosen["dot_general"] == ("float32[8,4]", "P('a',)")   # the type says nothing; the compiler split rows over a
assert chosen["transpose"] == ("float32[4,8]", "P(None, 'a')")
assert labels(rep_auto) == [["CPU 0,1", "CPU 2,3"]]             # the result: copies along b

# %% [markdown]
# ### Where does this all-gather come from? `--collectives`
#
# Under a sharding, XLA inserts collectives nobody wrote: all-gather, all-reduce, reduce-scatter,
# all-to-all, collective-permute (jax#20381). `--collectives` lists every one of the compiled program
# with the line and `named_scope` it came from (the instruction's metadata), the mesh axes it runs over,
# the bytes each device receives, and which sharding made it necessary. In `g` the contracting dimension
# of `x @ w` is split over `b` in both operands, so each device holds a partial sum that XLA adds up
# over `b`:

# %%
# %jax_sharding g(xa, w) --collectives -o rep_coll

# %%
[ar] = rep_coll.call.collectives
print(ar.kind, ar.axes, ar.values, ar.bytes_per_device, "|", ar.cause)
assert (ar.kind, ar.axes, ar.values) == ("all-reduce", ["b"], ["xa", "w"])
assert ar.line.code.strip() == "h = x @ w" and ar.cause_kind == "input"
assert rep_coll.call.collective_fixes == []      # a sum over a split dimension is the computation itself

# %% [markdown]
# A weight split over `a` like the batch (a fully-sharded layout): before multiplying, the blocks of `w`
# have to travel. Relayouts (all-gather, all-to-all, permute) are tried away by compiling the traced
# program again with another layout for the input - never running it - and the fix says what it costs:

# %%
w_fsdp = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh_auto, P("a", None)))
xr = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh_auto, P("a", None)))

@jax.jit
def layer(x, w):
    with jax.named_scope("dense"):
        return jax.nn.relu(x @ w)


# %%
# %jax_sharding layer(xr, w_fsdp) --collectives -o rep_fsdp

# %%
kinds = [(c.kind, c.axes, c.scope, c.line.code.strip()) for c in rep_fsdp.call.collectives]
print(kinds)
assert len(kinds) == 2 and {k for k, *_ in kinds} == {"collective-permute", "all-reduce"}
assert all(scope == "dense" and code == "return jax.nn.relu(x @ w)" for _, _, scope, code in kinds)
fix = rep_fsdp.call.collective_fix
print(fix.text)
assert (fix.collectives_before, fix.collectives_after) == (2, 0)
assert fix.code == "w_fsdp = jax.device_put(w_fsdp, NamedSharding(w_fsdp.sharding.mesh, P()))"

# %% [markdown]
# The fix, applied: with the weight whole on each device, nothing has to travel.

# %%
w_whole = jax.device_put(w_fsdp, NamedSharding(w_fsdp.sharding.mesh, P()))

# %%
# %jax_sharding layer(xr, w_whole) --collectives -o rep_whole

# %%
assert rep_whole.call.collectives == [] and "XLA inserted no collective" in rep_whole.summary

# %% [markdown]
# ## 8.3 "The devices disagree": copies that differ, and what each device computed
#
# Inside `shard_map` each device sees only its own block. The classic mistake is to forget the
# collective: each device computes a *local* sum and returns it as if it were the global one. JAX 0.12
# checks this by default (`check_vma=True`) and refuses, at trace time, an output declared replicated
# (`out_specs=P()`) that differs between devices. Switch the check off (`check_vma=False`, often done to
# silence another error) and the program silently returns device 0's value, while the "replicated"
# copies on the devices all differ.
#
# Two ways to look: print `lax.axis_index` and the local block with `jax.debug.print` inside the
# `shard_map`, and compare the data of every copy in `x.addressable_shards`.

# %%
xs = jax.device_put(jnp.arange(16.0), NamedSharding(mesh_d, P("d")))

def local_sum(block):
    jax.debug.print("device {i} local block {b}", i=lax.axis_index("d"), b=block)
    return block.sum()

e_checked = show_error(lambda: jax.jit(jax.shard_map(local_sum, mesh=mesh_d, in_specs=P("d"), out_specs=P()))(xs))
assert isinstance(e_checked, ValueError) and "out_specs" in str(e_checked).splitlines()[0]
bad_sum = jax.jit(jax.shard_map(local_sum, mesh=mesh_d, in_specs=P("d"), out_specs=P(), check_vma=False))

# %% [markdown]
# `%jax_sharding` on the call: the result is declared replicated (`P()`), so each device holds a copy;
# the report compares them and finds four different values.

# %%
# %jax_sharding bad_sum(xs) -o rep_bad

# %%
assert rep_bad.status.value == "problem" and rep_bad.layout.replica_check == "differ"
groups = rep_bad.layout.blocks[0].copy_groups
assert [(g.devices, g.preview) for g in groups] == [([0], "6.0"), ([1], "22.0"), ([2], "38.0"), ([3], "54.0")]

# the same check by hand, as the chapter writes it
def replicas_consistent(arr):
    copies = [np.asarray(s.data) for s in arr.addressable_shards]
    return all(np.array_equal(copies[0], c) for c in copies[1:]), [c.tolist() for c in copies]

value = bad_sum(xs)
jax.effects_barrier()
consistent, copies = replicas_consistent(value)
assert float(value) == 6.0 and consistent is False and sorted(copies) == [6.0, 22.0, 38.0, 54.0]
del value

# %% [markdown]
# `%%jax_per_device` answers the second question, what each device computed. For the cell it tags every
# `jax.debug.print` inside a `shard_map` with the device that printed it (it adds `lax.axis_index` of
# every mesh axis for you) and groups the lines by device, on a drawing of the mesh. The printed text is
# unchanged. The function is jitted again in the cell, so that it is traced while the probe is on.

# %%
# %%jax_per_device -o rep_local
jax.jit(jax.shard_map(local_sum, mesh=mesh_d, in_specs=P("d"), out_specs=P(), check_vma=False))(xs)

# %%
by_device = rep_local.by_device()
print(by_device)
assert sorted(by_device) == [0, 1, 2, 3]
for device, lines in by_device.items():
    assert lines == [f"device {device} local block {np.arange(16.0)[4 * device:4 * device + 4]}"]
assert jax.debug.print.__name__ == "debug_print"     # the real jax.debug.print is back

# %% [markdown]
# The fix: combine the local sums with a collective before returning them as replicated. With `psum`
# the check passes (keep `check_vma=True`), the value is the global sum, and every copy is the same.

# %%
good_sum = jax.jit(jax.shard_map(lambda b: lax.psum(b.sum(), "d"), mesh=mesh_d, in_specs=P("d"), out_specs=P()))

# %%
# %jax_sharding good_sum(xs) -o rep_good

# %%
assert rep_good.status.value == "ok" and rep_good.layout.replica_check == "consistent"
assert rep_good.layout.copies_compared == 4
value = good_sum(xs)
assert float(value) == float(np.arange(16.0).sum()) == 120.0 and replicas_consistent(value)[0]
del value

# %% [markdown]
# ## 8.4 Beyond one process: ipyparallel engines of a `jax.distributed` job, one merged report
#
# A job that outgrows one machine runs one process per host, joined by `jax.distributed.initialize`.
# From a notebook such a job is driven with **ipyparallel**: an engine per process, and `%%px` runs a
# cell on all of them. The bugs that hurt there are per process - a NaN from one host's data shard, one
# process compiling another program (a ragged last batch) so the collectives wait for ever, memory
# growing on one host, the same dropout key on every host. Run a magic on every engine with `%%px`,
# binding its report (`-o rep`), then `%jax_gather rep` in the notebook merges them: a row per process
# and the differences as findings. (`pip install jaxmagic[parallel]` brings ipyparallel.)
#
# Here: two local engines on loopback, each a `jax.distributed` CPU process.

# %%
import os
import socket
import ipyparallel as ipp

os.environ["JAX_PLATFORMS"] = "cpu"  # the engines inherit it: this machine has no accelerator
cluster = ipp.Cluster(n=2, engines="local", controller_ip="127.0.0.1", log_level=40)
cluster.start_cluster_sync()
rc = cluster.connect_client_sync()
rc.wait_for_engines(2, timeout=120, interactive=False)  # no progress widget (a saved notebook drops it)
dv = rc[:]
dv.block = True  # %%px waits for the engines and shows what they display (--progress-after -1: no
# progress bar, a widget that a saved notebook would not keep)
dv.activate()  # %%px now runs a cell on both engines
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dv.execute("%load_ext jaxmagic\nimport numpy as np, jax, jax.numpy as jnp", block=True)
joined = [rc[i].execute(f"jax.distributed.initialize('127.0.0.1:{port}', 2, {i})", block=False) for i in rc.ids]
[j.get(timeout=120) for j in joined]
print(dv.apply_sync(lambda: (__import__("jax").process_index(), __import__("jax").process_count())))

# %% [markdown]
# A small data-parallel training script, run under `%%jax_doctor` on every process. Each process loads
# its own shard; process 1's holds one bad sample and is 4 rows short (its last batch is ragged), only
# process 0 keeps a list of arrays, and both seed their dropout keys with `PRNGKey(0)`.

# %%
# %%px --progress-after -1
# %%jax_doctor -o rep
def loss_fn(w, x, y):
    h = jnp.sqrt(x) @ w               # a negative input gives NaN
    return jnp.mean((h - y) ** 2)

@jax.jit
def train_step(w, x, y, dropout_key):
    keep = jax.random.bernoulli(dropout_key, 0.9, x.shape)
    loss, g = jax.value_and_grad(loss_fn)(w, x * keep, y)
    return w - 0.1 * g, loss

me = jax.process_index()
data = np.random.default_rng(me).uniform(0.1, 1.0, size=(44 if me == 1 else 48, 4)).astype(np.float32)
if me == 1:
    data[9, 0] = -1.0                 # one bad sample in process 1's shard
key = jax.random.PRNGKey(0)           # the same seed on every process
w, history = jnp.ones(4), []
for start in range(0, len(data), 8):
    key, dropout_key = jax.random.split(key)
    batch = jnp.asarray(data[start:start + 8])
    w, loss = train_step(w, batch, batch.sum(axis=1), dropout_key)
    if me == 0:
        history.extend(jnp.zeros(3) + i for i in range(4))

# %%
# %jax_gather rep -o merged

# %%
found = {f.area: f for f in merged.findings}
assert [p.process for p in merged.processes] == [0, 1]
assert found["NaN"].processes == [1] and "jnp.sqrt(x) @ w" in found["NaN"].line   # the line, on process 1 only
assert found["divergence"].function == "train_step"     # process 1 compiled a second program: collectives hang
assert "first differing operation" in found["divergence"].summary  # ... named by its operation and line
assert found["memory"].processes == [0]                 # only process 0 piles arrays up
assert found["random keys"].processes == [0, 1]         # the same dropout keys everywhere: fold_in the index
print(sorted(found))

# %% [markdown]
# Each process also digested the programs it compiled: the merged report names the first operation of
# process 1's extra program that differs from process 0's, and the line it comes from.
#
# **Values that drift.** Each process trained on its own shard and never averaged its gradients with
# the other's, and process 1's went NaN: the "replicated" parameters `w` are no longer the same.
# `%jax_gather --values w`
# evaluates `w` once on each engine, compares a digest of every leaf, fetches only the leaves that
# differ, and names them with the largest difference.

# %%
# %jax_gather --values w -o drift

# %%
(values,) = [f for f in drift.findings if f.area == "values"]
assert values.processes == [0, 1] and "its only leaf differs" in values.summary   # two processes: both named
assert "largest difference NaN or inf on one side" in values.summary and "%%jax_nans" in values.fix
print(values.summary)

# %% [markdown]
# ### A process that hangs
#
# A job hangs when one process does not reach a collective the others wait in (jax#38503: one rank
# alive but stuck, the others waiting). Below, process 1 spins in a Python loop for 10 s while process
# 0 is idle. `%jax_gather --timeout 2` names the hang with its line: an engine still busy after the
# timeout is sent a signal through ipyparallel, and `faulthandler` (registered when jaxmagic loaded
# on the engine) writes its Python stack even while it runs; the engine's own thread adds whether it
# is running Python or waiting in a call (a jitted function, `block_until_ready`).

# %%
import time

busy = rc[1].execute(
    "import time\n"
    "def spin(seconds):\n"
    "    end = time.monotonic() + seconds\n"
    "    while time.monotonic() < end: pass\n"
    "def train_step():\n"
    "    spin(10)\n"
    "train_step()\n",
    block=False,
)
time.sleep(1)

# %%
# %jax_gather rep --timeout 2 -o stuck

# %%
hang = {f.area: f for f in stuck.findings}["not finished"]
assert hang.processes == [1] and hang.function == "spin"
assert hang.summary.startswith("A hang: process 1 is in `spin` at line 4: `while time.monotonic() < end: pass`")
assert hang.summary.endswith("process 0 finished") and "targets=[1]" in hang.fix
print(hang.summary)
busy.get(timeout=60)  # the loop ends: process 1 answers again

# %% [markdown]
# The same merge without a notebook: a script launched on every host calls `jaxmagic.gather(report)`;
# the reports travel through jax.distributed's key-value store (no collective, so a process that hangs
# cannot hang the others - it is named after the timeout) and process 0 gets the merged report;
# `jaxmagic.gather(report, values=params, values_name="params")` compares a pytree the same way.

# %%
rc.close()
cluster.stop_cluster_sync()

# %% [markdown]
# ## Final check: nothing left switched on
#
# `%jax_devices` set `jax_num_cpu_devices` before the snapshot at the top was taken; nothing after it
# may have changed the configuration.

# %%
assert config_changes(CONFIG_AT_START) == {}, config_changes(CONFIG_AT_START)
assert dict(jax.config.values) == CONFIG_AT_START
print("JAX config unchanged since the start ✔")
