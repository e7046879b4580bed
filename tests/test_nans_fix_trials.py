"""Every NaN/inf fix is tried on the values before it is offered (issue 39).

The producer search tries each candidate fix of the operation that made the value on that
operation's recorded inputs, then on the whole failing program with that one equation fixed
(``probes/_nans/fixes/value_fixes.py``); ``%%jax_nans``, the doctor and the watch offer only a fix that
stayed finite, say which naive one failed and with what, and list them all in ``to_dict()["fixes"]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes


def _nans(run, *, infs: bool = False):
    with pytest.raises(FloatingPointError):
        with probes.nans(infs=infs) as report:
            run()
    return report.to_dict()


def _by_key(data) -> dict:
    return {fix["key"]: fix for fix in data["fixes"]}


def _offered(data) -> list:
    return [fix for fix in data["fixes"] if fix["offered"]]


def test_a_bfloat16_variance_below_0_is_fixed_by_max_plus_eps_not_by_the_clamp_rsqrt_0_is_inf():
    # equinox#314 ("Clip variance in normalization": LayerNorm's rsqrt NaN under jax_debug_nans) and
    # DeepSpeed#581 (an epsilon lost to a half-precision variance, rsqrt NaN): a one-pass variance
    # E[x**2] - E[x]**2 in bfloat16 rounds below 0 for a nearly constant row, and is exactly 0 for a
    # constant (padding) row - so clamping at 0 leaves rsqrt(0) = inf.
    @jax.jit
    def layer_norm(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(x * x, axis=-1, keepdims=True) - mean**2
        return (x - mean) * jax.lax.rsqrt(var)

    x = jnp.full((4, 16), 3.3, jnp.bfloat16).at[1].set(jnp.linspace(10, 10.1, 16).astype(jnp.bfloat16))
    data = _nans(lambda: layer_norm(x))
    assert data["producer"]["primitive"] == "rsqrt" and data["producer"]["operands"][0]["dtype"] == "bfloat16"
    fixes = _by_key(data)
    clamp, offered = fixes["clamp"], fixes["clamp_eps"]
    assert (clamp["tried"], clamp["finite"], clamp["offered"]) == (True, False, False)
    assert clamp["result"].startswith("still inf at")  # rsqrt(0): the naive clamp fails on these values
    assert (offered["code"], offered["result"], offered["call_result"], offered["offered"]) == (
        "jnp.maximum(v, 0.0) + 1e-06",
        "finite",
        "finite",
        True,
    )
    assert _offered(data) == [offered]
    assert "`jnp.maximum(v, 0.0)` was tried too and is not offered" in data["fix"]
    assert "(rsqrt(0) is inf)" in data["fix"] and "the call's outputs finite" in data["fix"]


def test_one_over_sqrt_the_clamp_makes_sqrt_finite_but_not_the_call_so_it_is_not_offered():
    # the same variance through 1/jnp.sqrt(var): the clamp makes `sqrt` finite (sqrt(0) = 0), and the
    # division after it makes inf - only the whole-program trial shows it
    @jax.jit
    def standardise(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(x * x, axis=-1, keepdims=True) - mean**2
        return (x - mean) / jnp.sqrt(var)

    x = jnp.full((4, 16), 3.3, jnp.bfloat16).at[1].set(jnp.linspace(10, 10.1, 16).astype(jnp.bfloat16))
    data = _nans(lambda: standardise(x))
    assert data["producer"]["primitive"] == "sqrt"
    clamp = _by_key(data)["clamp"]
    assert clamp["result"] == "finite" and clamp["call_result"].startswith("still ")
    assert clamp["finite"] is False and clamp["offered"] is False
    assert [f["key"] for f in _offered(data)] == ["clamp_eps"]
    assert "`sqrt` finite, but the call's outputs still" in data["fix"]


def test_arccos_of_a_cosine_similarity_that_rounded_to_1_0000001_gets_a_clip_tried_on_call_3():
    # jax#23649 (arccos of a clipped cosine): dot(a, b) / (|a| |b|) of parallel vectors is 1.0000001 in float32
    @jax.jit
    def angle(a, b):
        c = jnp.dot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b))
        return jnp.arccos(c)

    a = jnp.array([0.1, 0.7, 0.3, 0.2], jnp.float32)
    scales = [1.7, 0.3, 3.0]  # only 3.0 * a rounds past 1
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            angles = [angle(a * scales[i], a) for i in range(3)]
    data = report.to_dict()
    assert "angles" not in locals()
    assert data["producer"]["primitive"] == "acos" and data["producer"]["operands"][0]["value"] == "1.0000001"
    assert data["call_number"] == 3
    (clip,) = _offered(data)
    assert (clip["code"], clip["tried"], clip["result"], clip["call_result"]) == (
        "jnp.clip(v, -1.0, 1.0)",
        True,
        "finite",
        "finite",
    )
    assert "Tried on the values of call 3: `acos` finite, and the call's outputs finite." in data["fix"]


def test_arctanh_clipped_to_1_is_inf_so_the_clip_inside_the_open_interval_is_offered():
    # cvoelcker/reppo#4: the inverse tanh of actions needs a clip slightly inside (-1, 1), not to it
    @jax.jit
    def pre_tanh(action):
        return jnp.arctanh(action)

    data = _nans(lambda: pre_tanh(jnp.array([0.5, 1.0000001, -0.2], jnp.float32)))
    fixes = _by_key(data)
    assert fixes["clip"]["result"] == "still inf at 1 of 3 elements" and not fixes["clip"]["offered"]
    assert fixes["clip_eps"]["offered"] and fixes["clip_eps"]["call_result"] == "finite"
    assert "(atanh(1) is inf)" in data["fix"]


def test_log_of_0_gets_an_epsilon_and_log_of_a_rounded_negative_is_not_clamped_at_0():
    # focal-loss-keras#17 (log of a probability 0: add epsilon); deep_learning_Nikolenko_and_Co#1 (1 - p
    # with p rounded to 1.0000001: log of a negative, and an epsilon too small to lift it)
    @jax.jit
    def nll(p):
        return -jnp.sum(jnp.log(p))

    data = _nans(lambda: nll(jnp.array([0.5, 0.0, 0.2])), infs=True)
    assert data["producer"]["primitive"] == "log" and data["value"] == "inf"
    assert [(f["key"], f["result"], f["call_result"]) for f in _offered(data)] == [("eps", "finite", "finite")]
    assert "`jnp.log(v + 1e-06)`" in data["fix"]

    @jax.jit
    def complement_log(p):
        return jnp.log(1.0 - p)

    data = _nans(lambda: complement_log(jnp.array([0.5, 1.0000001], jnp.float32)))
    fixes = _by_key(data)
    assert fixes["clamp"]["result"].startswith("still inf") and not fixes["clamp"]["offered"]  # log(0) = -inf
    assert fixes["floor"]["offered"] and fixes["floor"]["call_result"] == "finite"
    assert "(log(0) is -inf)" in data["fix"]


def test_a_division_by_an_empty_mask_in_float16_is_guarded_and_its_epsilon_is_one_float16_holds():
    # lightonai/pylate#239: "the 1e-8 normalisation guard is not representable in float16" - so the epsilon
    # candidate is chosen per dtype (1e-4 for float16), never one the dtype turns into 0
    @jax.jit
    def masked_mean(x, mask):
        return jnp.sum(x * mask) / jnp.sum(mask)

    data = _nans(lambda: masked_mean(jnp.ones(3, jnp.float16), jnp.zeros(3, jnp.float16)))
    fixes = _by_key(data)
    assert fixes["eps"]["code"] == "num / (den + 0.0001)" and fixes["eps"]["result"] == "finite"
    assert fixes["guard"]["offered"] and fixes["guard"]["call_result"] == "finite"
    assert data["producer"]["lost_constant"] is None  # no constant was added to the sum: none is named
    assert "1e-08" not in data["fix"]


def test_a_fix_inside_a_scan_body_is_tried_on_the_whole_program_with_the_loop_run_again():
    @jax.jit
    def normalise_rows(x):
        def row(carry, r):
            var = jnp.mean(r * r) - jnp.mean(r) ** 2
            return carry, r * jax.lax.rsqrt(var)

        return jax.lax.scan(row, 0.0, x)[1]

    x = jnp.full((3, 8), 2.0).at[1].set(jnp.arange(8.0))
    data = _nans(lambda: normalise_rows(x), infs=True)
    assert data["producer"]["primitive"] == "rsqrt" and data["producer"]["loops"]
    offered = _offered(data)
    assert offered and offered[0]["call_result"] == "finite"  # the scan re-run with the body's rsqrt fixed


def test_when_no_candidate_makes_the_call_finite_none_is_offered_and_the_report_says_what_it_tried():
    @jax.jit
    def two_bugs(v, z):
        return jnp.sqrt(v) + z / z  # the square root's fix leaves 0/0 in the same output

    data = _nans(lambda: two_bugs(jnp.array([-1.0, 4.0]), jnp.array([0.0, 1.0])))
    assert data["producer"]["primitive"] == "sqrt"
    assert _offered(data) == [] and all(f["tried"] for f in data["fixes"])
    assert all("without the fix" in f["call_result"] for f in data["fixes"] if f["call_result"])
    assert "No fix is offered: tried on the values of" in data["fix"]


def test_a_derivative_fix_is_tried_on_the_users_operation_and_says_why_the_call_was_not():
    # the gradient of a norm at 0 (0/0 in JAX's derivative): its fix, the double where, rewrites the user's
    # square root; it is tried on the value that square root got, with its derivative (issue 63.6)
    data = _nans(lambda: jax.grad(lambda x: jnp.linalg.norm(x))(jnp.zeros(2)))
    assert data["producer"]["derivative"] and "double-where safe norm" in data["fix"]
    assert [(f["key"], f["tried"], f["result"]) for f in data["fixes"]] == [
        ("primal_clamp", True, "finite, and its derivative finite"),
        ("double_where", True, "finite, and its derivative finite"),
    ]
    assert all(f["call_result"].startswith("not tried: the program's derivative") for f in data["fixes"])


def test_flax_layer_norm_with_epsilon_0_the_fix_is_tried_through_flaxs_own_code():
    nn = pytest.importorskip("flax.linen")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.LayerNorm(epsilon=0.0)(x)

    block, x = Block(), jnp.ones((3, 4), jnp.bfloat16).at[2].set(0.0)
    params = block.init(jax.random.key(0), x)
    data = _nans(lambda: jax.jit(block.apply)(params, x), infs=True)
    assert "`epsilon`" in data["fix"]
    assert [(f["key"], f["result"], f["call_result"]) for f in _offered(data)] == [("eps", "finite", "finite")]


def test_the_doctor_and_the_watch_offer_the_fix_the_nan_probe_tried(ip):
    source = (
        "@jax.jit\ndef angle(a, b):\n    c = jnp.dot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b))\n"
        "    return jnp.arccos(c)\n"
        "a = jnp.array([0.1, 0.7, 0.3, 0.2], jnp.float32)\n"
        "out = angle(a * 3.0, a)\n"
    )
    ip.run_cell("import jax\nimport jax.numpy as jnp", store_history=True)
    ip.run_cell("%%jax_doctor -o doc\n" + source, store_history=True)
    doctor = ip.user_ns["doc"].to_dict()
    (finding,) = [f for f in doctor["findings"] if f["probe"] == "nans"]
    assert (
        "`jnp.clip(v, -1.0, 1.0)`" in finding["fix"]
        and "`acos` finite, and the call's outputs finite" in finding["fix"]
    )
    ip.run_cell("%jax_watch -o wlog", store_history=True)
    try:
        ip.run_cell(source, store_history=True)
        (nan,) = [f for f in ip.user_ns["wlog"].to_dict()["findings"] if f["area"] == "NaN"]
    finally:
        ip.run_cell("%jax_watch off", store_history=True)
    assert nan["fix"] == finding["fix"]


def test_inside_a_while_loop_the_fix_is_tried_on_the_operation_and_the_whole_call_is_not_rerun():
    # a fixed value can change when a while loop ends (or make it run forever): only the operation is tried
    @jax.jit
    def iterate(x):
        def body(state):
            i, v = state
            return i + 1, jnp.sqrt(v - 0.5)

        return jax.lax.while_loop(lambda s: s[0] < 5, body, (0, x))[1]

    data = _nans(lambda: iterate(jnp.array([2.0, 0.6])))
    clamp = _by_key(data)["clamp"]
    assert clamp["result"] == "finite" and clamp["call_result"].startswith("not tried: the operation is inside a while")
    assert clamp["offered"] and "; the whole call not tried" in data["fix"]


def test_a_program_that_calls_back_into_python_is_not_rerun_for_a_trial():
    seen = []

    @jax.jit
    def logged_root(v):
        jax.debug.callback(lambda value: seen.append(1), v)  # the user's Python, inside the program
        return jnp.sqrt(v)

    data = _nans(lambda: logged_root(jnp.array([-1.0, 4.0])))
    clamp = _by_key(data)["clamp"]
    assert clamp["result"] == "finite"  # tried on the operation's recorded inputs: no Python of the user's
    assert (
        clamp["call_result"]
        == "not tried: the program calls back into Python (`debug_callback`), which a trial must not run"
    )


def test_an_exp_that_overflows_float16_is_computed_in_float32_and_not_sent_back_to_float16():
    # tensorflow#24979 / keras#22586 (half precision limits): a softmax's exp in float16 overflows above
    # 65504; in float32 it is finite - but its value does not fit float16 again, so "back to float16 after"
    # would make the same inf
    @jax.jit
    def softmax_half(z):
        e = jnp.exp(z)
        return e / jnp.sum(e)

    data = _nans(lambda: softmax_half(jnp.array([1.0, 12.0, 3.0], jnp.float16)), infs=True)
    (widened,) = _offered(data)
    assert widened["key"] == "float32" and widened["result"] == "finite (largest 1.63e+05, above float16's 65504)"
    assert widened["call_result"].startswith("not tried: the rest of the program would go on in float32")
    assert "keep the result in float32: it does not fit float16" in data["fix"]
    assert "back to float16 after" not in data["fix"]


def test_under_a_gradient_the_clip_to_1_gives_a_nan_derivative_so_the_clip_inside_is_offered():
    # jax#23649 ("Reverse differentiable arccos"): jnp.arccos(jnp.clip(y, -1, 1)) still made a NaN under
    # grad - the clip's derivative is 0 past 1 and arccos' is infinite at 1; clipping to 1 - eps fixed it.
    # The trial finds the same: the fixed operation's derivative is evaluated on the recorded values.
    def angle(a, b):
        c = jnp.dot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b))
        return jnp.arccos(c)

    a = jnp.array([0.1, 0.7, 0.3, 0.2], jnp.float32)
    data = _nans(lambda: jax.jit(jax.value_and_grad(angle))(a * 3.0, a))
    fixes = _by_key(data)
    assert fixes["clip"]["result"] == "finite, but its derivative still NaN at 1 of 1 element"
    assert not fixes["clip"]["offered"]
    assert fixes["clip_eps"]["offered"] and fixes["clip_eps"]["result"] == "finite, and its derivative finite"
    assert fixes["clip_eps"]["call_result"].startswith("not tried: the program also computes its derivative")


def test_a_reciprocal_of_0_written_as_a_constant_numerator_is_still_tried():
    # `1.0 / x`: the numerator is a constant written into the program (no array), the denominator 0
    @jax.jit
    def inverse(x):
        return 1.0 / x

    data = _nans(lambda: inverse(jnp.array([2.0, 0.0])), infs=True)
    assert data["producer"]["operands"][0]["constant"] is True
    (guard,) = _offered(data)
    assert (guard["key"], guard["result"], guard["call_result"]) == ("guard", "finite", "finite")
