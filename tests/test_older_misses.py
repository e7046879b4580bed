"""Older misses (issue 52, item 8), each fixed where its question is answered."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from jax.scipy.special import logsumexp  # noqa: E402

from jaxmagic import probes  # noqa: E402


def _forward(log_A):
    """A hidden Markov model's forward recursion in log space (jax-ml/jax#7434: ``logsumexp`` in a
    ``lax.scan`` body, NaN under grad; jax-ml/jax#6811: the gradient of ``logsumexp([-inf, -inf])`` is NaN,
    "what happens inside the dynamic program of the CTC loss")."""
    a_init = jnp.log(jnp.array([1.0, 0.0]))  # start in state 0: log(0) = -inf for state 1

    def step(a_prev, _):
        a = logsumexp(a_prev[:, None] + log_A, axis=0)
        return a, a

    _, alpha = jax.lax.scan(step, a_init, None, length=4)
    return alpha[-1, 1]


def test_a_nan_from_logsumexps_derivative_in_a_scan_body_names_logsumexp_not_the_scan():
    """The derivative's equations inside the transposed scan body were attributed to the scan's call, and
    what that line called (``jax.lax.scan``) was taken for what the body's line called."""
    log_A = jnp.log(jnp.array([[1.0, 0.0], [0.0, 1.0]]))  # state 1 is never reached: a column of -inf
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            jax.grad(_forward)(log_A)
    provenance = report.to_dict()["provenance"]
    assert provenance["made_at"]["code"] == "a = logsumexp(a_prev[:, None] + log_A, axis=0)"
    assert provenance["library_function"] == "jax.nn.logsumexp"  # the same function as jax.scipy.special's
    assert "jax.lax.scan" not in report.summary
    assert "inside `jax.nn.logsumexp`" in report.summary


def _pixel_coords(n, scale):
    pix = jnp.arange(n) - (n - 1) / 2.0
    return pix * scale


def test_a_size_given_to_lax_cond_as_an_operand_is_fixed_by_closing_over_it_tried():
    """LouisDesdoigts/dLux#260: "It arose in the jnp.arange argument 'stop' ... while tracing the function
    <lambda> ... for cond" - a pixel grid's size handed to ``lax.cond``'s branches as an operand, so it is
    traced there though it is a Python number. The branches closing over it is the fix, tried by tracing them."""

    def detector_coords(oversample, npix):
        return jax.lax.cond(oversample, lambda n: _pixel_coords(n, 0.5), lambda n: _pixel_coords(n, 1.0), npix)

    with pytest.raises(jax.errors.ConcretizationTypeError) as caught:
        detector_coords(True, 16)
    report = probes.explain(caught.value)
    first = report.fixes[0]
    assert first.use == "jax.lax.cond(oversample, lambda: _pixel_coords(npix, 0.5), lambda: _pixel_coords(npix, 1.0))"
    assert first.checked.startswith("checked: tracing every branch with `n` as the Python value 16 traces")
    assert jax.lax.cond(True, lambda: _pixel_coords(16, 0.5), lambda: _pixel_coords(16, 1.0)).shape == (16,)


def test_a_switch_whose_branches_need_different_sizes_is_not_offered_the_closure():
    """Closing over the size leaves branches that return other shapes: ``lax.switch`` cannot join them, so the
    trial fails and the fix is reported as tried and rejected, not offered."""

    def grid(level, n):
        return jax.lax.switch(level, [lambda n: jnp.arange(n), lambda n: jnp.arange(2 * n)], n)

    with pytest.raises(jax.errors.ConcretizationTypeError) as caught:
        grid(0, 4)
    report = probes.explain(caught.value)
    assert not any("lambda: jnp.arange(n)" in fix.use for fix in report.fixes)
    rejected = [fix for fix in report.rejected_fixes if "lax.switch" in fix.use]
    assert rejected and "return different types" in rejected[0].checked


def test_a_size_traced_where_cond_is_called_gets_no_closure_fix():
    """Under jit the operand is traced where ``lax.cond`` is called: there is no Python value to close over."""

    @jax.jit
    def detector_coords(oversample, npix):
        return jax.lax.cond(oversample, lambda n: _pixel_coords(n, 0.5), lambda n: _pixel_coords(n, 1.0), npix)

    with pytest.raises(jax.errors.ConcretizationTypeError) as caught:
        detector_coords(True, 16)
    report = probes.explain(caught.value)
    assert not any("closed over" in fix.use or "lambda: " in fix.use for fix in report.fixes + report.rejected_fixes)


def test_a_numpy_global_baked_into_the_program_is_named_with_the_line_that_made_it(ip):
    """jax-ml/jax#10596: a global ``pulse = np.random.rand(8000)`` read by the jitted function is a constant
    of the program. JAX keeps a float32 copy of the float64 array (no allocation record, and not the same
    object), so it was reported as an array "built while traced" with no line; it is the user's ``pulse``,
    made in an earlier cell - the latest one that assigned it."""
    ip.run_cell("import numpy as np", store_history=True)
    ip.run_cell("pulse = np.random.rand(8000)", store_history=True)
    ip.run_cell("def spectrum(x):\n    return jnp.fft.fft(pulse * x).real", store_history=True)
    ip.run_cell("%jax_hlo spectrum(1.0) -o first", store_history=True)
    ip.run_cell("pulse = np.random.rand(8000) * 2.0", store_history=True)
    # defined again: a new function traces anew (JAX's trace cache would give the old program, old pulse)
    ip.run_cell("def spectrum(x):\n    return jnp.fft.fft(pulse * x).real", store_history=True)
    ip.run_cell("%jax_hlo spectrum(1.0) -o second", store_history=True)
    for report, code in (
        (ip.user_ns["first"], "pulse = np.random.rand(8000)"),
        (ip.user_ns["second"], "pulse = np.random.rand(8000) * 2.0"),
    ):
        (constant,) = [c for c in report.constants if c.shape == (8000,)]
        assert (constant.name, constant.kind) == ("pulse", "global")
        made = constant.provenance.made_at
        assert made is not None and made.code == code and made.label.startswith("In [")
        assert "builds a NumPy array" not in report.summary
        assert f"`pulse` made at {made.label}:1" in report.summary


def test_a_program_traced_before_the_global_changed_is_said_to_hold_its_earlier_value(ip):
    """The jit cache's other side (jax-ml/jax#10596's global, rebound): the function, unchanged, was traced
    with the old ``pulse``; ``%jax_hlo`` reads the cached program, whose constant is no longer ``pulse``'s
    value. It is not "built while traced": a fresh trace of the function holds the current value, so the
    program holds an earlier one."""
    ip.run_cell("import numpy as np", store_history=True)
    ip.run_cell("pulse = np.random.rand(8000)", store_history=True)
    ip.run_cell("def spectrum(x):\n    return jnp.fft.fft(pulse * x).real", store_history=True)
    ip.run_cell("%jax_hlo spectrum(1.0)", store_history=True)
    ip.run_cell("pulse = np.random.rand(8000) * 2.0", store_history=True)
    ip.run_cell("%jax_hlo spectrum(1.0) -o stale", store_history=True)
    report = ip.user_ns["stale"]
    (constant,) = [c for c in report.constants if c.shape == (8000,)]
    assert (constant.name, constant.earlier) == ("pulse", True)
    assert constant.provenance.made_at is None
    assert "holds an earlier value of `pulse` (its current value was assigned at In [" in constant.provenance.unknown
    assert "builds a NumPy array" not in report.summary and "an earlier value of it" in report.summary
