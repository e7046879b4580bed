"""The NaN watch's looks on an accelerator, checked on the CPU (issue 60.3).

On a TPU each look that read a call's results on the host waited for the call, so a watched 300-step MLP
loop ran 2.45x its unwatched time. There a look now dispatches a verdict program of its own behind the call
and reads the verdict later (``probes/_nans/pending_looks.py``). CI has no accelerator: these tests
force that mechanism on the CPU (``call_sampling.LOOKS_DEFERRED``) and check what it promises - no look reads a
result of the user's on the host, the loop is not held up, the verdict read late still names the call that
made the NaN and its line, the cell computes what it computes unwatched, and nothing stays alive.
"""

from __future__ import annotations

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.array import ArrayImpl

from jaxmagic._jax import call_sampling
from jaxmagic.probes import Watch
from jaxmagic.probes._nans import pending_looks
from jaxmagic.probes._nans import watch as nan_watch
from jaxmagic.probes._watch import session


@pytest.fixture
def on_device(monkeypatch):
    monkeypatch.setattr(call_sampling, "LOOKS_DEFERRED", True)


@pytest.fixture
def every_call(monkeypatch):
    """Every call looked at: where a test is about what a look does, not about which calls are looked at."""
    monkeypatch.setattr(session, "CallSampler", lambda: call_sampling.CallSampler(share=None))


@pytest.fixture
def host_reads(monkeypatch):
    """The ids of the arrays read on the host meanwhile: through the NaN watch's one reader, and through
    every blocking read a JAX array offers in Python (NumPy's buffer read on the CPU goes by neither)."""
    read: list[int] = []

    def recording(original):
        def read_it(self, *args, **kwargs):
            read.append(id(self))
            return original(self, *args, **kwargs)

        return read_it

    for name in ("block_until_ready", "__array__", "__float__", "item", "tolist"):
        monkeypatch.setattr(ArrayImpl, name, recording(getattr(ArrayImpl, name)))
    value = ArrayImpl._value
    monkeypatch.setattr(ArrayImpl, "_value", property(lambda self: read.append(id(self)) or value.fget(self)))
    host_array = pending_looks.host_array
    monkeypatch.setattr(pending_looks, "host_array", lambda v: read.append(id(v)) or host_array(v))
    monkeypatch.setattr(nan_watch, "host_array", lambda v: read.append(id(v)) or host_array(v))
    return read


@jax.jit
def update(w, lr):
    return jnp.sqrt(w - lr)  # NaN once lr > 1: at call 37 of the loop below


def _watched(watch: Watch, body):
    watch.begin_cell("In [1]")
    try:
        return body()
    finally:
        watch.cell_findings = watch.end_cell()


def test_no_look_reads_a_result_and_the_late_verdict_names_the_call_and_line(on_device, every_call, host_reads):
    w0 = jnp.ones(4)
    lrs = [jnp.float32(i / 35.5) for i in range(60)]
    watch = Watch(only=["NaN"])
    outs: list = []

    def loop():
        for i in range(60):
            outs.append(update(w0, lrs[i]))
        return list(host_reads)  # what was read while the loop ran, before the cell's end reads the rest

    during = _watched(watch, loop)
    users = {id(out) for out in outs[1:]}  # the first call's look is read on the host (no program compiled yet)
    assert not users & set(during)
    assert not users & set(host_reads)  # nor at the cell's end: only the verdicts (and the NaN call's arguments)
    (nan,) = [f.to_dict() for f in watch.cell_findings.findings]
    assert nan["function"] == "update" and nan["call"] == 37  # the verdict read late, the call named
    assert nan["line"]["code"].startswith("return jnp.sqrt(w - lr)") and nan["line"]["function"] == "update"
    assert nan["provenance"]["started_by"]["code"].strip() == "outs.append(update(w0, lrs[i]))"
    assert "did not run again" in nan["details"]  # found on the program JAX cached: the re-run says so
    assert np.isnan(np.asarray(outs[36])).all() and not np.isnan(np.asarray(outs[35])).any()


@jax.jit
def slow_step(x, w):
    return jnp.tanh(x @ w) @ w * 0.01  # ~0.1-0.3 s here: long against the microseconds of a look


def test_the_loop_is_not_held_up_by_its_looks(on_device, every_call):
    # A look that read the previous call's results waited for that call: by the loop's end every call but
    # the last had finished. Looks that wait for nothing leave the loop's calls queued at its end.
    if jax.default_backend() != "cpu":
        pytest.skip("the step is long against a look only on the CPU (an accelerator computes it in microseconds)")
    x0, w = jnp.ones((1200, 1200)), jnp.full((1200, 1200), 0.001)
    warm = Watch(only=["NaN"])
    _watched(warm, lambda: [slow_step(x0, w) for _ in range(2)][-1].block_until_ready())  # compiled, both
    watch = Watch(only=["NaN"])
    outs: list = []

    def loop():
        x = x0
        for _ in range(4):
            x = slow_step(x, w)
            outs.append(x)
        return [out.is_ready() for out in outs]

    ready = _watched(watch, loop)
    assert ready[0] is False  # the first call still computing as the loop ended: no look waited for it
    assert watch.cell_findings.findings == [] and watch.log.calls_looked_at == 4


