"""The tracer-error explainer on the chapter's error kinds: kind, function, argument names, fixes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxmagic import probes
from jaxmagic.probes._leaks.tracers.text import english_list, split_names, tracing_context
from jaxmagic.render import static_bundle


def clip_positive(x, limit):
    if x > limit:
        return limit
    return x


def repeat_add(x, n):
    for _ in range(n):
        x = x + 1.0
    return x


def pick(i):
    return [10.0, 20.0, 30.0][i]


def np_inside(x):
    return np.sin(x) * 2


def halve_while_big(x):
    while x > 1:
        x = x / 2
    return x


def make_zeros(n):
    return jnp.zeros(n)


def window(x, i):
    return x[i : i + 2]


def positive_sum(x):
    return x[x > 0].sum()


def to_float(x):
    return float(x) * 2


def count_up(n):
    return jnp.arange(n)


def nonzero_idx(x):
    return jnp.nonzero(x)[0]


def draw_twice(key):
    a = jax.random.normal(key)
    b = jax.random.normal(key)
    return a + b


def raised(fn):
    try:
        fn()
    except Exception as error:  # the error under test
        return error
    raise AssertionError("expected an exception")


# (call, error class name, kind, traced function, arguments, the fix listed first)
CASES = [
    (
        lambda: jax.jit(clip_positive)(jnp.float32(3.0), 1.0),
        "TracerBoolConversionError",
        "bool",
        "clip_positive",
        ["x", "limit"],
        "jnp.where",
    ),
    (
        lambda: jax.jit(halve_while_big)(3.0),
        "TracerBoolConversionError",
        "bool",
        "halve_while_big",
        ["x"],
        "x = lax.while_loop(lambda x: x > 1, lambda x: x / 2, x)",  # the loop's one variable as its state
    ),
    (
        lambda: jax.jit(repeat_add)(1.0, 3),
        "TracerIntegerConversionError",
        "int",
        "repeat_add",
        ["n"],
        "lax.fori_loop(0, n, body, init)",
    ),
    (
        lambda: jax.jit(pick)(1),
        "TracerIntegerConversionError",
        "int",
        "pick",
        ["i"],
        "jnp.asarray([10.0, 20.0, 30.0])[i]",
    ),
    (lambda: jax.jit(np_inside)(jnp.ones(3)), "TracerArrayConversionError", "array", "np_inside", ["x"], "jnp.sin"),
    (
        lambda: jax.jit(to_float)(jnp.float32(1.0)),
        "ConcretizationTypeError",
        "concrete",
        "to_float",
        ["x"],
        "stay in JAX",
    ),
    (
        lambda: jax.jit(count_up)(3),
        "ConcretizationTypeError",
        "concrete",
        "count_up",
        ["n"],
        "jax.jit(count_up, static_argnames=('n',))",
    ),
    (
        lambda: jax.jit(nonzero_idx)(jnp.array([1.0, 0.0, 2.0])),
        "ConcretizationTypeError",
        "concrete",
        "nonzero_idx",
        ["x"],
        "jnp.nonzero(x, size=k, fill_value=-1)",
    ),
    (
        lambda: jax.jit(positive_sum)(jnp.array([1.0, -1.0, 2.0])),
        "NonConcreteBooleanIndexError",
        "bool_index",
        "positive_sum",
        [],
        "jnp.sum(jnp.where(x > 0, x, 0))",  # written from the line: x[x > 0].sum()
    ),
    (
        lambda: jax.jit(make_zeros)(3),
        "TypeError",
        "shape",
        "make_zeros",
        ["n"],
        "jax.jit(make_zeros, static_argnames=('n',))",
    ),
    (
        lambda: jax.jit(window)(jnp.arange(5.0), 1),
        "IndexError",
        "slice",
        "window",
        ["i"],
        "lax.dynamic_slice_in_dim(x, i, 2, axis=0)",
    ),
]


@pytest.mark.parametrize(
    "call, error_type, kind, function, arguments, first_fix", CASES, ids=[c[2] + "-" + c[3] for c in CASES]
)
def test_every_kind_is_explained(call, error_type, kind, function, arguments, first_fix):
    error = raised(call)
    report = probes.explain(error)
    assert report is not None
    assert report.error_type == error_type and report.error_kind == kind
    assert report.traced_function == function
    assert report.depends_on == arguments
    assert report.fixes[0].use.startswith(first_fix), [f.use for f in report.fixes]
    assert report.failing_line is not None and report.failing_line.function == function
    assert report.transformation == "jit"
    assert report.status.value == "problem"
    assert error_type in report.summary


def test_the_chapters_sentence_two_arguments():
    report = probes.explain(raised(lambda: jax.jit(clip_positive)(jnp.float32(3.0), 1.0)))
    assert report.depends_text == "x and limit"
    assert "the arguments `x` and `limit`" in report.summary
    # limit came in as a Python float (a weakly typed tracer): the one to make static
    assert [t.name for t in report.traced_names] == ["x", "limit"]
    assert [t.weak_type for t in report.traced_names] == [False, True]
    assert "jax.jit(clip_positive, static_argnames=('limit',))" in [f.use for f in report.fixes]
    assert report.failing_line.code == "if x > limit:"
    # tried: limit static is valid but x is still traced at `if x > limit:`, and the fix says so
    static = next(f for f in report.fixes if "static_argnames" in f.use)
    assert static.checked.startswith("checked: not enough on its own") and "TracerBoolConversionError" in static.checked


def test_vmap_error_names_function_and_tracers_from_the_frame():
    # Under vmap JAX names no arguments; the explainer reads the tracers on the line, and which of the vmapped
    # function's parameters they are (jax-ml/jax#5454: the failing frame shows it where JAX's message cannot).
    report = probes.explain(raised(lambda: jax.vmap(clip_positive)(jnp.ones(3), jnp.ones(3))))
    assert report.error_kind == "bool" and report.transformation == "vmap"
    assert report.traced_function == "clip_positive" and report.depends_on == ["x", "limit"]
    assert [t.name for t in report.traced_names] == ["x", "limit"]
    assert "depends on the arguments `x` and `limit`" in report.summary


def test_scan_body_is_named_with_its_transformation():
    def body(carry, v):
        return carry + (v if v > 0 else 0.0), None

    report = probes.explain(raised(lambda: lax.scan(body, 0.0, jnp.ones(3))))
    assert report.error_kind == "bool" and report.transformation == "scan"
    assert report.traced_function == "body" and report.depends_on == ["v"]


def test_key_reuse_is_explained():
    with jax.debug_key_reuse(True):
        error = raised(lambda: jax.jit(draw_twice)(jax.random.key(0)))
    report = probes.explain(error)
    assert report.error_kind == "key_reuse" and report.error_type == "KeyReuseError"
    assert report.fixes[0].use.startswith("key, sub = jax.random.split(key)")


def test_unexpected_tracer_names_where_it_was_made_and_who_holds_it():
    class Model:
        def __call__(self, x):
            h = jnp.tanh(x)
            self.last_hidden = h
            return h * 2

    m_leak = Model()
    jax.jit(m_leak)(jnp.ones(3))
    error = raised(lambda: jnp.sum(m_leak.last_hidden))
    report = probes.explain(error, namespace={"m_leak": m_leak})
    assert report.error_kind == "leak" and report.error_type == "UnexpectedTracerError"
    assert report.leaked_from.code == "h = jnp.tanh(x)"
    assert report.traced_function == "Model.__call__" and report.transformation == "jit"
    assert report.held_by == ["m_leak.last_hidden"]
    assert report.fixes[0].use == "return h * 2, h"  # written with the function's own return


def test_other_errors_are_not_explained():
    assert probes.explain(ValueError("x")) is None
    assert probes.explain(TypeError("unsupported operand")) is None
    assert probes.explain(raised(lambda: jnp.ones(3) + jnp.ones(4))) is None  # a shape mismatch, not a tracer error


def test_report_holds_only_data():
    report = probes.explain(raised(lambda: jax.jit(clip_positive)(jnp.float32(3.0), 1.0)))
    data = report.to_dict()
    assert data["kind"] == "jax_explain" and data["depends_on"] == ["x", "limit"]
    from jaxmagic.render import static_bundle

    html = static_bundle(report.document())["text/html"].replace("<wbr>", "")  # line-break hints in long tokens
    assert "if x &gt; limit:" in html and "static_argnames=(&#x27;limit&#x27;,)" in html
    for value in report.__dict__.values():
        assert not isinstance(value, (jax.Array, BaseException))


def test_sentence_parsing():
    message = (
        "Attempted boolean conversion of traced array with shape bool[].\nThe error occurred while tracing "
        "the function clip_positive at /tmp/a b.py:4 for jit. This concrete value was not available in\n"
        "Python because it depends on the values of the arguments x and limit.\nSee https://docs.jax.dev/"
    )
    context = tracing_context(message)
    assert (context.function, context.file, context.line, context.transformation) == (
        "clip_positive",
        "/tmp/a b.py",
        4,
        "jit",
    )
    assert context.depends_on == ["x", "limit"]
    assert split_names("x, y and p['a, b']") == ["x", "y", "p['a, b']"]
    assert english_list(["x"]) == "`x`" and english_list(["x", "y", "z"], code=False) == "x, y and z"


# -- shapes from public issue threads -------------------------------------------------


def _sample_actions_error(derived: bool):
    from jax import lax

    @jax.jit
    def sample_actions(logits, key, temperature):
        scale = temperature * 2 if derived else temperature

        def cond(state):
            return state[0] < 3

        def step(state):
            i, x = state
            if scale > 0:  # a closure variable of the loop body, traced by jit
                x = x / scale
            return i + 1, x

        return lax.while_loop(cond, step, (0, logits))[1]

    try:
        sample_actions(jnp.ones(4), jax.random.key(0), 1.0)
    except Exception as error:
        return error
    raise AssertionError("no error")


def test_fix_names_the_jitted_function_not_the_loop_body():
    report = probes.explain(_sample_actions_error(derived=False))
    assert report.error_kind == "bool" and report.traced_function == "step"
    assert report.jitted_function == "sample_actions" and report.jitted_transformation == "jit"
    assert report.origin_arguments == {"scale": "temperature"}
    assert report.depends_on == ["temperature"]
    uses = [f.use for f in report.fixes]
    jitted = report.jitted_function
    # sample_actions is decorated with @jax.jit: the static fix is that decorator, for it, not the loop body
    assert "@functools.partial(jax.jit, static_argnames=('temperature',))" in uses
    assert not any("jax.jit(step" in use for use in uses)
    assert f"`scale` comes from the argument `temperature` of `{jitted}`" in report.summary


def test_fix_for_a_value_derived_inside_the_jitted_function_does_not_guess_an_argument():
    report = probes.explain(_sample_actions_error(derived=True))
    assert report.origin_arguments == {}
    uses = [f.use for f in report.fixes]
    assert not any("static_argnames=('scale'" in use for use in uses)
    assert any(use.endswith("static_argnames=(...))") for use in uses)
    assert any("could not tell which argument" in f.when for f in report.fixes)


# -- issue 23: where the value was made, fixes that apply (tried where cheap), leaks in disguise ----


def custom_ones(arr):
    count = jnp.add(arr.size, 1)
    return jnp.ones((count,))


def test_a_size_computed_by_jax_numpy_is_blamed_on_the_line_that_made_it():
    # jax-ml/jax#4449 "Operations on static inputs/shapes yield concretization errors": jnp.add on
    # arr.size makes a tracer; `arr.size + 1` works.
    report = probes.explain(raised(lambda: jax.jit(custom_ones)(jnp.ones(3))))
    data = report.to_dict()
    assert data["error_kind"] == "shape"
    provenance = data["provenance"]
    assert provenance["made_at"]["code"] == "count = jnp.add(arr.size, 1)"
    assert provenance["function"] == "custom_ones" and provenance["transforms"] == ["jit(custom_ones)"]
    assert data["your_lines"][-1]["code"] == "return jnp.ones((count,))"  # the use, kept as context
    # no static_argnames for `count`: it is no parameter of custom_ones
    assert not any("static_argnames" in fix["use"] for fix in data["fixes"])
    first = data["fixes"][0]
    assert first["use"] == "arr.size + 1" and "jnp.add(arr.size, 1)" in first["when"]
    assert first["checked"].startswith("suggestion")
    assert "it was made by `count = jnp.add(arr.size, 1)`" in data["summary"]
    text = str(report)
    assert text.index("count = jnp.add(arr.size, 1)") < text.index("return jnp.ones((count,))")


def padded_length(x, pad):
    n = jnp.multiply(x.shape[0], pad)
    return jnp.zeros(n)


def test_a_product_of_static_values_gets_the_python_expression_and_no_argument_invented():
    report = probes.explain(raised(lambda: jax.jit(padded_length, static_argnames="pad")(jnp.ones(3), 2)))
    data = report.to_dict()
    assert data["provenance"]["made_at"]["code"] == "n = jnp.multiply(x.shape[0], pad)"
    assert data["fixes"][0]["use"] == "x.shape[0] * pad"
    assert not any("static_argnames=('n',)" in fix["use"] for fix in data["fixes"])


def test_a_static_argnames_fix_for_a_real_parameter_is_tried_on_the_function():
    report = probes.explain(raised(lambda: jax.jit(count_up)(3)))
    fix = report.to_dict()["fixes"][0]
    assert fix["use"] == "jax.jit(count_up, static_argnames=('n',))"
    assert fix["checked"].startswith("checked: tracing `count_up` with `n` static succeeds with this call's arguments")


def test_a_static_argnames_fix_that_fails_for_this_call_says_so():
    # an array for the "static" argument: making it static cannot work (arrays are not hashable)
    report = probes.explain(raised(lambda: jax.jit(make_zeros)(jnp.array(3))))
    data = report.to_dict()
    assert not any("static_argnames" in f["use"] for f in data["fixes"])  # it does not apply: not offered
    [rejected] = data["rejected_fixes"]
    assert rejected["use"] == "jax.jit(make_zeros, static_argnames=('n',))"
    assert rejected["checked"].startswith("checked: still fails") and "Non-hashable" in rejected["checked"]
    assert "Tried on your function and left out" in str(report)


class Encoder:
    """A Haiku/Flax-style module that caches an activation on itself while jitted."""

    def __init__(self):
        self.cache = None

    def __call__(self, x):
        h = jnp.tanh(x)
        self.cache = h
        return h.sum()


def test_a_tracer_reaching_device_put_is_explained_as_the_leak_it_is():
    enc = Encoder()
    jax.jit(enc)(jnp.ones(3))
    error = raised(lambda: jax.device_put(enc.cache))
    assert not isinstance(error, jax.errors.UnexpectedTracerError)  # JAX 0.12 says "not a valid JAX type"
    assert "is not a valid JAX type" in str(error)
    report = probes.explain(error, namespace={"enc": enc})
    data = report.to_dict()
    assert data["error_kind"] == "leak" and data["error_type"] == type(error).__name__
    assert data["held_by"] == ["enc.cache"]
    assert data["traced_function"] == "Encoder.__call__"
    assert data["stored_at"]["code"] == "self.cache = h"
    assert data["provenance"]["made_at"]["code"] == "h = jnp.tanh(x)"
    assert data["provenance"]["transforms"] == ["jit(Encoder.__call__)"]
    assert "`enc.cache` still holds it" in data["summary"]


def test_a_kept_tracer_given_to_numpy_is_a_leak_not_a_numpy_call_inside_jit():
    enc = Encoder()
    jax.jit(enc)(jnp.ones(2))
    error = raised(lambda: np.asarray(enc.cache))
    assert isinstance(error, jax.errors.TracerArrayConversionError)
    data = probes.explain(error, namespace={"enc": enc}).to_dict()
    assert data["error_kind"] == "leak" and data["disguised_as"] == "array"
    assert data["held_by"] == ["enc.cache"] and data["stored_at"]["code"] == "self.cache = h"
    assert not any("jnp.sin" in fix["use"] for fix in data["fixes"])
    # the same error inside jit stays a NumPy-inside-jit error
    assert probes.explain(raised(lambda: jax.jit(np_inside)(jnp.ones(3)))).error_kind == "array"


def test_an_error_the_explainer_does_not_know_still_gets_a_report_saying_why():
    assert probes.explain_any(raised(lambda: int("x"))) is None
    report = probes.explain_or_say_why(raised(lambda: int("x")))
    data = report.to_dict()
    assert data["kind"] == "jax_explain" and data["status"] == "error" and data["error_type"] == "ValueError"
    assert "not a tracer error" in data["reason"] and data["summary"].startswith("jaxmagic could not explain")


def index_at_time(x, t, dt):
    return x[t / dt]  # a float index: JAX's TypeError names no tracer, but t and dt are tracers here


def test_an_unknown_error_on_a_line_with_tracers_does_not_say_there_were_none():
    report = probes.explain_or_say_why(raised(lambda: jax.jit(index_at_time)(jnp.ones(5), 1.0, 0.5)))
    assert report.error_type == "TypeError"
    assert "not a tracer error" not in report.reason
    assert "`x`, `t` and `dt` on the line that raised it are tracers" in report.reason


def test_a_leak_caught_by_checking_leaks_without_the_magic_names_the_loss_under_jit():
    # leak checking switched on by the user (jax.checking_leaks), explained afterwards: the path is
    # read from the frames the error was raised in, though JAX filtered its frames out of the traceback
    logged = []

    def loss_fn(w, x):
        h = jnp.tanh(w * x)
        logged.append(h)
        return jnp.sum(h**2)

    @jax.jit
    def train_step(w, x):
        return w - 0.1 * jax.grad(loss_fn)(w, x)

    with jax.checking_leaks():
        error = raised(lambda: train_step(jnp.ones(3), jnp.ones(3)))
    first = probes.explain_any(error, {"logged": logged}).to_dict()["leaked"][0]
    assert first["function"] == "loss_fn" and first["held_by"] == ["logged[0]"]
    assert first["provenance"]["transforms"] == ["jit(train_step)", "grad"]
    assert first["provenance"]["made_at"]["code"] == "h = jnp.tanh(w * x)"
    assert first["stored_at"]["code"] == "logged.append(h)"


def make_grid(x, n, scale):
    if scale > 1:  # a setting the user already made static
        x = x * scale
    return jnp.zeros((n,)) + x.sum()


def test_trying_static_argnames_keeps_the_arguments_the_user_already_made_static():
    report = probes.explain(raised(lambda: jax.jit(make_grid, static_argnames="scale")(jnp.ones(2), 3, 2.0)))
    fix = next(f for f in report.to_dict()["fixes"] if "static_argnames" in f["use"])
    assert fix["use"] == "jax.jit(make_grid, static_argnames=('scale', 'n'))"
    assert fix["checked"].startswith("checked: tracing `make_grid` with `n` static succeeds")


@pytest.mark.parametrize(
    "use, error_type",
    [
        (lambda enc: enc.cache.block_until_ready(), "AttributeError"),  # "... not available on traced array"
        (lambda enc: {enc.cache: "step"}, "TypeError"),  # "unhashable type: 'DynamicJaxprTracer'"
    ],
    ids=["block_until_ready", "dict-key"],
)
def test_other_disguises_of_a_kept_tracer_are_leaks_too(use, error_type):
    enc = Encoder()
    jax.jit(enc)(jnp.ones(2))
    error = raised(lambda: use(enc))
    assert type(error).__name__ == error_type
    data = probes.explain(error, namespace={"enc": enc}).to_dict()
    assert data["error_kind"] == "leak" and data["held_by"] == ["enc.cache"]
    assert data["stored_at"]["code"] == "self.cache = h"


def wait_inside(x):
    return x.block_until_ready()


def test_the_same_message_inside_jit_is_not_called_a_leak():
    error = raised(lambda: jax.jit(wait_inside)(jnp.ones(2)))
    assert "traced array" in str(error)
    assert probes.explain(error) is None
    assert "not a tracer kept past its trace" in probes.explain_or_say_why(error).reason


def doubled_padding(x):
    n = jnp.add(x.size, 1)
    m = n * 2
    return jnp.zeros(m)


def test_in_a_chain_the_line_where_the_value_became_a_tracer_is_named():
    data = probes.explain(raised(lambda: jax.jit(doubled_padding)(jnp.ones(3)))).to_dict()
    assert data["provenance"]["made_at"]["code"] == "n = jnp.add(x.size, 1)"  # not `m = n * 2`
    assert data["fixes"][0]["use"] == "x.size + 1"


def count_true(mask):
    n = jnp.sum(mask)
    return jnp.zeros(n)


def test_a_size_computed_from_data_gets_no_static_expression():
    # the count of True entries depends on values: no Python expression keeps it static, and
    # making the array `mask` static cannot work - tried, and said so
    data = probes.explain(raised(lambda: jax.jit(count_true)(jnp.array([1, 0, 1])))).to_dict()
    # JAX's message names no line; the tracer on the failing line records the one that made it
    assert data["provenance"]["made_at"]["code"] == "n = jnp.sum(mask)"
    assert data["fixes"][0]["use"] == "a fixed size and a mask"  # a size from data: no setting to make static
    assert not any(fix["use"].startswith(("np.", "sum(")) for fix in data["fixes"])
    assert not any("static_argnames" in fix["use"] for fix in data["fixes"])
    assert [f["use"] for f in data["rejected_fixes"]] == ["jax.jit(count_true, static_argnames=('mask',))"]


# -- fixes fitted to the failing line (shapes from public threads) ---------------------------------


def _uses(report):
    return [f.use for f in report.fixes]


def test_a_count_from_two_settings_through_jnp_ceil_needs_both_static_and_math_ceil():
    # asantini29/phentax#28: `int(jnp.ceil(T / delta_t))` inside jit. Making T static alone is not
    # enough, nor both: jnp.ceil makes a tracer even from static inputs; math.ceil with both static works.
    @jax.jit
    def waveform(T, delta_t):
        n = int(jnp.ceil(T / delta_t))
        return jnp.zeros(n)

    report = probes.explain(raised(lambda: waveform(1.0, 0.1)))
    first = report.fixes[0]
    assert first.use == "math.ceil(T / delta_t)" and "static_argnames=('T', 'delta_t')" in first.when
    assert first.checked.startswith("checked: gives a concrete value once T = 1.0, delta_t = 0.1 are static")
    static = next(f for f in report.fixes if "static_argnames" in f.use)
    assert static.use == "@functools.partial(jax.jit, static_argnames=('T', 'delta_t'))"  # waveform is decorated
    assert static.checked.startswith("checked: not enough on its own")
    assert not any("nonzero" in use for use in _uses(report))


def test_printing_a_python_number_of_a_traced_loss_gets_jax_debug_print():
    @jax.jit
    def step(p):
        loss = jnp.sum(p**2)
        print(f"loss {float(loss):.3f}", "step")
        return p - 0.1 * p

    report = probes.explain(raised(lambda: step(jnp.ones(2))))
    assert report.fixes[0].use == 'jax.debug.print("loss {:.3f} step", loss)'
    assert report.fixes[0].checked.startswith("checked: traces with loss: float32[]")
    assert report.provenance.made_at.code == "loss = jnp.sum(p**2)"  # the tracer's own line, not "an input"
    assert not any(use.startswith(("a fixed size", "jnp.nonzero", "stay in JAX")) for use in _uses(report))


def test_an_assert_on_traced_values_gets_checkify_not_where():
    @jax.jit
    def f(x):
        assert jnp.all(x > 0), "inputs must be positive"
        return jnp.log(x)

    report = probes.explain(raised(lambda: f(jnp.ones(3))))
    assert report.fixes[0].use == 'checkify.check(jnp.all(x > 0), "inputs must be positive")'
    assert not any(use.startswith(("jnp.where", "lax.cond", "lax.while_loop")) for use in _uses(report))


def test_a_scipy_function_with_a_jax_twin_is_rewritten_and_traced_on_the_shapes():
    import scipy.special

    @jax.jit
    def scaled(x):
        return 2.0 * scipy.special.erfcx(np.asarray(x))

    report = probes.explain(raised(lambda: scaled(jnp.ones(3))))
    assert report.fixes[0].use == "2.0 * jax.scipy.special.erfcx(jnp.asarray(x))"
    assert report.fixes[0].checked.startswith("checked: traces with x: float32[3]")


def test_a_library_function_without_a_jax_twin_gets_pure_callback_naming_it():
    import scipy.special

    @jax.jit
    def bessel(x):
        return scipy.special.kv(1.0, x)

    report = probes.explain(raised(lambda: bessel(jnp.ones(3))))
    assert _uses(report) == ["jax.pure_callback(scipy.special.kv, jax.ShapeDtypeStruct(x.shape, x.dtype), x)"]


def test_a_slice_of_traced_length_gets_dynamic_slice_with_its_own_length_tried_with_it_static():
    @jax.jit
    def window(x, i, k):
        return x[i : i + k]

    report = probes.explain(raised(lambda: window(jnp.arange(10.0), 2, 3)))
    assert report.fixes[0].use == "lax.dynamic_slice_in_dim(x, i, k, axis=0)"
    assert "once k = 3 is static" in report.fixes[0].checked
    # the length, not the start; `window` is decorated with @jax.jit: the fix is the decorator
    assert "@functools.partial(jax.jit, static_argnames=('k',))" in _uses(report)


def test_a_list_of_functions_indexed_by_a_traced_integer_gets_lax_switch():
    def swish(v):
        return v * jax.nn.sigmoid(v)

    def make_layer(activations):
        @jax.jit
        def layer(h, which):
            return activations[which](h)

        return layer

    for activations, tried in (([jnp.tanh, jax.nn.relu], True), ([jnp.tanh, swish], False)):
        layer = make_layer(activations)
        report = probes.explain(raised(lambda layer=layer: layer(jnp.ones(2), 1)))
        assert report.fixes[0].use == "lax.switch(which, activations, h)"
        if tried:  # JAX's own functions: traced on the shapes
            assert report.fixes[0].checked.startswith("checked: traces with h: float32[2], which: int32[]")
        else:  # lax.switch would call swish, the user's: nothing of theirs runs again
            assert report.fixes[0].checked == "suggestion: not tried"


def test_control_flow_under_vmap_or_scan_gets_no_static_argnames():
    def relu(x):
        if x > 0:
            return x
        return 0.0

    for error in (raised(lambda: jax.vmap(relu)(jnp.arange(3.0))),):
        report = probes.explain(error)
        assert report.fixes[0].use == "jnp.where(x > 0, x, 0.0)"  # the if's own two values
        assert not any("static_argnames" in use for use in _uses(report))
        assert not any(use.startswith("lax.while_loop") for use in _uses(report))


def test_a_python_loop_over_a_traced_count_gets_fori_loop_with_its_bounds():
    def repeat(x, start, stop):
        for _ in range(start, stop):
            x = x * 2
        return x

    report = probes.explain(raised(lambda: jax.jit(repeat)(1.0, 0, 3)))
    assert report.fixes[0].use == "lax.fori_loop(start, stop, body, init)"
    assert not any(use.startswith("jnp.asarray") for use in _uses(report))


def test_a_traced_parameter_of_an_operation_is_explained_and_repeat_gets_its_total_length():
    # jnp.tile(x, k) with a traced k: JAX 0.12 raises a TypeError about hashable equation parameters
    def tile(x, k):
        return jnp.tile(x, k)

    report = probes.explain(raised(lambda: jax.jit(tile)(jnp.ones(2), 3)))
    assert report.error_kind == "concrete"
    assert report.fixes[0].use == "jax.jit(tile, static_argnames=('k',))"
    assert report.fixes[0].checked.startswith("checked: tracing `tile` with `k` static succeeds")

    def repeat_rows(x, counts):  # counts per element: data, so no static argument can work
        return jnp.repeat(x, counts)

    report = probes.explain(raised(lambda: jax.jit(repeat_rows)(jnp.ones(2), jnp.array([1, 2]))))
    assert report.fixes[0].use == "jnp.repeat(x, counts, total_repeat_length=N)"  # a parameter jnp.repeat has
    assert [f.use for f in report.rejected_fixes] == ["jax.jit(repeat_rows, static_argnames=('counts',))"]


def test_an_if_that_only_chooses_a_value_becomes_jnp_where_with_its_branches():
    # leaky ReLU written with a Python if (the most common shape of this error in issue threads)
    def leaky(x, slope):
        if x > 0:
            y = x
        else:
            y = slope * x
        return y

    # a vector condition under jit raises NumPy's ValueError ("truth value ... ambiguous"), not JAX's
    report = probes.explain(raised(lambda: jax.jit(leaky)(jnp.ones(3), 0.1)))
    assert report.error_kind == "bool" and report.error_type == "ValueError"
    assert report.fixes[0].use == "y = jnp.where(x > 0, x, slope * x)"
    assert report.fixes[0].checked.startswith("checked: traces with slope: float32[], x: float32[3]")
    # x is a vector: lax.cond needs one True/False - tried on the shapes and left out
    assert [f.use for f in report.rejected_fixes if f.use.startswith("lax.cond")] == [
        "lax.cond(x > 0, lambda: x, lambda: slope * x)"
    ]
    # the same message from an eager array is no tracer error: not explained as one
    assert probes.explain(raised(lambda: bool(jnp.ones(3) > 0))) is None


def test_writing_a_window_at_a_traced_position_gets_dynamic_update_slice_with_the_update():
    def write(buf, i, v):
        return buf.at[i : i + 2].set(v)

    report = probes.explain(raised(lambda: jax.jit(write)(jnp.zeros(8), 3, jnp.ones(2))))
    assert report.fixes[0].use == "lax.dynamic_update_slice_in_dim(buf, v, i, axis=0)"
    assert report.fixes[0].checked.startswith("checked: traces with buf: float32[8], i: int32[], v: float32[2]")


def test_math_functions_on_traced_values_get_their_jax_numpy_twins_tried():
    import math

    def gaussian(x, sigma):
        return math.exp(-(x**2) / (2 * sigma**2)) / math.sqrt(2 * math.pi * sigma**2)

    report = probes.explain(raised(lambda: jax.jit(gaussian)(jnp.float32(0.5), 1.0)))
    assert report.fixes[0].use == "jnp.exp(-(x**2) / (2 * sigma**2)) / jnp.sqrt(2 * math.pi * sigma**2)"
    assert report.fixes[0].checked.startswith("checked: traces with sigma: float32[], x: float32[]")


def test_a_while_loop_updating_one_variable_becomes_lax_while_loop_tried_on_the_shapes():
    def halve_until(delta, tol):
        while jnp.abs(delta) > tol:
            delta /= 2
        return delta

    report = probes.explain(raised(lambda: jax.jit(halve_until)(1.0, 1e-3)))
    first = report.fixes[0]
    assert first.use == "delta = lax.while_loop(lambda delta: jnp.abs(delta) > tol, lambda delta: delta / 2, delta)"
    assert first.checked.startswith("checked: traces with delta: float32[], tol: float32[]")


def _clip(x):
    if x > 0:
        return x
    return -x


def _zeros_of(x, n):
    return jnp.zeros(n) + x


def _zeros_of_sum(x):
    return jnp.zeros(x.sum().astype(int))


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (lambda: jax.make_jaxpr(_clip)(1.0), "bool"),
        (lambda: jax.eval_shape(_zeros_of, 1.0, 3), "shape"),
        (lambda: lax.switch(0, [_clip, _clip], 1.0), "bool"),
        (lambda: lax.cond(True, _zeros_of_sum, lambda x: jnp.zeros(3), jnp.ones(3)), "shape"),
    ],
    ids=["make_jaxpr", "eval_shape", "eager switch", "eager cond"],
)
def test_a_tracer_error_under_a_transformation_without_jit_is_no_leak(call, kind):
    """make_jaxpr, eval_shape and an eager lax.cond/switch trace the function like jit does; no table of
    API frames named them, and their tracer errors were told as tracers kept past an ended trace."""
    report = probes.explain(raised(call))
    assert report.error_kind == kind, report.summary
    assert "leak" not in report.summary and not report.held_by


# -- a static fix written for what the user gave jax.jit ------------------------------------------
# Shapes from public threads: jit of a vmapped or differentiated function with a size argument, a
# function decorated with @jax.jit, a *args function. The fix was `jax.jit(f, static_argnames=...)`
# for the bare function - dropping the vmap or the grad, or wrapping the jitted function in another
# jit (which still traces the argument) - and was marked checked, as the check traced the right one.


def _padrow(x, n):
    return jnp.concatenate([x, jnp.zeros(n)])


def _loss_of_n(w, n):
    return jnp.sum(w * jnp.arange(n))


@jax.jit
def _decorated(x, n):
    return jnp.ones((n, 2)) * x


def _packed(*args):
    x, n = args
    return jnp.zeros(n) + x


def _static_fix(report):
    return next(f for f in report.fixes if "static_arg" in f.use)


def test_the_static_fix_keeps_the_vmap_and_the_grad_the_user_gave_jax_jit():
    vmapped = probes.explain(raised(lambda: jax.jit(jax.vmap(_padrow, in_axes=(0, None)))(jnp.ones((2, 3)), 2)))
    fix = _static_fix(vmapped)
    assert fix.use == "jax.jit(jax.vmap(_padrow, in_axes=(0, None)), static_argnames=('n',))"
    assert fix.checked.startswith("checked: tracing `_padrow` with `n` static succeeds")
    assert jax.jit(jax.vmap(_padrow, in_axes=(0, None)), static_argnames=("n",))(jnp.ones((2, 3)), 2).shape == (2, 5)
    grad = probes.explain(raised(lambda: jax.jit(jax.grad(_loss_of_n))(jnp.ones(3), 3)))
    assert _static_fix(grad).use == "jax.jit(jax.grad(_loss_of_n), static_argnames=('n',))"


def test_the_static_fix_for_a_decorated_function_is_the_decorator():
    fix = _static_fix(probes.explain(raised(lambda: _decorated(1.0, 3))))
    assert fix.use == "@functools.partial(jax.jit, static_argnames=('n',))"
    assert "decorated with `@jax.jit`" in fix.checked


def test_a_value_from_star_args_is_never_given_to_static_argnames():
    fix = _static_fix(probes.explain(raised(lambda: jax.jit(_packed)(1.0, 3))))
    assert "static_argnames" not in fix.use and "static_argnums=(<position of args[1]>,)" in fix.use


def _zeros_beside_an_array(x, k):
    y = jnp.sin(x)
    return jnp.zeros(k) * y.sum()


def _prefix_to_argmax(x):
    k = jnp.argmax(x)
    y = jnp.sin(x)
    return y[:k]


def test_the_value_made_on_a_line_with_two_tracers_is_the_one_of_the_type_jax_names():
    """JAX's message shows the type of the value it could not use (int32[]); the float array beside it on
    the line was named as where the value was made."""
    size = probes.explain(raised(lambda: jax.jit(_zeros_beside_an_array)(jnp.ones(3), 2)))
    assert "made by" not in size.summary and size.depends_on == ["k"], size.summary
    bound = probes.explain(raised(lambda: jax.jit(_prefix_to_argmax)(jnp.ones(3))))
    assert bound.provenance.made_at.code == "k = jnp.argmax(x)", bound.summary


# -- boolean masks and checks written from the line -------------------------------------------------


def _relu_by_mask(x):
    return x.at[x < 0].set(0.0)


def _positive_mean(x):
    return x[x > 0].mean()


def _checked_sqrt(x):
    if jnp.any(x < 0):
        raise ValueError("negative input")
    return jnp.sqrt(x)


def test_a_masked_update_becomes_where_with_the_update_not_the_table_pattern():
    """The table's `jnp.where(mask, x, 0)` would zero exactly the entries `x.at[x < 0].set(0.0)` keeps."""
    report = probes.explain(raised(lambda: jax.jit(_relu_by_mask)(jnp.array([1.0, -1.0]))))
    assert report.error_kind == "bool_index"
    assert report.fixes[0].use == "jnp.where(x < 0, 0.0, x)" and report.fixes[0].checked.startswith("checked")
    assert not any(f.use.startswith("jnp.where(mask") for f in report.fixes)
    mean = probes.explain(raised(lambda: jax.jit(_positive_mean)(jnp.array([1.0, -1.0]))))
    assert mean.fixes[0].use == "jnp.sum(jnp.where(x > 0, x, 0)) / jnp.sum(x > 0)"


