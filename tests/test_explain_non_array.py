"""A value that is not an array given to jax.jit: the leaf named, the fixes tried by tracing.

jax.jit traces every leaf of its arguments as an array; a function or string among them stops it with
"Error interpreting argument to <f> as an abstract array ... at path model.activation". The shapes of
equinox's FAQ ("jax.jit on a Module that holds jax.nn.relu": patrick-kidger/equinox#1,
#183) and of jax#17052 (a config string in a dict handed to jit), written small; Equinox runs for real.
"""

from __future__ import annotations

import pytest

eqx = pytest.importorskip("equinox")

SETUP = """
import jax, jax.numpy as jnp, equinox as eqx
model = eqx.nn.MLP(2, 1, 8, 2, key=jax.random.key(0))
x = jnp.ones((4, 2))
traced = []
def loss(model, x):
    traced.append(1)
    return jnp.mean(jax.vmap(model)(x) ** 2)
def apply(act, x):
    return act(x).sum()
"""


def _explained(ip, cell: str) -> dict:
    ip.run_cell(SETUP)
    ip.run_cell(f"{cell}\n")
    traced_by_the_cell_and_its_explanation = len(ip.user_ns["traced"])
    ip.run_cell("import sys\nfrom jaxmagic import probes\n_report = probes.explain_any(sys.last_value)")
    report = ip.user_ns.pop("_report")
    assert report is not None and report.to_dict()["kind"] == "jax_explain"
    return {**report.to_dict(), "text": str(report), "traced": traced_by_the_cell_and_its_explanation}


def _first_lines(text: str) -> str:
    return " ".join(line.strip() for line in text.split("\nYour line:")[0].splitlines())


def test_an_equinox_module_given_to_jax_jit_names_its_functions_and_filter_jit_is_tried(ip):
    report = _explained(ip, "jax.jit(loss)(model, x)")
    assert report["function"] == "loss" and report["argument"] == "model" and report["error_kind"] == "non_array"
    assert report["leaves"] == {
        "model.activation": "a function (`relu`)",
        "model.final_activation": "a function (`<lambda>`)",
    }
    first = _first_lines(report["text"])
    assert first.startswith(
        "%jax_explain [FOUND] TypeError: `loss` was given values that are not arrays in its argument `model`: "
        "`model.activation` is a function (`relu`)"
    ), first
    assert "Fix: `eqx.filter_jit(loss)`" in first and "checked: `loss` traces with this call's arguments" in first
    assert report["traced"] == 1  # the cell did not trace `loss`; the explainer's trial did, once (and says so)
    assert "traced your function once more" in first


def test_jit_of_jax_grad_on_a_module_offers_equinoxs_filtered_grad_tried(ip):
    """jax.grad would differentiate the function leaf too: filter_jit alone fails when tried, and is left out."""
    report = _explained(ip, "jax.jit(jax.grad(loss))(model, x)")
    assert report["fixes"][0]["use"] == "eqx.filter_jit(eqx.filter_grad(loss))"
    assert report["fixes"][0]["checked"].startswith("checked: `loss` traces")
    assert "Fix: `eqx.filter_jit(eqx.filter_grad(loss))`" in _first_lines(report["text"])


def test_a_function_passed_as_a_whole_argument_is_made_static_and_tried(ip):
    report = _explained(ip, "jax.jit(apply)(jax.nn.relu, x)")
    assert report["leaves"] == {"act": "a function (`relu`)"}
    uses = [f["use"] for f in report["fixes"]]
    assert uses[0] == "jax.jit(apply, static_argnames=('act',))", uses
    assert "jax.jit(functools.partial(apply, act))" in uses
    assert all(f["checked"].startswith("checked: `apply` traces") for f in report["fixes"]), report["fixes"]


def test_a_string_inside_a_dict_argument_is_named_with_its_path(ip):
    report = _explained(ip, "jax.jit(lambda cfg, x: x * 2)({'name': 'mlp', 'w': x}, x)")
    assert report["leaves"] == {"cfg['name']": "a string ('mlp')"}
    assert report["argument"] == "cfg"
    assert not any("static_argnames=('cfg'" in f["use"] for f in report["fixes"])  # a dict is not hashable


def test_the_explainer_shows_it_above_the_error_and_the_error_is_unchanged(ip, capsys):
    ip.run_cell(SETUP)
    capsys.readouterr()
    result = ip.run_cell("jax.jit(loss)(model, x)")
    out = capsys.readouterr()
    shown = out.out + out.err
    assert isinstance(result.error_in_exec, TypeError)
    assert str(result.error_in_exec).startswith("Error interpreting argument to <function loss")
    assert shown.index("%jax_explain [FOUND] TypeError: `loss` was given") < shown.index("Traceback")


def test_jax_grad_of_a_module_offers_filter_grad_tried(ip):
    """jax.grad's own message names no function and no path ("Argument '<...custom_jvp...>' ... is not a valid
    JAX type"): its frames do, and eqx.filter_grad is tried on the call."""
    report = _explained(ip, "jax.grad(loss)(model, x)")
    assert report["transformation"] == "grad" and report["function"] == "loss"
    assert set(report["leaves"]) == {"model.activation", "model.final_activation"}
    assert report["fixes"][0]["use"] == "eqx.filter_grad(loss)"
    assert report["fixes"][0]["checked"].startswith("checked: `loss` traces")
    assert "jax.grad differentiates every leaf" in report["text"].split("\nFix:")[0].replace("\n  ", " ")


def test_eval_shape_names_the_leaf_and_a_static_argument_already_given_is_not_blamed(ip):
    report = _explained(ip, "jax.eval_shape(loss, model, x)")
    assert report["transformation"] == "eval_shape" and report["fixes"][0]["use"] == "eqx.filter_eval_shape(loss)"
    # `act` is static already: only the dict's string is named
    report = _explained(
        ip,
        "jax.jit(lambda act, cfg: act(cfg['w']), static_argnums=0)(jax.nn.relu, {'w': x, 'name': 'a'})",
    )
    assert report["leaves"] == {"cfg['name']": "a string ('a')"}


def test_without_jaxs_frames_the_leaf_is_still_named_and_the_fixes_say_they_were_not_tried():
    """A script: JAX filters its frames out of the traceback, so the call is not there to try fixes on."""
    import jax
    import jax.numpy as jnp

    from jaxmagic import probes

    def apply(act, x):
        return act(x).sum()

    jax.config.update("jax_traceback_filtering", "remove_frames")  # as in a script (pytest keeps them)
    try:
        try:
            jax.jit(apply)(jax.nn.relu, jnp.ones(3))
        except TypeError as error:
            caught = error
        try:
            jax.grad(lambda f, x: f(x).sum())(jax.nn.relu, jnp.ones(3))
        except TypeError as error:
            grad_error = error
    finally:
        jax.config.update("jax_traceback_filtering", "auto")
    report = probes.explain_any(caught)
    assert report is not None
    data = report.to_dict()
    assert data["leaves"] == {"act": "a function (`custom_jvp`)"}
    assert all("not tried" in f["checked"] for f in data["fixes"]), data["fixes"]
    assert probes.explain_any(grad_error) is None  # grad's message alone names nothing: not guessed
