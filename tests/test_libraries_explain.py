"""%jax_explain through the libraries people call: a library's jit wrapper hands jax.jit its own repacking
of the user's arguments, so JAX's message names the library's structure; the report names the user's.

Each program is shaped like a public thread, written small; the real libraries run.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from jaxmagic import probes

eqx = pytest.importorskip("equinox")


def _raised(call):
    try:
        call()
    except Exception as error:
        return error
    raise AssertionError("no error")


def test_filter_jit_bool_error_names_the_users_argument_not_equinoxs_repacking():
    # patrick-kidger/diffrax#379's shape: under Equinox's jit, an argument that arrives as an array reaches a
    # Python `if` (TracerBoolConversionError). JAX's message says "depends on the value of the argument
    # dynamic_nodonate['first'][0]" (equinox's repacking of the arguments); the user's parameter is `x`.
    @eqx.filter_jit
    def scale(x, n):
        if x.sum() > 0:
            return x * n
        return x

    report = probes.explain(_raised(lambda: scale(jnp.ones(3), 2)))
    assert report is not None and report.error_kind == "bool"
    data = report.to_dict()
    assert data["traced_function"] == "scale"
    assert data["depends_on"] == ["x"]
    text = str(report)
    assert "dynamic_nodonate" not in text.split("Why:")[0]
    headline = " ".join(line.strip() for line in text.split("\nFix:")[0].splitlines())
    assert headline.endswith("in `scale` (traced for jit): the value depends on the argument `x`.")
    assert data["fixes"][0]["use"] == "jnp.where(x.sum() > 0, x * n, x)"


def test_plain_jit_args_element_is_still_jaxs_name():
    # A *args parameter: JAX's "args[1]" is the user's own name (a parameter), kept as JAX wrote it.
    import jax

    def pick(*args):
        if args[1] > 0:
            return args[0]
        return -args[0]

    report = probes.explain(_raised(lambda: jax.jit(pick)(jnp.ones(3), 1.0)))
    assert report is not None and report.depends_on == ["args[1]"]


def test_a_tracer_error_in_optax_code_under_jit_is_no_leak_and_gets_inject_hyperparams_static_args():
    # google-deepmind/optax#412: `jax.jit(opt.init)` of `inject_hyperparams(adafactor)` raises
    # TracerBoolConversionError in Optax's `_factored_dims` (`if shape[d] < min_dim_size_to_factor`) while jit
    # traces Optax's init: the trace is running, so it is no tracer kept past its trace; the `if` is Optax's, so
    # the fix is the library's own option (static_args), tried by tracing Optax's init rebuilt with it.
    import jax

    optax = pytest.importorskip("optax")
    opt = optax.inject_hyperparams(optax.adafactor)(learning_rate=0.1)
    params = {"w": jnp.ones((200, 200))}
    report = probes.explain(_raised(lambda: jax.jit(opt.init)(params)))
    assert report is not None and report.error_kind == "bool", report and report.error_kind
    assert report.raised_in is not None and report.raised_in.function == "_factored_dims"
    assert report.raised_in.filename.endswith("optax/_src/factorized.py")
    (fix,) = report.fixes
    assert fix.use == "optax.inject_hyperparams(optax.adafactor, static_args=('min_dim_size_to_factor',))(...)"
    assert fix.checked.startswith("checked: its init traces under jax.jit"), fix.checked
    assert "leak" not in report.summary and "jnp.where" not in str(report)
    # the fix as offered: Optax's init traces under jit with the hyperparameter static
    fixed = optax.inject_hyperparams(optax.adafactor, static_args=("min_dim_size_to_factor",))(learning_rate=0.1)
    jax.jit(fixed.init)(params)


def _flax_net():
    nnx = pytest.importorskip("flax.nnx")

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(3, 3, rngs=rngs)
            self.drop = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.drop(self.lin(x))

    return nnx, Net(nnx.Rngs(0))


def test_flax_trace_context_error_of_merge_under_jax_grad_gets_nnx_grad_tried_and_copy_true():
    # google/flax#5050: `nnx.merge(graphdef, params, rest)` (copy=False, the default since 0.11.2) then Dropout,
    # inside a function given to plain jax.grad: "TraceContextError: Cannot mutate RngCount from a different trace
    # level" - declined as "not a tracer error". It is Flax's own trace-level error: explained, with nnx.grad tried
    # by tracing it on copies of the call's arguments (the user's state untouched) and copy=True on the merge.
    import jax

    nnx, model = _flax_net()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    count_before = jax.tree.leaves(rest)

    def loss(params, rest):
        m = nnx.merge(graphdef, params, rest)
        m.train()
        return m(jnp.ones((2, 3))).sum()

    error = _raised(lambda: jax.grad(loss)(params, rest))
    assert type(error).__name__ == "TraceContextError"
    report = probes.explain_or_say_why(error)
    assert report.error_kind == "library_trace" and report.status.value == "problem", report.summary
    assert report.traced_function == "loss" and report.transformation == "grad"
    uses = [f.use for f in report.fixes]
    assert uses[0] == "nnx.grad(loss)(params, rest)", uses
    assert report.fixes[0].checked.startswith("checked: traces"), report.fixes[0].checked
    assert "nnx.merge(graphdef, params, rest, copy=True)" in uses
    assert [a is b for a, b in zip(jax.tree.leaves(rest), count_before)] == [True] * len(count_before)
    nnx.grad(loss)(params, rest)  # the fix as offered runs


def test_flax_module_closed_over_under_jax_grad_gets_pass_it_as_an_argument():
    # google/flax#3997's shape under jax.grad: a Module the function closes over mutates its state. nnx.grad of the
    # same function still fails (tried: left out, said so); passing the Module as an argument is the fix.
    import jax

    nnx, model = _flax_net()
    model.train()

    def loss(x):
        return model(x).sum()

    report = probes.explain_or_say_why(_raised(lambda: jax.grad(loss)(jnp.ones((2, 3)))))
    assert report.error_kind == "library_trace", report.summary
    assert [f.use for f in report.rejected_fixes] == ["nnx.grad(loss)(jnp.ones((2, 3)))"]
    assert report.rejected_fixes[0].checked.startswith("checked: still fails - it raised TraceContextError")
    assert "pass the Module as an argument" in report.fixes[0].when
    nnx.grad(lambda m, x: m(x).sum())(model, jnp.ones((2, 3)))  # the fix as offered runs
