"""The NaN probe on small JAX programs with known bugs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxmagic import probes
from jaxmagic.render import static_bundle
from jaxmagic.report import Status


def reg_loss(p, x):
    return jnp.sum((x @ p["w"] + p["b"]) ** 2) + 1e-3 * jnp.linalg.norm(p["b"])


@jax.jit
def log_shifted(x):
    y = x * 2
    return jnp.log(y - 10)


def test_forward_nan_in_jit_names_primitive_and_line():
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            log_shifted(jnp.array(1.0))
    assert report.found and report.value == "nan"
    assert report.primitive == "log" and report.phase == "forward"
    assert report.where_line.function == "log_shifted"
    assert "jnp.log(y - 10)" in report.where_line.code
    assert [line.function for line in report.call_path][-2:] == [
        "test_forward_nan_in_jit_names_primitive_and_line",
        "log_shifted",
    ]
    assert any("Invalid nan value" in m for m in report.jax_messages)
    assert report.status is Status.PROBLEM


def test_backward_nan_of_norm_at_zero_finds_line_and_leaf():
    p = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    x = jnp.ones((4, 3))
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            jax.grad(reg_loss)(p, x)
    assert report.primitive == "mul" and report.phase == "backward"
    assert report.origin_lines[-1].function == "reg_loss"
    assert "jnp.linalg.norm" in report.origin_lines[-1].code
    assert report.failing_call == "jax.grad(reg_loss)(p, x)"
    assert [(leaf.holder, leaf.path) for leaf in report.nonfinite] == [("result of jax.grad(reg_loss)(p, x)", "['b']")]


def test_backward_nan_inside_jit_is_located_by_eager_rerun():
    params = [{"w": jnp.ones((3, 4)), "b": jnp.zeros(4)}, {"w": jnp.ones((4, 1)), "b": jnp.zeros(1)}]
    x = jnp.ones((2, 3))

    def loss(params, x):
        h = x
        for layer in params:
            h = h @ layer["w"] + layer["b"]
        return jnp.sum(h) + sum(jnp.linalg.norm(layer["b"]) for layer in params)

    grad_fn = jax.jit(jax.grad(loss))
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            grad_fn(params, x)
    assert report.phase == "backward"
    assert [line.function for line in report.origin_lines] == ["loss", "<genexpr>"]
    assert "jnp.linalg.norm" in report.origin_lines[-1].code
    assert any("disable_jit" in note for note in report.notes)
    assert sorted(leaf.path for leaf in report.nonfinite) == ["[0]['b']", "[1]['b']"]


def test_nan_already_in_arguments_is_blamed_on_the_input():
    bad = {"w": jnp.array([1.0, jnp.nan]), "b": jnp.ones(2)}
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            jax.jit(lambda p: p["w"] * p["b"])(bad)
    assert [leaf.name for leaf in report.nonfinite] == ["argument bad['w']"]
    assert report.nonfinite[0].nan_count == 1
    # JAX names the first operation the NaN reached; the summary says no operation made it
    assert report.summary.startswith("The NaN came in with the argument `bad['w']`: no operation of the call made it")


def test_infs_only_with_option():
    with probes.nans() as quiet:
        jax.jit(lambda x: 1.0 / x)(jnp.array(0.0))
    assert not quiet.found
    with pytest.raises(FloatingPointError):
        with probes.nans(infs=True) as report:
            jax.jit(lambda x: 1.0 / x)(jnp.array(0.0))
    assert report.value == "inf" and report.primitive == "div"


def test_config_restored_even_when_already_on():
    jax.config.update("jax_debug_nans", True)
    try:
        with pytest.raises(FloatingPointError):
            with probes.nans():
                jnp.log(jnp.array(-1.0))
        assert jax.config.jax_debug_nans is True
    finally:
        jax.config.update("jax_debug_nans", False)
    with probes.nans():
        pass
    assert jax.config.jax_debug_nans is False and jax.config.jax_debug_infs is False


def test_clean_block_and_other_errors():
    with probes.nans() as clean:
        jnp.ones(3).sum()
    assert clean.status is Status.OK and "No NaN" in clean.summary
    with pytest.raises(ValueError):
        with probes.nans() as failed:
            raise ValueError("not a nan")
    assert failed.status is Status.ERROR and failed.other_error == "ValueError: not a nan"


def test_nan_bound_by_block_without_computation_is_listed():
    namespace = {}
    with probes.nans(namespace=namespace) as report:
        namespace["weights"] = {"a": np.array([np.nan, 1.0], dtype=np.float32)}
    assert not report.found
    assert [leaf.name for leaf in report.nonfinite] == ["variable weights['a']"]
    assert report.status is Status.PROBLEM


def test_report_holds_no_arrays_and_is_json():
    import json

    p = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            jax.grad(reg_loss)(p, jnp.ones((4, 3)))
    json.dumps(report.to_dict())
    assert_holds_no_jax_objects(report)


def assert_holds_no_jax_objects(obj, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    assert not isinstance(obj, (jax.Array, np.ndarray)), f"report holds an array: {obj!r}"
    assert not callable(obj) or isinstance(obj, type), f"report holds a callable: {obj!r}"
    if isinstance(obj, dict):
        for value in obj.values():
            assert_holds_no_jax_objects(value, seen)
    elif isinstance(obj, (list, tuple, set)):
        for value in obj:
            assert_holds_no_jax_objects(value, seen)
    elif hasattr(obj, "__dict__"):
        for value in vars(obj).values():
            assert_holds_no_jax_objects(value, seen)


VMAP_MISS = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jaxmagic import probes
    f = jax.jit(lambda x: jnp.log(x))
    f(jnp.array(2.0)).block_until_ready()            # already executed once
    jax.vmap(lambda x: x * 2)(jnp.ones(3))           # tracing a vmap breaks the global switch
    jax.config.update("jax_debug_nans", True)
    try:
        f(jnp.array(-1.0)); print("global: missed")
    except FloatingPointError:
        print("global: caught")
    jax.config.update("jax_debug_nans", False)
    try:
        with probes.nans() as report:
            f(jnp.array(-1.0))
        print("probe: missed")
    except FloatingPointError:
        print("probe: caught", report.primitive)
""")


