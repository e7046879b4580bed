"""%%jax_doctor's probe: the chapter's section 9 script with three, two, one and no bugs, and the other probes."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import section9_script as s9

from jaxmagic import probes
from jaxmagic._jax.restore import take_snapshot

N = 4
X, Y, P0 = s9.data(n=128, sizes=(16, 32, 32, 2))  # the chapter's script on a smaller model and data set


def run_doctor(bugs_fixed, **kwargs):
    """The section 9 script with its first ``bugs_fixed`` bugs fixed, run under the doctor."""
    script = s9.version(bugs_fixed)
    step_fn = script.make_train_step(script.loss)
    with probes.doctor(namespace=globals(), **kwargs) as report:
        _, losses = script.train(step_fn, P0, X, Y, N)
    return report, losses


def test_three_bugs_in_one_run_in_the_order_to_fix_them():
    before = take_snapshot()
    report, losses = run_doctor(0)
    assert np.isfinite(losses[0]) and all(np.isnan(losses[1:]))  # the cell ran to the end
    assert report.areas == ["NaN", "recompilation", "random keys"]
    nan = report.finding("nans")
    assert report.nans.primitive == "mul" and report.nans.phase == "backward"
    assert "jnp.linalg.norm" in nan.line.code and report.nan_sighting.function == "train_step"
    assert report.nan_sighting.call_number == 1 and report.nan_sighting.calls_with_nan == N
    compile_finding = report.finding("compiles")
    assert report.compiles.count("train_step") == N and "`step`" in compile_finding.title
    keys = report.finding("keys")
    assert "same key in 4 of its 4 calls" in keys.title and keys.next_magic == "%%jax_keys"
    assert report.status.value == "problem" and report.summary.startswith("3 problems")
    assert take_snapshot().differences(before) == []
    assert jax.config.jax_debug_nans is False and jax.config.jax_debug_key_reuse is False


def test_two_bugs_then_one_then_none():
    two, _ = run_doctor(1)
    assert two.areas == ["recompilation", "random keys"]
    one, _ = run_doctor(2)
    assert one.areas == ["random keys"] and one.compiles.count("train_step") == 1
    none, losses = run_doctor(3)
    assert none.findings == [] and none.status.value == "ok"
    assert none.keys.flow("train_step").distinct == N


def test_results_are_those_of_the_plain_run():
    step_fn = s9.make_train_step_v2(s9.loss_v1)
    _, plain = s9.train_v3(step_fn, P0, X, Y, N)
    with probes.doctor(namespace=globals()):
        _, watched = s9.train_v3(step_fn, P0, X, Y, N)
    assert plain == watched


def test_leak_stops_the_cell_and_is_ranked_after_nan():
    box = []

    @jax.jit
    def leaky(x):
        box.append(x * 2)
        return x + 1

    with pytest.raises(Exception, match="Leaked"):
        with probes.doctor(namespace={"box": box}) as report:
            leaky(jnp.ones(3))
    assert report.areas[:1] == ["tracer leak"] and "box[0]" in report.findings[0].title
    box.clear()


def test_arrays_piling_up_and_host_arrays_copied_every_step():
    @jax.jit
    def double(v):
        return v * 2

    history = []
    host = np.ones((4, 4), np.float32)
    with probes.doctor(namespace={"history": history}) as report:
        for _ in range(12):
            history.append(double(host))  # a NumPy array, copied to the device at every call
    assert "implicit transfers" in report.areas and "arrays piling up" in report.areas
    live = report.finding("live")
    assert "12 more `f32[4,4]`" in live.title and "history" in live.title
    transfers = report.finding("transfers")
    assert transfers.line.code.startswith("history.append(double(host))")
    assert (
        transfers.title == "`double` was given a NumPy array (f32[4,4], argument `host`) in 12 calls: copied to "
        "the device every time"
    )
    assert report.transfers.total == 12
    history.clear()


def test_skip_and_errors():
    with probes.doctor(skip=["nans", "keys", "live"]) as report:
        jax.jit(lambda v: v + 1)(jnp.ones(2))
    assert report.checked == ["compiles", "leaks", "transfers"] and report.findings == []
    with pytest.raises(ValueError, match="unknown: speed") as raised:
        with probes.doctor(skip=["nans", "speed"]):
            pass
    assert raised.value.parameter == "skip"
    with pytest.raises(ZeroDivisionError):
        with probes.doctor() as failed:
            _ = 1 / 0
    assert failed.other_error.startswith("ZeroDivisionError")


def test_legacy_key_reuse_and_eager_key_reuse_are_reported():
    @jax.jit
    def noisy(w, rng):
        return w + jax.random.normal(rng, w.shape)

    with probes.doctor(namespace={}) as report:
        rng = jax.random.PRNGKey(0)
        w = jnp.zeros(3)
        for _ in range(3):
            w = noisy(w, rng)
    finding = report.finding("keys")
    assert "`noisy` got the same legacy uint32 key in 3 of its 3 calls (argument `rng`)" in finding.title
    assert "legacy uint32 key" in finding.evidence

    with probes.doctor(namespace={}) as report:
        key = jax.random.key(0)
        for _epoch in range(3):
            perm = jax.random.permutation(key, 8)
    assert perm.shape == (8,)
    finding = report.finding("keys")
    assert finding.title.startswith("`jax.random.permutation`") and "in 3 of its 3 calls" in finding.title
    assert finding.line.code == "perm = jax.random.permutation(key, 8)"
    assert "split" in finding.fix


# -- the calls stay on JAX's fast path: what the doctor still sees -----------------------------


def test_a_nan_that_first_appears_in_a_later_call_is_found_there(monkeypatch):
    # Calls after the first are served by JAX's C++ dispatch; the doctor reads them through JAX's post hook.
    from jax._src import pjit

    from jaxmagic._jax import own_programs

    python_path_calls = []
    infer_params = pjit._infer_params

    def counted(*a):
        if not own_programs.running():  # the NaN watch's own verdict program (traced once, on an accelerator)
            python_path_calls.append(1)
        return infer_params(*a)

    monkeypatch.setattr(pjit, "_infer_params", counted)

    @jax.jit
    def shrink(x):
        return jnp.log(x), x - 1.0

    with probes.doctor(namespace={}) as report:
        x = jnp.array(3.0)
        logs = []
        for i in range(6):
            y, x = shrink(x)  # log(3), log(2), log(1), log(0) = -inf, log(-1) = NaN, log(-2)
            logs.append(float(y))
            if i == 0:  # the first call compiles (jit's Python path); the others stay on the fast path
                python_path_calls.clear()
        after_the_first = len(python_path_calls)
    assert np.isnan(logs[4]) and not np.isnan(logs[3])
    assert after_the_first == 0
    assert report.areas[0] == "NaN"
    assert report.nan_sighting.function == "shrink" and report.nan_sighting.call_number == 5
    assert report.nan_sighting.calls_with_nan == 2
    assert report.nans.primitive == "log" and "-1" in report.nans.producer.description


def test_a_static_argument_is_passed_again_when_the_nan_call_is_repeated():
    # The optimizer-as-static-argument shape: the call is repeated with its static argument.
    class Sgd:
        def __init__(self, rate):
            self.rate = rate

        def __hash__(self):
            return hash(self.rate)

        def __eq__(self, other):
            return isinstance(other, Sgd) and other.rate == self.rate

    @functools.partial(jax.jit, static_argnums=1)
    def update(params, optimizer, scale):
        return params - optimizer.rate * jnp.sqrt(scale)

    with probes.doctor(namespace={}) as report:
        params = jnp.ones(3)
        for scale in (1.0, 4.0, -1.0):
            params = update(params, Sgd(0.1), jnp.float32(scale))
    assert report.nan_sighting.function == "update" and report.nan_sighting.call_number == 3
    assert report.nans.primitive == "sqrt"


def test_a_key_used_twice_inside_a_jitted_function_is_found_without_the_checker_on():
    @jax.jit
    def inner(key):
        return jax.random.normal(key, (2,))

    @jax.jit
    def noisy_twice(key, x):
        return x + jax.random.normal(key, (2,)) + inner(key)  # the same key, here and in inner

    with probes.doctor(namespace={}) as report:
        key = jax.random.key(0)
        for _ in range(3):
            key, sub = jax.random.split(key)
            y = noisy_twice(sub, jnp.zeros(2))
    assert y.shape == (2,)
    assert [r.where for r in report.keys.reuse] == ["trace"]
    assert report.finding("keys") is not None


def test_a_cell_that_switches_debug_nans_itself_is_told_what_was_not_watched():
    from jaxmagic._jax import jit_internals

    hook = jit_internals.post_hook_state()
    with jax.debug_nans(True):
        pass
    before = hook.get_local()  # what leaving the cell's own debug_nans block leaves, with or without the doctor

    @jax.jit
    def half(x):
        return x / 2

    with probes.doctor(namespace={}) as report:
        with jax.debug_nans(True):
            half(jnp.ones(2))
        half(jnp.ones(2))
    assert any("switched jax.debug_nans" in note for note in report.notes)
    assert hook.get_local() is before and jax.config.jax_debug_nans is False


def test_another_threads_jitted_calls_are_not_watched():
    import threading

    @jax.jit
    def bad(x):
        return jnp.log(x)

    bad(jnp.ones(2))  # compiled before: the thread's calls take the fast path
    started, finish = threading.Event(), threading.Event()
    thread_results = []  # the last result only: arrays piling up in the thread are not this test's subject

    def work():
        started.set()
        for _ in range(2000):
            thread_results[:] = [bad(-jnp.ones(2))]  # NaN in the other thread
            if finish.is_set():
                break

    thread = threading.Thread(target=work)
    thread.start()
    started.wait()
    try:
        with probes.doctor(namespace={}) as report:
            for _ in range(20):
                bad(jnp.ones(2))
    finally:
        finish.set()
        thread.join()
    assert thread_results and report.nan_sighting is None and report.findings == []


# -- issue 23: the doctor's NaN finding is %%jax_nans' finding; donated training steps -------------
# The usual training-step shape of Optax/Flax threads: loss_fn inside value_and_grad inside a jitted
# step, params donated, the loop rebinding `w, loss = train_step(w, x)`; the NaN first appears at step 2.


def loss_fn(w, x):
    h = x @ w
    return jnp.sum(jnp.log(h))


def sgd_step(w, x):
    loss, g = jax.value_and_grad(loss_fn)(w, x)
    return w - 0.1 * g, loss


BATCHES = [jnp.ones((4, 3)), -jnp.ones((4, 3)), jnp.ones((4, 3))]  # the second batch makes log(<0)


def run_steps(train_step):
    w = jnp.ones((3, 2))
    for x in BATCHES:
        w, loss = train_step(w, x)
    return w


@pytest.mark.parametrize("donate", [False, True])
def test_doctor_nan_finding_names_the_line_in_loss_fn_as_jax_nans_does(donate):
    train_step = jax.jit(sgd_step, donate_argnums=(0,) if donate else ())
    with probes.doctor() as report:
        run_steps(train_step)
    with pytest.raises(FloatingPointError):
        with probes.nans() as single:
            run_steps(train_step)
    finding = next(f for f in report.to_dict()["findings"] if f["probe"] == "nans")
    assert finding["line"]["code"] == "return jnp.sum(jnp.log(h))" and finding["line"]["function"] == "loss_fn"
    assert finding["line"] == single.to_dict()["provenance"]["made_at"] == single.to_dict()["producer"]["line"]
    assert finding["call_number"] == single.call_number == 2
    prov = finding["provenance"]
    assert prov["made_at"] == finding["line"] and prov["function"] == "loss_fn"
    assert prov["transforms"][0] == "jit(sgd_step)"
    assert prov["started_by"]["code"] == "w, loss = train_step(w, x)"
    # the fix tried on the values of the failing call (the clamp at 0 leaves log(0) = -inf): the same words
    assert "jnp.log(jnp.maximum(v, jnp.finfo(v.dtype).tiny))" in finding["fix"] and "sqrt" not in finding["fix"]
    # under value_and_grad: the fixed log's derivative is tried too (the program's own derivative reads the old value)
    assert "Tried on the values of call 2: `log` finite, and its derivative finite;" in finding["fix"]
    assert "jnp.log(jnp.maximum(v, jnp.finfo(v.dtype).tiny))" in single.fix  # searched in run_steps: loss unused
    assert report.nan_sighting.donated == (["argument 0"] if donate else [])


def test_donated_arguments_over_the_copy_limit_are_named_not_guessed():
    from jaxmagic.probes._nans.watch import NanWatch

    def fresh_step(w, x):  # not compiled before: the calls take the same paths in any test order
        return sgd_step(w, x)

    train_step = jax.jit(fresh_step, donate_argnums=(0,))
    watch = NanWatch(copy_limit=8)  # bytes: nothing of this step fits
    from jaxmagic._jax import jit_calls

    with jit_calls.observing_calls(watch, only_user_calls=True, fast_path=True):
        run_steps(train_step)
    sighting, call = watch.take_rerun()
    assert sighting.call_number == 2 and call is None
    assert "argument 0 of `fresh_step`" in sighting.rerun_note and "over the 8 B" in sighting.rerun_note


def distance_loss(w, x):  # finite at 0; its gradient is not
    return jnp.sum(jnp.linalg.norm(x @ w, axis=-1))


def test_a_gradient_only_nan_in_a_donated_step_is_found_in_call_2_not_3():
    # Only the new parameters hold the NaN (the loss is finite), and they are donated to call 3 at once:
    # without a copy the doctor could not read call 2's results and blamed call 3.
    def norm_step(w, x):
        loss, g = jax.value_and_grad(distance_loss)(w, x)
        return w - 0.1 * g, loss

    train_step = jax.jit(norm_step, donate_argnums=(0,))
    batches = [jnp.ones((4, 3)), jnp.zeros((4, 3)), jnp.ones((4, 3))]
    with probes.doctor() as report:
        w = jnp.ones((3, 2))
        for x in batches:
            w, loss = train_step(w, x)
    finding = next(f for f in report.to_dict()["findings"] if f["probe"] == "nans")
    assert finding["call_number"] == 2 and report.nan_sighting.leaves == ["output 0 (3, 2)"]
    assert finding["line"]["code"] == "return jnp.sum(jnp.linalg.norm(x @ w, axis=-1))"
    prov = finding["provenance"]
    assert prov["library_function"] == "jnp.linalg.norm" and prov["function"] == "distance_loss"
    assert "grad (backward pass)" in prov["transforms"] and prov["transforms"][0] == "jit(norm_step)"
    assert prov["started_by"]["code"] == "w, loss = train_step(w, x)"
    assert "safe norm" in finding["fix"]


def test_a_key_reused_in_a_fori_loop_body_is_the_keys_probes_finding_with_its_fix_and_provenance():
    # The BlackJAX/TF-tutorial shape: split off `sub`, then draw with the carried `key`.
    from jax import lax

    @jax.jit
    def augment(key, x):
        def body(i, carry):
            key, x = carry
            key, sub = jax.random.split(key)
            flips = jax.random.bernoulli(key, 0.5, x.shape)  # draws with key, not sub
            return key, jnp.where(flips, -x, x)

        return lax.fori_loop(0, 3, body, (key, x))

    with probes.doctor() as report:
        augment(jax.random.key(0), jnp.ones(3))
    keys = report.to_dict()["findings"][0]
    assert keys["area"] == "random keys"
    assert keys["line"]["code"].startswith("flips = jax.random.bernoulli(key, 0.5, x.shape)")
    assert "Draw with `sub`" in keys["fix"] or "draw with `sub`" in keys["fix"].lower()
    assert keys["provenance"]["function"] == "body" and keys["provenance"]["transforms"][-1] == "scan body"
