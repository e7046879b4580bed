"""%jax_explain's "make it static" fix, written for the jit wrapper the user called and tried with it.

``jax.jit(f, static_argnames=...)`` is jax.jit's form only: eqx.filter_jit has no static_argnames (a Python
value is static there already), nnx.jit takes them on its own wrapper. Each program is shaped like a public
thread, written small; the real libraries run.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes

eqx = pytest.importorskip("equinox")
nnx = pytest.importorskip("flax.nnx")


def _raised(call):
    try:
        call()
    except Exception as error:
        return error
    raise AssertionError("no error")


def _static_fix(data: dict, start: str) -> dict:
    found = [f for f in data["fixes"] + data["rejected_fixes"] if f["use"].startswith(start)]
    assert len(found) == 1, [f["use"] for f in data["fixes"] + data["rejected_fixes"]]
    return found[0]


def _head(report) -> str:
    return " ".join(line.strip() for line in str(report).split("\nWhere it was made:")[0].splitlines())


def test_filter_jit_setting_passed_as_an_array_fix_is_a_python_int_tried():
    # patrick-kidger/diffrax#379's shape: a count (max_steps) given to a function under Equinox's jit as an
    # array reaches a Python `if`. filter_jit has no static_argnames: passing a Python int is the fix.
    @eqx.filter_jit
    def repeat(x, n):
        if n > 0:
            return x * n
        return x

    report = probes.explain(_raised(lambda: repeat(jnp.ones(3), jnp.asarray(2))))
    assert report is not None and report.error_kind == "bool"
    data = report.to_dict()
    assert not any("static_argnames" in f["use"] for f in data["fixes"] + data["rejected_fixes"])
    fix = _static_fix(data, "repeat(")
    assert fix["use"] == "repeat(x, int(n))"
    assert fix["when"].startswith("at your call of `repeat`: pass `n` as a Python int, not a JAX array")
    assert "eqx.field(static=True)" in fix["when"]
    assert fix["checked"].startswith("checked: tracing `repeat` with n = 2 (Python values) succeeds")
    assert "eqx.filter_eval_shape" in fix["checked"]
    assert fix in data["fixes"]
    assert _head(report).startswith("%jax_explain [FOUND] TracerBoolConversionError")
    assert "repeat(x, int(n))" in str(report).split("Why:")[0]


def test_filter_jit_python_int_that_still_fails_is_rejected():
    # The same fix, tried where it does not help: `n` is used as an array (n.shape) - a Python int has none.
    @eqx.filter_jit
    def first(x, n):
        if n > 0:
            return x[: n.shape[0]]
        return x

    data = probes.explain(_raised(lambda: first(jnp.ones(3), jnp.asarray(2)))).to_dict()
    fix = _static_fix(data, "first(")
    assert fix in data["rejected_fixes"]
    assert fix["checked"].startswith("checked: still fails - tracing `first` with n = 2 (Python values) raised")


def test_nnx_jit_setting_fix_is_nnx_jit_static_argnames_tried():
    # google/flax#4146's shape: `if cond:` under nnx.jit, the flag passed as a Python value (traced by
    # nnx.jit like jax.jit). The fix is nnx.jit's own static_argnames, tried with nnx.jit.
    def scale(x, n):
        if n > 0:
            return x * n
        return x

    report = probes.explain(_raised(lambda: nnx.jit(scale)(jnp.ones(3), 2)))
    assert report is not None and report.error_kind == "bool"
    data = report.to_dict()
    fix = _static_fix(data, "nnx.jit(")
    assert fix["use"] == "nnx.jit(scale, static_argnames=('n',))"
    assert fix["checked"].startswith("checked: tracing `scale` with `n` static succeeds with this call's arguments")
    assert "nnx.jit(..., static_argnames=('n',)).trace" in fix["checked"]
    assert fix in data["fixes"]
    assert not any(f["use"].startswith(("jax.jit", "@functools.partial(jax.jit")) for f in data["fixes"])


def test_nnx_jit_decorated_fix_replaces_the_decorator():
    @nnx.jit
    def scale(x, n):
        if n > 0:
            return x * n
        return x

    data = probes.explain(_raised(lambda: scale(jnp.ones(3), 2))).to_dict()
    fix = _static_fix(data, "@nnx.jit(")
    assert fix["use"] == "@nnx.jit(static_argnames=('n',))"
    assert "in place of the @nnx.jit on `scale`" in fix["when"]
    assert fix["checked"].startswith("checked: tracing `scale` with `n` static succeeds")


def test_nnx_jit_array_made_static_still_fails_and_says_why():
    # An array is not hashable: nnx.jit's static_argnames cannot take it, as jax.jit's cannot. Tried, rejected.
    def scale(x, n):
        if n > 0:
            return x * n
        return x

    data = probes.explain(_raised(lambda: nnx.jit(scale)(jnp.ones(3), jnp.asarray(2)))).to_dict()
    fix = _static_fix(data, "nnx.jit(")
    assert fix in data["rejected_fixes"]
    assert "Non-hashable static arguments" in fix["checked"]


def test_plain_jax_jit_keeps_its_form():
    # jax-ml/jax#6612's shape: `if z > 0` under jax.jit with z a Python number.
    def scale(x, n):
        if n > 0:
            return x * n
        return x

    data = probes.explain(_raised(lambda: jax.jit(scale)(jnp.ones(3), 2))).to_dict()
    fix = _static_fix(data, "jax.jit(")
    assert fix["use"] == "jax.jit(scale, static_argnames=('n',))"
    assert fix["checked"].startswith("checked: tracing `scale` with `n` static succeeds")
    assert not any("nnx" in f["use"] or "int(n)" in f["use"] for f in data["fixes"])


def test_filter_jit_fix_in_a_notebook_cell(ip):
    # The explainer hook and %jax_explain in a notebook: the cell's frames are the user's, the same fix.
    ip.run_cell("import equinox as eqx")
    ip.run_cell("@eqx.filter_jit\ndef halve(x, n):\n    if n > 1:\n        return x / n\n    return x")
    ip.run_cell("try:\n    halve(jnp.ones(3), jnp.asarray(2.0))\nexcept Exception as err:\n    halve_error = err")
    ip.run_line_magic("jax_explain", "halve_error -o halve_rep")
    data = ip.user_ns["halve_rep"].to_dict()
    fix = _static_fix(data, "halve(")
    assert fix["use"] == "halve(x, float(n))"
    assert fix["checked"].startswith("checked: tracing `halve` with n = 2.0 (Python values) succeeds")
    ip.run_cell("del halve, halve_error, halve_rep")


def _compiled(report, name: str) -> dict:
    return next(f for f in report.to_dict()["functions"] if f["name"] == name)


def test_filter_jit_recompiles_every_call_pass_it_as_an_array_tried():
    # "filter_jit recompiles every call": a learning rate passed as a Python float is static under
    # eqx.filter_jit (every non-array is), so each new value compiles again. Passing it as an array is
    # tried after the block by tracing the user's function with it traced, as the wrapper would.
    @eqx.filter_jit
    def update(x, lr):
        return x - lr * x

    x = jnp.ones(3)
    with probes.compiles() as report:
        for lr in (0.1, 0.2, 0.3):
            update(x, lr)
    f = _compiled(report, "update")
    assert f["causes"] == {"first": 1, "static": 2}
    assert f["field_fix_works"] is True
    fix = f["field_fixes"]["static"]
    assert "pass it as an array (`jnp.asarray(...)`)" in fix and "not tried" not in fix
    assert "Checked: tried by tracing `update` with `lr` a traced float32 scalar: it traces" in fix
    head = " ".join(line.strip() for line in str(report).split("\nRecompiled:")[0].splitlines())
    assert head.startswith("%%jax_compiles [FOUND] `update` compiled 3 times: static argument value changed")
    assert "Checked: tried by tracing `update`" in head


def test_filter_jit_size_argument_must_stay_a_python_int_tried():
    # The same cause where the number sets a shape: traced, `jnp.zeros(n)` cannot trace. The fix says keep it
    # a Python number and let it take few values, from the trial.
    @eqx.filter_jit
    def pad(x, n):
        return jnp.zeros(n) + x.sum()

    x = jnp.ones(3)
    with probes.compiles() as report:
        for n in (1, 2, 3):
            pad(x, n)
    f = _compiled(report, "pad")
    assert f["field_fix_works"] is False
    fix = f["field_fixes"]["static"]
    assert fix.startswith("Keep `n` a Python number (static): making it an array does not trace")
    assert "needs `n` as a Python int" in fix


def test_linen_apply_jitted_by_the_user_fix_names_the_position():
    # The user jits a library's callable that runs their code: jax.jit(model.apply). `n` reaches
    # Module.__call__ through apply's *args, where static_argnames does not see it: the fix is its position.
    linen = pytest.importorskip("flax.linen")

    class Scale(linen.Module):
        @linen.compact
        def __call__(self, x, n):
            if n > 0:
                return x * n
            return x

    model = Scale()
    variables = model.init(jax.random.key(0), jnp.ones(3), 1)
    data = probes.explain(_raised(lambda: jax.jit(model.apply)(variables, jnp.ones(3), 2))).to_dict()
    fix = _static_fix(data, "jax.jit(")
    assert fix["use"] == "jax.jit(model.apply, static_argnums=(2,))"
    assert "`n` is argument 2 of the call" in fix["when"]
    assert fix["checked"].startswith("checked: tracing `model.apply` with `n` static succeeds")
    assert fix in data["fixes"]


def test_haiku_transform_apply_jitted_fix_names_the_position():
    hk = pytest.importorskip("haiku")

    def forward(x, n):
        if n > 0:
            return x * n
        return x

    transformed = hk.transform(forward)
    params = transformed.init(None, jnp.ones(3), 1)
    data = probes.explain(_raised(lambda: jax.jit(transformed.apply)(params, None, jnp.ones(3), 2))).to_dict()
    fix = _static_fix(data, "jax.jit(")
    assert fix["use"] == "jax.jit(transformed.apply, static_argnums=(3,))"
    assert fix["checked"].startswith("checked: tracing `transformed.apply` with `n` static succeeds")


def test_nnx_jit_number_attribute_pass_it_as_an_array_tried():
    # An nnx.Module's Python number is part of the graph definition nnx.jit compares at every call. Both
    # outcomes of the trial: it only feeds arithmetic (traces), it sets a shape (keep it static).
    class Model(nnx.Module):
        def __init__(self, n_iter):
            self.w = nnx.Param(jnp.ones(3))
            self.n_iter = n_iter

    @nnx.jit
    def step(model, x):
        return model.w * x * model.n_iter

    @nnx.jit
    def grow(model, x):
        return jnp.zeros(model.n_iter) + x.sum()

    x = jnp.ones(3)
    with probes.compiles() as report:
        for n in (4, 5, 6):
            step(Model(n), x)
            grow(Model(n), x)
    traces, sized = _compiled(report, "step"), _compiled(report, "grow")
    assert traces["field_fix_works"] is True and sized["field_fix_works"] is False
    assert (
        "Checked: tried by tracing `step` with `model.n_iter` a traced int32 scalar (a data field): it traces"
        in (traces["field_fixes"]["pytree_static"])
    )
    assert sized["field_fixes"]["pytree_static"].startswith("Keep `Model.n_iter` static: making it an array does not")
