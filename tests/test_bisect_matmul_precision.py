"""%jax_bisect on a backend whose float32 matmuls default to bfloat16 passes (a TPU; TF32 on a GPU).

There, jit and eager miss a float64 reference alike (0.06 absolute on the chapter's closure example on a TPU
v5e), which read as "both wrong: the algorithm". The probe runs the off runs again under
``jax.default_matmul_precision("highest")`` and says the precision when that puts them right. The CPU ignores
the setting, so here a function emulates a TPU's default - its products rounded through bfloat16 unless full
precision is asked for - and the platform check is told the results live on a TPU. The live case is
tests/test_on_accelerator.py's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmagic import probes
from jaxmagic.probes._bisect import matmul_precision
from jaxmagic.probes._bisect import probe as bisect_probe
from jaxmagic.render.text import render_text

W = jax.random.normal(jax.random.key(1), (128, 128)) / jnp.sqrt(128.0)
X = jax.random.normal(jax.random.key(2), (50, 128))
REF = (np.asarray(W, np.float64) @ np.asarray(X, np.float64).T).sum(0)
CALLS: list[str] = []


def _as_a_tpu_multiplies(a):
    """float32 operands rounded to bfloat16 unless full precision is asked for: a TPU's default pass."""
    if str(jax.config.jax_default_matmul_precision or "").lower() in matmul_precision.FULL_FLOAT32:
        return a
    return a.astype(jnp.bfloat16).astype(jnp.float32)


def products(x):
    CALLS.append("ran")
    return jax.vmap(lambda row: jnp.sum(_as_a_tpu_multiplies(W) @ _as_a_tpu_multiplies(row)))(x)


@pytest.fixture
def on_a_tpu(monkeypatch):
    monkeypatch.setattr(bisect_probe, "reduced_precision_platform", lambda sample: "tpu")


def test_runs_off_only_at_the_default_matmul_precision_are_said_so_with_the_fix_tried(on_a_tpu):
    CALLS.clear()
    report = probes.bisect(products, X, ref=REF, call_text="products(X)")
    assert report.verdict == "matmul_precision" and report.status.value == "problem"
    retry = report.matmul_precision
    assert retry.explains and set(retry.errors_after) == {"jit", "eager"}
    assert all(retry.errors_before[n] > 1e-3 > 1e-5 > retry.errors_after[n] for n in ("jit", "eager"))
    assert "both wrong" not in report.summary and "within the tolerance" in report.summary
    assert 'jax.default_matmul_precision("highest")' in report.fix
    document = render_text(report.document())
    assert "Ran jit and eager again under" in document and "their Python ran again" in document
    assert len(CALLS) > 2  # the runs again are the user's Python again: said in the report (above)


DATA = jnp.asarray(np.random.default_rng(0).normal(1e4, 1.0, 4096), jnp.float32)
VARIANCE = np.var(np.asarray(DATA, np.float64))


def test_an_algorithm_error_stays_one_and_says_the_precision_was_checked(on_a_tpu):
    def variance_by_a_product(x):  # catastrophic cancellation: wrong at any matmul precision
        return jnp.dot(x, x) / x.size - jnp.mean(x) ** 2

    report = probes.bisect(variance_by_a_product, DATA, ref=VARIANCE)
    assert report.verdict == "algorithm" and not report.matmul_precision.explains
    assert "still off: not the matmul precision" in report.summary


def test_a_program_without_a_matrix_product_is_not_run_again(on_a_tpu):
    runs = []

    def variance(x):
        runs.append("ran")
        return jnp.mean(x**2) - jnp.mean(x) ** 2

    report = probes.bisect(variance, DATA, ref=VARIANCE)
    assert report.verdict == "algorithm" and report.matmul_precision is None
    assert len(runs) == 2  # traced for jit once, op by op once: the check read the jit's trace JAX kept