def test_probe_is_immune_to_the_vmap_miss_of_the_global_switch():
    proc = subprocess.run([sys.executable, "-c", VMAP_MISS], capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("global:", "probe:"))]
    # The control shows the bug exists in this JAX; the probe must still catch the NaN.
    assert lines == ["global: missed", "probe: caught log"], proc.stdout + proc.stderr


def test_inf_without_infs_option_says_to_turn_inf_checks_on():
    namespace = {}
    with probes.nans(namespace=namespace) as report:
        namespace["inf_val"] = jax.jit(lambda x: 1.0 / x)(jnp.array(0.0))
    assert [leaf.name for leaf in report.nonfinite] == ["variable inf_val"]
    assert "--infs" in report.summary and "holds inf" in report.summary


def test_call_sites_are_counted_on_the_blocks_thread_only():
    import threading

    from jaxmagic.probes._nans.call_sites import counting_call_sites

    def work(fail):
        if fail:
            raise RuntimeError("stop")

    def call_site(fail=False):
        work(fail)  # the counted call

    with counting_call_sites() as counts:
        other = threading.Thread(target=lambda: [call_site() for _ in range(5)])
        other.start()
        other.join()
        for _ in range(3):
            call_site()
        try:
            call_site(fail=True)
        except RuntimeError as error:
            tb = error.__traceback__
    while tb.tb_frame.f_code is not call_site.__code__:
        tb = tb.tb_next
    assert counts.number(tb) == 4  # the 4th call on this thread; the other thread's 5 are not the block's


def test_magic_names_the_library_function_by_its_public_name(ip):
    # Issue 23: through %%jax_nans the library function was IPython's `run_cell_magic`. A constant
    # feature column (zero variance) under jnp.std's gradient, as in normalisation-layer threads.
    ip.run_cell("def feature_scale_loss(x):\n    return jnp.sum(jnp.std(x, axis=0))", store_history=True)
    result = ip.run_cell(
        "%%jax_nans -o nr_std\ng_std = jax.grad(feature_scale_loss)(jnp.ones((4, 3)))", store_history=True
    )
    assert isinstance(result.error_in_exec, FloatingPointError)
    data = ip.user_ns["nr_std"].to_dict()
    assert data["library_function"] == "jnp.std" and data["provenance"]["library_function"] == "jnp.std"
    assert data["provenance"]["made_at"]["function"] == "feature_scale_loss"
    assert data["provenance"]["made_at"]["code"].strip() == "return jnp.sum(jnp.std(x, axis=0))"
    assert data["provenance"]["started_by"]["code"].strip() == "g_std = jax.grad(feature_scale_loss)(jnp.ones((4, 3)))"
    assert "variance is 0" in data["fix"]


