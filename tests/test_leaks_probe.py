"""The leak probe on small leaking programs: who holds each tracer, in the user's names."""

from __future__ import annotations

import collections
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic._jax import retrace
from jaxmagic._jax.restore import take_snapshot
from jaxmagic.probes._leaks.explanations import _path_from_chain
from jaxmagic.probes._leaks.tracers.text import leak_blocks


def run_leak(namespace: dict, fn, *args):
    """Run ``fn(*args)`` inside the probe; return (report, the exception it raised or None)."""
    raised = None
    try:
        with probes.leaks(namespace=namespace) as report:
            fn(*args)
    except Exception as error:  # JAX's "Leaked trace" Exception, or UnexpectedTracerError
        raised = error
    return report, raised


def test_list_holder():
    leaked = []

    def leaky_fn(x):
        leaked.append(x)
        return x + 1

    report, error = run_leak({"leaked": leaked, "leaky_fn": leaky_fn}, jax.jit(leaky_fn), jnp.float32(1.0))
    assert type(error) is Exception and str(error).startswith("Leaked trace DynamicJaxprTrace")
    [tracer] = report.leaked
    assert tracer.held_by == ["leaked[0]"] and tracer.aval == "float32[]"
    assert tracer.function == "leaky_fn" and tracer.transformation == "jit" and tracer.depends_on == ["x"]
    assert report.summary.startswith("Tracer leaked from `leaky_fn` (traced for jit): `leaked[0]` holds")
    assert report.status.value == "problem" and report.traced == ["leaky_fn"]


def test_dict_attribute_holder_and_the_tracer_it_keeps_alive():
    class Cache:
        pass

    cache = Cache()
    cache.store = {}

    def remember(x):
        h = jnp.tanh(x)
        cache.store["h"] = h
        return h

    report, error = run_leak({"cache": cache}, jax.jit(remember), jnp.ones(3))
    assert error is not None
    first, second = report.leaked
    assert first.held_by == ["cache.store['h']"] and first.created_at.code == "h = jnp.tanh(x)"
    # x is only alive because h's computation refers to it
    assert second.held_by == [] and second.kept_alive_by == 1 and second.depends_on == ["x"]
    assert [t.number for t in report.primary] == [1]


def test_attribute_of_a_callable_object():
    class Model:
        def __call__(self, x):
            h = jnp.tanh(x)
            self.last_hidden = h
            return h * 2

    m_leak = Model()
    report, _ = run_leak({"m_leak": m_leak}, jax.jit(m_leak), jnp.ones((2, 3)))
    first = report.leaked[0]
    assert first.held_by == ["m_leak.last_hidden"] and first.aval == "float32[2,3]"
    # JAX calls a callable object's function "<unknown>"; its line names it
    assert first.function == "Model.__call__"
    assert all(t.function == "Model.__call__" for t in report.leaked)


def test_class_attribute_holder():
    class Model:
        last = None

        def __call__(self, x):
            Model.last = x * 2
            return x

    report, _ = run_leak({"Model": Model, "model": Model()}, jax.jit(Model()), jnp.ones(2))
    assert report.leaked[0].held_by[0] == "Model.last"


def test_closure_and_default_argument_holders():
    def make():
        box = []

        def g(x):
            box.append(x * 2)
            return x

        return g

    g = make()
    report, _ = run_leak({"g": g}, jax.jit(g), jnp.ones(3))
    assert report.leaked[0].held_by == ["box[0] (closed over by g)"]
    assert report.leaked[0].created_at.function == "g"

    def memo_fn(x, memo=[]):  # noqa: B006 - the classic mutable default, on purpose
        memo.append(x)
        return x

    report, _ = run_leak({"memo_fn": memo_fn}, jax.jit(memo_fn), 1.0)
    assert report.leaked[0].held_by == ["memo[0] (default argument of memo_fn)"]