def test_no_retry_on_the_cpu_or_where_full_precision_was_asked_for():
    on_cpu = jax.device_put(jnp.ones(3), jax.devices("cpu")[0])
    assert matmul_precision.reduced_precision_platform(on_cpu) == ""
    with jax.default_matmul_precision("highest"):
        assert matmul_precision.reduced_precision_platform(jnp.ones(3)) == ""
    if jax.default_backend() == "cpu":  # (the live case on a TPU: tests/test_on_accelerator.py)
        report = probes.bisect(products, X, ref=REF)
        assert report.verdict == "algorithm" and report.matmul_precision is None  # never a retry here


def test_a_run_failing_at_full_precision_keeps_the_verdict(on_a_tpu):
    def fails_when_asked(x):
        if str(jax.config.jax_default_matmul_precision or "") == "highest":
            raise RuntimeError("no such precision here")
        return products(x)

    report = probes.bisect(fails_when_asked, X, ref=REF)
    assert report.verdict == "algorithm" and "it failed (RuntimeError: no such precision here)" in (
        report.matmul_precision.checked
    )


def test_matrix_products_are_found_inside_loops_and_nested_jits():
    def scanned(x):
        return jax.lax.scan(lambda c, row: (c + jax.jit(jnp.dot)(row, row), None), 0.0, x)[0]

    assert matmul_precision.has_matrix_products(jax.make_jaxpr(scanned)(X))
    assert matmul_precision.has_matrix_products(jax.make_jaxpr(lambda x: jnp.einsum("ij,kj->ik", x, x))(X))
    assert not matmul_precision.has_matrix_products(jax.make_jaxpr(lambda x: jnp.cumsum(x * x))(X))


# -- through Flax and Equinox: their layers' products, their jits, their retraces ------------------------------


