"""Static/traced fixes are tried by tracing before they are offered (issue 39).

"Pass it traced" for a static number is right for a learning rate and wrong for the count of
``jax.random.split`` or a scan's ``length`` (jax-ml/jax#3603, jax-ml/jax#4473: a jitted scan whose length
is traced raises ConcretizationTypeError; jax-ml/jax#2506: a traced count given to a split).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from jaxmagic import probes
from jaxmagic.probes._compiles.fixes import main_fix

# -- %%jax_compiles, the doctor and the watch: "pass the static number traced" -------------------------


@partial(jax.jit, static_argnames=("n",))
def sample_paths(key, x, n):
    keys = jax.random.split(key, n)  # n is a count: it must stay static

    def step(c, k):
        return c + jax.random.normal(k, x.shape), None

    out, _ = lax.scan(step, x, keys, length=n)
    return out


def test_pass_it_traced_is_not_offered_when_the_count_of_a_split_must_be_static():
    key, x = jax.random.PRNGKey(0), jnp.ones(3)
    with probes.compiles() as rep:
        for n in (2, 3, 4):
            sample_paths(key, x, n)
    data = next(d for d in rep.to_dict()["functions"] if d["name"] == "sample_paths")
    assert data["static_fix_works"] is False
    assert data["static_fix_trial"].startswith("tried by tracing `sample_paths` with `n` traced (as jnp.int32(n))")
    assert "keys = jax.random.split(key, n)` (" in data["static_fix_trial"]  # the line where tracing stopped
    # said plainly, not JAX's "parameters to jaxpr equations must have __hash__" (kept as the evidence)
    assert "needs `n` as a Python int: a traced value cannot set a count" in data["static_fix_trial"]
    assert "__hash__" not in data["static_fix_trial"] and "__hash__" in data["static_fix_error"]
    assert data["traced_again_to_try"] is True  # said plainly: the function was traced once more
    fix = main_fix(rep.function("sample_paths"))
    assert "drop it from static_argnums" not in fix and "Keep `n` static" in fix
    assert "traced `sample_paths` once more" in fix
    # the compilations' own fixes say the same as the function's
    later = [c for c in rep.to_dict()["compilations"] if c["function"] == "sample_paths" and c["cause"] == "static"]
    assert later and all("Keep `n` static" in c["fix"] for c in later)


def test_a_scan_length_alone_is_enough_to_keep_it_static():
    @partial(jax.jit, static_argnums=(1,))
    def repeat(x, n):
        out, _ = lax.scan(lambda c, _: (c * 2.0, None), x, None, length=n)
        return out

    with probes.compiles() as rep:
        for n in (1, 2, 3):
            repeat(jnp.ones(2), n)
    data = next(d for d in rep.to_dict()["functions"] if d["name"] == "repeat")
    assert data["static_fix_works"] is False
    # worded plainly from the line the trial stopped at; JAX's own error kept beside it as evidence
    assert "length=n)` (" in data["static_fix_trial"]
    assert data["static_fix_trial"].endswith(
        "needs `n` as a Python int: a traced value cannot set a count, a shape or a loop length"
    )
    assert data["static_fix_error"].startswith("ConcretizationTypeError")
    assert "jnp.int32(n)" not in main_fix(rep.function("repeat")).split("Keep")[0]


def test_pass_it_traced_is_offered_as_tried_when_it_traces(capsys):
    @partial(jax.jit, static_argnames=("lr",))
    def sgd(w, lr):
        print("tracing sgd")  # a trace-time side effect: the trial's run of it is not shown as the user's
        return w - lr * w

    with probes.compiles() as rep:
        for epoch in range(3):
            sgd(jnp.ones(2), lr=0.1 / (epoch + 1))
    printed = capsys.readouterr().out
    assert printed.count("tracing sgd") == 3  # the user's three traces, not the trial's
    data = next(d for d in rep.to_dict()["functions"] if d["name"] == "sgd")
    assert data["static_fix_works"] is True and data["traced_again_to_try"] is True
    assert data["static_fix_trial"] == "tried by tracing `sgd` with `lr` traced (as jnp.float32(lr)): it traces"
    fix = main_fix(rep.function("sgd"))
    assert "pass an array, here jnp.float32(lr)" in fix and "Checked: tried by tracing `sgd`" in fix


def test_the_doctor_gives_the_same_tried_fix():
    key, x = jax.random.PRNGKey(1), jnp.ones(2)
    with probes.doctor(skip=["nans", "keys", "live", "leaks", "transfers"]) as report:
        for n in (5, 6, 7):
            sample_paths(key, x, n)
    findings = [f for f in report.to_dict()["findings"] if f["probe"] == "compiles"]
    assert findings and "Keep `n` static" in findings[0]["fix"]
    assert "drop it from static_argnums" not in findings[0]["fix"]


# -- %jax_explain: fixes written from the line and static/traced fixes, tried by tracing ----------------


def _explained(function, *args):
    from jaxmagic.probes._explain import explain

    try:
        function(*args)
    except Exception as error:
        report = explain(error, {})
        assert report is not None
        return report.to_dict()
    raise AssertionError("the call did not raise")


def _uses(fixes):
    return [f["use"] for f in fixes]


def test_a_bare_scan_gets_no_jit_fix_and_a_tried_one_for_its_carry():
    # A size kept in a bare scan's carry (jax-ml/jax#23637: a tracer error raised "for scan" in the body;
    # marin-community/haliax#57: concretization inside scan): nothing is jitted, so no static_argnums.
    def run(xs):
        def body(c, x):
            total, n = c
            return (total + jnp.zeros(n).sum() + x, n), None

        return lax.scan(body, (0.0, 3), xs)

    data = _explained(run, jnp.ones(4))
    every = _uses(data["fixes"]) + _uses(data["rejected_fixes"])
    assert not [u for u in every if "jit" in u or "static_arg" in u]
    first = data["fixes"][0]
    assert first["use"].startswith("`n` (`c[1]`) kept out of the carry") and "(n = 3)" in first["use"]
    assert first["checked"].startswith("checked: tracing `body` with `c[1]` as the Python value 3")
    assert "returns it unchanged" in first["checked"] and "traced your loop body once more" in first["checked"]


def _fori(xs):
    def body(i, c):
        total, n = c
        return (total + jnp.zeros(n).sum() + xs[i], n)

    return lax.fori_loop(0, 3, body, (0.0, 3))


def _while(xs):
    def body(c):
        total, n, k = c
        return (total + jnp.zeros(n).sum() + xs[k], n, k + 1)

    return lax.while_loop(lambda c: c[2] < 3, body, (0.0, 3, 0))


@pytest.mark.parametrize("run", [_fori, _while], ids=["fori_loop", "while_loop"])
def test_a_bare_fori_or_while_loop_gets_the_same_tried_carry_fix(run):
    data = _explained(run, jnp.ones(4))
    assert not [u for u in _uses(data["fixes"]) + _uses(data["rejected_fixes"]) if "jit" in u]
    first = data["fixes"][0]
    assert first["use"].startswith("`n` (`c[1]`) kept out of the carry") and "returns it unchanged" in first["checked"]


def test_a_carried_size_the_body_changes_is_not_offered_as_a_constant():
    def run(xs):
        def body(c, x):
            total, n = c
            return (total + jnp.zeros(n).sum() + x, n + 1), None  # n grows: it cannot be a constant

        return lax.scan(body, (0.0, 3), xs)

    data = _explained(run, jnp.ones(4))
    assert not [u for u in _uses(data["fixes"]) if "kept out of the carry" in u or "jit" in u]
    rejected = [f for f in data["rejected_fixes"] if "kept out of the carry" in f["use"]]
    assert rejected and "returns a new value for it at each step" in rejected[0]["checked"]


def test_a_lambda_line_fix_is_tried_on_the_lambdas_body():
    # np inside a jitted function's lambda (the trial used to eval_shape the lambda itself: "returned a
    # value of type <class 'function'>" - the right fix rejected, no fix left)
    import numpy as np

    @jax.jit
    def layer(x, w):
        act = lambda h: np.tanh(h) * 2.0  # noqa: E731
        return act(x @ w)

    data = _explained(layer, jnp.ones((2, 3)), jnp.ones((3, 4)))
    assert data["rejected_fixes"] == []
    fix = data["fixes"][0]
    assert fix["use"] == "act = lambda h: jnp.tanh(h) * 2.0"
    assert fix["checked"].startswith("checked: traces with h: float32[2,4] (the lambda's body")


def test_a_conditional_expression_in_a_lambda_becomes_a_tried_where():
    @jax.jit
    def g(x):
        relu = lambda v: v if v > 0 else 0.0  # noqa: E731
        return relu(x)

    data = _explained(g, jnp.float32(1.0))
    assert _uses(data["fixes"])[:2] == [
        "relu = lambda v: jnp.where(v > 0, v, 0.0)",
        "relu = lambda v: lax.cond(v > 0, lambda: v, lambda: 0.0)",
    ]
    assert all(f["checked"].startswith("checked: traces with v: float32[]") for f in data["fixes"][:2])


def test_static_argnames_under_a_jit_is_still_tried_and_offered():
    @partial(jax.jit, static_argnames=())
    def make(x, n):
        return x + jnp.arange(n)

    data = _explained(make, jnp.ones(3), 3)
    static = [f for f in data["fixes"] if "static_argnames=('n',)" in f["use"]]
    assert static and static[0]["checked"].startswith("checked: tracing `make` with `n` static succeeds")


def test_the_watch_does_not_trace_again_and_says_the_fix_is_untried(ip):
    # The watch tells a finding once: a trial after a later cell would run the user's function unsaid.
    ip.run_cell("import functools, jax, jax.numpy as jnp", store_history=True)
    ip.run_cell("%jax_watch --budget 2 -o wlog", store_history=True)
    try:
        ip.run_cell(
            "traces = []\n"
            "@functools.partial(jax.jit, static_argnames=('n',))\n"
            "def draw(key, n):\n"
            "    traces.append(n)\n"
            "    return jax.random.split(key, n)\n",
            store_history=True,
        )
        result = ip.run_cell("outs = [draw(jax.random.PRNGKey(0), n) for n in range(2, 6)]", store_history=True)
        assert result.success
        (found,) = [f for f in ip.user_ns["wlog"].to_dict()["findings"] if f["area"] == "recompilation"]
    finally:
        ip.run_cell("%jax_watch off", store_history=True)
    assert ip.user_ns["traces"] == [2, 3, 4, 5]  # the user's four traces, none of jaxmagic's
    assert "not tried (jaxmagic does not trace your function again here" in found["fix"]
