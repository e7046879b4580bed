"""Keys and NaNs through NumPyro, called for real: the library's public function is named, and
a key the library consumes is traced back to the user's line that handed it over."""

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
numpyro = pytest.importorskip("numpyro")
dist = pytest.importorskip("numpyro.distributions")
handlers = pytest.importorskip("numpyro.handlers")

import jaxmagic.probes as probes  # noqa: E402


def _sample_normal():
    return numpyro.sample("x", dist.Normal(0.0, 1.0))


def test_seed_handler_given_the_same_key_each_iteration_is_traced_to_the_users_line():
    # numpyro forum shape: handlers.seed(model, rng_seed=key) in a loop with one key
    key = jax.random.PRNGKey(0)
    with probes.keys() as report:
        draws = [handlers.seed(_sample_normal, rng_seed=key)() for _ in range(3)]
    assert len({float(d) for d in draws}) == 1  # the bug is real: the same draw each time
    text = report.summary
    assert "inside `numpyro.sample`" in text
    assert "given its key by your line" in text
    assert "wrapper" not in text and "primitives.py" not in text


def test_nan_inside_a_distribution_is_named_by_its_public_class_and_method():
    @jax.jit
    def loglik(scale, x):
        return dist.Normal(0.0, scale, validate_args=False).log_prob(x).sum()

    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            loglik(jnp.array([1.0, 0.0, 1.0]), jnp.zeros(3))
    assert report.to_dict()["library_function"] == "numpyro.distributions.Normal.log_prob"
    assert "inside `numpyro.distributions.Normal.log_prob`" in report.summary
    assert "loglik" in report.summary
