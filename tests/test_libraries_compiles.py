"""%%jax_compiles through the libraries people call: a library's jit wrapper (or a library callable the user
jits) holds the user's function, and the report names that function and the part of the user's object
that changed. Each program is shaped like a public thread (Equinox "Why is this function recompiling?",
NumPyro "jit(svi.update) compiled each time step is called", ...), written small; the real libraries run.

Every test defines its functions and classes inside the test, so no compilation cache from another
test can hide (or add) a compilation.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes

eqx = pytest.importorskip("equinox")
nnx = pytest.importorskip("flax.nnx")


def _line_of(function, text: str) -> int:
    """The file line of the first line of ``function`` containing ``text`` (a decorated function is defined
    at its first decorator's line, as Python and JAX count it)."""
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _function(report, name: str) -> dict:
    return next(f for f in report.to_dict()["functions"] if f["name"] == name)


def test_filter_jit_names_the_users_function_and_the_new_config_object():
    # equinox#686's shape: a Module built again for each run, holding an object compared by identity.
    class Config:  # no __eq__/__hash__: compared by identity
        def __init__(self, lr):
            self.lr = lr

    class Model(eqx.Module):
        w: jax.Array
        cfg: Config

    @eqx.filter_jit
    def step(model, x):
        return model.w * x * model.cfg.lr

    x = jnp.ones(3)
    with probes.compiles() as report:
        for _ in range(5):
            model = Model(jnp.ones(3), Config(0.1))
            step(model, x)
    f = _function(report, "step")
    assert f["kind"] == "user" and f["count"] == 5
    assert f["defined_at"].endswith(
        f"test_libraries_compiles.py:{_line_of(test_filter_jit_names_the_users_function_and_the_new_config_object, '@eqx.filter_jit')}"
    )
    assert f["causes"] == {"first": 1, "pytree_identity": 4}
    assert f["change_examples"]["pytree_identity"] == ["`model.cfg` is a new Config with the same text Config(lr=0.1)"]
    fix = f["field_fixes"]["pytree_identity"]
    assert "equinox's jit wrapper passes every value of the arguments that is not an array to jax.jit" in fix
    assert "Build it once" in fix and "frozen dataclass" in fix and "checked: a frozen dataclass" in fix
    assert f["first_line"]["code"] == "step(model, x)"
    text = str(report)
    assert text.startswith("%%jax_compiles [FOUND] `step` compiled 5 times: a static field holds a new object")
    assert "eager" not in f["causes"] and "[OK]" not in text
    assert "static_argnames" not in f or f["static_argnames"] == []  # the library's own "static" is not shown


def test_filter_jit_fixes_tried_compile_once():
    # The two fixes the report offers for filter_jit, run: a frozen dataclass config, a number as an array.
    @dataclasses.dataclass(frozen=True)
    class Config:
        lr: float

    class Model(eqx.Module):
        w: jax.Array
        cfg: Config
        n_iter: object

    @eqx.filter_jit
    def step(model, x):
        return model.w * x * model.cfg.lr * model.n_iter

    x = jnp.ones(3)
    with probes.compiles() as fixed:
        for i in range(4):
            step(Model(jnp.ones(3), Config(0.1), jnp.asarray(i)), x)
    assert _function(fixed, "step")["count"] == 1
    with probes.compiles() as report:
        for i in range(4, 8):
            step(Model(jnp.ones(3), Config(0.1), i), x)
    f = _function(report, "step")
    assert f["count"] == 4 and f["causes"] == {"first": 1, "pytree_static": 3}
    assert f["change_examples"]["pytree_static"] == [
        "`model.n_iter`: 4 -> 5 -> 6 -> 7",  # one field changing at every call: one sequence
    ]
    fix = f["field_fixes"]["pytree_static"]
    assert fix.startswith("`model.n_iter` is a Python int: equinox's jit wrapper passes")
    assert "jnp.asarray(...)" in fix


def test_filter_jit_module_jitting_in_its_init_equinox_686():
    # equinox#686: a Module that stores `jax.jit(fk_fn)` in __init__, built again for each run of an
    # Optax loop under filter_jit; the step also takes the loss's gradient function and the optimizer.
    optax = pytest.importorskip("optax")

    def fk_fn(x):
        return jnp.sin(x)

    class Trajectory(eqx.Module):
        linear: eqx.nn.Linear
        forward: object

        def __init__(self, forward):
            self.linear = eqx.nn.Linear(1, 3, key=jax.random.key(0))
            self.forward = forward

        def __call__(self, data):
            return self.forward(self.linear(data))

    def loss(model, xs, ys):
        return jnp.mean((jax.vmap(model)(xs) - ys) ** 2)

    @eqx.filter_jit
    def step(model, opt_state, xs, ys, loss_grad, opt):
        value, grads = loss_grad(model, xs, ys)
        updates, opt_state = opt.update(grads, opt_state, model)
        return value, eqx.apply_updates(model, updates), opt_state

    xs, ys = jnp.ones((8, 1)), jnp.zeros((8, 3))
    opt, loss_grad = optax.adam(1e-2), eqx.filter_value_and_grad(loss)

    def runs(make_forward):
        with probes.compiles() as report:
            for _ in range(3):
                model = Trajectory(make_forward())
                opt_state = opt.init(eqx.filter(model, eqx.is_array))
                for _ in range(2):
                    _, model, opt_state = step(model, opt_state, xs, ys, loss_grad, opt)
        return report

    report = runs(lambda: jax.jit(fk_fn))  # the thread's code: a new jit wrapper for each Trajectory
    f = _function(report, "step")
    assert f["count"] == 3 and f["causes"] == {"first": 1, "pytree_identity": 2}
    assert f["change_examples"]["pytree_identity"][0].startswith("`model.forward` is a new PjitFunction")
    fix = f["field_fixes"]["pytree_identity"]
    assert fix.startswith("`model.forward` is a new jit wrapper at each call, compared by identity")
    assert "self.forward = jax.jit(f)" in fix
    forward = jax.jit(fk_fn)  # the fix: made once, outside, passed in
    fixed = runs(lambda: forward)
    assert fixed.function("step") is None or _function(fixed, "step")["count"] <= 1


def test_nnx_jit_names_the_module_attribute_the_user_set():
    # The case: an nnx.Module built for each run with a new config object on it.
    class Config:
        def __init__(self, lr):
            self.lr = lr

    class Model(nnx.Module):
        def __init__(self, cfg, rngs):
            self.lin = nnx.Linear(3, 3, rngs=rngs)
            self.cfg = cfg

    @nnx.jit
    def step(model, x):
        return model.lin(x) * model.cfg.lr

    x = jnp.ones(3)
    with probes.compiles() as report:
        for _ in range(5):
            step(Model(Config(0.1), nnx.Rngs(0)), x)
    f = _function(report, "step")
    assert f["kind"] == "user" and f["count"] == 5
    assert f["defined_at"].endswith(f":{_line_of(test_nnx_jit_names_the_module_attribute_the_user_set, '@nnx.jit')}")
    assert f["causes"] == {"first": 1, "pytree_identity": 4}
    assert f["change_examples"]["pytree_identity"] == [
        "`model.cfg` (Model.cfg) is a new Config with the same text Config(lr=0.1)"
    ]
    fix = f["field_fixes"]["pytree_identity"]
    assert fix.startswith("`model.cfg` is a static attribute of `Model` (not an array)")
    assert "flax's jit wrapper" in fix and "frozen dataclass" in fix
    text = str(report)
    assert text.startswith("%%jax_compiles [FOUND] `step` compiled 5 times: a static field holds a new object")
    for private in ("_graphdef", "NodeDef", "GraphDef(nodes", "dict keys", "input path"):
        assert private not in text.split("JAX's compile log")[0], private


def test_nnx_jit_number_attribute_and_its_fixes():
    # A Python number on an nnx module is a static attribute: each value compiles again. Both fixes, run.
    @dataclasses.dataclass(frozen=True)
    class Config:
        lr: float

    class Model(nnx.Module):
        def __init__(self, cfg, n_iter):
            self.w = nnx.Param(jnp.ones(3))
            self.cfg = cfg
            self.n_iter = n_iter

    @nnx.jit
    def step(model, x):
        return model.w * x * model.cfg.lr * model.n_iter

    x = jnp.ones(3)
    with probes.compiles() as fixed:
        for i in range(4):
            step(Model(Config(0.1), jnp.asarray(i)), x)
    assert _function(fixed, "step")["count"] == 1
    with probes.compiles() as report:
        for i in range(4, 7):
            step(Model(Config(0.1), i), x)
    f = _function(report, "step")
    assert f["count"] == 3 and f["causes"] == {"first": 1, "pytree_static": 2}
    assert f["change_examples"]["pytree_static"][0] == "`model.n_iter` (Model.n_iter): 4 -> 5 -> 6"
    assert (
        "store it as an array from where it is first set (`self.n_iter = jnp.asarray(...)` in `Model.__init__`)"
        in (f["field_fixes"]["pytree_static"])
    )


def test_nnx_an_attribute_that_held_a_number_takes_no_array_later_and_the_fix_says_where_to_set_it():
    """The fix said "store it as an array (`jnp.asarray(...)`)": on a module whose `__init__` set the number,
    `model.count = jnp.asarray(i)` raises in Flax 0.12 (the attribute stays static). Set as an array in
    `__init__`, the later arrays are traced: one compilation - both run here."""

    def make(first):
        class Counter(nnx.Module):
            def __init__(self):
                self.w = nnx.Param(jnp.ones(3))
                self.count = first

        return Counter()

    @nnx.jit
    def step(model, x):
        return model.w * x * model.count

    x, model = jnp.ones(3), make(0)
    with probes.compiles() as report:
        for i in range(3):
            model.count = i
            step(model, x)
    fix = _function(report, "step")["field_fixes"]["pytree_static"]
    assert "`self.count = jnp.asarray(...)` in `Counter.__init__`" in fix
    with pytest.raises(ValueError, match="static attribute"):
        model.count = jnp.asarray(3)  # what "store it as an array" alone would have the user write
    fixed = make(jnp.asarray(0))
    with probes.compiles() as report:
        for i in range(3):
            fixed.count = jnp.asarray(i)
            step(fixed, x)
    assert _function(report, "step")["count"] == 1


def test_filter_jit_array_shape_change_is_named_by_the_users_path():
    class Model(eqx.Module):
        w: jax.Array

    @eqx.filter_jit
    def predict(model, batch):
        return batch["x"] @ model.w

    model = Model(jnp.ones((3, 2)))
    with probes.compiles() as report:
        for n in (4, 5, 6):
            predict(model, {"x": jnp.ones((n, 3))})
    f = _function(report, "predict")
    assert f["count"] == 3 and f["causes"] == {"first": 1, "types": 2}
    assert f["change_examples"]["types"][0] == "`batch['x']`: f32[4,3] -> f32[5,3] -> f32[6,3]"
    assert "dynamic_nodonate" not in str(report).split("JAX's compile log")[0]


def test_filter_jit_weakly_typed_state_leaf_is_a_weak_type_cause_not_types():
    # google/jaxopt#451 (and patrick-kidger/equinox#817 via jax-ml/jax#23302): a solver state whose scalar leaf is
    # weakly typed after `init` (made from a Python float) and typed after `update` compiles `update` again. Under
    # eqx.filter_jit the change is read from the user's own leaves; it is the weak-type kind, as JAX's explanation
    # of the same change under jax.jit is - not "argument types changed".
    class State(eqx.Module):
        params: jax.Array
        stepsize: jax.Array

    def init(params):
        return State(params, jnp.asarray(1.0))  # weakly typed: f32[] weak

    @eqx.filter_jit
    def update(state, grad):
        stepsize = jnp.minimum(state.stepsize, jnp.max(jnp.abs(grad)))  # typed: f32[]
        return State(state.params - stepsize * grad, stepsize)

    state = init(jnp.ones(3))
    with probes.compiles() as report:
        state = update(state, jnp.full(3, 0.5, dtype=jnp.float32))
        state = update(state, jnp.full(3, 0.5, dtype=jnp.float32))
    f = _function(report, "update")
    assert f["count"] == 2 and f["causes"] == {"first": 1, "weak_type": 1}, f
    assert f["change_examples"]["weak_type"][0] == "`state.stepsize`: f32[] weak -> f32[]", f
    assert "weak type" in report.summary and "jnp.float32" in str(report)


def test_linen_and_optax_inside_the_users_jit_stay_the_users():
    linen = pytest.importorskip("flax.linen")
    optax = pytest.importorskip("optax")

    class MLP(linen.Module):
        @linen.compact
        def __call__(self, x):
            return linen.Dense(2)(x)

    model = MLP()
    params = model.init(jax.random.key(0), jnp.ones((1, 3)))
    tx = optax.adam(1e-3)
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state, x):
        loss, grads = jax.value_and_grad(lambda p: (model.apply(p, x) ** 2).mean())(params)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    with probes.compiles() as report:
        for n in (2, 3, 4):
            params, opt_state, _ = train_step(params, opt_state, jnp.ones((n, 3)))
    f = _function(report, "train_step")
    assert f["count"] == 3 and f["causes"] == {"first": 1, "types": 2}
    assert f["change_examples"]["types"][0] == "x: f32[2,3] -> f32[3,3] (shape)"
    # a Linen module's apply jitted by the user: the user's, named as they call it
    apply = jax.jit(model.apply)
    with probes.compiles() as report:
        for n in (2, 3):
            apply(params, jnp.ones((n, 3)))
    f = _function(report, "MLP.apply")
    assert f["kind"] == "user" and f["count"] == 2 and f["causes"] == {"first": 1, "types": 1}


