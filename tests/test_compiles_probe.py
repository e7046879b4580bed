"""The compilation probe on small programs with a known recompilation cause.

Every test defines its functions inside the test, so no compilation cache from
another test can hide (or add) a compilation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# the module (``probes.compiles`` is the probe itself, which shadows it as an attribute)
import jaxmagic.probes._compiles as compiles_module
import jaxmagic.probes._compiles.model as limits_module  # how much is kept
from jaxmagic import probes
from jaxmagic._jax.compile_log import (
    argument_passing_changes,
    parse_cache_miss,
    parse_compile_log_line,
    pytree_changes,
    short_types,
    signature_text,
)
from jaxmagic._jax.restore import take_snapshot
from jaxmagic.probes._compiles import CompileBudgetExceeded
from jaxmagic.probes._compiles.cause import KINDS
from jaxmagic.probes._compiles.fixes import fix_for, main_fix
from jaxmagic.render import static_bundle


def test_static_argument_value_change_is_named_with_its_values():
    @partial(jax.jit, static_argnames=("step",))
    def decay(w, step):
        return w * 0.9**step

    w = jnp.ones(3)
    with probes.compiles() as rep:
        for step in range(4):
            decay(w, step=step)
    f = rep.function("decay")
    assert rep.count("decay") == 4 and f.count == 4
    assert f.causes == {"first": 1, "static": 3}
    assert f.main_cause == "static" and f.static_argnames == ["step"]
    assert f.static_values["step"] == ["0", "1", "2", "3"]
    assert [c.changes for c in rep.compilations_of("decay")][1:] == [
        ["step: 0 -> 1"],
        ["step: 1 -> 2"],
        ["step: 2 -> 3"],
    ]
    # JAX itself only said "explanation unavailable"; the report keeps that evidence
    assert "cache miss explanation unavailable" in rep.compilations_of("decay")[1].jax_explanation
    assert f.distinct_argument_types == 1  # same shapes every time: it is not the arguments
    assert rep.recompiled_functions == [f]
    assert rep.summary == "`decay` compiled 4 times: static argument value changed: `step` 0 -> 1 -> 2 -> 3."


def test_dtype_change_names_the_argument_and_both_types():
    @jax.jit
    def scale(w, x):
        return w * x

    x = jnp.ones(3)
    with probes.compiles() as rep:
        scale(jnp.ones(3), x)
        scale(jnp.ones(3, jnp.int32), x)
    second = rep.compilations_of("scale")[1]
    assert second.cause == "types"
    assert second.changes == ["w: f32[3] -> i32[3] (dtype)"]
    assert second.argument_types == "i32[3], f32[3]"


def test_two_causes_are_both_named():
    @partial(jax.jit, static_argnames=("step",))
    def decay_step(w, x, step):
        return w - 0.1 * 0.99**step * x

    w0, x0 = jnp.ones(3), jnp.ones(3)
    with probes.compiles() as rep:
        decay_step(w0, x0, step=0)
        decay_step(w0, x0, step=1)
        decay_step(w0.astype(jnp.int32), x0, step=1)
    f = rep.function("decay_step")
    assert f.causes_again == ["static", "types"]  # equally frequent: the static argument is named first
    assert f.reason == (
        "static argument value changed: `step` 0 -> 1, and argument types changed: w: f32[3] -> i32[3] (dtype)"
    )


def test_shape_growth_counts_every_shape():
    @jax.jit
    def total(x):
        return jnp.sum(x * 2)

    xs = [jnp.ones(n) for n in (2, 3, 4, 5)]
    with probes.compiles() as rep:
        for x in xs:
            total(x)
        total(xs[0])  # seen before: no compilation
    f = rep.function("total")
    assert f.count == 4 and f.distinct_argument_types == 4
    assert f.causes == {"first": 1, "types": 3}
    # JAX compares with the closest earlier key, which need not be the previous call
    assert rep.compilations_of("total")[3].changes[0].startswith("x: f32[")
    assert rep.compilations_of("total")[3].changes[0].endswith("-> f32[5] (shape)")
    assert f.changed_arguments == {"x": 3}


def test_weak_type_flip_python_float_vs_jnp_float32():
    @jax.jit
    def double(x):
        return x * 2

    with probes.compiles() as rep:
        double(jnp.float32(1.0))
        double(1.0)
        double(2.0)  # another Python float: same weak type, cached
    f = rep.function("double")
    assert f.count == 2 and f.main_cause == "weak_type"
    assert rep.compilations_of("double")[1].changes == ["x: f32[] -> f32[] weak"]
    assert rep.compilations_of("double")[1].argument_types == "f32[] weak"


def test_weak_type_of_an_array_made_from_a_python_float_is_not_called_a_scalar():
    # jnp.full(4, 1.0 + i) takes its dtype from a Python float: a weakly typed *array*
    @jax.jit
    def scale(batch):
        return batch * 2

    with probes.compiles() as rep:
        scale(jnp.array([1.0, 2.0, 3.0, 4.0]))
        scale(jnp.full(4, 1.0))
    f = rep.function("scale")
    assert f.causes == {"first": 1, "weak_type": 1}
    assert rep.compilations_of("scale")[1].changes == ["batch: f32[4] -> f32[4] weak"]
    assert f.reason.startswith("weakly typed vs typed argument (weak type): batch")
    assert "an array whose dtype came from one" in rep.compilations_of("scale")[1].why
    assert "dtype=jnp.float32" in main_fix(f)


def test_pytree_structure_change():
    @jax.jit
    def first_leaf(tree):
        return jax.tree.leaves(tree)[0] + 1

    a = jnp.ones(2)
    with probes.compiles() as rep:
        first_leaf({"a": a})
        first_leaf({"a": a, "b": a})
    second = rep.compilations_of("first_leaf")[1]
    assert second.cause == "pytree"
    assert second.changes[0].startswith("argument `tree`: now dict with 2 children, before dict with 1 child")
    assert "{'b'}" in second.changes[0]


def test_keyword_vs_positional_passing():
    @partial(jax.jit, static_argnames=("n",))
    def power(x, n):
        return x**n

    x = jnp.ones(3)
    with probes.compiles() as rep:
        power(x, n=2)
        power(x, 2)
    second = rep.compilations_of("power")[1]
    assert second.cause == "passing" and second.changes == [
        "n: passed by keyword in one call, positionally in the other"
    ]


def test_new_function_object_each_call():
    x = jnp.ones(3)
    with probes.compiles() as rep:
        for _ in range(3):
            jax.jit(lambda v: v + 1)(x)  # a new lambda, and a new wrapper, every time
    [f] = rep.user_functions
    assert f.name == "<lambda>" and f.count == 3
    assert f.causes == {"first": 1, "new_function": 2}


def test_new_wrapper_of_the_same_function_does_not_compile():
    def plain(x):
        return x - 1

    x = jnp.ones(3)
    jax.jit(plain)(x)
    with probes.compiles() as rep:
        jax.jit(plain)(x)  # the cache belongs to the Python function, not to the wrapper
    assert rep.count("plain") == 0 and rep.total_compilations == 0
    assert rep.status.value == "ok" and "Nothing was compiled" in rep.summary


def test_static_argument_that_compares_by_identity():
    class Config:
        def __init__(self, scale):
            self.scale = scale

        def __repr__(self):
            return f"Config(scale={self.scale})"

    @partial(jax.jit, static_argnums=1)
    def apply(x, config):
        return x * config.scale

    x = jnp.ones(3)
    with probes.compiles() as rep:
        apply(x, Config(2))
        apply(x, Config(2))
    second = rep.compilations_of("apply")[1]
    assert second.cause == "static_identity" and len(second.changes) == 1
    change = second.changes[0]
    assert change.startswith("config: a new Config (id 0x") and "equal-looking (Config(scale=2))" in change
    assert "hashed by identity" in change


def test_config_context_change():
    @jax.jit
    def matmul(a):
        return a @ a

    a = jnp.ones((4, 4))
    with probes.compiles() as rep:
        matmul(a)
        with jax.default_matmul_precision("highest"):
            matmul(a)
    second = rep.compilations_of("matmul")[1]
    assert second.cause == "context"
    assert second.changes == ["jax_default_matmul_precision: now highest and before None"]


def test_eager_operations_are_kept_apart():
    @jax.jit
    def mlp_step(w, x):
        return jnp.tanh(x @ w).sum()

    jax.clear_caches()  # so the eager jnp.ones below compile again, as in the chapter
    with probes.compiles() as rep:
        w = jnp.ones((64, 64))
        mlp_step(w, jnp.ones((8, 64)))
        mlp_step(w, jnp.ones((8, 64)))
        mlp_step(w, jnp.ones((16, 64)))
    assert [f.name for f in rep.user_functions] == ["mlp_step"]
    assert rep.count("mlp_step") == 2
    assert rep.eager_compilations >= 1
    assert {f.kind for f in rep.eager_functions} == {"eager"}
    assert "broadcast_in_dim" in {f.name for f in rep.eager_functions}
    # the eager compilations do not make the report a problem; mlp_step compiled twice does
    assert rep.function("mlp_step").main_cause == "types"
    assert rep.compilations_of("mlp_step")[1].argument_types == "f32[64,64], f32[16,64]"


def test_eager_only_cell_is_ok():
    jax.clear_caches()
    with probes.compiles() as rep:
        jnp.zeros((3, 7))
    assert rep.user_functions == [] and rep.eager_compilations >= 1
    assert rep.status.value == "ok"


def test_budget_kept_and_exceeded():
    @partial(jax.jit, static_argnums=1)
    def shift(x, k):
        return x + k

    x = jnp.ones(2)
    with probes.compiles(budget=1) as kept:
        shift(x, 1)
        shift(x, 1)
    assert kept.over_budget == [] and kept.budget_message == ""

    with pytest.raises(CompileBudgetExceeded, match=r"jit\(shift\) compiled 2 times .*static argument.*budget is 1"):
        with probes.compiles(budget=1) as over:
            shift(x, 2)
            shift(x, 3)
    assert [f.name for f in over.over_budget] == ["shift"]
    assert over.status.value == "problem" and over.summary.startswith("Over budget")


def test_budget_for_one_function_only():
    @jax.jit
    def noisy(x):
        return x + 1

    @jax.jit
    def quiet_fn(x):
        return x * 3

    with probes.compiles(budget=1, fn="jit(quiet_fn)") as rep:
        noisy(jnp.ones(2))
        noisy(jnp.ones(3))  # over 1, but the budget is about quiet_fn
        quiet_fn(jnp.ones(2))
    assert rep.over_budget == [] and rep.count("noisy") == 2


def test_budget_error_does_not_replace_the_cells_own_error():
    @jax.jit
    def grow(x):
        return x + 1

    with pytest.raises(ValueError, match="mine"):
        with probes.compiles(budget=0) as rep:
            grow(jnp.ones(5))
            raise ValueError("mine")
    assert rep.other_error == "ValueError: mine" and rep.count("grow") == 1


def test_call_site_is_the_users_line():
    @jax.jit
    def located(x):
        return x + 1

    with probes.compiles() as rep:
        located(jnp.ones(4))  # the line to find
    line = rep.compilations_of("located")[0].line
    assert line.code == "located(jnp.ones(4))  # the line to find"
    assert line.filename == __file__


def test_durations_of_the_three_stages():
    @jax.jit
    def timed(x):
        return jnp.sin(x) @ x

    with probes.compiles() as rep:
        timed(jnp.ones((8, 8)))
    c = rep.compilations_of("timed")[0]
    assert c.trace_seconds > 0 and c.lower_seconds > 0 and c.compile_seconds > 0
    assert len(c.log) == 5  # the cache-miss explanation + the four log lines of one compilation
    assert [line.split(" ")[0] for line in c.log] == ["TRACING", "Finished", "Compiling", "Finished", "Finished"]


def test_leaves_config_loggers_and_listeners_as_found():
    @jax.jit
    def f(x):
        return x * 2

    before = take_snapshot()
    with probes.compiles():
        f(jnp.ones(3))
    assert before.differences(take_snapshot()) == []
    with pytest.raises(KeyboardInterrupt):
        with probes.compiles():
            f(jnp.ones(4))
            raise KeyboardInterrupt
    assert before.differences(take_snapshot()) == []
    assert jax.config.jax_log_compiles is False and jax.config.jax_explain_cache_misses is False
    assert not any(logging.getLogger(name).filters for name in before.loggers)


def test_compile_log_does_not_spill_but_other_jax_warnings_pass():
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    root = logging.getLogger()
    root.addHandler(handler)
    try:

        @jax.jit
        def g(x):
            return x + 2

        with probes.compiles() as rep:
            g(jnp.ones(3))
            logging.getLogger("jax._src.dispatch").warning("an unrelated JAX warning")
    finally:
        root.removeHandler(handler)
    assert rep.count("g") == 1 and rep.log_lines >= 5
    assert seen == ["an unrelated JAX warning"]


def test_user_silenced_jax_logger_still_gives_shapes_and_stays_silent():
    jax_logger = logging.getLogger("jax")
    old = jax_logger.level
    jax_logger.setLevel(logging.ERROR)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger().addHandler(handler)
    try:

        @jax.jit
        def h(x):
            return x - 2

        with probes.compiles() as rep:
            h(jnp.ones(6))
            logging.getLogger("jax._src.dispatch").warning("silenced by the user's level")
    finally:
        logging.getLogger().removeHandler(handler)
        jax_logger.setLevel(old)
    assert rep.compilations_of("h")[0].argument_types == "f32[6]"
    assert seen == []


def test_probe_itself_compiles_nothing():
    @jax.jit
    def cached(x):
        return x * 5

    x = jnp.ones(3)
    cached(x)
    with probes.compiles() as rep:
        for _ in range(200):
            cached(x)
    assert rep.total_compilations == 0 and rep.functions == []


def test_many_compilations_are_summarised(monkeypatch):
    monkeypatch.setattr(limits_module, "DETAILS_PER_FUNCTION", 4)
    monkeypatch.setattr(limits_module, "EXPLAIN_LIMIT", 3)

    @jax.jit
    def sized(x):
        return x.sum()

    shapes = [jax.ShapeDtypeStruct((n,), jnp.float32) for n in range(1, 13)]
    with probes.compiles() as rep:
        for s in shapes:
            sized.lower(s).compile()
    [f] = rep.functions  # an AOT .compile() has no jit frame: one function all the same
    assert f.count == 12 and f.distinct_argument_types == 12
    assert len(rep.compilations_of("sized")) == 4
    assert rep.explanations_stopped == "sized"
    # after the explanations stopped, the cause comes from the compile log's types
    assert f.causes == {"first": 1, "types": 11}
    assert jax.config.jax_explain_cache_misses is False
    text = str(rep)
    assert "8 later compilation(s) are counted above but not listed" in text


def test_report_is_plain_data():
    @partial(jax.jit, static_argnums=1)
    def f(x, n):
        return x * n

    x = jnp.ones(3)
    with probes.compiles(budget=5) as rep:
        f(x, 1)
        f(x, 2)
    data = json.loads(json.dumps(rep.to_dict()))
    assert data["kind"] == "jax_compiles" and data["functions"][0]["count"] == 2
    assert data["compilations"][1]["static_arguments"] == {"n": "2"}
    html = rep._repr_mimebundle_()["text/html"]
    assert "jit(f)" in html and "<script" not in html


# -- the text parsing, on JAX's own messages -----------------------------------------


def test_parse_the_four_log_lines():
    assert parse_compile_log_line("Finished tracing decay_step for jit in 0.002487659 sec").seconds == pytest.approx(
        0.002487659
    )
    compiling = parse_compile_log_line(
        "Compiling jit(f) with global shapes and types (ShapedArray(float32[3]), ShapedArray(key<fry>[]), "
        "ShapedArray(int32[], weak_type=True)). Argument mapping: (UnspecifiedValue, UnspecifiedValue, UnspecifiedValue)."
    )
    assert compiling.stage == "compiling" and compiling.name == "f"
    assert compiling.types == ["f32[3]", "key<fry>[]", "i32[] weak"]
    assert (
        parse_compile_log_line("Finished jaxpr to MLIR module conversion jit(<lambda>) in 0.0015 sec").name
        == "<lambda>"
    )
    assert parse_compile_log_line("Finished XLA compilation of jit(f) in 0.030032873 sec").stage == "xla"
    assert parse_compile_log_line("Some other message") is None


def test_parse_cache_miss_kinds():
    never = parse_cache_miss(
        "TRACING CACHE MISS at x.py:22:4 (<module>):\n  never seen function:\n"
        "    decay_step id=4653816064 defined at /tmp/x.py:16"
    )
    assert (never.kind, never.name, never.defined_at) == ("never_seen", "decay_step", "/tmp/x.py:16")
    weak = parse_cache_miss(
        "TRACING CACHE MISS at x.py:27:20 (<lambda>):\n  for f defined at x.py:16\n"
        "  all previously seen cache keys differ. For the closest previous key:\n  different input types:\n"
        "  * at x, now f32[]{weak_type=True} and before f32[]{weak_type=False}"
        "https://docs.jax.dev/en/latest/101/type_promotion.html#weak-types"
    )
    assert weak.kind == "types" and weak.type_changes[0].what == "weak type"
    assert weak.type_changes[0].text == "x: f32[] -> f32[] weak"
    sharded = parse_cache_miss(
        "TRACING CACHE MISS at x.py:1:1 (<m>):\n  for f defined at x.py:16\n"
        "  all previously seen cache keys differ. For the closest previous key:\n  different input types:\n"
        "  * at x, now i32[3]({}) and before f32[]({})"
    )
    assert sharded.type_changes[0].text == "x: f32[] -> i32[3]" and sharded.type_changes[0].what == "dtype and shape"
    unavailable = parse_cache_miss(
        "TRACING CACHE MISS at x.py:2:2 (<m>):\n  for s defined at x.py:44\n"
        "  all previously seen cache keys differ. For the closest previous key:\n  cache miss explanation unavailable"
    )
    assert unavailable.kind == "unavailable" and unavailable.name == "s"
    assert parse_cache_miss("Finished tracing f for jit in 0.1 sec") is None


def test_pytree_details_in_words():
    details = [
        "at input path [0], now tuple of length 3 and before tuple of length 2, so the lengths do not match",
        "at input path [1], now <class 'dict'> with 0 child and before <class 'dict'> with 1 child, so the "
        "numbers of children do not match, with the symmetric difference of key sets: {'step'}",
    ]
    assert argument_passing_changes(details, []) == [("step", "positionally")]
    assert argument_passing_changes(details[1:], []) == [("step", "left to its default")]
    assert argument_passing_changes(details[:1], ["x", "lr", "step"]) == [("step", "left to its default")]
    words = pytree_changes(
        ["at input path [0][1], now <class 'list'> and before <class 'dict'>, so their Python types differ"],
        ["params", "x"],
    )
    assert words == ["argument `x`: now list, before dict - their Python types differ"]


def test_signature_text_is_bounded():
    types = short_types(", ".join(f"ShapedArray(float32[{n},{n}])" for n in range(100)))
    assert len(types) == 100
    text = signature_text(types, limit=60)
    assert len(text) < 100 and text.endswith("more of 100)")


def test_numpy_static_value_repr_is_bounded():
    value = compiles_module.static_value(tuple(range(1000)))
    assert value.text == "<tuple object>" and value.hashed == hash(tuple(range(1000)))  # never cut mid-repr
    assert not value.by_identity and value.kind == "value"
    assert compiles_module.static_value(np.zeros(3)).hashed is None  # unhashable: None, no error


# -- the magic ----------------------------------------------------------------------


def test_magic_budget_fails_the_cell_after_the_report(ip):
    ip.run_cell(
        "from functools import partial\n"
        "@partial(jax.jit, static_argnames=('step',))\n"
        "def magic_step(w, step):\n"
        "    return w * 0.5 ** step\n"
    )
    result = ip.run_cell(
        "%%jax_compiles --budget 1 -o budget_rep\n"
        "w_magic = jnp.ones(3)\n"
        "for s in range(3):\n"
        "    w_magic = magic_step(w_magic, step=s)\n"
    )
    assert isinstance(result.error_in_exec, CompileBudgetExceeded)
    assert "jit(magic_step) compiled 3 times" in str(result.error_in_exec)
    rep = ip.user_ns["budget_rep"]
    assert rep.count("magic_step") == 3 and rep.function("magic_step").main_cause == "static"
    assert rep.compilations_of("magic_step")[2].line.code == "w_magic = magic_step(w_magic, step=s)"
    assert ip.user_ns["w_magic"].shape == (3,)  # the cell ran to the end before the budget was checked


def test_magic_budget_kept_lets_the_cell_pass(ip):
    ip.run_cell("@jax.jit\ndef kept_fn(x):\n    return x + 1\n")
    result = ip.run_cell(
        "%%jax_compiles --budget 1 --fn kept_fn -o kept_rep\nfor n in [3, 3, 3, 4]:\n    kept_fn(jnp.ones(n))\n"
    )
    assert isinstance(result.error_in_exec, CompileBudgetExceeded)  # 2 shapes: 2 compilations
    result = ip.run_cell(
        "%%jax_compiles --budget 1 --fn kept_fn -o kept_rep\nfor n in [3, 3, 4, 5]:\n    kept_fn(jnp.ones(n))\n"
    )
    assert result.success and ip.user_ns["kept_rep"].count("kept_fn") == 1  # only 5 is new
    assert ip.user_ns["kept_rep"].over_budget == []


def test_magic_options_are_checked(ip):
    from IPython.core.error import UsageError

    assert isinstance(ip.run_cell("%%jax_compiles --fn f\n1").error_in_exec, UsageError)
    assert isinstance(ip.run_cell("%%jax_compiles --budget -1\n1").error_in_exec, UsageError)
    assert isinstance(ip.run_cell("%%jax_compiles --budget many\n1").error_in_exec, UsageError)


def test_nested_probes_both_see_the_compilations():
    @jax.jit
    def inner_fn(x):
        return x * 7

    @jax.jit
    def outer_fn(x):
        return x * 8

    before = take_snapshot()
    with probes.compiles() as outer:
        outer_fn(jnp.ones(3))
        with probes.compiles() as inner:
            inner_fn(jnp.ones(3))
        outer_fn(jnp.ones(4))
    assert before.differences(take_snapshot()) == []
    assert inner.count("inner_fn") == 1 and inner.count("outer_fn") == 0
    assert inner.compilations_of("inner_fn")[0].argument_types == "f32[3]"  # the inner probe got the log too
    assert outer.count("inner_fn") == 1 and outer.count("outer_fn") == 2
    assert outer.compilations_of("outer_fn")[1].changes == ["x: f32[3] -> f32[4] (shape)"]


def test_unavailable_explanation_without_a_changed_static_argument():
    # No real program is known to give "explanation unavailable" without a static argument that jaxmagic
    # sees, so the classifier is fed JAX's message directly.
    explanation = parse_cache_miss(
        "TRACING CACHE MISS at x.py:2:2 (<m>):\n  for g defined at x.py:4\n"
        "  all previously seen cache keys differ. For the closest previous key:\n"
        "  cache miss explanation unavailable"
    )
    summary = compiles_module.FunctionCompiles(name="g", kind="user", count=1, causes={"first": 1})
    state = compiles_module.FunctionState(summary, last_types=["f32[3]"], last_static={})
    info = compiles_module.CallInfo()
    [found] = compiles_module.classify(summary, state, explanation, ["f32[3]"], info, True, {})
    assert found.cause == "unexplained" and found.changes == []
    assert "no static arguments" in found.why
    info.static_argnames = ["mode"]
    info.static_values = {"mode": compiles_module.static_value("fast")}
    state.last_static = {"mode": compiles_module.static_value("fast")}
    [found] = compiles_module.classify(summary, state, explanation, ["f32[3]"], info, True, {})
    assert found.cause == "unexplained" and "(mode) kept their values" in found.why


# -- shapes from public issue threads ------------------------------------------------


def test_jit_of_grad_built_inside_a_helper_is_the_users_function():
    # jax-ml/jax#2515: `return jit(grad(_Likelihood))(pars[0], pars[1], x)` inside a helper called in a loop
    def likelihood(s, m, w):
        return jnp.sum(((w - m) / s) ** 2)

    def dev_likelihood(pars, w):
        return jax.jit(jax.grad(likelihood))(pars[0], pars[1], w)

    w = jnp.ones(5)
    with probes.compiles() as rep:
        for _ in range(3):
            dev_likelihood((1.0, 0.5), w)
    f = rep.function("likelihood")
    assert f.kind == "user" and f.count == 3 and rep.user_functions == [f]
    assert f.causes == {"first": 1, "new_function": 2}
    assert f.defined_at.endswith(str(likelihood.__code__.co_firstlineno))
    assert "jax.jit(jax.grad(likelihood))" in f.reason  # the line that builds the wrapper
    assert "a new jit wrapper built at each call" in rep.summary
    second = rep.compilations_of("likelihood")[1]
    assert "is jitted anew at each call" in second.why and "a JAX transformation of it" in second.why
    assert "Build the jitted function once" in main_fix(f)
    assert not rep.summary.startswith("None of your jitted functions")


def test_jit_of_a_partial_or_lambda_in_a_loop():
    def scale(a, s):
        return a * s

    w = jnp.ones(3)
    with probes.compiles() as rep:
        for _ in range(3):
            jax.jit(partial(scale, s=2.0))(w)
            jax.jit(lambda a: a + 1)(w)
    assert rep.function("scale").causes == {"first": 1, "new_function": 2}
    assert rep.function("<lambda>").causes == {"first": 1, "new_function": 2}
    assert "functools.partial" in rep.compilations_of("scale")[1].why


def test_first_compilation_is_never_a_new_function_object():
    src = "import jax\ndef twice(x):\n    return x * 2\njitted = jax.jit(twice)\n"
    for _ in range(2):  # the second definition on the same line makes JAX hint at a redefinition
        namespace = {}
        exec(compile(src, "<ipython-input-99-redefine>", "exec"), namespace)
        with probes.compiles() as rep:
            namespace["jitted"](jnp.ones(2))
        assert rep.function("twice").causes == {"first": 1}


def test_optimizer_built_by_a_factory_as_static_argument():
    # google-deepmind/optax#353 / patrick-kidger/equinox#940: a GradientTransformation (a NamedTuple of
    # closures) passed as a static argument and built anew for each call
    from collections.abc import Callable
    from typing import NamedTuple

    class GradientTransformation(NamedTuple):
        init: Callable
        update: Callable

    def sgd(learning_rate):
        def init(params):
            return ()

        def update(grads, state):
            return -learning_rate * grads, state

        return GradientTransformation(init, update)

    @partial(jax.jit, static_argnames=("optimizer",))
    def train_step(params, grads, optimizer):
        updates, _ = optimizer.update(grads, ())
        return params + updates

    p = jnp.ones(4)
    optimizers = [sgd(1e-2) for _ in range(3)]  # kept alive: distinct ids
    with probes.compiles() as rep:
        for optimizer in optimizers:
            train_step(p, p, optimizer=optimizer)
    f = rep.function("train_step")
    assert f.causes == {"first": 1, "static_identity": 2}
    assert "`optimizer` is a new GradientTransformation at each call (id 0x" in f.reason
    assert "..." not in f.static_values["optimizer"][0][1:-1]  # never a repr cut in the middle
    assert "jnp.int32" not in main_fix(f) and "Build it once, before the loop" in main_fix(f)
    change = rep.compilations_of("train_step")[1].changes[0]
    assert change.startswith("optimizer: a new GradientTransformation (id 0x")


def test_dataclass_without_eq_as_static_argument_gets_the_object_fix():
    import dataclasses

    @dataclasses.dataclass(eq=False)
    class Model:
        width: int

    @partial(jax.jit, static_argnums=1)
    def forward(x, model):
        return x * model.width

    models = [Model(2), Model(2)]
    with probes.compiles() as rep:
        for model in models:
            forward(jnp.ones(2), model)
    f = rep.function("forward")
    assert f.main_cause == "static_identity"
    assert "equal-looking" in rep.compilations_of("forward")[1].changes[0]
    assert "make it hashable by value" in main_fix(f) and "pytree argument" in main_fix(f)


def test_numeric_static_argument_fix_suggests_a_traced_array():
    @partial(jax.jit, static_argnums=1)
    def decay(w, step):
        return w * 0.9**step

    with probes.compiles() as rep:
        for step in range(3):
            decay(jnp.ones(2), step)
    assert "jnp.int32(step)" in main_fix(rep.function("decay"))

    @partial(jax.jit, static_argnames=("lr",))
    def sgd(w, lr):  # a learning-rate schedule made static: the fix names lr, as a float
        return w - lr * w

    with probes.compiles() as rep:
        for epoch in range(3):
            sgd(jnp.ones(2), lr=0.1 / (epoch + 1))
    assert "pass an array, here jnp.float32(lr)" in main_fix(rep.function("sgd"))


def test_weak_type_and_a_changing_static_argument_are_both_named():
    @partial(jax.jit, static_argnames=("n",))
    def g(x, s, n):
        return x * s + n

    w = jnp.ones(3)
    with probes.compiles() as rep:
        g(w, 1.0, n=0)
        for i in range(1, 4):
            g(w, jnp.float32(1.0), n=i)
    f = rep.function("g")
    assert f.causes == {"first": 1, "weak_type": 1, "static": 3}
    assert [c.cause for c in rep.compilations_of("g")] == ["first", "weak_type", "static", "static"]
    assert rep.compilations_of("g")[1].also == ["static"]
    assert "`n` 0 -> 1 -> 2 -> 3" in rep.summary and "weak type" in rep.summary
    document = str(rep)
    assert "jnp.int32(n)" in document and "always jnp.float32(x)" in document  # a fix for each cause


def test_jaxmagics_own_settings_are_never_the_cause():
    from jaxmagic._jax import jit_calls

    @jax.jit
    def step(x):
        return jnp.sum(x * 2)

    with jit_calls.observing_calls(jit_calls.CallObserver()):  # what %%jax_doctor / %%jax_keys run under
        step(jnp.ones(3))
    with probes.compiles() as rep:
        for n in (3, 4):
            step(jnp.ones(n))
    # f32[3] was compiled before only under the key-reuse check: compiled again for jaxmagic, not the user.
    assert [c.cause for c in rep.compilations_of("step")] == ["jaxmagic", "types"]
    assert "the key-reuse checker" in rep.compilations_of("step")[0].why
    assert rep.compilations_of("step")[1].changes == ["x: f32[3] -> f32[4]"]
    assert "jax_debug_key_reuse" not in rep.summary and "context" not in rep.function("step").causes


def test_own_retrace_token_is_never_the_cause():
    from jaxmagic._jax.retrace import fresh_traces

    @jax.jit
    def step(x):
        return x + 1

    with fresh_traces("jaxmagic-test"):
        step(jnp.ones(2))
    with probes.compiles() as rep:
        step(jnp.ones(2))
    assert rep.function("step").causes == {"jaxmagic": 1}  # traced before only under jaxmagic's token
    assert "user_context" not in rep.summary and rep.status.value == "ok"


def test_users_own_setting_change_is_still_named():
    @jax.jit
    def matmul(a):
        return a @ a

    from jaxmagic._jax import jit_calls

    with jit_calls.observing_calls(jit_calls.CallObserver()):
        matmul(jnp.ones((2, 2)))
    with probes.compiles() as rep:
        matmul(jnp.ones((2, 2)))
        with jax.debug_key_reuse(True):  # the user's own switch: theirs to see... unless it equals ours
            matmul(jnp.ones((3, 3)))
        with jax.default_matmul_precision("highest"):
            matmul(jnp.ones((2, 2)))
    causes = [c.cause for c in rep.compilations_of("matmul")]
    assert causes[-1] == "context"
    assert "jax_default_matmul_precision" in rep.compilations_of("matmul")[-1].changes[0]


def test_weak_type_found_from_the_compile_log_when_jaxs_explanation_is_jaxmagics():
    # notebook 09, exercise 4: batches made by jnp.full(4, 1.0 + i) are weakly typed, one made by
    # jnp.array([...]) is not; the function ran under the doctor's key-reuse checker before
    from jaxmagic._jax import jit_calls

    @jax.jit
    def ex_step(w, batch):
        return w - 0.01 * jnp.mean(jnp.log(batch) * w)

    batches = [jnp.full(4, 1.0 + i) for i in range(4)]
    batches[2] = jnp.array([1.0, 2.0, 3.0, 4.0])
    with jit_calls.observing_calls(jit_calls.CallObserver()):
        ex_step(jnp.float32(1.0), batches[0])
    with probes.compiles() as rep:
        for batch in batches:
            ex_step(jnp.float32(1.0), batch)
    f = rep.function("ex_step")
    assert f.causes == {"jaxmagic": 1, "weak_type": 1}  # the first: compiled before only under the checker
    assert rep.compilations_of("ex_step")[1].changes == ["batch: f32[4] weak -> f32[4]"]


# -- static fields compared by identity, and static-field values (issue 23) ----------------------
# Shapes from public threads: equinox#686 "Why is this function recompiling?" (a Module keeps
# `self.forward = jax.jit(fk_fn)`, and re-initialising the module recompiles `step`); jax#33043
# (a register_dataclass class whose static field `idx` takes another value); a Flax-style
# struct with an activation lambda in a pytree_node=False field; a config object without __eq__
# given to static_argnames.


def _register(cls, data, meta):
    import dataclasses

    return jax.tree_util.register_dataclass(dataclasses.dataclass(cls), data_fields=data, meta_fields=meta)


def test_jit_wrapper_kept_in_a_static_field_is_named_with_build_it_once():
    def forward_kinematics(q):
        return jnp.sin(q)

    class Trajectory:
        scale: jax.Array
        forward: object

    Trajectory = _register(Trajectory, ["scale"], ["forward"])

    @jax.jit
    def step(model, x):
        return model.forward(x * model.scale)

    with probes.compiles() as rep:
        for _ in range(3):
            model = Trajectory(jnp.ones(3), jax.jit(forward_kinematics))  # re-initialised each run
            step(model, jnp.ones(3))
    f = rep.function("step")
    assert f.causes == {"first": 1, "pytree_identity": 2}
    second = rep.to_dict()["compilations"]
    second = [c for c in second if c["function"] == "step"][1]
    assert second["cause"] == "pytree_identity"
    assert "`model.forward` (Trajectory.forward) is a new PjitFunction with the same code" in second["changes"][0]
    fix = second["fix"]
    assert "`Trajectory.forward` gets a new jit wrapper" in fix and "Build it once (outside the loop)" in fix
    assert "checked: a copy of it (copy.copy) compares unequal to it" in fix
    assert "always the same keys" not in fix  # the structure advice does not apply
    prov = second["provenance"]
    assert prov["made_at"]["code"] == "step(model, jnp.ones(3))" and prov["transforms"] == ["jit(step)"]
    assert prov["started_by"]["function"] == "test_jit_wrapper_kept_in_a_static_field_is_named_with_build_it_once"
    assert "Build it once (outside the loop)" in " ".join(str(rep).split())


def test_the_same_jit_wrapper_built_once_compiles_once():
    class Trajectory:
        scale: jax.Array
        forward: object

    Trajectory = _register(Trajectory, ["scale"], ["forward"])

    @jax.jit
    def step(model, x):
        return model.forward(x * model.scale)

    forward = jax.jit(jnp.sin)
    with probes.compiles() as rep:
        for _ in range(3):
            step(Trajectory(jnp.ones(3), forward), jnp.ones(3))
    assert rep.function("step").count == 1


def test_lambda_in_a_static_field_is_a_new_function_with_the_same_code():
    class Dense:
        w: jax.Array
        activation: object

    Dense = _register(Dense, ["w"], ["activation"])

    @jax.jit
    def apply(layer, x):
        return layer.activation(x @ layer.w)

    with probes.compiles() as rep:
        for _ in range(2):
            apply(Dense(jnp.eye(2), lambda v: jnp.maximum(v, 0.0)), jnp.ones(2))
    f = rep.function("apply")
    assert f.main_cause == "pytree_identity"
    assert "is a new function with the same code (" in f.reason and "<lambda>" in f.reason
    assert "checked: the same code made into a new function compares unequal to it" in main_fix(f)
    assert "made by `apply(Dense(jnp.eye(2), lambda v: jnp.maximum(v, 0.0)), jnp.ones(2))`" in main_fix(f)


def test_static_field_value_change_names_the_field_not_the_keys():
    class Shape:
        length: jax.Array
        idx: int

    Shape = _register(Shape, ["length"], ["idx"])

    @jax.jit
    def area(shape):
        return shape.length * shape.length

    with probes.compiles() as rep:
        area(Shape(jnp.asarray(10.0), 2))
        area(Shape(jnp.asarray(10.0), 3))
    f = rep.function("area")
    assert f.causes == {"first": 1, "pytree_static": 1}
    assert "`shape.idx` (Shape.idx): 2 -> 3" in f.reason
    assert "`Shape.idx` is a static field" in main_fix(f) and "keys" not in main_fix(f)


def test_config_object_without_eq_in_static_argnames_names_that_parameter():
    class Config:
        def __init__(self, depth):
            self.depth = depth

        def __repr__(self):
            return f"Config(depth={self.depth})"

    @partial(jax.jit, static_argnames=("cfg",))
    def forward(x, cfg):
        for _ in range(cfg.depth):
            x = jnp.tanh(x)
        return x

    with probes.compiles() as rep:
        for _ in range(3):
            forward(jnp.ones(3), cfg=Config(2))
    f = rep.function("forward")
    assert f.main_cause == "static_identity"
    assert main_fix(f).startswith("The static argument `cfg` of `forward` is a new Config at each call")
    assert "define __eq__ and __hash__ on Config" in main_fix(f) and "checked: a copy of it" in main_fix(f)
    assert "static_argnames=('" not in main_fix(f)  # no new static argument is invented


def test_metadata_equal_in_print_but_not_a_field_is_still_identity_not_keys():
    # a custom pytree node whose aux data is a wrapper tuple, not one of its attributes
    class Box:
        def __init__(self, x, fn):
            self.x, self.fn = x, fn

    jax.tree_util.register_pytree_node(
        Box, lambda b: ((b.x,), (b.fn.__name__, jax.jit(b.fn))), lambda aux, ch: Box(ch[0], aux[1])
    )

    @jax.jit
    def run(box):
        return box.x * 2

    with probes.compiles() as rep:
        for _ in range(2):
            run(Box(jnp.ones(2), jnp.sin))
    f = rep.function("run")
    assert f.main_cause == "pytree_identity"
    assert "could not be told" in f.reason or "could not be told" in rep.compilations_of("run")[1].why
    assert "always the same keys" not in main_fix(f) and "Build it once, outside the loop" in main_fix(f)


def test_each_compilation_writes_out_only_what_changed_from_the_row_above():
    import jax
    import jax.numpy as jnp

    from jaxmagic.probes import compiles

    def scale(x, factor):
        return x * factor

    f = jax.jit(scale, static_argnames="factor")
    with compiles() as report:
        for factor in (1, 2, 3):
            f(jnp.ones(3), factor=factor)  # same line, same argument types: only the static changes
    table = next(s for s in report.document().sections if s.title.startswith("Each compilation")).blocks[0]
    line_col, types_col = table.columns.index("your line"), table.columns.index("argument types")
    assert table.rows[0][line_col] != "same" and table.rows[0][types_col] == "f32[3]"
    assert [row[line_col] for row in table.rows[1:]] == ["same", "same"]
    assert [row[types_col] for row in table.rows[1:]] == ["same", "same"]


# -- programs JAX compiles for a transformation run outside jit ---------------------------------
# A jitted function vmapped or differentiated eagerly: JAX compiles the transformed program (the
# batched one, the gradient's forward and backward) through its jit primitive's own implementation,
# not through the function's jit call - there was no trace, and the report said "compiled again
# without re-tracing" (with a donate_argnums fix), or blamed JAX's `_reduce_sum` as the user's.


def _sq(v):
    return jnp.sum(v**2)


@jax.jit
def _predict(w, x):
    return jnp.tanh(x @ w)


@jax.jit
def _g1(x):
    return jnp.sin(x) * 2.0


def test_eager_grad_compiles_jaxs_own_functions_as_eager_work_not_yours():
    with probes.compiles() as rep:
        for n in (2, 3, 4):
            jax.grad(_sq)(jnp.ones(n))
    assert rep.user_functions == [] and rep.status.value == "ok", rep.summary
    assert any(f.name == "grad(_reduce_sum) backward pass" for f in rep.eager_functions)


def test_a_vmapped_jitted_function_with_a_new_batch_size_is_a_new_shape_of_its_vmapped_program():
    w = jnp.ones((3, 2))
    with probes.compiles() as rep:
        for n in (8, 8, 5):
            jax.vmap(_predict, in_axes=(None, 0))(w, jnp.ones((n, 3)))
    f = rep.function("vmap(_predict)")
    assert f is not None, (rep.summary, [(f.name, f.kind) for f in rep.functions])
    assert f.causes == {"first": 1, "types": 1}, rep.summary
    assert rep.compilations_of("vmap(_predict)")[1].changes == ["x: f32[8,3] -> f32[5,3]"]
    assert "without re-tracing" not in rep.summary


def test_eager_grad_of_a_jitted_function_compiles_its_forward_and_backward_once():
    def loss(v):
        return _g1(v).sum()

    with probes.compiles() as rep:
        for _ in range(3):
            jax.grad(loss)(jnp.ones(5))
    assert {f.name: dict(f.causes) for f in rep.user_functions} == {
        "grad(_g1)": {"first": 1},
        "grad(_g1) backward pass": {"first": 1},
    }, rep.summary
    assert not rep.recompiled_functions


class _ValueConfig:
    """Compared and hashed by value, with object's own repr (jax#28418's shape)."""

    def __init__(self, lr):
        self.lr = lr

    def __eq__(self, other):
        return isinstance(other, _ValueConfig) and self.lr == other.lr

    def __hash__(self):
        return hash(self.lr)


def test_a_static_object_compared_by_value_without_a_repr_is_named_by_its_fields():
    """Its repr without the address looks the same for every value: the report said "a new object each
    call, hashed by identity" and told the user to define __eq__ and __hash__, which it has."""
    step = partial(jax.jit, static_argnames="cfg")(lambda p, cfg: p - cfg.lr * p)
    with probes.compiles() as rep:
        for i in (1, 2, 2):
            step(jnp.ones(3), cfg=_ValueConfig(0.25 * i))
    [f] = rep.user_functions
    assert f.causes == {"first": 1, "static": 1}, rep.summary
    assert rep.compilations[1].changes == ["cfg: _ValueConfig(lr=0.25) -> _ValueConfig(lr=0.5)"]