def test_jitted_wrapper_namedtuple_and_nested_containers():
    Pair = collections.namedtuple("Pair", "a b")
    history = {"steps": []}

    def step(x):
        history["steps"].append(Pair(1, x))
        return x

    step_jit = jax.jit(step)
    report, _ = run_leak({"history": history, "step_jit": step_jit}, step_jit, 2.0)
    assert report.leaked[0].held_by[0] == "history['steps'][0].b"


def test_a_cached_function_is_traced_again_and_caught():
    leaked2 = []

    def leaky_cached(x):
        leaked2.append(x)
        return x * 2

    leaky_cached_jit = jax.jit(leaky_cached)
    leaky_cached_jit(jnp.float32(1.0))  # traced and cached without checks
    leaked2.clear()
    with jax.checking_leaks():  # JAX's own check alone: the cached trace hides the leak
        leaky_cached_jit(jnp.float32(2.0))
    assert leaked2 == []
    report, error = run_leak({"leaked2": leaked2}, leaky_cached_jit, jnp.float32(2.0))
    assert error is not None and report.leaked[0].held_by == ["leaked2[0]"]
    assert report.retrace_method == "user_context" and "traced afresh" in report.retrace_note
    leaked2.clear()


def test_caches_are_untouched_after_the_probe():
    """After the probe the user's cached trace is used again. The first probe of a process that makes jaxmagic's
    cache key (``retrace.create_context``) re-traces what was cached before it once, and says so (the next test):
    the key is made first here, so this holds whichever tests ran before (alone, it failed)."""
    retrace.create_context()
    traces = []

    @jax.jit
    def f(x):
        traces.append(1)
        return x + 1

    f(jnp.ones(2))
    with probes.leaks() as report:
        f(jnp.ones(2))  # traced again, under the probe's own cache key
    assert len(traces) == 2 and report.status.value == "ok" and report.traced == ["f"]
    f(jnp.ones(2))  # after the probe: the old cached trace, no new trace
    assert len(traces) == 2


def test_the_first_probe_of_a_process_says_that_what_was_cached_traces_once_more():
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        from jaxmagic import probes
        traces = []

        @jax.jit
        def f(x):
            traces.append(1)
            return x + 1

        f(jnp.ones(2))
        with probes.leaks() as report:
            f(jnp.ones(2))
        f(jnp.ones(2))
        print(len(traces), "first %%jax_leaks in this process" in report.retrace_note)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["3", "True"], done.stdout + done.stderr[-2000:]


def test_clean_block_and_tracers_left_from_before():
    class Model:
        def __call__(self, x):
            self.h = jnp.sin(x)
            return x

    old = Model()
    jax.jit(old)(jnp.ones(2))  # leaked earlier, outside the probe
    with probes.leaks(namespace={"old": old}) as report:
        jnp.ones(3).sum()
    assert report.leaked == [] and report.status.value == "ok"
    assert [h.path for h in report.held] == ["old.h"] and report.held[0].created_at.code == "self.h = jnp.sin(x)"
    assert report.summary == "No tracer leaked (but `old.h` still holds a tracer leaked earlier)."


def test_unexpected_tracer_error_in_the_block():
    class Model:
        def __call__(self, x):
            h = jnp.tanh(x)
            self.last_hidden = h
            return h * 2

    m_leak = Model()
    jax.jit(m_leak)(jnp.ones(3))
    report, error = run_leak({"m_leak": m_leak}, lambda: jnp.sum(m_leak.last_hidden))
    assert isinstance(error, jax.errors.UnexpectedTracerError)
    u = report.unexpected
    assert u.held_by == ["m_leak.last_hidden"] and u.created_at.code == "h = jnp.tanh(x)"
    assert u.used_at.code == 'report, error = run_leak({"m_leak": m_leak}, lambda: jnp.sum(m_leak.last_hidden))'
    assert u.aval == "float32[3]" and u.transformation == "jit"
    assert report.status.value == "problem"