# -- issue 28: a clean report says what was checked -------------------------------------------


@jax.jit
def layer_norm_f16(x, scale):
    # A hand-written mixed-precision layer norm: the variance overflows float16 (max 65504) to inf,
    # and rsqrt(inf) = 0 hides it - the output is finite (and wrong).
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


@jax.jit
def finite_or_zero(x):
    y = jnp.exp(x)
    return jnp.where(jnp.isfinite(y), y, 0.0)


@jax.jit
def cleaned_logits(x):
    z = x * 1e30
    return jnp.nan_to_num(z * z)


def _f16_activations():
    return jnp.array([[300.0, -300.0, 250.0, -250.0]], jnp.float16)


def test_clean_report_says_which_calls_were_checked_and_points_to_inside():
    x = _f16_activations()
    with probes.nans(infs=True) as report:
        for _ in range(3):
            out = layer_norm_f16(x, jnp.float16(1.0))
        finite_or_zero(jnp.array([100.0]))
    assert bool(jnp.all(jnp.isfinite(out)))  # the overflow is hidden: nothing raised
    data = report.to_dict()
    assert data["status"] == "ok"
    assert data["jit_calls"] == {"layer_norm_f16": 3, "finite_or_zero": 1}
    scope = data["checked_scope"]
    assert "the outputs of 3 calls of `layer_norm_f16` and 1 call of `finite_or_zero`" in scope
    assert "checked only where they reach an output" in scope and "--inside" in scope
    # the headline says what was looked at; what was not, and --inside, are under "What was checked" (issue 53)
    assert scope.split("; ")[0] in data["summary"] and "any JAX computation" not in data["summary"]


def test_clean_report_of_eager_cell_says_no_jitted_call_was_made():
    with probes.nans() as report:
        jnp.ones(3) * 2
    assert report.jit_calls == {}
    # what ran compiled inside an eager operation was not looked at: said in the headline, naming --inside (63.4)
    assert report.summary == (
        "No NaN in what was checked: the output of each eager operation JAX checked (the cell called no jitted "
        "function directly). Not looked inside compiled code: a NaN masked there (or made by its gradient) is "
        "unseen - `%%jax_nans --inside` looks."
    )


# -- issue 28: %%jax_nans --inside finds the masked non-finite value ---------------------------


def _only_inside_finding(report, function):
    data = report.to_dict()
    found = [s for s in data["inside_searches"] if s["function"] == function]
    assert len(found) == 1 and found[0]["failure"] == ""
    return data, found[0]


def test_inside_finds_float16_variance_overflow_hidden_by_rsqrt():
    x = _f16_activations()
    with probes.nans(infs=True, inside=True) as report:
        for _ in range(3):
            out = layer_norm_f16(x, jnp.float16(1.0))
    assert bool(jnp.all(jnp.isfinite(out)))  # the cell ran as without the probe
    data, found = _only_inside_finding(report, "layer_norm_f16")
    assert data["status"] == "problem" and not data["found"]
    producer = found["producer"]
    assert (producer["primitive"], producer["value"]) == ("square", "inf")
    assert producer["line"]["code"] == "var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)"
    assert producer["line"]["function"] == "layer_norm_f16"
    assert (found["masked_by"], found["masked_primitive"]) == ("rsqrt", "rsqrt")
    assert found["masked_line"]["code"] == "return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale"
    assert found["call"] == 1 and found["reached_output"] is False
    assert "`square` made inf" in data["summary"] and "`rsqrt`" in data["summary"]
    assert "masked it" in data["summary"]
    assert "every intermediate of 1 compiled computation (evaluated op by op, --inside)" in data["checked_scope"]
    assert "Not looked inside 2 later calls: checked only at their outputs." in data["checked_scope"]


