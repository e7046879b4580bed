"""A constant that a low-precision dtype holds as 0: why the denominator was 0, and a fix that holds.

optax#1754 / optax#1755 (and chainer#6299, pykoi#69, glide-finetune#6 for other libraries): with float16
parameters, ``optax.adam``'s ``m / (jnp.sqrt(v + eps_root) + eps)`` adds its default ``eps=1e-8``, which
float16 holds as 0.0 (its smallest positive value is ~6e-08); where a gradient is 0, that is 0/0. The
producer search follows the zero denominator back to that constant (``_nans/fixes/lost_constant.py``),
the report says what it became, and the fix offered is the same constant with a value the dtype holds,
tried by evaluating the program again with it in place (``probes/_nans/fixes/value_fixes.try_constant``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic.render.text import render_text


def _nans(run):
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            run()
    return report, report.to_dict()


def _first_lines(report) -> str:
    """The headline and the Fix: paragraph, as a user reads them first."""
    return render_text(report.document()).split("\n\nWhat:")[0]


def _by_key(data) -> dict:
    return {fix["key"]: fix for fix in data["fixes"]}


def test_optax_adam_in_float16_names_its_eps_that_float16_holds_as_0_and_tries_one_it_holds():
    # optax#1754: the reproducer of the issue, jitted as a training step (a gradient of 0 at x[0])
    optax = pytest.importorskip("optax")
    params = {"w": jnp.ones((3,), jnp.float16)}
    tx = optax.adam(1e-3)
    state = tx.init(params)

    def loss(p, x):
        return jnp.sum((p["w"] * x) ** 2)

    @jax.jit
    def step(p, s, x):
        g = jax.grad(loss)(p, x)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    x = jnp.array([0.0, 1e-4, 1.0], jnp.float16)
    report, data = _nans(lambda: step(params, state, x))
    producer = data["producer"]
    assert producer["primitive"] == "div" and producer["library_function"] == "optax.scale_by_adam"
    lost = producer["lost_constant"]
    assert lost["dtype"] == "float16" and lost["became"] == "0.0" and lost["written"] == "eps"
    assert lost["written_value"] is None  # a name: its value is not in the program, and is not invented
    assert lost["replacement"] == 1e-4
    constant = _by_key(data)["constant"]
    assert constant["code"] == "optax.scale_by_adam(..., eps=0.0001)"
    assert constant["tried"] and constant["offered"]
    assert constant["result"] == "finite" and constant["call_result"] == "finite"
    in_float32 = [fix for fix in data["fixes"] if fix["code"] == "the values in float32"]
    assert in_float32 and not in_float32[0]["tried"] and in_float32[0]["result"].startswith("not tried:")
    assert _by_key(data)["eps"]["code"] == "num / (den + 0.0001)"  # no epsilon float16 turns into 0
    first = " ".join(_first_lines(report).split())
    assert first.startswith("%%jax_nans [FOUND] NaN produced by `div` inside `optax.scale_by_adam`")
    assert (
        "the constant added to it (`eps`, 1e-08 by default in `optax.scale_by_adam`) is 0.0 in float16: "
        "float16 cannot hold numbers below ~6e-08" in first
    )
    assert (
        "`eps=0.0001`" in first
        and "0.0001 in place of that constant): `div` finite, and the call's outputs finite" in first
    )
    assert "(not tried: it changes the dtype" in first


@pytest.mark.parametrize(
    ("dtype", "eps", "holds", "smallest"),
    [("float16", "1e-8", "0.0001", "6e-08"), ("bfloat16", "1e-41", "1e-08", "9e-41")],
)
def test_a_users_epsilon_that_its_dtype_holds_as_0_is_replaced_on_the_line_by_one_it_holds(dtype, eps, holds, smallest):
    # optax#1755's `sqrt(v) + eps` written by the user: float16 holds 1e-8 as 0; bfloat16 holds 1e-8 but
    # not 1e-41 (its smallest positive value is ~9e-41)
    @jax.jit
    def normalised_f16(x, v):
        return x / (jnp.sqrt(v) + 1e-8)

    @jax.jit
    def normalised_bf16(x, v):
        return x / (jnp.sqrt(v) + 1e-41)

    function = normalised_f16 if dtype == "float16" else normalised_bf16
    zeros = jnp.zeros(3, getattr(jnp, dtype))
    report, data = _nans(lambda: function(zeros, zeros))
    lost = data["producer"]["lost_constant"]
    assert lost["dtype"] == dtype and lost["written"] == eps and lost["written_value"] == float(eps)
    assert lost["expression"] == f"jnp.sqrt(v) + {eps}"
    constant = _by_key(data)["constant"]
    assert constant["code"] == f"jnp.sqrt(v) + {holds}" and constant["offered"]
    assert constant["result"] == "finite" and constant["call_result"] == "finite"
    first = " ".join(_first_lines(report).split())
    assert (
        f"the constant added to it (`{eps}`) is 0.0 in {dtype}: {dtype} cannot hold numbers below ~{smallest}" in first
    )
    assert f"Use an epsilon {dtype} holds: `jnp.sqrt(v) + {holds}` in place of `jnp.sqrt(v) + {eps}`" in first
    assert "Tried on the values of" in first


def test_bfloat16_holds_1e_8_so_the_same_line_makes_no_nan_there():
    @jax.jit
    def normalised(x, v):
        return x / (jnp.sqrt(v) + 1e-8)

    zeros = jnp.zeros(3, jnp.bfloat16)
    with probes.nans() as report:
        normalised(zeros, zeros)
    assert not report.to_dict()["found"]


def test_a_zero_written_as_0_is_no_lost_constant_and_no_precision_is_named():
    # the constant is 0.0 in float16 because the source wrote 0.0: nothing about precision is said
    @jax.jit
    def normalised(x, v):
        return x / (jnp.sqrt(v) + 0.0)

    zeros = jnp.zeros(3, jnp.float16)
    report, data = _nans(lambda: normalised(zeros, zeros))
    assert data["producer"]["lost_constant"] is None
    assert "constant" not in _by_key(data)
    first = _first_lines(report)
    assert "cannot hold" not in first and "float16" not in data["fix"]


def test_a_float32_zero_denominator_says_nothing_about_precision():
    # pylate#239's masked mean, in float32: the sum of an empty mask is 0, no constant was lost
    @jax.jit
    def masked_mean(x, mask):
        return jnp.sum(x * mask) / (jnp.sum(mask) + 0.0)

    report, data = _nans(lambda: masked_mean(jnp.ones(3), jnp.zeros(3)))
    assert data["producer"]["lost_constant"] is None
    fixes = _by_key(data)
    assert "constant" not in fixes and fixes["eps"]["code"] == "num / (den + 1e-08)"
    assert fixes["guard"]["offered"]
    rendered = render_text(report.document())
    assert "cannot hold" not in rendered and "in float16" not in rendered and "holds" not in rendered


def _adam_float16_step():
    """optax#1754's reproducer as a jitted training step, with its arguments (a gradient of 0 at x[0])."""
    optax = pytest.importorskip("optax")
    params = {"w": jnp.ones((3,), jnp.float16)}
    tx = optax.adam(1e-3)

    def loss(p, x):
        return jnp.sum((p["w"] * x) ** 2)

    @jax.jit
    def step(p, s, x):
        g = jax.grad(loss)(p, x)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    return step, (params, tx.init(params), jnp.array([0.0, 1e-4, 1.0], jnp.float16))