@pytest.mark.parametrize("how", ["clean", "leak", "other", "interrupt"])
def test_leaves_config_as_found(how):
    leaked = []

    def leaky(x):
        leaked.append(x)
        return x

    before = take_snapshot()
    body = {
        "clean": lambda: jax.jit(lambda x: x + 1)(1.0),
        "leak": lambda: jax.jit(leaky)(1.0),
        "other": lambda: int("x"),
        "interrupt": lambda: (_ for _ in ()).throw(KeyboardInterrupt),
    }[how]
    try:
        with probes.leaks() as report:
            body()
    except BaseException:  # noqa: B036 - every way out is tested
        pass
    assert take_snapshot().differences(before) == []
    assert jax.config.jax_check_tracer_leaks is False
    assert report.to_dict()["kind"] == "jax_leaks"
    if how == "other":
        assert report.other_error.startswith("ValueError") and report.status.value == "error"


def test_leak_message_parsing_keeps_each_block():
    message = (
        "Leaked trace DynamicJaxprTrace. Leaked tracer(s):\n\nJitTracer(float32[])\n"
        "The error occurred while tracing the function leaky_fn at /tmp/x.py:3 for jit. This concrete value was "
        "not available in Python because it depends on the value of the argument x.\n"
        "<DynamicJaxprTracer 11> is referred to by <list 22>[0]\n<list 22> is referred to by __main__.leaked\n"
        "<DynamicJaxprTracer 11> is referred to by the local variable 'leaked', a list containing it, of the frame "
        "<module> (/tmp/x.py:9)\n"
    )
    [block] = leak_blocks(message)
    assert (block.tracer_type, block.aval, block.tracer_id) == ("JitTracer", "float32[]", 11)
    assert block.context.function == "leaky_fn" and block.context.depends_on == ["x"]
    assert [link.holder for link in block.chain] == ["<list 22>[0]", "__main__.leaked"]
    assert len(block.frame_holders) == 1

    assert _path_from_chain(block.chain) == "leaked[0]"


# -- shapes from public issue threads: leaks through grad and vmap, not only jit -------------


def test_leak_through_grad_names_the_transformation_and_the_start_of_the_trace():
    store = []

    def loss(w):
        h = w * 2
        store.append(h)  # the classic "save an intermediate for logging" leak
        return jnp.sum(h)

    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"store": store}) as report:
            jax.grad(loss)(jnp.ones(2))
    first = report.leaked[0]
    assert first.transformation == "grad" and first.aval == "f32[2]"
    assert "traced for grad" in report.summary and "<module>" not in report.summary
    assert "jax.grad(loss)(jnp.ones(2))" in report.summary  # where the trace was started
    assert "a  tracer" not in report.summary
    assert "no jitted function of yours" not in str(report) and "no function of yours" not in str(report)


def test_leak_through_vmap_names_the_function_and_a_whole_aval():
    store = []

    def leaky(x):
        y = jnp.sin(x)
        store.append(y)
        return y

    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"store": store}) as report:
            jax.vmap(leaky)(jnp.ones(3))
    assert report.summary.startswith("Tracer leaked from `leaky` (traced for vmap)")
    assert report.leaked[0].aval == "float32[] (batched float32[3])"
    assert "Traced with leak checking: `leaky`" in str(report)


def test_traced_functions_are_told_by_where_they_are_defined():
    def _private_step(x):  # a leading underscore is still the user's function
        return x + 1

    with probes.leaks() as report:
        jax.jit(_private_step)(jnp.ones(2))
        jax.eval_shape(_private_step, jnp.ones(3))
    assert report.traced == ["_private_step"]


# -- issue 23: nested transformations name the innermost function, the path and the storing line --


