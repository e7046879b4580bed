"""NaN/inf programs in the shapes of public threads of plain JAX that the NaN probe got wrong (an audit of
`%%jax_nans` / `%%jax_doctor` on new threads): each is cited where it is defined, and each assertion is on
the report's ``to_dict()`` as `%%jax_nans` and `%%jax_doctor` give it in a shell.
"""

from __future__ import annotations

import pytest

CASES = {
    # jnp.linalg.solve of a singular matrix (a least-squares system with two proportional rows,
    # jax-ml/jax#22809's "SVD/solve returns NaNs on a specific matrix"): the NaN is made by the
    # `triangular_solve` inside the `custom_linear_solve` JAX binds, which the search did not open; and
    # JAX's own op-by-op re-run missed it, so the headline blamed "the compiled program".
    "solve_singular": (
        "@jax.jit\ndef least_norm(a, b):\n    return jnp.linalg.solve(a, b)\n",
        "x_singular = least_norm(jnp.array([[1.0, 2.0], [2.0, 4.0]]), jnp.array([1.0, 2.0]))",
    ),
    # jax.scipy.special.loggamma at 0 (jax-ml/jax#38240): the frame's function is named `loggamma`, and
    # so is jax.random.loggamma - the report named the sampler as what the user's line called.
    "loggamma_zero": (
        "@jax.jit\n"
        "def log_norm_const(alpha):\n"
        "    return jnp.sum(jax.scipy.special.loggamma(alpha)) - jax.scipy.special.loggamma(jnp.sum(alpha))\n",
        "c_loggamma = log_norm_const(jnp.array([1.0, 0.0, 2.0]))",
    ),
    # jax.scipy.special.loggamma of a negative concentration: JAX's own `jnp.where(x > 0, lgamma(x), nan)`
    # writes the NaN (jax-ml/jax#38240 asks it to be inf at 0); `select_n` only passed the constant on
    "loggamma_negative": (
        "@jax.jit\ndef log_norm_neg(alpha):\n    return jnp.sum(jax.scipy.special.loggamma(alpha))\n",
        "c_loggamma_neg = log_norm_neg(jnp.array([1.0, -0.5, 2.0]))",
    ),
    # a NaN the user writes to mark what does not count, then a plain mean (the "use nanmean" answers
    # of jax-ml/jax#9040's jnp.nanmean thread): the select did not make it
    "user_written_nan": (
        "@jax.jit\ndef masked_mean(x, mask):\n    kept = jnp.where(mask, x, jnp.nan)\n    return jnp.mean(kept)\n",
        "m_written = masked_mean(jnp.array([1.0, 2.0, 3.0]), jnp.array([True, False, True]))",
    ),
}


@pytest.fixture
def shell(ip):
    ip.run_cell("import jax.scipy.special", store_history=True)
    return ip


def _reports(ip, case: str) -> tuple[dict, dict]:
    setup, call = CASES[case]
    ip.run_cell(setup, store_history=True)
    ip.run_cell(f"%%jax_nans -o thread_nans\n{call}", store_history=True)
    ip.run_cell(f"%%jax_doctor -o thread_doctor\n{call}", store_history=True)
    return ip.user_ns["thread_nans"].to_dict(), ip.user_ns["thread_doctor"].to_dict()


def test_a_singular_solve_names_the_triangular_solve_inside_it_not_the_compiled_program(shell):
    plain, doctor = _reports(shell, "solve_singular")
    for report in (plain, doctor["nans"]):
        producer = report["producer"]
        assert producer["primitive"] == "triangular_solve" and producer["value"] == "nan"
        assert producer["line"]["code"].strip() == "return jnp.linalg.solve(a, b)"
        assert producer["library_function"] == "jnp.linalg.solve"
    # the producer was observed op by op: the headline says so, not JAX's guess that compiling made it
    assert "triangular_solve" in plain["summary"] and "compiled program" not in plain["summary"]


def test_a_scipy_function_is_named_by_its_own_namespace_not_by_a_namesake(shell):
    plain, doctor = _reports(shell, "loggamma_zero")
    for report in (plain, doctor["nans"]):
        assert report["producer"]["library_function"] == "jax.scipy.special.loggamma"
    assert "jax.random" not in plain["summary"]
    (finding,) = [f for f in doctor["findings"] if f["probe"] == "nans"]
    assert "jax.scipy.special.loggamma" in finding["title"] and "jax.random" not in finding["title"]


@pytest.mark.parametrize(
    ("case", "writer"),
    [
        # at 0, lgamma made inf first: the NaN is not made of it (the select dropped it), the written NaN is
        ("loggamma_zero", "written by `jax.scipy.special.loggamma`'s own code"),
        ("loggamma_negative", "written by `jax.scipy.special.loggamma`'s own code"),
        ("user_written_nan", "your line writes"),
    ],
)
def test_a_nan_written_into_the_program_is_said_to_be_written_not_made_by_the_select(shell, case, writer):
    plain, doctor = _reports(shell, case)
    for report in (plain, doctor["nans"]):
        producer = report["producer"]
        assert producer["primitive"] == "select_n" and producer["written_nan"] and producer["nan_maker"] == ""
        assert [op["value"] for op in producer["operands"]][1] == "nan"
    assert plain["summary"].startswith(f"NaN written into the program, not computed: a NaN constant {writer}")
    (finding,) = [f for f in doctor["findings"] if f["probe"] == "nans"]
    assert finding["title"].startswith("NaN written into the program, not computed")