def test_an_argument_left_to_its_default_in_one_call_is_a_way_of_passing_it():
    """h(x), h(x, mode="train"), h(x, "train"): one value, three cache keys. The report said the argument
    structure changed and told the user to keep the same dict keys."""

    @partial(jax.jit, static_argnames="mode")
    def h(x, mode="train"):
        return x * (2 if mode == "train" else 1)

    x = jnp.ones(3)
    with probes.compiles() as rep:
        h(x)
        h(x, mode="train")
        h(x, "train")
    assert [c.cause for c in rep.compilations_of("h")] == ["first", "passing", "passing"]
    assert rep.compilations_of("h")[1].changes == ["mode: passed in one call, left to its default in the other"]
    assert "keys" not in fix_for(rep.function("h"), KINDS["passing"])


def test_jax_clear_caches_in_the_loop_is_named_not_a_new_wrapper():
    """jax#10828's shape: the function is built once; the loop empties JAX's caches."""

    @jax.jit
    def add(x, y):
        return x + y

    x = jnp.ones(3)
    with probes.compiles() as rep:
        for _ in range(3):
            add(x, x)
            jax.clear_caches()
    assert [c.cause for c in rep.compilations_of("add")] == ["first", "cache_cleared", "cache_cleared"], rep.summary
    assert "jax.clear_caches()" in fix_for(rep.function("add"), KINDS["cache_cleared"])