@pytest.fixture
def tpu_default_products(on_a_tpu):
    """Every float32 `dot_general` the CPU compiles at the default precision rounds its operands to bfloat16's
    8 bits of mantissa, as a TPU's default pass does - in any library's layer, jitted or op by op - unless full
    precision was asked for (the precision JAX binds then: HIGHEST). `reduce_precision`, not a convert to
    bfloat16 and back: XLA:CPU removes that pair as excess precision under jit."""
    from jax._src.interpreters import mlir
    from jax._src.lax import lax as lax_internal

    dot, highest = lax_internal.dot_general_p, (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    cpu = mlir._platform_specific_lowerings["cpu"]
    saved = cpu[dot]

    def rounded(lhs, rhs, **params):
        def bf16(a):
            return jax.lax.reduce_precision(a, exponent_bits=8, mantissa_bits=7) if a.dtype == jnp.float32 else a

        return dot.bind(bf16(lhs), bf16(rhs), **{**params, "precision": highest})

    def lowering(ctx, lhs, rhs, *, precision, **params):
        if precision is None or precision == (jax.lax.Precision.DEFAULT,) * 2:
            return mlir.lower_fun(rounded, multiple_results=False)(ctx, lhs, rhs, precision=precision, **params)
        return saved.rule(ctx, lhs, rhs, precision=precision, **params)

    mlir.register_lowering(dot, lowering, platform="cpu")
    jax.clear_caches()  # nothing compiled before may answer
    try:
        yield
    finally:
        cpu[dot] = saved
        jax.clear_caches()  # nor anything compiled here, after


def _float64(tree):
    return jax.tree.map(lambda a: np.asarray(a, np.float64) if isinstance(a, jax.Array) else a, tree)


def test_a_flax_models_products_at_the_default_precision_are_found_through_nnx_jit(tpu_default_products):
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Sequential(nnx.Linear(128, 256, rngs=nnx.Rngs(0)), nnx.relu, nnx.Linear(256, 4, rngs=nnx.Rngs(1)))
    first, last = model.layers[0], model.layers[2]
    hidden = np.maximum(np.asarray(X, np.float64) @ _float64(first.kernel[...]) + _float64(first.bias[...]), 0)
    reference = hidden @ _float64(last.kernel[...]) + _float64(last.bias[...])

    @nnx.jit
    def predict(model, x):
        return model(x)

    report = probes.bisect(predict, model, X, ref=reference, call_text="predict(model, X)")
    assert report.jit.how == "the jitted function as given"  # nnx.jit's own, with its retrace at "highest"
    assert report.verdict == "matmul_precision", report.summary
    retry = report.matmul_precision
    assert set(retry.errors_after) == {"jit", "eager"}
    assert all(retry.errors_before[n] > 1e-3 and retry.errors_after[n] < 1e-5 for n in ("jit", "eager"))


def test_an_equinox_models_products_at_the_default_precision_are_found_through_filter_jit(tpu_default_products):
    """`%jax_bisect step(mlp, x)` of an `eqx.filter_jit` function said "the jit run failed: Non-hashable
    static arguments": the probe put jax.jit around the library's jit, the module (it holds its activation
    functions) as a static argument. A callable that jits itself (it can be lowered) is run as given."""
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(128, 4, 64, 2, key=jax.random.key(0))
    with jax.enable_x64(True):
        mlp64 = jax.tree.map(lambda a: a.astype(jnp.float64) if eqx.is_inexact_array(a) else a, mlp)
        reference = np.asarray(jax.vmap(mlp64)(X.astype(jnp.float64)))

    @eqx.filter_jit
    def predict(model, x):
        return jax.vmap(model)(x)

    report = probes.bisect(predict, mlp, X, ref=reference, call_text="predict(mlp, X)")
    assert report.jit.how.startswith("the jitted function as given") and not report.jit.error
    assert report.verdict == "matmul_precision", report.summary
    assert all(report.matmul_precision.errors_after[n] < 1e-5 for n in ("jit", "eager"))


def test_an_equinox_filter_jit_is_bisected_as_the_user_calls_it():
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(8, 2, 16, 1, key=jax.random.key(0))
    report = probes.bisect(eqx.filter_jit(lambda m, x: jax.vmap(m)(x)), mlp, X[:, :8])
    assert report.reference_kind == "float64" and not report.jit.error  # the module upcast, op by op
    assert report.verdict == "precision" and report.status.value == "ok", report.summary  # float32's rounding


def test_a_library_jits_program_is_read_for_products_without_running_the_users_python(on_a_tpu):
    """Whether to run again is read from the trace JAX kept of the library's own jax.jit (opened: eqx.filter_jit
    has no `trace` of its own): a program without a matrix product runs twice in all, as with jax.jit."""
    eqx = pytest.importorskip("equinox")
    runs = []

    @eqx.filter_jit
    def variance(x):
        runs.append("ran")
        return jnp.mean(x**2) - jnp.mean(x) ** 2

    report = probes.bisect(variance, DATA, ref=VARIANCE)
    assert report.verdict == "algorithm" and report.matmul_precision is None
    assert len(runs) == 2


def test_a_donating_call_is_bisected_on_copies_and_the_users_arrays_outlive_it():
    """`%jax_bisect update(P, G)` of a jit donating `P`: the jit run deleted `P`, then the float64 reference
    raised "Array has been deleted" out of the magic. Each jit run gets copies of the arrays it donates."""
    from functools import partial

    @partial(jax.jit, donate_argnums=0)
    def update(p, g):
        return p - 0.1 * g

    p, g = jnp.ones(4), jnp.ones(4)
    report = probes.bisect(update, p, g)
    assert report.verdict in ("precision", "exact") and not p.is_deleted()
    assert report.jit.how.endswith("on copies of the arrays it donates")
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(4, 4, 8, 1, key=jax.random.key(0))
    step = eqx.filter_jit(lambda m, x: (jax.vmap(m)(x[None]), m.layers[0].weight * 2), donate="all")
    report = probes.bisect(step, mlp, p)
    assert not report.jit.error and not any(
        leaf.is_deleted() for leaf in jax.tree.leaves(eqx.filter(mlp, eqx.is_array))
    )
    assert report.jit.how.endswith("on copies of the arrays it donates")