def test_haiku_transform_apply_jitted_is_the_users_function():
    hk = pytest.importorskip("haiku")

    def forward(x):
        return hk.Linear(2)(x)

    net = hk.transform(forward)
    params = net.init(jax.random.key(0), jnp.ones((1, 3)))
    apply = jax.jit(net.apply)
    with probes.compiles() as report:
        for n in (2, 3, 4):
            apply(params, None, jnp.ones((n, 3)))
    f = _function(report, "forward")
    assert f["kind"] == "user" and f["count"] == 3 and f["causes"] == {"first": 1, "types": 2}
    assert f["defined_at"].endswith(
        f":{_line_of(test_haiku_transform_apply_jitted_is_the_users_function, 'def forward')}"
    )
    assert not str(report).startswith("%%jax_compiles [OK]")


def test_numpyro_svi_update_jitted_anew_each_step():
    # numpyro#2's shape: jit(svi.update) made inside the loop, so every step compiles again.
    numpyro = pytest.importorskip("numpyro")
    from numpyro import distributions as dist
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    def model(data):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("obs", dist.Normal(mu, 1.0), obs=data)

    svi = SVI(model, AutoNormal(model), numpyro.optim.Adam(0.01), Trace_ELBO())
    data = jnp.ones(10)
    state = svi.init(jax.random.key(0), data)
    with probes.compiles() as report:
        for _ in range(4):
            state, _ = jax.jit(svi.update)(state, data)
    f = _function(report, "SVI.update")
    assert f["kind"] == "user" and f["count"] == 4
    assert f["causes"] == {"first": 1, "new_function": 3}
    assert "jax.jit(svi.update)" in f["first_line"]["code"]