def test_inside_finds_overflow_hidden_by_where_isfinite():
    with probes.nans(infs=True, inside=True) as report:
        finite_or_zero(jnp.array([1.0, 100.0]))
    _, found = _only_inside_finding(report, "finite_or_zero")
    assert found["producer"]["primitive"] == "exp"
    assert found["producer"]["line"]["code"] == "y = jnp.exp(x)"
    assert found["producer"]["index"] == [1]
    assert found["masked_by"] == "jnp.where"
    assert found["masked_line"]["code"] == "return jnp.where(jnp.isfinite(y), y, 0.0)"


def test_inside_finds_inf_hidden_by_nan_to_num():
    with probes.nans(inside=True) as report:
        cleaned_logits(jnp.array([1.0, 1e-20]))
    _, found = _only_inside_finding(report, "cleaned_logits")
    assert found["producer"]["primitive"] == "mul"
    assert found["producer"]["line"]["code"] == "return jnp.nan_to_num(z * z)"
    assert found["masked_by"] == "jnp.nan_to_num"
    assert found["masked_line"]["code"] == "return jnp.nan_to_num(z * z)"


@jax.jit
def masked_attention(scores, mask):
    scores = jnp.where(mask, scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=-1)


def test_inside_does_not_report_a_written_minus_inf_mask_and_stays_ok():
    mask = jnp.array([[True, False, True], [True, True, False]])
    with probes.nans(infs=True, inside=True) as report:
        masked_attention(jnp.ones((2, 3)), mask)
    data = report.to_dict()
    assert data["status"] == "ok" and report.inside_findings == []
    assert [s["function"] for s in data["inside_searches"]] == ["masked_attention"]
    assert "every intermediate of 1 compiled computation (evaluated op by op, --inside)" in data["checked_scope"]
    # every compiled computation the cell ran was evaluated: the clean headline says so, with no caveat
    assert data["summary"].startswith("No NaN/inf in what was checked: every intermediate of 1 compiled computation")


def test_without_inside_masked_values_stay_ok_with_precise_words():
    with probes.nans(infs=True) as report:
        cleaned_logits(jnp.array([1.0, 1e-20]))
        finite_or_zero(jnp.array([100.0]))
    data = report.to_dict()
    assert data["status"] == "ok" and data["inside_searches"] == []
    assert "values inside compiled programs are checked only where they reach an output" in data["checked_scope"]


def test_inside_provenance_names_the_jit_and_the_cell_line_that_called_it():
    with probes.nans(infs=True, inside=True) as report:
        finite_or_zero(jnp.array([100.0]))  # the call
    (found,) = report.to_dict()["inside_searches"]
    made = found["producer"]["provenance"]
    assert made["made_at"]["code"] == "y = jnp.exp(x)" and made["function"] == "finite_or_zero"
    assert made["transforms"][0] == "jit(finite_or_zero)"
    assert made["started_by"]["code"] == "finite_or_zero(jnp.array([100.0]))  # the call"
    assert found["masked_provenance"]["made_at"]["code"] == "return jnp.where(jnp.isfinite(y), y, 0.0)"


@jax.jit
def safe_log(x):
    # The jnp.where trap in the forward pass: log(-1) = NaN is made, then discarded by the where.
    return jnp.where(x > 0, jnp.log(x), 0.0)


@jax.jit
def clipped_square(x):
    return jnp.clip(x * x, -1e4, 1e4)


@jax.jit
def capped_activation_sum(xs):
    def body(total, x):
        e = jnp.exp(x)
        return total + jnp.minimum(e, 1.0), None

    return jax.lax.scan(body, 0.0, xs)[0]


def test_inside_names_nan_discarded_by_where_clip_and_min_in_a_scan_iteration():
    with probes.nans(inside=True) as report:
        safe_log(jnp.array([1.0, -1.0]))
        clipped_square(jnp.array([1.0, 300.0], jnp.float16))
        capped_activation_sum(jnp.array([1.0, 2.0, 100.0, 3.0]))
    by_function = {s["function"]: s for s in report.to_dict()["inside_searches"]}
    log = by_function["safe_log"]
    assert (log["producer"]["primitive"], log["producer"]["value"], log["masked_by"]) == ("log", "nan", "jnp.where")
    clip = by_function["clipped_square"]
    assert (clip["producer"]["primitive"], clip["producer"]["value"]) == ("mul", "inf")
    assert clip["masked_by"] == "jnp.clip" and clip["producer"]["index"] == [1]
    loop = by_function["capped_activation_sum"]
    assert loop["producer"]["line"]["code"] == "e = jnp.exp(x)"
    assert [(p["primitive"], p["index"]) for p in loop["producer"]["loops"]] == [("scan", 2)]
    assert (loop["masked_by"], loop["masked_line"]["code"]) == ("min", "return total + jnp.minimum(e, 1.0), None")
    assert (
        report.summary.startswith("`log` made nan") and "(2 more compiled computations made one too)" in report.summary
    )


