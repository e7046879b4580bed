"""Collective scenarios (``%jax_sharding --collectives``) run in a fresh process with 8 fake CPU devices.

tests/test_collectives.py runs this file with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``
and reads one JSON object from its last stdout line: each scenario's ``report.to_dict()`` plus the
rendered text. The programs are shaped like the threads users file when XLA inserts a collective
they did not write: jax#20381 ("where does this all-gather come from?"), jax#25010, openxla/xla#42481
(an all-reduce whose axes come from the sharding strategy).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxmagic import probes
from jaxmagic.render.text import render_text

mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))


def on(*spec):
    return NamedSharding(mesh, P(*spec))


def run(fn, args, text, **options):
    report, error = probes.run_sharding_call(fn, args, call_text=text, collectives=True, **options)
    return {"report": report.to_dict(), "text": render_text(report.document()), "error": repr(error) if error else ""}


out = {}

# A matmul whose contracting dimension is split over 'model' in both operands (tensor parallelism):
# each device has a partial sum, XLA all-reduces it over 'model'.
x = jax.device_put(jnp.ones((16, 32)), on("data", "model"))
w = jax.device_put(jnp.ones((32, 8)), on("model", None))


@jax.jit
def contract(x, w):
    with jax.named_scope("dense"):
        y = x @ w
    return y


out["contracting"] = run(contract, (x, w), "contract(x, w)")

# A weight split over 'data' on its rows while the batch is split over 'data' too (an FSDP-style layout,
# jax#20381's question): to multiply, every device needs the whole weight, so XLA all-gathers `w`;
# keeping `w` whole on each device removes it, at the memory the fix states.
w_rows = jax.device_put(jnp.ones((32, 8)), on("data", None))
x_rows = jax.device_put(jnp.ones((16, 32)), on("data", None))


@jax.jit
def project(x, w):
    with jax.named_scope("proj"):
        return jnp.tanh(x @ w)


out["gathered_weight"] = run(project, (x_rows, w_rows), "project(x, w)")


# The same with an argument the program never reads (a step taking a key it does not use yet): JAX
# prunes it, so the program's parameters are not the call's arguments one for one.
@jax.jit
def project_with_key(key, x, w):
    return jnp.tanh(x @ w)


out["pruned"] = run(project_with_key, (jnp.zeros(2, jnp.uint32), x_rows, w_rows), "project_with_key(key, x, w)")

# An argument in the middle the program never reads (a step taking a mask it does not use yet): JAX
# prunes it from the compiled program (jax#8241 "drop unused arguments in the jit AOT compiled call"),
# and every row after it must keep its own name and sharding.
a_rows = jax.device_put(jnp.ones((16, 32)), on("data", None))
ignored = jax.device_put(jnp.ones((8, 8)), on("model", None))
b_model = jax.device_put(jnp.ones((32, 8)), on("model", None))


@jax.jit
def middle_unread(a, unused, b):
    y = a @ b
    return jnp.tanh(y)


out["unread_middle"] = run(middle_unread, (a_rows, ignored, b_model), "middle_unread(a, unused, b)", intermediates=True)


# The same inside one pytree argument: the unread leaf sits between two read ones.
@jax.jit
def leaf_unread(params):
    return jnp.tanh(params["a"] @ params["b"])


out["unread_leaf"] = run(
    leaf_unread, ({"a": a_rows, "mask": ignored, "b": b_model},), "leaf_unread(params)", intermediates=True
)


# A None passed as an argument is no input at all (not a pruned one): the rows, the intermediates and
# the relayout trial keep their places.
@jax.jit
def project_masked(x, mask, w):
    return jnp.tanh(x @ w) if mask is None else jnp.tanh(x @ w) * mask


out["none_argument"] = run(project_masked, (x_rows, None, w_rows), "project_masked(x, None, w)", intermediates=True)

# A reshape that merges the split dimension with another (jax#25010's shape).
cols = jax.device_put(jnp.ones((16, 32)), on(None, "data"))


@jax.jit
def flatten(x):
    return x.reshape(8, 64) * 2


out["reshape"] = run(flatten, (cols,), "flatten(x)")

# A with_sharding_constraint asking for another layout than the value has: an all-to-all.
rows = jax.device_put(jnp.ones((16, 32)), on("data", None))


@jax.jit
def relayout(x):
    y = x * 2
    z = jax.lax.with_sharding_constraint(y, on(None, "data"))
    return z + 1


out["constraint"] = run(relayout, (rows,), "relayout(x)", intermediates=True)

# Data parallelism: the batch split over 'data', the weight replicated; grad all-reduces over 'data'.
w_rep = jax.device_put(jnp.ones((32, 4)), on())


def loss(w, x):
    return ((x @ w) ** 2).mean()


grad_step = jax.jit(jax.grad(loss))
out["gradient"] = run(grad_step, (w_rep, rows), "grad_step(w, x)")


# Inside a scan body (an RNN step whose contraction is split over 'model'): the line is the body's;
# the body's inputs are followed back through the loop's carry to the call's arguments.
w_square = jax.device_put(jnp.ones((32, 32)), on("model", None))


@jax.jit
def rnn(x, w):
    def body(h, _):
        return jnp.tanh(h @ w), None

    return jax.lax.scan(body, x, None, length=4)[0]


out["loop"] = run(rnn, (x, w_square), "rnn(x, w)")


# A fori_loop whose carry holds the weight itself (an optimizer-style loop, jax#20381's question asked
# from inside a loop): the weight reaches the body only through the carry tuple.
x_whole = jax.device_put(jnp.ones((16, 32)), on())


@jax.jit
def iterate(x, w):
    def step(i, carry):
        h, w = carry
        return jnp.tanh(h @ w), w

    return jax.lax.fori_loop(0, 3, step, (x, w))[0]


out["carried"] = run(iterate, (x_whole, w_square), "iterate(x, w)")


# A psum the program wrote itself inside a shard_map: listed as written, not as inserted.
@jax.jit
def summed(x):
    total = jax.shard_map(lambda b: jax.lax.psum(b.sum(0), "data"), mesh=mesh, in_specs=P("data", None), out_specs=P())
    return total(x)


out["written"] = run(summed, (rows,), "summed(x)")

# Nothing split: no collective at all.
plain = jax.jit(lambda x: x * 2)
out["none"] = run(plain, (jnp.ones((4, 4)),), "plain(x)")

# The magic in an IPython shell: the lines are the cell's, numbered as the editor shows them.
from IPython.testing.globalipapp import start_ipython  # noqa: E402

shell = start_ipython()
shell.run_line_magic("load_ext", "jaxmagic")
shell.user_ns.update(jax=jax, jnp=jnp, x_rows=x_rows, w_rows=w_rows)
shell.run_cell("@jax.jit\ndef layer(x, w):\n    with jax.named_scope('proj'):\n        return jnp.tanh(x @ w)\n")
shell.run_cell("%jax_sharding layer(x_rows, w_rows) --collectives -o rep_magic")
out["magic"] = {"report": shell.user_ns["rep_magic"].to_dict(), "text": ""}

print(json.dumps(out))