def test_optax_update_jitted_by_the_user_for_each_learning_rate_is_not_an_eager_operation():
    # optax#577 ("Optax recompiles when learning rate changes") and optax#197: `jax.jit(tx.update)` of a new
    # `tx = optax.adam(lr)` for each learning rate. `tx.update` is a closure optax's factory made: a library's
    # function, but one only the user jits, so its recompiles are the user's - never "[OK] ... eager operations".
    optax = pytest.importorskip("optax")
    params = jnp.ones(8)
    with probes.compiles() as report:
        for lr in (0.1, 0.2, 0.3):
            tx = optax.adam(learning_rate=lr)
            jax.jit(tx.update)(params, tx.init(params), params)
    f = _function(report, "update_fn")
    assert f["kind"] == "user" and f["count"] == 3
    assert f["causes"] == {"first": 1, "new_function": 2}
    assert "jax.jit(tx.update)" in f["first_line"]["code"]
    assert str(report).startswith("%%jax_compiles [FOUND] `update_fn` compiled 3 times: a new jit wrapper")
    # The fix the report offers, run: one optimizer whose learning rate is in its state, jitted once.
    tx = optax.inject_hyperparams(optax.adam)(learning_rate=0.1)
    update = jax.jit(tx.update)
    with probes.compiles() as fixed:
        for lr in (0.1, 0.2, 0.3):
            state = tx.init(params)
            state.hyperparams["learning_rate"] = jnp.asarray(lr)
            update(params, state, params)
    assert _function(fixed, "update_fn")["count"] == 1
    # JAX's own jitted functions called eagerly stay eager operations (one compilation per new shape)
    with probes.compiles() as eager:
        for n in (2, 3):
            jax.nn.relu(jnp.ones(n))
    assert all(f["kind"] != "user" for f in eager.to_dict()["functions"])