def test_inside_with_a_nan_that_reaches_the_output_keeps_the_usual_finding():
    with pytest.raises(FloatingPointError):
        with probes.nans(inside=True) as report:
            log_shifted(jnp.array(1.0))
    assert report.found and report.primitive == "log" and "jnp.log(y - 10)" in report.where_line.code
    (found,) = report.to_dict()["inside_searches"]
    assert found["function"] == "log_shifted" and found["reached_output"] and found["masked_by"] == ""


def test_inside_says_when_no_jitted_call_of_the_users_was_evaluated():
    with probes.nans(inside=True) as report:
        jax.grad(lambda x: jnp.sum(jnp.log(x)))(jnp.ones(2))
    assert report.inside_searches == [] and report.status is Status.OK
    # the eager gradient ran JAX's own jitted functions (jnp.log, jnp.sum): their insides are not evaluated,
    # and the clean headline says so (issue 63.4)
    assert "Not looked inside" in report.summary and "calls of JAX library functions" in report.summary


def test_inside_under_another_probe_that_follows_every_call_runs_the_cell_and_says_why_not():
    from jaxmagic._jax import jit_calls

    with jit_calls.observing_calls(jit_calls.CallObserver()):
        with probes.nans(inside=True) as report:
            out = finite_or_zero(jnp.array([100.0]))
    assert float(out[0]) == 0.0 and report.inside_searches == []
    assert any(note.startswith("--inside did not run: cannot run inside another magic") for note in report.notes)
    assert not any("evaluated no call" in note for note in report.notes)


def _standardize(x):
    mu, sd = jnp.mean(x, axis=0), jnp.std(x, axis=0)
    return (x - mu) / sd  # sd is 0 for a constant column


def _train_step(w, x):
    return w - 0.1 * jnp.sum(_standardize(x), axis=0)


def test_a_nan_argument_that_plays_no_part_does_not_hide_the_operation_that_made_the_nan():
    params = jnp.array([1.0, jnp.nan])  # a NaN the failing division never sees
    x = jnp.ones((4, 2)).at[:, 0].set(jnp.arange(4.0))
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            _train_step(params, x)
    assert report.producer is not None and report.producer.primitive == "div"
    assert report.producer.line.code == "return (x - mu) / sd  # sd is 0 for a constant column"
    assert "already held" not in " ".join(report.notes)


def _bf16_exp(x):
    x = x.astype(jnp.bfloat16)
    e = jnp.exp(x)  # overflows bfloat16
    return e - e


def test_a_bfloat16_nan_is_searched_like_a_float32_one():
    """NumPy does not count bfloat16 as inexact: its values were never read, and no line was named."""
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            _bf16_exp(jnp.array([100.0, 1.0]))
    assert report.producer is not None and report.producer.primitive == "exp"
    assert report.producer.line.code == "e = jnp.exp(x)  # overflows bfloat16"


def _masked_softmax(logits, mask):
    logits = jnp.where(mask, logits, -jnp.inf)
    return jax.nn.softmax(logits, axis=-1)


def test_a_report_whose_producer_has_no_forward_cause_is_laid_out():
    """`select_n` has no entry among the forward causes: laying the report out raised TypeError, which
    replaced the user's FloatingPointError and showed no report."""
    mask = jnp.array([[True, False, True], [False, False, False]])
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            _masked_softmax(jnp.ones((2, 3)), mask)
    document = report.document()
    assert "-jnp.inf" in report.fix and document.headline == report.summary


# -- derivative fixes that fit the function the derivative is of --------------------------------
# Shapes from public threads: the gradient of an elementwise sqrt (a distance |x - y| written as
# sqrt((x - y)**2)), of arccos at 1 (the angle between equal vectors), of arctan2 at the origin,
# and a custom_vjp backward rule of the user's that divides 0/0. Each got the sum-of-squares
# safe norm (a different function for an elementwise sqrt, and no sqrt at all in the others).