def test_a_scan_outside_jit_given_a_new_lambda_each_time_is_a_finding():
    """flowMC#133 / jax#14743's shape: lax.scan called eagerly in a loop with a lambda body compiles at
    every call; it was "3 small compilations of eager operations" - cheap and cached, the report said."""
    xs = jnp.ones(5)
    with probes.compiles() as rep:
        for _ in range(3):
            jax.lax.scan(lambda c, x: (c + x, c * x), 0.0, xs)
    assert rep.status.value == "problem"
    assert rep.summary.startswith("`scan` outside jit compiled 3 times for the same argument types")

    def body(c, x):
        return c + x, c * x

    with probes.compiles() as clean:
        for _ in range(3):
            jax.lax.scan(body, 0.0, xs)
    assert clean.status.value == "ok" and not clean.rebuilt_loops


def test_a_static_nan_is_told_it_never_equals_itself():
    """The fix was "build it once and pass the same object, or define __eq__ and __hash__" - for a float."""

    @partial(jax.jit, static_argnums=1)
    def fill_nans(x, fill):
        return jnp.where(jnp.isnan(x), 0.0, x)

    with probes.compiles() as rep:
        for _ in range(3):
            fill_nans(jnp.ones(2), float("nan"))
    fix = fix_for(rep.function("fill_nans"), KINDS["static_identity"])
    assert "NaN, which never equals itself" in fix and "__eq__" not in fix


