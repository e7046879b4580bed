""" "Pass it as an array" for a pytree's static field, and "pass it traced" for a value a functools.partial
binds, tried by tracing before they are offered (issue 39; compiles/field_trial.py, compiles/baked_trial.py).

A static field (``flax.struct.field(pytree_node=False)``, ``eqx.field(static=True)``, a ``register_dataclass``
meta field) is part of jit's cache key: each new value compiles again (jax-ml/jax#33043: a static ``idx`` of a
registered dataclass; patrick-kidger/equinox#154: a static field is part of the structure). A learning rate
there should be a data field; a count or a size must stay static. A learning rate bound by
``functools.partial`` into a jit built per value is baked into the program (google-deepmind/optax#577).
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from flax import struct

from jaxmagic import probes
from jaxmagic.probes._compiles.fixes import main_fix


def _function(report, name):
    (found,) = [f for f in report.to_dict()["functions"] if f["name"] == name]
    return found


# -- a static field of a pytree argument -----------------------------------------------------------------


@struct.dataclass
class TrainState:
    w: jax.Array
    lr: float = struct.field(pytree_node=False)  # a learning rate kept as metadata: recompiles per value


@jax.jit
def sgd_step(state, g):
    print("tracing sgd_step")  # a trace-time side effect: the trial's trace of it is not shown
    return state.replace(w=state.w - state.lr * g)


def test_a_learning_rate_in_a_flax_struct_static_field_is_offered_as_an_array_once_tried(capsys):
    with probes.compiles() as report:
        for lr in (0.1, 0.05, 0.01):
            sgd_step(TrainState(jnp.ones(2), lr), jnp.ones(2))
    assert capsys.readouterr().out.count("tracing sgd_step") == 3  # the user's traces only
    f = _function(report, "sgd_step")
    assert f["causes"] == {"first": 1, "pytree_static": 2}
    assert f["field_fix_works"] is True and f["traced_again_to_try"] is True
    assert f["field_fix_trial"] == (
        "tried by tracing `sgd_step` with `state.lr` a traced float32 scalar (a data field): it traces"
    )
    fix = f["field_fixes"]["pytree_static"]
    assert fix.startswith("`TrainState.lr` is a static field") and "make `lr` a data field" in fix
    assert "Checked: tried by tracing `sgd_step`" in fix and "traced `sgd_step` once more after the cell" in fix
    later = [c for c in report.to_dict()["compilations"] if c["cause"] == "pytree_static"]
    assert later and all("Checked: tried by tracing" in c["fix"] for c in later)


class Sampler(eqx.Module):
    key: jax.Array
    n: int = eqx.field(static=True)  # a sample count: a shape, so it must stay static


@jax.jit
def draw(sampler):
    return jax.random.normal(sampler.key, (sampler.n,)).sum()


def test_a_count_in_an_equinox_static_field_is_not_offered_as_an_array():
    with probes.compiles() as report:
        for n in (2, 3, 4):
            draw(Sampler(jax.random.PRNGKey(0), n))
    f = _function(report, "draw")
    assert f["causes"] == {"first": 1, "pytree_static": 2}
    assert f["field_fix_works"] is False
    assert f["field_fix_trial"].endswith(
        "(a data field): it fails - `return jax.random.normal(sampler.key, (sampler.n,)).sum()` ("
        + f["field_fix_trial"].split("sum()` (", 1)[1].split(")", 1)[0]
        + ") needs `sampler.n` as a Python int: a traced value cannot set a count, a shape or a loop length"
    )
    assert f["field_fix_error"].startswith("TypeError: Shapes must be 1D sequences of concrete values")
    fix = f["field_fixes"]["pytree_static"]
    assert fix.startswith("Keep `Sampler.n` static: making it an array does not trace")
    assert "data field (an array" not in fix


def test_a_registered_dataclass_meta_field_jax_33043():
    # jax-ml/jax#33043: a static `idx` a method does not even use compiles `area` again per instance
    @functools.partial(jax.tree_util.register_dataclass, data_fields=["length"], meta_fields=["idx"])
    @dataclasses.dataclass
    class Shape:
        length: jax.Array
        idx: int

    @jax.jit
    def area(shape):
        return shape.length * shape.length

    with probes.compiles() as report:
        area(Shape(jnp.asarray(10.0), 2))
        area(Shape(jnp.asarray(10.0), 3))
    f = _function(report, "area")
    assert f["field_fix_works"] is True
    assert (
        f["field_fix_trial"]
        == "tried by tracing `area` with `shape.idx` a traced int32 scalar (a data field): it traces"
    )


def test_an_equinox_filter_jit_number_is_tried_through_the_wrapper():
    # eqx.filter_jit holds every non-array value static itself: the trial traces the user's function it holds
    # with the user's arguments, arrays traced and the field made a traced scalar (tests/test_library_static_fixes.py)
    class Model(eqx.Module):
        w: jax.Array
        n_iter: object

    @eqx.filter_jit
    def step(model, x):
        return model.w * x * model.n_iter

    with probes.compiles() as report:
        for i in (4, 5, 6):
            step(Model(jnp.ones(3), i), jnp.ones(3))
    f = _function(report, "step")
    fix = f["field_fixes"]["pytree_static"]
    assert "pass it as an array (`jnp.asarray(...)`)" in fix
    assert f["field_fix_works"] is True
    assert fix.endswith(
        "Checked: tried by tracing `step` with `model.n_iter` a traced int32 scalar (a data field): it traces "
        "(jaxmagic traced `step` once more after the cell to try it; its output while tracing was not shown)."
    )


def test_the_watch_offers_the_static_field_fix_untried(ip):
    ip.run_cell("import jax, jax.numpy as jnp\nfrom flax import struct", store_history=True)
    ip.run_cell("%jax_watch --budget 2 -o wlog", store_history=True)
    try:
        ip.run_cell(
            "traces = []\n"
            "@struct.dataclass\n"
            "class St:\n"
            "    w: jax.Array\n"
            "    lr: float = struct.field(pytree_node=False)\n"
            "@jax.jit\n"
            "def upd(s):\n"
            "    traces.append(s.lr)\n"
            "    return s.w * s.lr\n",
            store_history=True,
        )
        result = ip.run_cell("outs = [upd(St(jnp.ones(2), lr)) for lr in (0.1, 0.2, 0.3, 0.4)]", store_history=True)
        assert result.success
        (found,) = [f for f in ip.user_ns["wlog"].to_dict()["findings"] if f["area"] == "recompilation"]
    finally:
        ip.run_cell("%jax_watch off", store_history=True)
    assert ip.user_ns["traces"] == [0.1, 0.2, 0.3, 0.4]  # the user's traces, none of jaxmagic's
    assert "(a suggestion: not tried (jaxmagic does not trace your function again here" in found["fix"]


# -- a value bound by functools.partial into a jit built per value ---------------------------------------


def sgd_update(p, g, lr):
    return p - lr * g


def split_n(key, n):
    return jax.random.split(key, n)


def test_a_partial_bound_learning_rate_is_tried_traced_optax_577():
    p = jnp.ones(3)
    with probes.compiles() as report:
        for lr in (1e-3, 1e-2, 1e-1):
            p = jax.jit(functools.partial(sgd_update, lr=lr))(p, p)
    f = _function(report, "sgd_update")
    assert f["causes"] == {"first": 1, "baked_constant": 2}
    assert f["baked_fix_works"] is True and f["traced_again_to_try"] is True
    assert (
        f["baked_fix_trial"] == "tried by tracing `sgd_update` with `lr` passed traced (a float32 argument): it traces"
    )
    assert "Pass it traced instead: jit `sgd_update` itself once" in f["field_fixes"]["baked_constant"]
    assert "Checked: tried by tracing `sgd_update`" in main_fix(report.function("sgd_update"))


def test_a_partial_bound_count_is_not_offered_traced():
    with probes.compiles() as report:
        for n in (2, 3, 4):
            jax.jit(functools.partial(split_n, n=n))(jax.random.PRNGKey(0))
    f = _function(report, "split_n")
    assert f["baked_fix_works"] is False
    assert "`return jax.random.split(key, n)` (" in f["baked_fix_trial"]
    assert f["baked_fix_trial"].endswith(
        "needs `n` as a Python int: a traced value cannot set a count, a shape or a loop length"
    )
    assert "__hash__" in f["baked_fix_error"]  # JAX's own words, kept as evidence
    fix = main_fix(report.function("split_n"))
    assert "Keep it bound: passing `n` traced does not trace" in fix and "Pass it traced instead" not in fix


def test_a_closed_over_learning_rate_says_why_it_is_not_tried():
    def make_step(lr):
        return jax.jit(lambda p, g: p - lr * g)

    p = jnp.ones(3)
    with probes.compiles() as report:
        for lr in (1e-3, 1e-2, 1e-1):
            p = make_step(lr)(p, p)
    f = _function(report, "<lambda>")
    assert f["baked_fix_trial"] == "" and f["baked_fix_works"] is None
    assert f["field_fixes"]["baked_constant"].endswith(
        "(A suggestion: not tried - trying it needs the function rebuilt with the value as a parameter, which "
        "means running your code that builds it again, or putting a traced value into a closure cell that "
        "other functions may share.)"
    )


def test_the_doctor_gives_the_same_tried_static_field_fix():
    with probes.doctor(skip=["nans", "keys", "live", "leaks", "transfers"]) as report:
        for n in (5, 6, 7):
            draw(Sampler(jax.random.PRNGKey(1), n))
    findings = [f for f in report.to_dict()["findings"] if f["probe"] == "compiles"]
    assert findings and findings[0]["fix"].startswith("Keep `Sampler.n` static: making it an array does not trace")
