"""The chapter's section 9 training script, defined once.

A binary classifier (a three-layer MLP with dropout, an L2 penalty on the norm of the biases, a
learning rate that decays with the step) with three bugs, fixed one at a time in the chapter's
order (``version(bugs_fixed)``):

* 0 fixed: ``loss_v0``, ``make_train_step_v0``, ``train_v0``. The gradient of the norm is NaN at
  0 (the biases start at 0); ``step`` is static, so every step compiles; the dropout key is
  split from the same ``key`` every step, so it never changes.
* 1 fixed: ``loss_v1`` (with ``safe_norm``) instead of ``loss_v0``.
* 2 fixed: also ``make_train_step_v2`` (``step`` traced) and ``train_v2`` (``step`` an int32).
* 3 fixed: also ``train_v3`` (``key, step_key = jax.random.split(key)``).

Who uses it:

* notebooks 05 and 09 show the functions inline, for the reader; tests/test_section9_script.py
  checks that every definition there equals the one here (whitespace aside: this file is
  formatted by ruff, the notebooks keep the chapter's layout);
* tests/test_doctor_probe.py imports the functions (``version(n)``) and calls them;
* benchmarks/bench_doctor.py and tools/screenshot_values.py run ``source(n)`` as an IPython cell;
  ``run(n)`` executes the same text in a fresh namespace, outside IPython.

The data sizes are parameters: ``source(..., n=128, sizes=(16, 32, 32, 2))`` or
``data(n=128, sizes=...)``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from functools import partial

import jax
import jax.numpy as jnp

SIZES = (16, 64, 64, 2)  # the chapter's MLP: 16 inputs, two hidden layers of 64, 2 classes
N_SAMPLES = 512


# ----------------------------------------------------------------------------------------------
# The script, as the chapter gives it (notebook 09, section "The script, version 0").


def make_data(key, n=512, d=16):
    kx, kw = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    w_true = jax.random.normal(kw, (d,))
    return X, (X @ w_true > 0).astype(jnp.int32)


def init_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        {"w": jax.random.normal(k, (m, n)) * jnp.sqrt(2.0 / m), "b": jnp.zeros(n)}
        for k, m, n in zip(keys, sizes[:-1], sizes[1:])
    ]


def forward(params, x, key=None, rate=0.2):
    for i, layer in enumerate(params):
        x = x @ layer["w"] + layer["b"]
        if i < len(params) - 1:
            x = jax.nn.relu(x)
            if key is not None:  # dropout while training
                keep = jax.random.bernoulli(jax.random.fold_in(key, i), 1 - rate, x.shape)
                x = jnp.where(keep, x / (1 - rate), 0.0)
    return x


def cross_entropy(params, x, y, key):
    logits = forward(params, x, key)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def loss_v0(params, x, y, key):
    reg = sum(jnp.linalg.norm(layer["b"]) for layer in params)  # L2 norm of the biases
    return cross_entropy(params, x, y, key) + 1e-3 * reg


def make_train_step_v0(loss_fn):
    @partial(jax.jit, static_argnames=("step",))
    def train_step(params, x, y, key, step):
        lr = 0.5 * 0.98**step  # learning rate decays with the step
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, key)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    return train_step


def train_v0(step_fn, params, X, Y, n_steps, seed=0):
    key = jax.random.key(seed)
    losses = []
    for step in range(n_steps):
        step_key = jax.random.split(key)[0]  # a sub-key for this step's dropout
        params, loss = step_fn(params, X, Y, step_key, step)
        losses.append(float(loss))
    return params, losses


def accuracy(params, X, Y):
    return float(jnp.mean(jnp.argmax(forward(params, X), axis=-1) == Y))


# ----------------------------------------------------------------------------------------------
# Fix 1 (section 9.1): a norm whose value and gradient are 0 at 0.


def safe_norm(v):
    """||v||; value 0 and gradient 0 at v = 0 (double where)."""
    ss = jnp.sum(v**2)
    ok = ss > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, ss, 1.0)), 0.0)


def loss_v1(params, x, y, key):
    reg = sum(safe_norm(layer["b"]) for layer in params)
    return cross_entropy(params, x, y, key) + 1e-3 * reg


# ----------------------------------------------------------------------------------------------
# Fix 2 (section 9.2): `step` is traced, always an int32 array.


def make_train_step_v2(loss_fn):
    @jax.jit
    def train_step(params, x, y, key, step):  # step is no longer static
        lr = 0.5 * 0.98**step
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, key)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    return train_step


def train_v2(step_fn, params, X, Y, n_steps, seed=0):
    key = jax.random.key(seed)
    losses = []
    for step in range(n_steps):
        step_key = jax.random.split(key)[0]
        params, loss = step_fn(params, X, Y, step_key, jnp.int32(step))  # always an int32 array
        losses.append(float(loss))
    return params, losses


# ----------------------------------------------------------------------------------------------
# Fix 3 (section 9.3): the key advances at every step.


def train_v3(step_fn, params, X, Y, n_steps, seed=0):
    key = jax.random.key(seed)
    losses = []
    for step in range(n_steps):
        key, step_key = jax.random.split(key)  # advance the key every step
        params, loss = step_fn(params, X, Y, step_key, jnp.int32(step))
        losses.append(float(loss))
    return params, losses


# ----------------------------------------------------------------------------------------------
# Versions, text and execution.

MODEL = (make_data, init_params, forward, cross_entropy)
SCRIPT = (
    *MODEL,
    loss_v0,
    make_train_step_v0,
    train_v0,
    accuracy,
    safe_norm,
    loss_v1,
    make_train_step_v2,
    train_v2,
    train_v3,
)
"""Every function of the script, in the order notebook 09 shows them."""


@dataclasses.dataclass(frozen=True)
class Version:
    """The script with its first ``bugs_fixed`` bugs fixed: the loss, the step factory, the loop."""

    bugs_fixed: int
    loss: Callable
    make_train_step: Callable
    train: Callable

    @property
    def functions(self) -> tuple[Callable, ...]:
        """The functions this version's text defines, in the chapter's order."""
        loss = (loss_v0,) if self.loss is loss_v0 else (safe_norm, loss_v1)
        return (*MODEL, *loss, self.make_train_step, self.train, accuracy)


def version(bugs_fixed: int = 0) -> Version:
    """The script after fixing its first ``bugs_fixed`` (0-3) bugs, in the order the chapter fixes them."""
    table = {
        0: (loss_v0, make_train_step_v0, train_v0),
        1: (loss_v1, make_train_step_v0, train_v0),
        2: (loss_v1, make_train_step_v2, train_v2),
        3: (loss_v1, make_train_step_v2, train_v3),
    }
    if bugs_fixed not in table:
        raise ValueError(f"bugs_fixed must be 0, 1, 2 or 3, not {bugs_fixed!r}")
    return Version(bugs_fixed, *table[bugs_fixed])


def function_source(fn: Callable) -> str:
    """The text of one of the script's functions, as written in this file."""
    return inspect.getsource(fn)