def test_an_if_that_only_raises_is_a_check_like_an_assert():
    report = probes.explain(raised(lambda: jax.jit(_checked_sqrt)(jnp.ones(3))))
    assert report.fixes[0].use == 'checkify.check(jnp.logical_not(jnp.any(x < 0)), "negative input")'
    assert not any(f.use.startswith(("jnp.where", "lax.cond")) for f in report.fixes)


def _take_two(x, i):
    return x[i : i + 2]


def test_under_vmap_the_function_is_the_one_holding_the_tracers_not_where_vmap_made_them():
    """JAX's vmap message says where the tracer was created - at the vmap call, for an input - which was
    named as the traced function (`<lambda>`, `<module>`) and its line as the definition."""
    report = probes.explain(raised(lambda: jax.vmap(_take_two, in_axes=(None, 0))(jnp.arange(5.0), jnp.array([0, 1]))))
    assert report.traced_function == "_take_two", report.summary
    assert report.function_line.code == "def _take_two(x, i):"


def _ordered(x, y):
    if x > y:
        return x, y
    return y, x


def _prefix_or_all(x):
    if x.sum() > 0:
        return x
    else:
        return x[:2]


def test_branches_returning_tuples_are_written_as_tuples():
    report = probes.explain(raised(lambda: jax.jit(_ordered)(1.0, 2.0)))
    assert report.fixes[0].use == "lax.cond(x > y, lambda: (x, y), lambda: (y, x))"
    assert report.fixes[0].checked.startswith("checked: traces")