def test_the_cell_computes_the_same_runs_the_users_python_as_often_and_keeps_nothing(on_device):
    traced = []

    def sgd(w, x):
        traced.append(1)  # the user's Python: runs when traced, never again because of the watch
        loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
        return w - 0.1 * g, loss

    step = jax.jit(sgd)
    x = jnp.linspace(0.0, 1.0, 12).reshape(4, 3)

    def loop():
        w, losses = jnp.ones(3), []
        for _ in range(50):
            w, loss = step(w, x)
            losses.append(loss)
        return w, losses

    w_plain, losses_plain = loop()
    plain_traces = len(traced)
    watch = Watch()
    w_watched, losses_watched = _watched(watch, loop)
    assert len(traced) == plain_traces == 1
    assert np.array_equal(np.asarray(w_plain), np.asarray(w_watched))
    assert [float(v) for v in losses_plain] == [float(v) for v in losses_watched]
    assert watch.cell_findings.findings == []  # the watch's own verdict programs are no recompilation
    nan = watch._nan
    assert nan is None  # switched off: its looks (and what they held) are gone with it
    kept = [weakref.ref(w_watched), weakref.ref(losses_watched[-1])]
    del w_watched, losses_watched
    gc.collect()
    assert [ref() for ref in kept] == [None, None]


def test_looks_wait_behind_the_oldest_and_are_bounded(monkeypatch):
    class Late(pending_looks.PendingLook):
        def ready(self) -> bool:
            return self.number != 1  # the first look's verdict is never ready

    def look(number: int, copies: bool = False) -> pending_looks.PendingLook:
        return Late("f", True, number, number - 1, None, [0], [(3,)], [], None, {} if copies else None)

    looks = pending_looks.PendingLooks()
    for number in (1, 2, 3):
        looks.add(look(number))
    assert looks.take(wait=False) is None  # call 2's ready verdict waits behind call 1's: the first NaN first
    assert looks.take(wait=True).number == 1 and looks.take(wait=False).number == 2
    monkeypatch.setattr(pending_looks, "MAX_PENDING", 2)
    looks.add(look(4))
    assert not looks.over_limit()
    looks.add(look(5))
    assert looks.over_limit()  # the watch then reads the oldest, waiting for it
    looks.clear()
    for number in range(1, 4):
        looks.add(look(number, copies=True))
    assert looks.over_limit()  # three looks holding copies of donated arguments: over MAX_PENDING_COPIES


def test_a_donated_step_whose_nan_is_read_late_is_replayed_from_the_copies(on_device):
    # The Optax/Flax shape (donated params) with the verdict read after later calls ran: the copies the
    # look kept replay call 2, and the report names its line.
    def loss_fn(w, x):
        return jnp.sum(jnp.log(x @ w))

    def step(w, x):
        loss, g = jax.value_and_grad(loss_fn)(w, x)
        return w - 0.1 * g, loss

    train_step = jax.jit(step, donate_argnums=(0,))
    batches = [jnp.ones((4, 3)), -jnp.ones((4, 3))] + [jnp.ones((4, 3))] * 6
    watch = Watch(only=["NaN"])

    def loop():
        w = jnp.ones((3, 2))
        for x in batches:
            w, loss = train_step(w, x)

    _watched(watch, loop)
    (nan,) = [f.to_dict() for f in watch.cell_findings.findings]
    assert nan["call"] == 2 and nan["function"] == "step"
    assert nan["line"]["code"].strip() == "return jnp.sum(jnp.log(x @ w))"
    assert "the re-run used the copies the watch kept" in nan["details"]


def test_the_verdict_programs_are_not_counted_among_the_users_compilations(on_device):
    from jaxmagic import probes
    from jaxmagic._jax import finite_flags, jit_calls

    double = jax.jit(lambda x: x * 2.0)
    x = jnp.ones((5, 17))  # results of a signature no other test compiles a verdict program for
    signature = finite_flags.signature_of([x])
    assert not finite_flags.has_verdict_program(signature)
    with probes.compiles(raise_over_budget=False) as report:
        watch = nan_watch.NanWatch()
        with jit_calls.observing_calls(watch, only_user_calls=True, fast_path=True):
            for _ in range(3):
                double(x)
        watch.flush()
    assert finite_flags.has_verdict_program(signature)  # compiled inside the block, at the second call's look
    assert report.total_compilations == 1 and [f.name for f in report.functions] == ["<lambda>"]
    assert report.functions[0].kind == "user" and watch.calls_seen == 3
