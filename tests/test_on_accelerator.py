"""What only a real TPU or GPU can show, checked live in the accelerator lane (tools/accelerator/).

Every test here is marked ``accelerator``: where JAX has only the CPU (CI) it is skipped. What these tests
read from the device is also recorded and replayed in CI by the tests of each parser
(tests/fixtures/accelerator/), so a parser's change is tested without a device; these say that the live
path gives what the recordings gave.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes

pytestmark = pytest.mark.accelerator


def _line_of(function, text: str) -> int:
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


@jax.jit
def _matmul_then_tanh(a):
    with jax.named_scope("matmul"):
        y = a @ a
    return jnp.tanh(y).sum()


def test_profile_splits_device_time_by_line_and_scope():
    a = jnp.ones((2048, 2048), jnp.bfloat16)
    _matmul_then_tanh(a).block_until_ready()  # compiled outside the block: only runs are profiled
    with probes.profile() as report:
        for _ in range(3):
            _matmul_then_tanh(a).block_until_ready()
    data = report.to_dict()
    assert data["kernel_events"] > 0, data.get("trace_notes")
    assert data["devices"] and data["devices"][0].split()[0] in ("TPU", "GPU")
    top = data["lines"][0]
    assert top["line"]["lineno"] == _line_of(_matmul_then_tanh, "y = a @ a")
    assert "matmul" in top["scopes"] and top["calls"] == 3


@jax.jit
def _nearest(x):
    d = jnp.abs(x[:, None] - x[None, :])
    return jnp.sort(d, axis=0)[1]


def test_a_compile_time_out_of_memory_gets_a_way_down_compiled_for_the_device():
    """80,000 points need 47.7 GiB of temporaries on a TPU v5e (15.75 GiB): the compiler refuses the program;
    the report is of that program, and its way down is compiled for the device, not for the CPU."""
    from jaxmagic.probes._memory.probe import memory_of_call  # deferred: the probe's module, as the tests of it

    limit = (jax.devices()[0].memory_stats() or {}).get("bytes_limit", 0)
    if not 0 < limit < 40 * 2**30:
        pytest.skip("the program fits a device of this size")
    report = memory_of_call(_nearest, (jax.ShapeDtypeStruct((80_000,), jnp.float32),), call="_nearest(x)")
    [program] = report.programs
    assert program.compile_error is not None and "No jitted call" not in report.summary
    rows = next(way for way in program.ways_down if way.kind == "rows")
    assert rows.platform == jax.default_backend() and rows.fits and rows.peak_after < limit


@jax.jit
def _sgd_until_nan(w, lr):
    return jnp.sqrt(w - lr)  # NaN once lr > 1: at call 37 of the loop below


def test_a_watched_loops_verdicts_arrive_and_name_the_call(monkeypatch):
    """On the device the watch defers its looks: a verdict program dispatched behind each call, read later. Every
    call looked at (the sampler's choice is not under test), the loop's NaN is read late and still names call 37
    and its line; then with the sampler's own choice, looks are deferred and start with two first calls."""
    from jaxmagic._jax import call_sampling, finite_flags
    from jaxmagic.probes import Watch
    from jaxmagic.probes._watch import session

    made: list[call_sampling.CallSampler] = []

    def every_call() -> call_sampling.CallSampler:
        made.append(call_sampling.CallSampler(share=None))
        return made[-1]

    monkeypatch.setattr(session, "CallSampler", every_call)
    w0, lrs = jnp.ones(4), [jnp.float32(i / 35.5) for i in range(60)]
    watch = Watch(only=["NaN"])
    watch.begin_cell("In [1]")  # call 1's look is read on the host; from call 2 on, the device's verdicts
    outs = [_sgd_until_nan(w0, lr) for lr in lrs]
    found = watch.end_cell()
    signature = finite_flags.signature_of([outs[0]])
    assert made[-1].deferred is True and finite_flags.has_verdict_program(signature)
    (nan,) = [f.to_dict() for f in found.findings]
    assert nan["function"] == "_sgd_until_nan" and nan["call"] == 37
    assert nan["line"]["lineno"] == _line_of(_sgd_until_nan, "return jnp.sqrt(w - lr)")
    monkeypatch.setattr(session, "CallSampler", lambda: made.append(call_sampling.CallSampler()) or made[-1])
    watch.begin_cell("In [2]")
    [_sgd_until_nan(w0, lrs[0]) for _ in range(10)][-1].block_until_ready()
    watch.end_cell()
    assert (made[-1].deferred, made[-1].first_calls) == (True, call_sampling.FIRST_CALLS_DEFERRED)


def test_bisect_tells_the_default_matmul_precision_from_an_algorithm_error():
    """The chapter's closure example: a TPU's default bfloat16 passes put jit and eager 0.06 off the float64
    reference alike (a TPU v5e); the probe says the precision, having run both again at "highest"."""
    import numpy as np

    w = jax.random.normal(jax.random.key(1), (128, 128)) / jnp.sqrt(128.0)
    x = jax.random.normal(jax.random.key(2), (50, 128))
    ref = (np.asarray(w, np.float64) @ np.asarray(x, np.float64).T).sum(0)
    if jax.default_backend() != "tpu":
        pytest.skip("a GPU's default float32 matmul precision depends on the GPU")
    report = probes.bisect(lambda xs: jax.vmap(lambda row: jnp.sum(w @ row))(xs), x, ref=ref)
    assert report.verdict == "matmul_precision", report.summary
    assert report.matmul_precision.explains and max(report.matmul_precision.errors_after.values()) < 1e-4
