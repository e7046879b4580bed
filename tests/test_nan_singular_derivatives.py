"""A derivative that is infinite where it is taken gets a fix the user can write at their own line
(issue 63.6): never a guard inside JAX's derivative rule, always tried on the value the user's operation got,
with as many derivatives as the failing program takes.

Shaped like public threads: IvanYashchuk/jax-fenics-adjoint#2 (`jax.jvp` of `sqrt(square(x))` at 0: NaN
tangents), HajimeKawahara/exojax#598 (forward-mode NaN through `sqrt` at 0, fixed by a custom rule),
jax-ml/jax#21723 and #3058 (`jax.grad` of `jnp.linalg.norm(x) ** 2` at 0), and `x * log(x)` at 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes


def _caught(thunk):
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            thunk()
    return report.to_dict()


def _offered(data):
    (offered,) = [f for f in data["fixes"] if f["offered"]]
    return offered


def magnitude(x):
    return jnp.sqrt(jnp.square(x))  # jax-fenics-adjoint#2


def test_forward_mode_jvp_through_sqrt_at_zero_offers_a_rewrite_of_the_users_sqrt_tried_there():
    data = _caught(lambda: jax.jvp(magnitude, (jnp.zeros(2),), (2.5 * jnp.ones(2),)))
    p = data["producer"]
    assert (p["primitive"], p["derivative"], p["phase"]) == ("div", True, "forward")
    assert (p["primal"], p["primal_value"]) == ("sqrt", "0.0")
    assert p["line"]["code"].strip() == "return jnp.sqrt(jnp.square(x))  # jax-fenics-adjoint#2"
    assert "a derivative JAX computed in forward mode (jvp)" in data["summary"]
    offered = _offered(data)
    assert offered["key"] == "double_where" and offered["tried"] and offered["finite"]
    assert offered["code"] == "jnp.where(v > 0, jnp.sqrt(jnp.where(v > 0, v, 1.0)), 0.0)"
    assert "`jnp.abs(...)` for the square root of a square" in data["fix"]
    # JAX's own 0.5 / sqrt(x) is never what the report tells the user to guard
    assert "Guard that denominator" not in data["fix"] and "den != 0" not in data["fix"]
    assert not any(f["key"] in ("guard", "eps") for f in data["fixes"])


def squared_norm(x):
    return jnp.linalg.norm(x) ** 2  # jax#21723


def test_grad_of_squared_norm_at_zero_offers_the_safe_norm_tried_on_the_sum_of_squares():
    data = _caught(lambda: jax.grad(squared_norm)(jnp.zeros(3)))
    p = data["producer"]
    assert p["derivative"] and p["library_function"] == "jnp.linalg.norm" and p["primal"] == "sqrt"
    assert "double-where safe norm" in data["fix"] and "`jnp.sum(v**2)` itself" in data["fix"]
    offered = _offered(data)
    assert offered["tried"] and offered["finite"] and "derivative finite" in offered["result"]


def test_jacfwd_of_norm_at_zero_is_a_derivative_not_a_forward_value():
    data = _caught(lambda: jax.jacfwd(lambda x: jnp.linalg.norm(x))(jnp.zeros(3)))
    p = data["producer"]
    assert p["derivative"] is True and p["primal"] == "sqrt"
    assert "Guard that denominator" not in data["fix"]
    assert _offered(data)["finite"]


def root_sum(x):
    return jnp.sum(x**0.5)


def test_hessian_through_a_half_power_at_zero_tries_two_derivatives():
    data = _caught(lambda: jax.hessian(root_sum)(jnp.zeros(2)))
    p = data["producer"]
    assert p["derivative"] and p["primal"] == "pow"
    offered = _offered(data)
    assert offered["result"] == "finite, and its first 2 derivatives finite"


def entropy(p):
    return -jnp.sum(p * jnp.log(p))


def test_grad_of_x_log_x_at_zero_offers_a_rewrite_of_the_log_and_xlogy():
    data = _caught(lambda: jax.grad(entropy)(jnp.array([0.0, 1.0])))
    p = data["producer"]
    assert p["primal"] == "log" and p["derivative"]
    assert p["line"]["code"].strip() == "return -jnp.sum(p * jnp.log(p))"
    assert "`jax.scipy.special.xlogy(x, x)`" in data["fix"]
    offered = _offered(data)
    assert offered["key"] == "double_where" and offered["tried"] and offered["finite"]