IMPORTS = "from functools import partial\n\nimport jax\nimport jax.numpy as jnp\n"


def data_source(n: int = N_SAMPLES, sizes: Sequence[int] = SIZES) -> str:
    """The two lines that make the data and the initial parameters (``X_tr, Y_tr``, ``params0``)."""
    n_arg = "" if n == N_SAMPLES else f", n={n}"
    return (
        f"X_tr, Y_tr = make_data(jax.random.key(42){n_arg})\nparams0 = init_params(jax.random.key(1), {list(sizes)})\n"
    )


def source(bugs_fixed: int = 0, *, n: int = N_SAMPLES, sizes: Sequence[int] = SIZES) -> str:
    """The script of ``version(bugs_fixed)`` as one cell: imports, its functions, the data lines."""
    functions = "\n\n".join(function_source(fn) for fn in version(bugs_fixed).functions)
    return f"{IMPORTS}\n\n{functions}\n\n{data_source(n, sizes)}"


def run(bugs_fixed: int = 0, *, n: int = N_SAMPLES, sizes: Sequence[int] = SIZES, namespace=None) -> dict:
    """Execute ``source(...)`` in ``namespace`` (a fresh dict by default): new functions, fresh jit caches."""
    namespace = {} if namespace is None else namespace
    exec(compile(source(bugs_fixed, n=n, sizes=sizes), f"<section 9 script, {bugs_fixed} fixed>", "exec"), namespace)
    return namespace


def data(n: int = N_SAMPLES, sizes: Sequence[int] = SIZES):
    """``(X_tr, Y_tr, params0)`` made exactly as ``data_source`` makes them."""
    namespace = {"jax": jax, "make_data": make_data, "init_params": init_params}
    exec(data_source(n, sizes), namespace)
    return namespace["X_tr"], namespace["Y_tr"], namespace["params0"]
