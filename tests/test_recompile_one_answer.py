"""One answer to "why did this compile again": %%jax_compiles, %%jax_doctor and %jax_watch give the same
cause object (compiles.why_again.RecompileCause) for the same program - its kind and what it names.

The programs are shaped like public threads:
- jax-ml/jax#9288: `jax.jit(lambda ...)` inside a loop compiles at every iteration;
- jax-ml/jax#2251: a jitted function defined inside the function called per step;
- google-deepmind/optax#577 and #197, bardhh/cbfkit#333: a learning rate (a hyperparameter) closed over by a
  function built anew per value is baked into the program - one compilation per value of the sweep.
"""

from __future__ import annotations

import functools

import pytest

from jaxmagic.probes._compiles import compiles
from jaxmagic.probes._compiles.baked import baked_changes, baked_values


def cell(ip, source: str):
    result = ip.run_cell(source, store_history=True)
    assert result.error_before_exec is None and result.error_in_exec is None, result
    return result


def compiles_cause(ip, source: str, function: str) -> dict:
    cell(ip, "%%jax_compiles -o crep\n" + source)
    (entry,) = [f for f in ip.user_ns["crep"].to_dict()["functions"] if f["name"] == function]
    return entry["again"]


def doctor_cause(ip, source: str) -> dict:
    cell(ip, "%%jax_doctor -o drep\n" + source)
    (finding,) = [f for f in ip.user_ns["drep"].to_dict()["findings"] if f["area"] == "recompilation"]
    return finding["cause"]


def watch_cause(ip, *cells: str) -> dict:
    cell(ip, "%jax_watch -o wlog")
    try:
        for source in cells:
            cell(ip, source)
    finally:
        cell(ip, "%jax_watch off")
    (finding,) = [f for f in ip.user_ns["wlog"].to_dict()["findings"] if f["area"] == "recompilation"]
    return finding["cause"]


def same(*causes: dict) -> tuple:
    """What must agree between the paths: the kind, the function, and the names and values it is about."""
    keys = [(c["kind"], c["function"], c["names"], c["values"]) for c in causes]
    assert all(k == keys[0] for k in keys), keys
    return keys[0]


@pytest.fixture
def shell(ip):
    cell(ip, "import functools")
    return ip


# More compilations than the probe asks JAX to explain (model.EXPLAIN_LIMIT = 16): past them the watch said
# "cache miss explanation unavailable" and gave the static-argument fix.
LOOP = "xs = jnp.ones(3)\nfor i in range(20):\n    ys = jax.jit(lambda v: v * 2)(xs)"


def test_jit_rebuilt_in_a_loop_is_one_cause_everywhere(shell):
    causes = compiles_cause(shell, LOOP, "<lambda>"), doctor_cause(shell, LOOP), watch_cause(shell, LOOP)
    assert same(*causes) == ("new_function", "<lambda>", [], {})
    for cause in causes:
        assert cause["count"] == 20
        assert "unavailable" not in cause["fix"] and "static" not in cause["fix"]
        assert "outside the helper or loop" in cause["fix"]
        assert "jax.jit(lambda v: v * 2)(xs)" in cause["reason"]


STEP = "def per_step(x):\n    return jax.jit(lambda v: v + 1)(x)\n"


def test_jit_rebuilt_inside_the_function_called_per_step_once_per_cell(shell):
    # %jax_watch: one step per cell, three cells - each cell alone compiles the step once ("first"), so the
    # cause must come from what the function compiled with in the cells before.
    cell(shell, STEP + "xp = jnp.ones(3)")
    loop = "xp = jnp.ones(3)\nfor i in range(3):\n    xp = per_step(xp)"
    watched = watch_cause(shell, "xp = per_step(xp)", "xp = per_step(xp)", "xp = per_step(xp)")
    assert same(compiles_cause(shell, loop, "<lambda>"), doctor_cause(shell, loop), watched) == (
        "new_function",
        "<lambda>",
        [],
        {},
    )
    assert "return jax.jit(lambda v: v + 1)(x)" in watched["reason"]


CLOSURE = (
    "def make_step(lr):\n    return jax.jit(lambda p, g: p - lr * g)\n"
    "pc = jnp.ones(3)\nfor lr in [1e-3, 1e-2, 1e-1]:\n    pc = make_step(lr)(pc, pc)"
)
PARTIAL = (
    "def sgd_update(p, g, lr):\n    return p - lr * g\n"
    "pp = jnp.ones(3)\nfor lr in [1e-3, 1e-2, 1e-1]:\n    pp = jax.jit(functools.partial(sgd_update, lr=lr))(pp, pp)"
)

# A lambda made in a cell's loop reads the loop variable as a global: baked all the same
GLOBAL = "pg = jnp.ones(3)\nfor lr in [1e-3, 1e-2, 1e-1]:\n    pg = jax.jit(lambda p, g: p - lr * g)(pg, pg)"