def test_linen_train_flag_static_is_a_flag_not_a_size():
    # google/flax#3630 / #3171's flag: a Linen model's `train` flag passed static to the user's jit
    # (Dropout(deterministic=not train)), given
    # as True, False, then 1. Tracing it traced fails on Python's `not`: it chooses code, so the fix says to
    # keep it static (two values, two programs) and to pass a bool each time - not "round it up to a power of
    # two and mask", the advice for a size.
    linen = pytest.importorskip("flax.linen")

    class Net(linen.Module):
        @linen.compact
        def __call__(self, x, train: bool):
            return linen.Dropout(0.5, deterministic=not train)(linen.Dense(4)(x))

    net = Net()
    params = net.init({"params": jax.random.key(0)}, jnp.ones((2, 3)), train=False)

    @functools.partial(jax.jit, static_argnames=("train",))
    def forward(params, x, train, key):
        return net.apply(params, x, train=train, rngs={"dropout": key})

    x, key = jnp.ones((2, 3)), jax.random.key(1)
    with probes.compiles() as report:
        forward(params, x, True, key)
        forward(params, x, False, key)
        forward(params, x, 1, key)
    f = _function(report, "forward")
    assert f["count"] == 3 and f["causes"] == {"first": 1, "static": 2}
    assert f["static_fix_works"] is False
    assert f["static_fix_error"].startswith("TracerBoolConversionError")
    fix = f["again"]["fix"]
    assert "Python's `if`/`not`/`and`/`or` cannot decide on a traced value" in fix
    assert "It chooses which code runs" in fix and "(True and 1) are two cache keys" in fix
    assert "powers of two" not in fix