def test_leak_from_grad_inside_jit_names_the_loss_the_path_and_the_storing_line():
    # Shaped like the "save an intermediate for logging" leaks of jax-ml/jax#3086 / #7556, written the
    # way training steps are: jax.grad of a loss inside a jitted step.
    activations = []

    def loss_fn(w, x):
        h = jnp.tanh(w * x)
        activations.append(h)
        return jnp.sum(h**2)

    @jax.jit
    def train_step(w, x):
        g = jax.grad(loss_fn)(w, x)
        return w - 0.1 * g

    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"activations": activations}) as report:
            train_step(jnp.ones(3), jnp.ones(3))
    data = report.to_dict()
    first = data["leaked"][0]
    assert first["function"] == "loss_fn" and first["held_by"] == ["activations[0]"]
    provenance = first["provenance"]
    assert provenance["function"] == "loss_fn"
    assert provenance["transforms"] == ["jit(train_step)", "grad"]
    assert provenance["made_at"]["code"] == "h = jnp.tanh(w * x)"
    assert provenance["started_by"]["code"] == "train_step(jnp.ones(3), jnp.ones(3))"
    assert first["stored_at"]["code"] == "activations.append(h)"
    assert "`loss_fn` (traced for jit(train_step) > grad)" in data["summary"]
    text = str(report).split("\n\n", 1)[1]  # the sections, after the headline and its fix (which names the line)
    assert text.index("h = jnp.tanh(w * x)") < text.index("activations.append(h)")


def test_leak_of_a_vmap_input_names_the_function_given_to_vmap_not_module():
    # jax-ml/jax#13022: a closure over vmap's input kept in an attribute's dict; JAX says the tracer
    # "was created on line ... (<module>)" - the vmap call, not the function that leaked it.
    class Holder:
        def __init__(self):
            self.dct = {}

    a = Holder()

    def sketch(x):
        a.dct["hi"] = [lambda: x]
        return x

    with pytest.raises(Exception, match="Leaked trace BatchTrace"):
        with probes.leaks(namespace={"a": a}) as report:
            jax.vmap(sketch)(jnp.arange(3))
    first = report.to_dict()["leaked"][0]
    assert first["function"] == "sketch" and first["function_line"]["code"] == "def sketch(x):"
    assert first["provenance"]["function"] == "sketch" and first["provenance"]["transforms"] == ["vmap"]
    # the leaked value is vmap's input: no line inside sketch made it, and the report says so
    assert first["provenance"]["made_at"] is None and "input" in first["provenance"]["unknown"]
    assert first["provenance"]["started_by"]["code"] == "jax.vmap(sketch)(jnp.arange(3))"
    assert first["stored_at"]["code"] == 'a.dct["hi"] = [lambda: x]'
    assert "<module>" not in report.summary and report.summary.startswith("Tracer leaked from `sketch`")


def test_leak_from_a_method_under_grad_names_the_method_and_the_attribute_store():
    # Flax/Haiku-style: a module object keeps an intermediate as an attribute during jax.grad.
    class Encoder:
        def __call__(self, params, x):
            hidden = jnp.tanh(params * x)
            self.last_hidden = hidden
            return jnp.sum(hidden)

    enc = Encoder()
    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"enc": enc}) as report:
            jax.grad(enc)(jnp.ones(2), jnp.ones(2))
    first = report.to_dict()["leaked"][0]
    assert first["held_by"] == ["enc.last_hidden"]
    assert first["provenance"]["function"] == "Encoder.__call__" and first["provenance"]["transforms"] == ["grad"]
    # grad without jit computes eagerly: JAX records no line for the value, and the report says so
    assert first["provenance"]["made_at"] is None and "recorded no line" in first["provenance"]["unknown"]
    assert first["stored_at"]["code"] == "self.last_hidden = hidden"
    assert "Could not tell which line made the leaked value" in str(report)
    # the fix is written from the storing line
    text = " ".join(str(report).split())
    assert "Here: `return jnp.sum(hidden), hidden` - return `hidden` from `Encoder.__call__`" in text