def test_a_fix_that_fails_on_the_shapes_is_left_out_even_when_the_static_retry_cannot_be_tried():
    """Branches of different shapes: jnp.where and lax.cond fail on the shapes; the retry with `x` static
    could not be tried (`x.sum` is then no traced method) and its "not tried" hid the failure."""
    report = probes.explain(raised(lambda: jax.jit(_prefix_or_all)(jnp.ones(3))))
    assert not report.fixes, [f.use for f in report.fixes]
    rejected = {f.use: f.checked for f in report.rejected_fixes}
    assert "Incompatible shapes" in rejected["jnp.where(x.sum() > 0, x, x[:2])"]
    assert "No fix of this kind works here as written" in static_bundle(report.document())["text/plain"]


def _positive(v):
    return v[v > 0]


def _scan_body(total, row):
    kept = _positive(row)
    return total + kept.sum(), total


def test_a_value_traced_only_by_lax_scan_is_said_to_be_scans_not_jits():
    """jax-ml/jax#23637 ("when a tracer error happens in for_loop, should point to the user's body function") and
    marin-community/haliax#57 (a concretization inside a scan body): a helper called by a scan body, with no jit
    anywhere, was told "in `_positive` (traced for jit), inside `_scan_body` (jit)" - a scan body's tracer is of
    jit's class. The trace that made it says scan (its debug info), and no jax.jit fix is written for it."""
    report = probes.explain(raised(lambda: lax.scan(_scan_body, jnp.array(0.0), jnp.ones((3, 4)))))
    data = report.to_dict()
    assert (data["transformation"], data["jitted_function"], data["jitted_transformation"]) == (
        "scan",
        "_scan_body",
        "scan",
    )
    assert "(traced for scan), inside `_scan_body` (scan)" in report.summary and "jit" not in report.summary
    assert not any("jax.jit" in use or "static_arg" in use for use in _uses(report))
    # under a jit the same helper is jit's: the trace, not the class, decides
    jitted = probes.explain(raised(lambda: jax.jit(_positive)(jnp.ones(4))))
    assert jitted.to_dict()["transformation"] == "jit"