def test_numpyro_mcmc_run_again_compiles_its_sampler_again():
    # numpyro#441 ("Avoid recompilation in MCMC.run with new data"): `mcmc.run` again with new data of the same
    # shape compiles NumPyro's sampling loop again (seconds). The library jitted it, from the user's line:
    # never "[OK] ... small compilations of eager operations"; said as the library's, with the user's line,
    # and honest that jaxmagic cannot tell which of the library's values changed.
    numpyro = pytest.importorskip("numpyro")
    from numpyro import distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("obs", dist.Normal(mu, 1.0), obs=y)

    mcmc = MCMC(NUTS(model), num_warmup=5, num_samples=5, progress_bar=False)
    mcmc.run(jax.random.key(0), jnp.ones(4))
    with probes.compiles() as report:
        mcmc.run(jax.random.key(1), jnp.zeros(4))
        mcmc.run(jax.random.key(2), 2 * jnp.ones(4))
    loops = [f for f in report.to_dict()["functions"] if f["library"] == "numpyro"]
    assert [(f["kind"], f["count"], f["causes"]) for f in loops] == [("library", 2, {"library": 2})]
    assert str(report).startswith("%%jax_compiles [FOUND] numpyro's `_fori_collect_loop` compiled 2 times")
    assert "your line In [" not in report.summary  # a test file's line, not a cell's
    assert "`mcmc.run(jax.random.key(1), jnp.zeros(4))`" in report.summary
    assert "could not tell which value changed, and tried no fix" in report.first_fix
    assert report.to_dict()["status"] != "ok"