def test_the_doctor_says_the_same_cause_and_fix_for_adam_in_float16():
    step, arguments = _adam_float16_step()
    with probes.doctor() as report:
        step(*arguments)
    (finding,) = [f for f in report.to_dict()["findings"] if f["area"] == "NaN"]
    assert "is 0.0 in float16: float16 cannot hold numbers below ~6e-08" in finding["fix"]
    assert "`eps=0.0001`" in finding["fix"]


def test_the_watch_says_the_same_cause_and_fix_for_adam_in_float16():
    from jaxmagic.probes._watch import Watch

    step, arguments = _adam_float16_step()
    watch = Watch()
    watch.begin_cell("adam in float16")
    try:
        step(*arguments)
        cell = watch.end_cell()
    finally:
        watch.close()
    (finding,) = [f for f in cell.findings if f.area == "NaN"]
    text = " ".join(str(value) for value in dataclasses.asdict(finding).values())
    assert "is 0.0 in float16: float16 cannot hold numbers below ~6e-08" in text
    assert "`eps=0.0001`" in text


def test_a_layer_norm_epsilon_float16_holds_as_0_is_named_for_rsqrt_too():
    # DeepSpeed#581 ("an epsilon lost to a half-precision variance"): rsqrt(var + 1e-8) of a constant row in
    # float16 is rsqrt(0) = inf - the same cause, said by the same mechanism for a root as for a division
    @jax.jit
    def layer_norm(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-8)

    with pytest.raises(FloatingPointError):
        with probes.nans(infs=True) as report:
            layer_norm(jnp.ones((2, 4), jnp.float16))
    data = report.to_dict()
    assert data["producer"]["primitive"] == "rsqrt" and data["producer"]["lost_constant"]["written"] == "1e-8"
    constant = _by_key(data)["constant"]
    assert constant["code"] == "var + 0.0001" and constant["offered"] and constant["call_result"] == "finite"
    first = " ".join(_first_lines(report).split())
    assert "the constant added to it (`1e-8`) is 0.0 in float16" in first
    assert "Use an epsilon float16 holds: `var + 0.0001` in place of `var + 1e-8`" in first


def test_a_lost_epsilon_inside_a_scan_body_is_tried_with_the_loop_run_again():
    @jax.jit
    def normalise_rows(xs, vs):
        def body(carry, row):
            x, v = row
            return carry, x / (jnp.sqrt(v) + 1e-8)

        return jax.lax.scan(body, 0.0, (xs, vs))[1]

    rows = jnp.ones((3, 2), jnp.float16).at[1].set(0.0)
    report, data = _nans(lambda: normalise_rows(rows, rows))
    constant = _by_key(data)["constant"]
    assert constant["offered"] and constant["call_result"] == "finite"
    assert constant["result"] == "not observed (it runs inside a loop)"  # the loop body runs traced
    first = " ".join(_first_lines(report).split())
    assert "`div` not observed (it runs inside a loop); the call's outputs finite" in first