def test_a_numpy_function_given_to_jit_is_a_numpy_conversion_not_a_leak():
    # google/brax#321's shape: a function that is not the user's (there brax's env.step, here NumPy's own
    # np.asarray) is handed to jax.jit on the user's line and converts its traced argument while jit traces it.
    # The trace is running - no tracer kept past its trace - and the fix is the function's JAX twin on that
    # line, tried by tracing the rewritten line (nothing of the user's runs).
    def convert(xs):
        return jax.jit(np.asarray)(xs)

    report = probes.explain(raised(lambda: convert(jnp.ones(3))))
    assert report is not None and report.error_kind == "array", report and report.error_kind
    assert "leak" not in report.summary
    assert report.fixes[0].use == "jax.jit(jnp.asarray)(xs)", report.fixes
    assert report.fixes[0].checked.startswith("checked: traces"), report.fixes[0].checked


def test_arange_of_a_fixed_length_from_a_traced_start_gets_a_fixed_range_plus_the_start():
    # jax-ml/jax#19433: `np.arange(x[0] - 1, x[0] + 1)` (jax.numpy imported as np) under jit always has length 2,
    # but its start is traced. The fix is a range of that fixed length plus the start, written with the line's own
    # names and tried by tracing the rewritten line; "a fixed size and a mask" is not the first word.
    import jax.numpy as np_jax

    def around(x):
        np = np_jax
        return np.arange(x[0] - 1, x[0] + 1)

    report = probes.explain(raised(lambda: jax.jit(around)(jnp.zeros(1, dtype=jnp.int32))))
    assert report is not None and report.error_kind == "concrete"
    first = report.fixes[0]
    assert first.use == "np.arange(2) + (x[0] - 1)", report.fixes
    assert first.checked.startswith("checked: traces with x: int32[1]"), first.checked
    assert jnp.array_equal(jax.jit(lambda x: np_jax.arange(2) + (x[0] - 1))(jnp.array([5])), jnp.array([4, 5]))
