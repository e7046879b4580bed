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


def test_the_doctor_is_not_ok_when_the_cell_leaves_an_inf_it_does_not_watch_for(shell):
    # A Dirichlet log-likelihood's gradient at a concentration of 0: gammaln's derivative digamma(0) is
    # inf (jax-ml/jax#37763), no NaN. %%jax_nans said "holds inf, run --infs"; the doctor said [OK].
    shell.run_cell(
        "def dirichlet_ll(alpha, log_x):\n"
        "    lnorm = jnp.sum(jax.scipy.special.gammaln(alpha)) - jax.scipy.special.gammaln(jnp.sum(alpha))\n"
        "    return jnp.sum((alpha - 1.0) * log_x) - lnorm\n"
        "dirichlet_grad = jax.jit(jax.grad(dirichlet_ll))\n"
        "log_x = jnp.log(jnp.array([0.5, 0.2, 0.3]))\n",
        store_history=True,
    )
    call = "g_dirichlet = dirichlet_grad(jnp.array([2.0, 0.0, 1.5]), log_x)"
    shell.run_cell(f"%%jax_nans -o thread_nans\n{call}", store_history=True)
    shell.run_cell(f"%%jax_doctor -o thread_doctor\n{call}", store_history=True)
    plain, doctor = shell.user_ns["thread_nans"].to_dict(), shell.user_ns["thread_doctor"].to_dict()
    assert [leaf["inf_count"] for leaf in plain["nonfinite"]] == [1]
    (finding,) = [f for f in doctor["findings"] if f["probe"] == "nans"]
    assert finding["title"] == "an inf, not a NaN, in the results of `dirichlet_ll` (call 1)"
    assert finding["line"]["code"].strip() == call and finding["next_magic"] == "%%jax_nans --infs"
    assert doctor["status"] == "problem"  # shown as [FOUND], never [OK]
    # %jax_watch: the same NaN watch, the same words
    shell.run_cell("%jax_watch -o thread_watch", store_history=True)
    shell.run_cell(call, store_history=True)
    shell.run_cell("%jax_watch off", store_history=True)
    watched = shell.user_ns["thread_watch"].to_dict()
    (seen,) = [f for f in watched["findings"] if f["area"] == "NaN"]
    assert seen["headline"] == finding["title"] and seen["next_magic"] == "%%jax_nans --infs"
    assert watched["status"] == "problem"


def test_the_doctor_is_not_ok_on_an_inf_left_by_an_eager_operation_it_does_not_watch(shell):
    # The same inf made eagerly (no jit): the doctor watches jitted calls only; the variable tells.
    shell.run_cell(
        "def dirichlet_ll(alpha, log_x):\n"
        "    lnorm = jnp.sum(jax.scipy.special.gammaln(alpha)) - jax.scipy.special.gammaln(jnp.sum(alpha))\n"
        "    return jnp.sum((alpha - 1.0) * log_x) - lnorm\n"
        "log_x = jnp.log(jnp.array([0.5, 0.2, 0.3]))\n",
        store_history=True,
    )
    call = "g_eager = jax.grad(dirichlet_ll)(jnp.array([2.0, 0.0, 1.5]), log_x)"
    shell.run_cell(f"%%jax_doctor -o thread_doctor\n{call}", store_history=True)
    doctor = shell.user_ns["thread_doctor"].to_dict()
    (finding,) = [f for f in doctor["findings"] if f["probe"] == "nans"]
    assert finding["title"] == "No NaN seen, but `variable g_eager` holds inf"
    assert doctor["status"] == "problem"


def test_a_negative_base_to_a_fractional_power_gets_a_clamp_tried_on_the_values(shell):
    # jax-ml/jax#7440 ("nan in gradient due to failure in pow"), tinygrad#1251: a strain shifted below 0
    # raised to 1.5. The report named `pow` and its -0.3 but offered only a cause ("typically ...").
    shell.run_cell(
        "@jax.jit\ndef stress(strain, k):\n    shifted = strain - 0.5\n    return k * jnp.power(shifted, 1.5)\n",
        store_history=True,
    )
    call = "s_pow = stress(jnp.array([1.0, 0.2, 2.0]), 3.0)"
    shell.run_cell(f"%%jax_nans -o thread_nans\n{call}", store_history=True)
    shell.run_cell(f"%%jax_doctor -o thread_doctor\n{call}", store_history=True)
    plain, doctor = shell.user_ns["thread_nans"].to_dict(), shell.user_ns["thread_doctor"].to_dict()
    producer = plain["producer"]
    assert producer["primitive"] == "pow" and [op["value"] for op in producer["operands"]][0] == "-0.3"
    (clamp,) = [t for t in producer["fix_trials"] if t["key"] == "clamp"]
    assert clamp["finite"] and clamp["offered"]
    assert "`jnp.power(jnp.maximum(v, 0.0), ...)`" in plain["fix"] and "Tried on the values" in plain["fix"]
    (finding,) = [f for f in doctor["findings"] if f["probe"] == "nans"]
    assert finding["fix"] == doctor["nans"]["fix"] and "jnp.maximum(v, 0.0)" in finding["fix"]


@pytest.mark.parametrize(
    ("setup", "call", "library", "spectrum"),
    [
        # jax-ml/jax#4646: an eigenvector's gradient at a matrix with two equal eigenvalues
        (
            "def vector_entry(m):\n"
            "    _, vecs = jnp.linalg.eigh(m)\n"
            "    return vecs[0, 2]\n"
            "eig_grad = jax.jit(jax.grad(vector_entry))\n",
            "g_eig = eig_grad(jnp.diag(jnp.array([4.0, 1.0, 1.0])))",
            "jnp.linalg.eigh",
            "eigenvalues",
        ),
        # jax-ml/jax#8732: the norm of U S V^T through svd, two singular values equal
        (
            "def rebuilt_norm(a):\n"
            "    u, s, vh = jnp.linalg.svd(a, full_matrices=False)\n"
            "    return jnp.linalg.norm((u * s) @ vh)\n"
            "svd_grad = jax.jit(jax.grad(rebuilt_norm))\n",
            "g_svd = svd_grad(jnp.diag(jnp.array([1.0, 1.0, 2.0, 3.0])))",
            "jnp.linalg.svd",
            "singular values",
        ),
    ],
)
def test_a_decompositions_gradient_at_repeated_values_says_so_and_suggests_no_double_where(
    shell, setup, call, library, spectrum
):
    from jaxmagic.render import static_bundle

    shell.run_cell(setup, store_history=True)
    shell.run_cell(f"%%jax_nans -o thread_nans\n{call}", store_history=True)
    report = shell.user_ns["thread_nans"]
    producer = report.to_dict()["producer"]
    assert producer["library_function"] == library and producer["phase"] == "backward"
    assert producer["nan_maker"] == "mul" and report.to_dict()["fix"] == ""
    text = " ".join(static_bundle(report.document())["text/plain"].split())
    assert f"derivative of `{library}` divides by differences of its {spectrum}" in text
    assert "double where" not in text