def _distance(x, y):
    d = jnp.sqrt((x - y) ** 2)
    return jnp.sum(d)


def _angle_between(a, b):
    c = jnp.dot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b))
    return jnp.arccos(c)


def _heading(v):
    return jnp.arctan2(v[1], v[0])


@jax.custom_vjp
def _scaled(x):
    return x


def _scaled_fwd(x):
    return x, x


def _scaled_bwd(x, g):
    scale = jnp.sqrt(x) / x  # the user's own rule: 0/0 at x = 0
    return (g * scale,)


_scaled.defvjp(_scaled_fwd, _scaled_bwd)


def _fix_of(call):
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            call()
    return report


def test_the_gradient_fix_fits_the_function_differentiated():
    elementwise = _fix_of(lambda: jax.grad(_distance)(jnp.array([1.0, 2.0]), jnp.array([1.0, 3.0])))
    assert "jnp.where(v > 0, jnp.sqrt(jnp.where(v > 0, v, 1.0)), 0.0)" in elementwise.fix
    assert "jnp.abs" in elementwise.fix and "jnp.sum(v**2" not in elementwise.fix
    arccos = _fix_of(lambda: jax.grad(_angle_between)(jnp.ones(3), jnp.ones(3)))
    assert "jnp.arccos(jnp.clip(c, -1 + eps, 1 - eps))" in arccos.fix and "norm" not in arccos.fix
    heading = _fix_of(lambda: jax.grad(_heading)(jnp.zeros(2)))
    assert "jnp.arctan2(jnp.where(ok, y, 0.0), jnp.where(ok, x, 1.0))" in heading.fix
    assert "mask" not in heading.fix


def test_a_nan_made_by_the_users_own_backward_rule_is_told_as_theirs():
    report = _fix_of(lambda: jax.grad(lambda x: jnp.sum(_scaled(x) ** 2))(jnp.array([0.0, 1.0])))
    p = report.producer
    assert p.user_rule and not p.derivative and p.line.code.strip().startswith("scale = jnp.sqrt(x) / x")
    assert "your own derivative rule" in static_bundle(report.document())["text/plain"]
    assert "jnp.where(den != 0" in report.fix and "safe norm" not in report.fix


def _cond_sqrt(x):
    return lax.cond(x > 0, jnp.sqrt, jnp.zeros_like, x)


def test_a_discarded_nan_in_a_gradient_cell_is_not_said_to_make_the_gradient_nan():
    """grad of vmap(cond): vmap turns the cond into a select; the gradient is finite. The report said
    `jnp.where` discarded it and that "a gradient through it would be NaN"."""
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            jax.grad(lambda x: jnp.sum(jax.vmap(_cond_sqrt)(x)))(jnp.array([1.0, -1.0, 0.0]))
    p = report.producer
    assert p is not None and p.discarded_by == "lax.cond", report.summary
    assert "would be NaN" not in report.summary


def _half_variance(x):
    x = x.astype(jnp.float16)
    m = jnp.mean(x * x)  # 300 * 300 is above float16's largest value
    return m - m


def test_an_overflow_to_inf_is_told_as_the_dtypes_limit_with_a_float32_fix():
    """The explanation was mul's usual cause, "0 * inf", for 300.0 * 300.0, and no fix was offered."""
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            _half_variance(jnp.full(4, 300.0))
    text = static_bundle(report.document())["text/plain"]
    assert "above the largest float16 value (65504, `jnp.finfo(jnp.float16).max`)" in " ".join(text.split())
    assert "0 * inf" not in text and report.fix.startswith("`mul` (`x * x`) overflowed float16")


def test_a_nan_check_the_cell_caught_itself_is_not_ok():
    # A loop that skips bad batches (`try: step(...) except FloatingPointError: continue`) under the
    # checks: the error never reaches the probe, but JAX printed that its check fired - never [OK].
    @jax.jit
    def step(x):
        return jnp.log(x) * 2.0

    with probes.nans() as report:
        try:
            step(jnp.array([-1.0, 2.0]))
        except FloatingPointError:
            pass
    data = report.to_dict()
    assert data["status"] != "ok", report.summary
    assert "caught the FloatingPointError" in report.summary
    assert "the error is below" not in static_bundle(report.document())["text/plain"]
