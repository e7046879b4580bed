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
