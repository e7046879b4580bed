"""%jax_bisect's probe: verdicts on constructed cases, the float64 reference and the closure-constant flag."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxmagic import probes
from jaxmagic._jax.restore import take_snapshot


def to64(a):
    return np.asarray(a, dtype=np.float64)


W = jax.random.normal(jax.random.key(1), (64, 64)) / 8.0
X = jax.random.normal(jax.random.key(2), (20, 64))
REF = (to64(W) @ to64(X).T).sum(0)


def test_float32_precision_and_the_captured_constant():
    def closure_version(x):
        return jax.vmap(lambda row: jnp.sum(W @ row))(x)

    report = probes.bisect(closure_version, X, ref=REF, call_text="closure_version(X)", namespace=globals())
    assert report.verdict == "precision" and report.status.value == "ok"
    assert 0 < report.jit.max_rel_error < 1e-5 and 0 < report.eager.max_rel_error < 1e-5
    assert [c.name for c in report.captured] == ["W"] and report.captured[0].shape == (64, 64)
    assert "captures `W` by closure" in report.summary

    def param_version(w, x):
        return jax.vmap(lambda row: jnp.sum(w @ row))(x)

    clean = probes.bisect(param_version, W, X, ref=REF)
    assert clean.verdict == "precision" and clean.captured == []


def test_jit_wrong_eager_right_is_the_compilation_layer():
    def miscompiled(x):  # stands in for a compiler bug: the traced program computes something else
        if isinstance(x, jax.core.Tracer):
            return x * 2.0 + 0.5
        return x * 2.0

    x = jnp.arange(4.0)
    report = probes.bisect(miscompiled, x, ref=to64(x) * 2)
    assert report.verdict == "compilation" and report.status.value == "problem"
    assert report.eager.equal and report.jit.max_abs_error == 0.5
    assert "%jax_hlo" in report.document().fix  # the next step, under the headline
    # without a reference: jit and eager disagree
    assert probes.bisect(miscompiled, x).verdict in ("jit_differs", "compilation")


def test_both_wrong_is_the_algorithm_and_eager_only_wrong_is_named():
    def mean_off_by_one(x):
        return jnp.sum(x) / (x.size + 1)

    x = jnp.arange(1.0, 5.0)
    report = probes.bisect(mean_off_by_one, x, ref=np.mean(to64(x)))
    assert report.verdict == "algorithm" and report.jit.max_rel_error > 0.1

    def eager_only_wrong(x):
        if isinstance(x, jax.core.Tracer):
            return x + 1.0
        return x + 1.5

    assert probes.bisect(eager_only_wrong, x, ref=to64(x) + 1).verdict == "eager_differs"


def test_automatic_float64_reference_only_when_sound():
    def unstable_variance(x):  # fine in float64, cancels catastrophically in float32
        return jnp.mean(x**2) - jnp.mean(x) ** 2

    x = jnp.array([1e4 + 1, 1e4 + 2, 1e4 + 3], dtype=jnp.float32)
    report = probes.bisect(unstable_variance, x)
    assert report.reference_kind == "float64" and report.reference.leaves == ["() float64"]
    assert report.verdict == "algorithm"
    assert abs(float(np.var(to64(x))) - 2 / 3) < 1e-9  # what the float64 run computed is the truth

    casting = probes.bisect(lambda v: v.astype(jnp.float32) * 2, x)
    assert casting.reference_kind == "none" and "float32" in casting.reference_note
    assert casting.verdict == "agree"
    random = probes.bisect(lambda k: jax.random.normal(k, (3,)), jax.random.key(0))
    assert random.reference_kind == "none" and "random" in random.reference_note
    assert jax.config.jax_enable_x64 is False


def test_pytrees_static_arguments_and_failures():
    def scaled(params, mode):
        factor = 2.0 if mode == "double" else 1.0
        return {"w": params["w"] * factor, "b": params["b"] + 1}

    params = {"w": jnp.ones(3), "b": jnp.zeros(2)}
    report = probes.bisect(scaled, params, "double")
    assert report.verdict == "precision" or report.verdict == "ok"
    assert "static arguments 1" in report.jit.how
    assert report.jit.leaves == ["(2,) float32", "(3,) float32"]

    before = take_snapshot()
    failed = probes.bisect(lambda v: v.reshape(7), jnp.ones(3))
    assert failed.verdict == "failed" and failed.jit.error.startswith("TypeError") and failed.status.value == "error"
    assert take_snapshot().differences(before) == []
    wrong_shape = probes.bisect(lambda v: v * 2, jnp.ones(3), ref=np.ones(4))
    assert wrong_shape.verdict == "failed" and "shape" in wrong_shape.jit.error


def test_a_second_run_reads_the_same_trace_and_holds_nothing_alive():
    import gc
    import weakref

    def closure_version(x):
        return jax.vmap(lambda row: jnp.sum(W @ row))(x)

    traces = []

    def on_duration(event, *args, **kwargs):
        if "jaxpr_trace" in event:
            traces.append(event)

    first = probes.bisect(closure_version, X, ref=REF, namespace=globals())
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    try:
        second = probes.bisect(closure_version, X, ref=REF, namespace=globals())
    finally:
        jax.monitoring.unregister_event_duration_listener(on_duration)
    assert [c.name for c in first.captured] == [c.name for c in second.captured] == ["W"]
    assert second.jit.max_abs_error == first.jit.max_abs_error
    assert traces == []  # the captured arrays were read from the trace JAX had cached at the first run

    held = weakref.ref(closure_version)
    del closure_version, first, second
    gc.collect()
    assert held() is None


# -- the difference is made before the program runs (issue 28) ---------------------------------
#
# jit flattens its arguments (a dict by sorted keys, a custom node by its flatten function), turns
# Python numbers into int32/float32 arrays and runs the body once, when tracing. Eager does none of
# it. A jit/eager difference made there is not the compiler's: bisect re-runs eager with what jit
# gave the function and names that stage, the user's line and a fix.


def test_dict_values_concatenated_in_insertion_order_is_not_the_compiler():
    # jax-ml/jax#8419: concatenating a dict of input features; eager [0, 1, 2, 3], jit [2, 3, 0, 1]
    def func(input_dict):
        return jnp.concatenate(list(input_dict.values()), axis=0)

    input_dict = {"b": np.array([0.0, 1.0], np.float32), "a": np.array([2.0, 3.0], np.float32)}
    for fn in (func, jax.jit(func)):
        report = probes.bisect(fn, input_dict, ref=np.array([0.0, 1.0, 2.0, 3.0]), call_text="func(input_dict)")
        data = report.to_dict()
        assert report.eager.equal and report.jit.max_abs_error == 2.0  # what used to read "compilation"
        assert data["verdict"] == "before_program" and "%jax_hlo" not in data["summary"]
        before = data["before_program"]
        assert before["stage"] == "pytree_order" and before["explains"] is True
        assert before["checked"].startswith(
            "checked: eager with the dict `input_dict` rebuilt in sorted key order gives jit's numbers"
        )
        assert before["line"]["code"] == "return jnp.concatenate(list(input_dict.values()), axis=0)"
        assert before["line"]["function"] == "func"
        assert before["provenance"]["made_at"]["lineno"] == before["line"]["lineno"]
        assert before["provenance"]["library_function"] == "jnp.concatenate"
        assert before["provenance"]["started_by"]["code"].startswith("report = probes.bisect(fn, input_dict")
        assert before["dicts"] == [
            {"path": "input_dict", "given_order": ["'b'", "'a'"], "jit_order": ["'a'", "'b'"], "explains": None}
        ]
        assert "sorted(input_dict)" in before["fix"] and "NamedTuple" in before["fix"]
        assert "not tried" in before["fix"]
        assert "input_dict.values()" in data["summary"]
        text, html = str(report), report._repr_mimebundle_()["text/html"]
        assert "Before the program runs" in text and "keys as jit gives them" in text
        assert (
            "Before the program runs" in html and "<b>Fix:</b> Do not rely on the order of" in html
        )  # under the headline


def test_first_key_of_a_dict_decides_the_value_without_any_operation():
    # jax-ml/jax#4085: `next(iter(x))` under jit is always the first *sorted* key
    def first_value(x):
        first_key = next(iter(x))
        return x[first_key]

    report = probes.bisect(first_value, {"b": jnp.float32(2.0), "a": jnp.float32(1.0)})
    before = report.to_dict()["before_program"]
    assert report.verdict == "before_program" and before["stage"] == "pytree_order"
    assert before["line"]["code"] == "first_key = next(iter(x))"
    assert "no operation of the traced program differs" in before["line_how"]
    assert "sorted(x)" in before["fix"]


def test_haiku_style_params_dict_iterated_layer_by_layer():
    # dict-of-layers models (Haiku/Flax params, instadeepai/Mava#802): layers applied in dict order
    def mlp(params, x):
        for layer in params.values():
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return x

    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "linear_1": {"w": jax.random.normal(k1, (3, 3)), "b": jnp.zeros(3)},
        "linear_0": {"w": jax.random.normal(k2, (3, 3)), "b": jnp.zeros(3)},
    }
    report = probes.bisect(mlp, params, jnp.ones((4, 3)))
    before = report.before_program
    assert report.verdict == "before_program" and before.stage == "pytree_order"
    assert before.line.code == "for layer in params.values():"
    assert "line" in before.line_how and "source_info" in before.line_how
    # three dicts are reordered (the layers' "w"/"b" too) but sorting `params` alone explains it
    assert [(d.path, d.explains) for d in before.dicts] == [
        ("params", True),
        ("params['linear_1']", False),
        ("params['linear_0']", False),
    ]
    assert "sorting the dict `params` alone does too" in before.checked
    assert "sorted(params)" in before.fix


def test_custom_pytree_node_rebuilt_in_sorted_order():
    # liukidar/pcx#100: a node whose flatten sorts its entries; the function reads them in its own order
    class Features:
        def __init__(self, cols):
            self.cols = cols

    jax.tree_util.register_pytree_node(
        Features,
        lambda f: (tuple(f.cols[k] for k in sorted(f.cols)), tuple(sorted(f.cols))),
        lambda keys, values: Features(dict(zip(keys, values))),
    )

    def stack(feats):
        return jnp.stack(list(feats.cols.values()))

    report = probes.bisect(stack, Features({"z": jnp.ones(2), "a": jnp.zeros(2)}))
    before = report.to_dict()["before_program"]
    assert report.verdict == "before_program" and before["stage"] == "custom_node"
    assert "(`feats` (Features) by its unflatten function) gives jit's numbers" in before["checked"]
    assert before["line"]["code"] == "return jnp.stack(list(feats.cols.values()))"
    assert "unflatten" in before["fix"]

    # with an unsorted options dict beside it, sorting that dict alone is tried and does not explain it
    def stack_scaled(feats, opts):
        return jnp.stack(list(feats.cols.values())) * opts["s"] + opts["t"]

    options = {"t": jnp.float32(1.0), "s": jnp.float32(2.0)}
    mixed = probes.bisect(stack_scaled, Features({"z": jnp.ones(2), "a": jnp.zeros(2)}), options)
    assert mixed.verdict == "before_program" and mixed.before_program.stage == "custom_node"
    assert "sorting the dict `opts` alone does not" in mixed.before_program.checked
    assert [(d.path, d.explains) for d in mixed.before_program.dicts] == [("opts", False)]


def test_numpy_random_in_the_body_is_frozen_at_trace_time():
    # google/objax#208, JAX's "pure functions" gotcha: a NumPy draw inside jit runs once, at trace time
    def noisy(x):
        return x + np.random.normal(size=x.shape).astype(np.float32)

    report = probes.bisect(noisy, jnp.ones(3))
    before = report.to_dict()["before_program"]
    assert report.verdict == "before_program" and before["stage"] == "trace_time_python"
    assert "two eager runs of the same call differ" in before["checked"]
    assert "two jit runs give the same numbers" in before["checked"]
    assert "random states set back before the second run, two eager runs repeat their numbers" in before["checked"]
    assert "np.random.normal" in before["line"]["code"] and before["line"]["function"] == "noisy"
    assert "jax.random" in before["fix"]


def test_python_counter_mutated_inside_the_function():
    # jax-ml/jax#20732 (stateful computations doc): a Python counter inside a jitted function
    calls = []

    def counted(x):
        calls.append(1)
        return x * len(calls)

    report = probes.bisect(counted, jnp.ones(3))
    assert report.verdict == "before_program" and report.before_program.stage == "trace_time_python"
    assert report.before_program.line.code == "calls.append(1)"
    assert (
        "still differ" in report.before_program.checked
        and "not (only) a global random draw" in report.before_program.checked
    )


def test_a_call_that_changes_at_every_run_jitted_or_not_is_not_compared():
    # a host callback drawing with NumPy (jax.pure_callback threads): new numbers at each jitted call too
    def with_callback(x):
        noise = jax.pure_callback(
            lambda: np.random.normal(size=3).astype(np.float32), jax.ShapeDtypeStruct((3,), jnp.float32)
        )
        return x + noise

    report = probes.bisect(with_callback, jnp.ones(3))
    before = report.before_program
    assert report.verdict == "before_program" and before.stage == "nondeterministic"
    assert "two jit runs differ too" in before.checked and "says nothing about compilation" in before.checked


def test_python_int_argument_becomes_int32_under_jit():
    # eager computes `n ** 10` as a Python int; jit receives `n` as a weakly typed int32 and overflows
    def scaled(x, n):
        return x * (n**10) / 1e10

    report = probes.bisect(scaled, jnp.ones(3), 10)
    before = report.to_dict()["before_program"]
    assert report.verdict == "before_program" and before["stage"] == "argument_dtypes"
    assert before["argument"] == "n" and before["line"]["code"] == "return x * (n**10) / 1e10"
    assert "Python ints converted to JAX arrays, as jit converts them, gives jit's numbers" in before["checked"]
    assert "`n`" in before["fix"]


def test_a_real_float32_reassociation_is_not_blamed_on_the_dict_order():
    # XLA fuses and reorders float32 arithmetic: a real jit/eager difference, with an unsorted dict present
    def cancel(d):
        x = d["x"]
        return ((x + d["eps"]) * 7.0 - d["eps"]) / 7.0 - x

    d = {"x": jax.random.normal(jax.random.key(0), (1000,)), "eps": jnp.float32(1e-3)}
    report = probes.bisect(cancel, d)
    before = report.to_dict()["before_program"]
    assert report.jit_vs_eager > report.rtol and report.verdict != "before_program"
    assert before["stage"] == "none" and before["explains"] is False
    assert before["checked"].startswith("checked: the eager call run again repeats its numbers")
    assert "a new trace of the function (nothing cached) differs from eager too" in before["checked"]
    assert "rebuilt in sorted key order still differs from jit" in before["checked"]
    assert before["dicts"][0]["given_order"] == ["'x'", "'eps'"]
    assert before["line"] is None and before["fix"] == ""
    assert "What the runs receive was checked (dict order, dtypes, a new trace) and does not explain it" in (
        report.summary
    )


def test_no_input_check_when_jit_and_eager_agree():
    def ordered(d):
        return d["a"] * 2 + d["b"]

    report = probes.bisect(ordered, {"b": jnp.ones(2), "a": jnp.ones(2)})
    assert report.verdict in ("ok", "precision") and report.before_program is None


SCALE = 2.0


def test_a_global_changed_after_the_trace_is_a_stale_program_not_the_compiler():
    # the FAQ "jit does not see my updated global": the program keeps the value read when it was traced
    global SCALE

    def rescale(x):
        return x * SCALE

    x = jnp.ones(3)
    assert probes.bisect(rescale, x).verdict == "ok"  # traces with SCALE = 2.0
    SCALE = 3.0
    try:
        report = probes.bisect(rescale, x)  # jit reuses that program; eager reads 3.0
    finally:
        SCALE = 2.0
    before = report.to_dict()["before_program"]
    assert report.verdict == "before_program" and before["stage"] == "stale_trace"
    assert before["line"]["code"] == "return x * SCALE" and before["argument"] == "SCALE"
    assert before["checked"].startswith("checked: a new trace of the function")
    assert "reads `SCALE` from outside the function" in before["fix"]


def test_an_array_captured_by_a_user_jitted_function_and_replaced_later():
    # equinox/flax users re-binding a global weight after jitting: the old array is a program constant
    weights = {"w": jnp.ones(3)}

    def project(x):
        return x @ weights["w"]

    jitted = jax.jit(project)
    jitted(jnp.ones(3))
    weights["w"] = jnp.full(3, 2.0)
    report = probes.bisect(jitted, jnp.ones(3))
    assert report.verdict == "before_program" and report.before_program.stage == "stale_trace"
    assert report.before_program.line.code == 'return x @ weights["w"]'


def test_the_input_checks_hold_nothing_alive():
    import gc
    import weakref

    def func(input_dict):
        return jnp.concatenate(list(input_dict.values()), axis=0)

    report = probes.bisect(func, {"b": jnp.zeros(2), "a": jnp.ones(2)})
    assert report.verdict == "before_program"
    held = weakref.ref(func)
    del func, report
    gc.collect()
    assert held() is None


def test_a_static_argument_changed_in_place_finds_the_old_program():
    # jax-ml/jax#9024, #13992: a static object mutated after the first call; jit's cache returns the old program
    from functools import partial

    class Config:
        def __init__(self, scale):
            self.scale = scale

    @partial(jax.jit, static_argnums=1)
    def apply(x, config):
        return x * config.scale

    config = Config(2.0)
    x = jnp.ones(3)
    apply(x, config)
    config.scale = 3.0
    report = probes.bisect(apply, x, config)
    before = report.to_dict()["before_program"]
    assert report.verdict == "before_program" and before["stage"] == "stale_trace"
    assert before["line"]["code"] == "return x * config.scale" and before["argument"] == "config"
    assert "static argument `config`" in before["fix"] and "frozen dataclass" in before["fix"]