@pytest.mark.parametrize(
    ("program", "function", "held_by"),
    [
        (CLOSURE, "<lambda>", "closed over by `<lambda>`"),
        (PARTIAL, "sgd_update", "functools.partial"),
        (GLOBAL, "<lambda>", "a global read by `<lambda>`"),
    ],
    ids=["closure", "partial", "loop-global"],
)
def test_learning_rate_baked_into_a_wrapper_per_value(shell, program, function, held_by):
    causes = compiles_cause(shell, program, function), doctor_cause(shell, program), watch_cause(shell, program)
    assert same(*causes) == ("baked_constant", function, ["lr"], {"lr": ["0.001", "0.01", "0.1"]})
    for cause in causes:
        assert "new jit wrapper" not in cause["title"]
        assert "`lr`" in cause["fix"] and held_by in cause["fix"] and "0.001, 0.01, 0.1" in cause["fix"]
        assert "Pass it traced" in cause["fix"]
    # a partial's bound value is tried by tracing (compiles/baked_trial.py) where the probe traces again; the
    # watch never does; a closure or a global would need the function rebuilt: said, not tried
    tried = "Checked: tried by tracing `sgd_update` with `lr` passed traced (a float32 argument): it traces"
    for cause in causes[:2]:
        assert (tried in cause["fix"]) == (program is PARTIAL)
        assert ("not tried - trying it needs the function rebuilt" in cause["fix"]) == (program is not PARTIAL)
    assert "not tried" in causes[2]["fix"] and "Checked" not in causes[2]["fix"]


def test_learning_rate_sweep_one_value_per_watched_cell(shell):
    # A baked value is avoidable (CauseKind.avoidable): the watch tells it at its first repeat - the second
    # cell, within the budget - with the values seen so far; the third value is counted, not told again.
    cell(shell, "def make_update(lr):\n    return jax.jit(lambda p, g: p - lr * g)\npw = jnp.ones(3)")
    watched = watch_cause(
        shell,
        "pw = make_update(0.5)(pw, pw)",
        "pw = make_update(0.25)(pw, pw)",
        "pw = make_update(0.125)(pw, pw)",
    )
    assert (watched["kind"], watched["names"], watched["values"]) == (
        "baked_constant",
        ["lr"],
        {"lr": ["0.5", "0.25"]},
    )


STATIC = (
    "@functools.partial(jax.jit, static_argnums=1)\ndef scale_by(x, n):\n    return x * n\n"
    "xs = jnp.ones(3)\nfor n in [1, 2, 3]:\n    ys = scale_by(xs, n)"
)


def test_control_a_real_static_argument_stays_a_static_argument(shell):
    causes = compiles_cause(shell, STATIC, "scale_by"), doctor_cause(shell, STATIC), watch_cause(shell, STATIC)
    assert same(*causes) == ("static", "scale_by", ["n"], {"n": ["1", "2", "3"]})


def test_a_static_argument_past_the_explained_compilations_stays_static():
    import jax
    import jax.numpy as jnp

    @functools.partial(jax.jit, static_argnums=1)
    def power(x, n):
        return x**n

    x = jnp.ones(2)
    with compiles() as report:
        for n in range(20):  # JAX's explanations are switched off after model.EXPLAIN_LIMIT (16)
            power(x, n)
    assert report.explanations_stopped == "power"
    assert report.function("power").causes == {"first": 1, "static": 19}


def test_a_wrapper_rebuilt_with_the_same_value_is_no_baked_constant():
    import jax
    import jax.numpy as jnp

    def make(scale):
        return jax.jit(lambda v: v * scale)

    x = jnp.ones(2)
    with compiles() as report:
        for _ in range(3):
            make(2.0)(x)
    f = report.function("<lambda>")
    assert f.causes == {"first": 1, "new_function": 2}
    assert report.to_dict()["functions"][0]["again"]["kind"] == "new_function"
    assert "`scale` = 2.0" in report.compilations[1].why  # the values were read, and they are the same


def test_a_callable_object_rebuilt_says_it_could_not_tell():
    import jax
    import jax.numpy as jnp

    class Scale:
        def __init__(self, k):
            self.k = k

        def __call__(self, v):
            return v * self.k

    x = jnp.ones(2)
    with compiles() as report:
        for k in (1.0, 2.0):
            jax.jit(Scale(k))(x)
    (f,) = report.user_functions
    assert f.main_cause == "new_function"
    assert "could not be told" in report.compilations[1].why


def test_baked_values_reads_closures_and_partials():
    def is_user(filename):
        return filename == __file__

    def update(p, g, lr, momentum=0.9):
        return p - lr * g

    def make(lr):
        return lambda p: update(p, p, lr)

    assert baked_values(make(0.1), is_user)["lr"].text == "0.1"
    bound = baked_values(functools.partial(update, 0.0, lr=0.5), is_user)
    assert {n: v.text for n, v in bound.items()} == {"p": "0.0", "lr": "0.5"}
    assert "functools.partial" in bound["lr"].held_by
    assert baked_values(len, is_user) is None  # nothing of the user's to read: "could not tell"
    assert baked_changes(baked_values(make(0.1), is_user), baked_values(make(0.2), is_user)) == [("lr", "0.1", "0.2")]