def test_a_cell_failing_at_its_first_call_does_not_say_calls_reused_a_program():
    @dataclasses.dataclass
    class Model:  # not frozen: unhashable, so no static argument
        scale: float

        @partial(jax.jit, static_argnums=0)
        def apply(self, x):
            return x * self.scale

    x, model = jnp.ones(2), Model(2.0)
    with pytest.raises(ValueError):
        with probes.compiles() as rep:
            model.apply(x)
    assert rep.summary.endswith("Nothing was compiled before it.") and "reused an already" not in rep.summary


def test_an_int_then_a_float_scalar_gets_the_fix_to_pass_one_kind():
    @jax.jit
    def scale(x, s):
        return x * s

    x = jnp.ones(3)
    with probes.compiles() as rep:
        scale(x, 1)
        scale(x, 1.5)
    fix = fix_for(rep.function("scale"), KINDS["types"])
    assert "`float(s)`" in fix and "bucket" not in fix


def test_a_rebuilt_loop_beside_a_users_function_is_still_a_finding_and_transformed_names_are_not_rewrapped():
    @jax.jit
    def predict(w, x):
        return jnp.tanh(x @ w)

    w, xs = jnp.ones((3, 2)), jnp.ones(5)
    with probes.compiles() as rep:
        jax.vmap(predict, in_axes=(None, 0))(w, jnp.ones((4, 3)))
        for _ in range(3):
            jax.lax.scan(lambda c, x: (c + x, c * x), 0.0, xs)
    assert rep.status.value == "problem" and rep.summary.startswith("`scan` outside jit compiled 3 times")
    assert rep.function("vmap(predict)").jit_name == "vmap(predict)"
    text = static_bundle(rep.document())["text/plain"]
    assert "Control flow outside jit" in text and "jit(vmap(" not in text


def test_started_by_is_the_cells_line_not_the_run_cell_magic_call(ip):
    """In a notebook a cell magic runs from a `get_ipython().run_cell_magic(...)` line of the cell's own
    file; that line was shown as the call that started the compilation (CI's JupyterLab screenshot)."""
    ip.run_cell("import jax, jax.numpy as jnp\nstarted_step = jax.jit(lambda x: x * 2)")
    ip.run_cell("%%jax_compiles -o started_rep\nfor n in (2, 3):\n    started_step(jnp.ones(n))\n")
    compilation = ip.user_ns["started_rep"].compilations_of("<lambda>")[1]
    started = compilation.provenance.started_by
    assert started is not None and "run_cell_magic" not in started.code, started
    assert started.code.strip() == "started_step(jnp.ones(n))"  # the cell's own outermost line