def test_doctor_agrees_with_compiles_through_filter_jit():
    class Config:
        def __init__(self, lr):
            self.lr = lr

    class Model(eqx.Module):
        w: jax.Array
        cfg: Config

    @eqx.filter_jit
    def step(model, x):
        return model.w * x * model.cfg.lr

    x = jnp.ones(3)
    with probes.doctor(namespace={}, skip=["nans", "keys", "live"]) as report:
        for _ in range(4):
            step(Model(jnp.ones(3), Config(0.1)), x)
    (finding,) = [f for f in report.to_dict()["findings"] if f["area"] == "recompilation"]
    assert report.compiles.count("step") == 4
    assert "`model.cfg` is a new Config" in str(report)
    assert finding["next_magic"] == "%%jax_compiles --budget 1 --fn step"


def test_watch_agrees_with_compiles_through_nnx_jit(ip):
    ip.run_cell("%jax_watch --budget 2 -o wlog", store_history=True)
    try:
        ip.run_cell(
            textwrap.dedent(
                """
                from flax import nnx
                class Config:
                    def __init__(self, lr):
                        self.lr = lr
                class Model(nnx.Module):
                    def __init__(self, cfg):
                        self.w = nnx.Param(jnp.ones(3))
                        self.cfg = cfg
                @nnx.jit
                def watched_step(model, x):
                    return model.w * x * model.cfg.lr
                """
            ),
            store_history=True,
        )
        # a loop variable not named `_`: that would shadow IPython's last-output variable for later tests
        ip.run_cell("for run in range(4):\n    watched_step(Model(Config(0.1)), jnp.ones(3))", store_history=True)
        found = [f for f in ip.user_ns["wlog"].to_dict()["findings"] if f["area"] == "recompilation"]
    finally:
        ip.run_cell("%jax_watch off", store_history=True)
    (finding,) = found
    assert finding["function"] == "watched_step" and finding["count"] == 4
    assert "model.cfg" in finding["summary"] and "_graphdef" not in finding["summary"]


def test_nothing_of_a_library_is_imported_for_plain_jax(tmp_path):
    script = textwrap.dedent(
        """
        import sys, jax, jax.numpy as jnp
        from jaxmagic import probes
        @jax.jit
        def f(x):
            return x * 2
        with probes.compiles() as report:
            for n in (2, 3):
                f(jnp.ones(n))
        assert report.count("f") == 2
        print(sorted(m for m in ("equinox", "flax", "haiku", "numpyro", "optax", "chex") if m in sys.modules))
        """
    )
    path = tmp_path / "plain.py"  # a file of the user's ("-c" code is no one's file)
    path.write_text(script)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