def test_a_tracer_used_later_names_where_it_was_made_and_stored_before_the_use():
    # Equinox/Flax-style: a model keeps its last activation; a later cell sums it (UnexpectedTracerError)
    class Mlp:
        def __call__(self, x):
            act = jnp.maximum(x, 0.0)
            self.last_act = act
            return act.sum()

    mlp = Mlp()
    jax.jit(mlp)(jnp.ones(3))
    report, error = run_leak({"mlp": mlp}, lambda: jnp.sum(mlp.last_act))
    assert isinstance(error, jax.errors.UnexpectedTracerError)
    u = report.to_dict()["unexpected"]
    assert u["held_by"] == ["mlp.last_act"] and u["stored_at"]["code"] == "self.last_act = act"
    assert u["provenance"]["made_at"]["code"] == "act = jnp.maximum(x, 0.0)"
    assert u["provenance"]["transforms"] == ["jit(Mlp.__call__)"]
    text = str(report)
    assert text.index("act = jnp.maximum(x, 0.0)") < text.index("jnp.sum(mlp.last_act)")
    assert "Here: `return act.sum(), act`" in text
    explained = probes.explain(error, namespace={"mlp": mlp})
    assert explained.fixes[0].use == "return act.sum(), act" and "drop `self.last_act = act`" in explained.fixes[0].when


def test_tracers_left_from_before_carry_where_they_were_made_and_stored():
    history = {}

    def record(x):
        y = x * 3
        history["y"] = y
        return y

    jax.jit(record)(jnp.ones(2))
    with probes.leaks(namespace={"history": history}) as report:
        pass
    [held] = report.to_dict()["held"]
    assert held["path"] == "history['y']" and held["stored_at"]["code"] == 'history["y"] = y'
    assert held["provenance"]["made_at"]["code"] == "y = x * 3"
    assert held["provenance"]["transforms"] == ["jit(record)"]


def test_leak_from_a_scan_body_inside_jit_names_the_body_and_the_loop():
    # BlackJAX/NumPyro-style sampler loop: the body appends each state to a Python list for inspection
    states = []

    def one_step(position, noise):
        position = position + 0.1 * jnp.sin(noise)
        states.append(position)
        return position, position

    @jax.jit
    def sample(noises):
        return jax.lax.scan(one_step, 0.0, noises)

    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"states": states}) as report:
            sample(jnp.ones(4))
    first = report.to_dict()["leaked"][0]
    assert first["function"] == "one_step" and first["held_by"] == ["states[0]"]
    assert first["provenance"]["transforms"] == ["jit(sample)", "scan body"]
    assert first["provenance"]["made_at"]["code"] == "position = position + 0.1 * jnp.sin(noise)"
    assert first["stored_at"]["code"] == "states.append(position)"
    assert "(traced for jit(sample) > scan body)" in report.summary
    # the scan body already hands `position` out as its per-step output: drop the append, use what scan returns
    text = " ".join(str(report).split())
    assert "Here: `states.append(position)` - drop this line: `one_step` already returns `position`" in text


def test_a_value_stored_by_a_method_the_traced_function_calls_is_found_there():
    """`self._remember(h)` stores `self.remembered = v`: the storing line is in the method, and the fix is to
    return the value from the traced function (it was neither found nor written)."""

    class Layer:
        def _remember(self, v):
            self.remembered = v

        def __call__(self, x):
            h = jnp.tanh(x)
            self._remember(h)
            return h.sum()

    layer = Layer()
    with pytest.raises(Exception, match="Leaked trace"):
        with probes.leaks(namespace={"layer": layer}) as report:
            jax.jit(layer)(jnp.ones(3))
    first = report.to_dict()["leaked"][0]
    assert first["stored_at"]["code"] == "self.remembered = v" and first["stored_at"]["function"] == "_remember"
    text = " ".join(str(report).split())
    assert (
        "Here: `self.remembered = v` - drop this line: with it `_remember`, which `Layer.__call__` calls, keeps a "
        "traced value; return the value from `Layer.__call__` instead" in text
    )  # the code shown is code (it read "`return the value from Layer.__call__`")
