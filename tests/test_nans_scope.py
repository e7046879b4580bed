"""What a clean %%jax_nans report says it checked (issue 63.4): an OK that did not look inside a compiled
computation says so in its headline and names `--inside`; `--inside` looks inside every path a cell runs
compiled code by - its jitted calls, an eager `lax.cond`/`scan`/`while_loop`, a jitted function under
`vmap` or `grad`, and the branches of a `cond` under `vmap`, which JAX evaluates with its checks off.

The programs are shaped like public threads: jax-ml/jax#20601 and sail-sg/jax_xc#28 (a `cond` under `vmap`
becomes a select of both branches, the untaken one's NaN hidden), jax-ml/jax#2630 (a `jnp.where` whose
discarded branch is infinite: finite result, NaN gradient).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxmagic import probes
from jaxmagic.report.document import HEADLINE_CHARS


def log_or_zero(b, x):
    # jax#20601's shape: the untaken branch is not finite where x <= 0
    return lax.cond(x > 0, lambda: b * jnp.log(x), lambda: 0.0)


def test_vmap_of_cond_clean_headline_says_it_did_not_look_inside_and_names_inside():
    with probes.nans() as report:
        out = jax.vmap(log_or_zero)(jnp.ones(2), jnp.array([1.0, -1.0]))
    assert bool(jnp.all(jnp.isfinite(out)))  # the NaN of log(-1) was selected away
    data = report.to_dict()
    assert data["status"] == "ok"
    headline = data["summary"]
    assert "Not looked inside compiled code" in headline and "`%%jax_nans --inside` looks" in headline
    assert "every eager operation" not in headline  # JAX ran the branches with its checks off
    assert len(headline.replace("`", "")) <= HEADLINE_CHARS
    assert "switches its checks off" in data["checked_scope"]


def test_inside_finds_the_nan_jax_evaluated_with_its_checks_off_under_vmap_of_cond():
    with probes.nans(inside=True) as report:
        out = jax.vmap(log_or_zero)(jnp.ones(2), jnp.array([1.0, -1.0]))
    assert float(out[1]) == 0.0  # the cell computes what it computes unprobed
    data = report.to_dict()
    assert data["status"] == "problem" and not data["found"]
    (found,) = [s for s in data["inside_searches"] if s["producer"]]
    assert found["unchecked"] is True and found["reached_output"] is False
    assert (found["producer"]["primitive"], found["producer"]["value"]) == ("log", "nan")
    assert found["producer"]["line"]["code"].strip() == "return lax.cond(x > 0, lambda: b * jnp.log(x), lambda: 0.0)"
    assert "with its checks off" in data["summary"]


def scan_of_ratios(xs):
    def body(total, x):
        r = x / x  # 0/0 at x == 0
        return total + jnp.where(jnp.isnan(r), 0.0, r), None

    return lax.scan(body, 0.0, xs)[0]


def test_eager_scan_clean_without_inside_and_found_with_it():
    xs = jnp.array([1.0, 0.0, 2.0])
    with probes.nans() as clean:
        scan_of_ratios(xs)
    assert clean.status.value == "ok" and "--inside" in clean.summary
    with probes.nans(inside=True) as report:
        total = scan_of_ratios(xs)
    assert float(total) == 2.0
    data = report.to_dict()
    (found,) = [s for s in data["inside_searches"] if s["producer"]]
    assert found["function"] == "lax.scan"
    assert (found["producer"]["primitive"], found["producer"]["value"]) == ("div", "nan")
    assert found["producer"]["line"]["code"].strip() == "r = x / x  # 0/0 at x == 0"
    assert [(loop["primitive"], loop["index"]) for loop in found["producer"]["loops"]] == [("scan", 1)]


@jax.jit
def hinge(x):
    # an overflow a later operation masks: exp(100) is inf in float32, and the minimum makes it 1e30
    return jnp.where(x < 10.0, x, jnp.minimum(jnp.exp(x * 5.0), 1e30))


def test_inside_evaluates_a_jitted_function_run_under_vmap_not_called_directly():
    with probes.nans(infs=True, inside=True) as report:
        jax.vmap(hinge)(jnp.array([1.0, 20.0]))
    data = report.to_dict()
    assert data["jit_calls"] == {}  # the cell called `vmap(hinge)`, not `hinge`
    (found,) = [s for s in data["inside_searches"] if s["producer"]]
    assert found["function"] == "hinge"
    assert (found["producer"]["primitive"], found["producer"]["value"]) == ("exp", "inf")
    assert found["masked_by"] == "min"


def test_inside_clean_cell_names_what_it_left_whole():
    with probes.nans(inside=True) as report:
        for _ in range(3):
            hinge(jnp.array([1.0, 2.0]))
    data = report.to_dict()
    assert data["status"] == "ok"
    assert data["summary"].startswith("No NaN in what was checked: every intermediate of 1 compiled computation")
    assert "Not looked inside 2 later calls: checked only at their outputs." in data["summary"]


def test_clean_headline_fits_two_lines_with_many_jitted_functions():
    functions = [jax.jit(lambda x, k=k: x * k) for k in range(6)]
    for k, f in enumerate(functions):
        f.__wrapped__.__name__ = f"a_rather_long_function_name_number_{k}"
    with probes.nans() as report:
        for f in functions:
            f(jnp.ones(2))
    headline = report.summary
    assert len(headline.replace("`", "")) <= HEADLINE_CHARS
    assert "inside" in headline and "--inside" in headline
