"""Keys and NaNs through the libraries, called for real: the library's public function is named
(never the library's wrapper of the user's own function), a library's jit wrapper does not hide a
NaN from the doctor, a normalisation layer's NaN is fixed by the layer's own epsilon (tried), and a
key the library consumes is traced back to the user's line that handed it over."""

import math

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


def _nan_report(run):
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            run()
    return report.to_dict()


def test_doctor_finds_a_nan_made_under_eqx_filter_jit_and_names_the_jnp_function_not_the_wrapper():
    # equinox threads: a norm of a zero difference in a loss, stepped with filter_jit + optax
    eqx = pytest.importorskip("equinox")
    optax = pytest.importorskip("optax")

    class Model(eqx.Module):
        w: jax.Array

        def __call__(self, x):
            return jnp.linalg.norm(x - self.w, axis=-1)

    model, x = Model(jnp.array([1.0, 2.0])), jnp.array([[1.0, 2.0], [0.0, 1.0]])
    optimizer = optax.sgd(0.1)
    state = optimizer.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def make_step(model, state, x):
        loss, grads = eqx.filter_value_and_grad(lambda m: m(x).mean())(model)
        updates, state = optimizer.update(grads, state)
        return eqx.apply_updates(model, updates), state, loss

    with probes.doctor(namespace={"model": model}) as report:
        for _ in range(2):
            model, state, _loss = make_step(model, state, x)
    assert bool(jnp.isnan(model.w).any())  # the bug is real
    data = report.to_dict()
    assert data["status"] == "problem", report.summary
    assert "jnp.linalg.norm" in report.summary and "inside `make_step`" not in report.summary
    assert "return jnp.linalg.norm(x - self.w, axis=-1)" in str(report)


def test_doctor_under_nnx_jit_says_the_nan_and_why_it_could_not_tell_the_line():
    nnx = pytest.importorskip("flax.nnx")

    class Model(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array([1.0, 2.0]))

        def __call__(self, x):
            return jnp.linalg.norm(x - self.w[...], axis=-1)

    model, x = Model(), jnp.array([[1.0, 2.0], [0.0, 1.0]])

    @nnx.jit
    def grad_norm(model, x):
        grads = nnx.grad(lambda m: m(x).mean())(model)
        return grads.w[...]

    with probes.doctor(namespace={"model": model}) as report:
        grad_norm(model, x)
    data = report.to_dict()
    assert data["status"] == "problem", report.summary  # never [OK] on a NaN
    assert "grad_norm" in report.summary


def test_nans_under_nnx_jit_with_an_optimizer_update_finds_the_line_and_leaves_the_model_whole():
    # flax NNX tutorials' train_step shape (nnx.jit + nnx.value_and_grad + nnx.Optimizer.update) with a
    # log of a negative residual. The producer search re-evaluates the failing call: it must take the
    # Module and Optimizer as arguments (fresh copies), not close over the user's objects - nnx.jit writes
    # its outputs back into the objects it was given, and a failed write under a trace left the user's
    # Module with no attributes at all.
    nnx = pytest.importorskip("flax.nnx")
    optax = pytest.importorskip("optax")

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(4, 1, rngs=rngs)

        def __call__(self, x):
            return self.lin(x)

    model = Model(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, opt, x, y):
        def loss_fn(model):
            return jnp.mean(jnp.log(model(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    x, y = jnp.ones((8, 4)), jnp.full((8, 1), 10.0)
    kernel_before = model.lin.kernel[...]
    data = _nan_report(lambda: train_step(model, opt, x, y))
    assert data["producer"]["primitive"] == "log"
    assert "jnp.log(model(x) - y)" in data["producer"]["line"]["code"]
    assert any(fix["offered"] for fix in data["fixes"])
    assert set(vars(model)) >= {"lin"}  # the user's objects are whole, and hold no tracer
    assert isinstance(model.lin.kernel[...], jax.Array) and not isinstance(model.lin.kernel[...], jax.core.Tracer)
    assert jnp.array_equal(model.lin.kernel[...], kernel_before)
    assert jnp.isfinite(train_step(model, opt, x, -y))


def test_equinox_layer_norm_with_eps_zero_is_fixed_by_its_own_eps_tried_on_the_value():
    eqx = pytest.importorskip("equinox")

    class Block(eqx.Module):  # the user's module calls the layer (padding rows: variance 0)
        norm: eqx.nn.LayerNorm

        def __call__(self, x):
            return self.norm(x)

    block, x = Block(eqx.nn.LayerNorm(4, eps=0.0)), jnp.ones((3, 4)).at[2].set(0.0)

    @eqx.filter_jit
    def forward(block, x):
        return jax.vmap(block)(x)

    data = _nan_report(lambda: forward(block, x))
    assert data["library_function"] == "equinox.nn.LayerNorm.__call__"
    assert "pass a positive `eps` (its default: 1e-05)" in data["fix"]
    offered = [fix for fix in data["fixes"] if fix["offered"]]  # tried on the values before it is offered
    assert [(f["key"], f["tried"], f["result"], f["call_result"]) for f in offered] == [
        ("eps", True, "finite", "finite")
    ]
    assert "Tried on the values of" in data["fix"] and "the call's outputs finite" in data["fix"]


def test_haiku_layer_norm_is_named_through_haikus_method_wrappers_and_fixed_by_eps():
    hk = pytest.importorskip("haiku")

    def net(x):
        return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, eps=0.0)(x)

    f = hk.without_apply_rng(hk.transform(net))
    x = jnp.ones((3, 4)).at[2].set(0.0)
    params = f.init(jax.random.key(0), x)
    data = _nan_report(lambda: jax.jit(f.apply)(params, x))
    assert data["library_function"] == "haiku.LayerNorm.__call__"
    assert "layer's `eps`" in data["fix"] and "finite" in data["fix"]


def test_linen_layer_norm_fix_names_epsilon_and_a_plain_rsqrt_gets_an_epsilon_not_a_clamp():
    nn = pytest.importorskip("flax.linen")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.LayerNorm(epsilon=0.0)(x)

    block, x = Block(), jnp.ones((3, 4)).at[2].set(0.0)
    params = block.init(jax.random.key(0), x)

    @jax.jit
    def forward(params, x):
        return block.apply(params, x)

    data = _nan_report(lambda: forward(params, x))
    assert "`epsilon` (its default: 1e-06)" in data["fix"]

    @jax.jit
    def normalise(x):
        var = jnp.var(x, axis=-1, keepdims=True)
        return (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(var)

    fix = _nan_report(lambda: normalise(x))["fix"]
    assert "`jax.lax.rsqrt(v + 1e-06)`" in fix and "jnp.maximum" not in fix and "negative" not in fix


def test_optax_cross_entropy_of_a_written_minus_inf_mask_names_optax_offers_where_and_says_forward():
    # optax threads: logits masked with -inf before softmax_cross_entropy; one-hot labels are 0 there,
    # and 0 * -inf is NaN in the loss itself (a forward value, though it is found under jax.grad)
    optax = pytest.importorskip("optax")

    @jax.jit
    def loss_fn(w, x, labels, valid):
        logits = x @ w
        masked = jnp.where(valid, logits, -jnp.inf)
        return optax.softmax_cross_entropy(masked, labels).mean()

    w, x = jnp.ones((4, 3)) * 0.1, jnp.arange(8.0).reshape(2, 4)
    labels = jax.nn.one_hot(jnp.array([1, 0]), 3)
    valid = jnp.array([[True, True, False], [True, True, True]])
    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            jax.grad(loss_fn)(w, x, labels, valid)
    data = report.to_dict()
    producer = data["producer"]
    assert (producer["primitive"], producer["library_function"]) == ("mul", "optax.softmax_cross_entropy")
    assert producer["written_inf"]["code"] == "masked = jnp.where(valid, logits, -jnp.inf)"  # written, not made
    assert producer["derivative"] is False and "in the derivative" not in str(report)
    # told from the program, without running `loss_fn` again: the NaN flows into the loss jax.grad drops
    assert any("the loss jax.grad computes and drops" in note for note in data["notes"])
    assert not any("`loss_fn` alone was traced" in note for note in data["notes"])
    assert "where=valid" in data["fix"] and "Tried on the values of" in data["fix"]
    fill = next(fix for fix in data["fixes"] if fix["offered"])  # the finite fill, tried on the values of `mul`
    assert (fill["key"], fill["tried"], fill["result"].split(" (")[0]) == ("finite_fill", True, "finite")


def test_the_call_number_under_filter_jit_is_the_pass_of_the_users_loop_not_the_traces():
    eqx = pytest.importorskip("equinox")

    @eqx.filter_jit
    def step(scale, x):
        return jnp.log(x * scale)  # log of a negative value at the second pass

    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            for scale in (1.0, -1.0, 1.0):
                step(jnp.asarray(scale), jnp.ones(2))
    data = report.to_dict()
    assert data["call_number"] == 2, report.summary
    assert data["call_line"]["code"] == "step(jnp.asarray(scale), jnp.ones(2))"


def test_a_typed_key_consumed_inside_numpyro_is_the_reuse_of_the_line_that_handed_it_over():
    key = jax.random.key(0)
    with probes.keys(record=True) as report:
        for _step in range(3):
            handlers.seed(_sample_normal, rng_seed=key)()  # the same typed key each pass
    (reuse,) = report.reuse
    assert reuse.library == "numpyro.sample" and reuse.reused_at.function == "_sample_normal"
    assert reuse.handed_at.code == "handlers.seed(_sample_normal, rng_seed=key)()  # the same typed key each pass"
    assert "given again by your line" in report.summary


def _mcmc(seed_key):
    mcmc_module = pytest.importorskip("numpyro.infer")

    def model():
        numpyro.sample("mu", dist.Normal(0.0, 1.0))

    mcmc = mcmc_module.MCMC(mcmc_module.NUTS(model), num_warmup=5, num_samples=5, progress_bar=False)
    mcmc.run(seed_key)
    return mcmc.get_samples()["mu"]


def test_one_mcmc_run_with_a_fresh_key_is_not_a_reuse_of_the_users_though_jax_flags_numpyro():
    # numpyro's sampler splits and reuses keys it made itself; the user handed over one key, once
    with probes.keys(record=True) as report:
        _mcmc(jax.random.key(0))
    assert report.status.value == "ok" and report.reuse == [], report.summary
    assert report.library_reuse and "not of a key your code handed over twice" in report.summary


def test_two_mcmc_runs_with_the_same_key_are_a_reuse_at_the_users_line():
    key = jax.random.key(1)
    with probes.keys(record=True) as report:
        first, second = _mcmc(key), _mcmc(key)
    assert bool((first == second).all())  # the bug is real: identical "independent" chains
    assert report.status.value == "problem"
    # the innermost line of the user's that gave numpyro the key: the helper's `mcmc.run(seed_key)`
    assert any(r.handed_at is not None and r.handed_at.code == "mcmc.run(seed_key)" for r in report.reuse)


def test_haiku_apply_given_the_same_rng_each_step_is_traced_to_the_apply_line():
    hk = pytest.importorskip("haiku")

    def net(x):
        return hk.dropout(hk.next_rng_key(), 0.5, x)

    f = hk.transform(net)
    x, rng = jnp.ones((2, 3)), jax.random.key(42)
    params = f.init(jax.random.key(0), x)
    with probes.keys(record=True) as report:
        outs = [f.apply(params, rng, x) for _ in range(3)]
    assert bool((outs[0] == outs[1]).all())
    (reuse,) = report.reuse
    assert reuse.library == "haiku.next_rng_key"
    assert reuse.handed_at.code == "outs = [f.apply(params, rng, x) for _ in range(3)]"


def test_flax_dropout_in_a_scan_body_with_the_same_rngs_every_pass_is_found():
    # flax threads: dropout inside lax.scan given rngs={"dropout": key} from outside the loop
    nn = pytest.importorskip("flax.linen")

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dropout(0.5, deterministic=False)(nn.Dense(8)(x))

    model, x = MLP(), jnp.ones((4, 3))
    params = model.init(jax.random.key(0), x)

    @jax.jit
    def masks(params, key):
        def step(carry, _):
            return carry, model.apply(params, x, rngs={"dropout": key})

        return jax.lax.scan(step, 0, None, length=3)[1]

    with probes.keys(record=True) as report:
        out = masks(params, jax.random.key(1))
    assert bool((out[0] == out[1]).all())  # the bug is real: the same mask at every pass
    (draw,) = report.loop_draws
    assert draw.api == "flax.linen.Dropout.__call__" and draw.loop == "scan"
    assert draw.line.code == "return nn.Dropout(0.5, deterministic=False)(nn.Dense(8)(x))"
    assert report.status.value == "problem" and "with a key that is the same at every pass" in report.summary


def test_a_key_folded_with_a_constant_in_a_loop_body_is_found_and_a_carried_key_is_not():
    @jax.jit
    def same_each_pass(key):
        step = lambda c, _: (c, jax.random.bernoulli(jax.random.fold_in(key, 7), 0.5, (4,)))  # noqa: E731
        return jax.lax.scan(step, 0, None, length=3)[1]

    @jax.jit
    def split_each_pass(key):
        def step(k, _):
            k, sub = jax.random.split(k)
            return k, jax.random.bernoulli(sub, 0.5, (4,))

        return jax.lax.scan(step, key, None, length=3)[1]

    @jax.jit
    def folded_with_the_counter(key):
        body = lambda i, acc: acc + jax.random.normal(jax.random.fold_in(key, i), (2,))  # noqa: E731
        return jax.lax.fori_loop(0, 3, body, jnp.zeros(2))

    with probes.keys(record=True) as report:
        same_each_pass(jax.random.key(0))
        split_each_pass(jax.random.key(1))
        folded_with_the_counter(jax.random.key(2))
    assert [(d.function, d.api) for d in report.loop_draws] == [("same_each_pass", "jax.random.bernoulli")]
    with probes.doctor() as doctor_report:
        same_each_pass(jax.random.key(3))
    assert doctor_report.areas == ["random keys"], doctor_report.summary


def test_the_watch_says_it_looked_at_nothing_when_a_numpyro_svi_loop_calls_no_jitted_function():
    # numpyro threads: an unconstrained guide parameter goes negative, the ELBO is NaN from step 2;
    # svi.update called without jit runs eager operations only, which the watch does not check
    from jaxmagic.probes._watch import Watch

    infer = pytest.importorskip("numpyro.infer")
    optax = pytest.importorskip("optax")

    def model(counts):
        p = numpyro.sample("p", dist.Dirichlet(jnp.ones(3)))
        numpyro.sample("obs", dist.Multinomial(35, probs=p, validate_args=False), obs=counts)

    def guide(counts):
        alpha = numpyro.param("alpha", jnp.ones(3))
        numpyro.sample("p", dist.Dirichlet(alpha, validate_args=False))

    counts = jnp.array([30.0, 0.0, 5.0])
    svi = infer.SVI(model, guide, optax.sgd(5.0), infer.Trace_ELBO())
    state = svi.init(jax.random.key(0), counts)
    watch = Watch()
    watch.begin_cell("svi loop")
    try:
        losses = []
        for _step in range(4):
            state, loss = svi.update(state, counts)
            losses.append(float(loss))
        cell = watch.end_cell()
    finally:
        watch.close()
    assert any(math.isnan(value) for value in losses)  # the bug is real: NaN losses
    assert cell.jitted_calls == 0 and "no jitted function of yours ran in it" in cell.summary


def test_the_doctor_says_nans_were_not_checked_when_no_jitted_function_ran():
    with probes.doctor() as report:
        jax.lax.log(jnp.array([-1.0]))  # a primitive applied eagerly: no jitted call of the user's
    assert report.jitted_calls_watched == 0
    assert "NaNs not checked (no jitted function of yours ran" in report.summary
    assert "Nothing found by nans" not in report.summary


def test_a_key_handed_over_in_a_comprehension_at_the_top_of_a_cell_is_traced_to_that_line(ip):
    # dm-haiku#585 shape: f.apply(params, key, x) given the same key each time, written in a notebook
    # cell as a comprehension. Python 3.12+ runs it inline, so while it runs the cell frame's locals
    # are the comprehension's own - the cell's `rng` is among its globals, not the magic's line.
    pytest.importorskip("haiku")
    ip.run_cell(
        "import haiku as hk\n"
        "def _dropped(x):\n"
        "    return hk.dropout(hk.next_rng_key(), 0.5, x)\n"
        "hk_net = hk.transform(_dropped)\n"
        "hk_params = hk_net.init(jax.random.PRNGKey(0), jnp.ones(4))\n"
        "hk_rng = jax.random.PRNGKey(1)\n"
    )
    cell = "%%jax_keys -o hk_keys\nhk_outs = [hk_net.apply(hk_params, hk_rng, jnp.ones(4)) for i in range(3)]\n"
    assert ip.run_cell(cell).error_in_exec is None
    report = ip.user_ns["hk_keys"]
    (draw,) = [d for d in report.to_dict()["draws"] if d["library"] == "haiku.next_rng_key"]
    assert draw["line"]["code"] == "hk_outs = [hk_net.apply(hk_params, hk_rng, jnp.ones(4)) for i in range(3)]"
    assert "run_cell_magic" not in report.summary


def test_a_nan_made_in_an_optax_transformation_inside_a_chain_is_named_by_its_factory():
    # optax#1752 (pull request): clip_by_global_norm(0.0) given all-zero gradients computes 0/0 * 0 in
    # its clipping branch. Optax's transformations are closures of public factories: the name the user
    # wrote is the factory's, and the innermost one (not the `optax.chain` around it) made the value.
    optax = pytest.importorskip("optax")
    optimizer = optax.chain(optax.clip_by_global_norm(0.0), optax.adam(1e-3))
    params = {"w": jnp.ones(3)}
    state = optimizer.init(params)

    @jax.jit
    def step(params, state, x):
        grads = jax.grad(lambda p: jnp.sum(p["w"] * x))(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            step(params, state, jnp.zeros(3))
    data = report.to_dict()
    assert data["producer"]["primitive"] == "div"
    assert data["producer"]["library_function"] == "optax.clip_by_global_norm"
    assert "inside `optax.clip_by_global_norm`" in report.summary
    # the division is Optax's: no guard for the user to write there; what they give it is named, the guard's
    # trial kept as the evidence that the 0 denominator is the whole cause
    fix = data["fix"]
    assert "That division is optax's code, not yours" in fix
    assert "`optax.clip_by_global_norm(max_norm)`" in fix
    assert "which only the library can write) was tried on the values of" in fix
    assert "Guard that denominator" not in fix
    assert not any(f["offered"] for f in data["fixes"])  # the table agrees: the guard is evidence, not offered


def test_a_gradient_nan_at_the_edge_of_a_distributions_support_names_it_and_says_whose_code_it_is():
    # numpyro#404 shape: log_prob at (or past) the boundary of the support. Gamma's log_prob at x = 0 is
    # finite in value, but its gradient in the concentration takes log(0) (xlogy's custom_jvp rule): the
    # rule's equations are attributed to the forward line, whose frames name the distribution's method.
    @jax.jit
    def nll(concentration, x):
        return -dist.Gamma(concentration, 1.0).log_prob(x).sum()

    with pytest.raises(FloatingPointError):
        with probes.nans(inside=True) as report:
            jax.grad(nll)(jnp.array(0.5), jnp.array([0.0, 1.0]))
    data = report.to_dict()
    assert data["producer"]["library_function"] == "numpyro.distributions.Gamma.log_prob"
    assert data["producer"]["primitive"] == "log" and data["producer"]["phase"] == "backward"
    fix = data["fix"]  # no rule for a log inside a library's code: said to be the library's, never a rewrite of it
    assert fix.startswith("`log` inside `numpyro.distributions.Gamma.log_prob`")
    assert "numpyro's code, not yours" in fix
    assert "`numpyro.distributions.Gamma(concentration, rate, validate_args).log_prob(value)`" in fix


def test_adam_on_float16_zero_gradients_is_named_inside_scale_by_adam_with_no_guessed_cause():
    # optax#1754 (pull requests #1755, #1769): eps=1e-8 is 0 in float16, so a zero gradient gives
    # m / (sqrt(v) + eps) = 0/0 inside scale_by_adam. Its denominator is a sum, but no mask or padding of
    # the user's: a library's own division gets no guessed cause and no guard the user cannot write.
    optax = pytest.importorskip("optax")
    optimizer = optax.adam(1e-3)
    params = {"w": jnp.array([1.0, -2.0, 0.5], dtype=jnp.float16)}
    state = optimizer.init(params)

    @jax.jit
    def step(params, state, grads):
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    with pytest.raises(FloatingPointError):
        with probes.nans() as report:
            step(params, state, {"w": jnp.zeros(3, jnp.float16)})
    data = report.to_dict()
    assert data["producer"]["library_function"] == "optax.scale_by_adam"
    assert "all-padding batch" not in data["fix"] and "Guard that denominator" not in data["fix"]
    # the cause observed in the program instead: the constant added to the denominator is 0.0 in float16, and
    # the fix the user writes is the library's parameter (test_nan_float16.py has the whole wording)
    assert "is 0.0 in float16" in data["fix"] and "`eps=0.0001`" in data["fix"]


def test_the_doctor_names_the_optimizer_as_the_nan_maker_and_the_users_derivative_as_the_inf():
    # optax#882 / torchopt#26 shape: an inf gradient (sqrt's derivative at 0) reaches Adam, whose
    # m / sqrt(v) is inf/inf = NaN: the library named is where the NaN was made, the fix is the user's line
    optax = pytest.importorskip("optax")
    optimizer = optax.adam(1e-3)
    params = {"w": jnp.array([0.0, 1.0])}
    state = optimizer.init(params)

    def loss(p):
        return jnp.sum(jnp.sqrt(p["w"]))

    @jax.jit
    def step(params, state):
        updates, state = optimizer.update(jax.grad(loss)(params), state, params)
        return optax.apply_updates(params, updates), state

    with probes.doctor() as report:
        step(params, state)
    (finding,) = [f for f in report.to_dict()["findings"] if f["area"] == "NaN"]
    assert "`div` inside `optax.scale_by_adam` from the inf of `div` in the forward pass" in finding["title"]
    assert 'jnp.sqrt(p["w"])' in finding["fix"]


def test_an_inf_a_librarys_own_code_wrote_is_not_blamed_on_the_users_line():
    # numpyro's log_prob outside the support returns -inf (its validate_sample writes it): under a gradient in a
    # scan body that -inf becomes a NaN. The user's line called the distribution; it did not write the inf.
    def total(conc, xs):
        def body(c, x):
            return c + dist.Gamma(conc, 1.0).log_prob(x), None

        out, _ = jax.lax.scan(body, 0.0, xs)
        return out

    with pytest.warns(UserWarning):  # numpyro's own out-of-support warning
        data = _nan_report(lambda: jax.jit(jax.grad(total))(2.0, jnp.array([1.0, 0.0, 2.0])))
    assert "Your line" not in data["fix"] and "wrote an inf" not in data["fix"], data["fix"]
    # named by what the line called when JAX kept the library's frames, else said neutrally - never the user's
    assert data["producer"]["written_inf_by"] or "in what your line" in data["fix"], data["fix"]


def test_dropout_under_nnx_vmap_without_jit_is_found_too_and_the_split_streams_are_not():
    # google/flax#4195 run as most notebooks do, with no nnx.jit around it: the draws are eager (under vmap's
    # trace), not in a program to search - they were "OK" before.
    nnx = pytest.importorskip("flax.nnx")

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.drop = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.drop(x)

    with probes.keys() as report:
        ys = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(Model(nnx.Rngs(dropout=0)), jnp.ones((4, 8)))
    assert bool((ys == ys[0]).all())
    (shared,) = report.shared
    assert shared.api == "flax.nnx.Dropout.__call__" and "nnx.split_rngs(splits=n)" in shared.fix

    @nnx.split_rngs(splits=4)
    @nnx.vmap(in_axes=(nnx.StateAxes({nnx.RngState: 0, ...: None}), 0))
    def per_element(m, x):
        return m(x)

    with probes.keys() as fixed:
        ys = per_element(Model(nnx.Rngs(dropout=0)), jnp.ones((4, 8)))
    assert not bool((ys == ys[0]).all())
    assert fixed.shared == [] and fixed.status.value == "ok"


def test_dropout_under_nnx_vmap_with_one_stream_for_the_batch_gets_split_rngs_not_jax_random_split():
    # google/flax#4195: `nnx.vmap(f, in_axes=(None, 0))(model, xs)` gives every element of the batch the Module's
    # one random stream, so Dropout draws the same mask for all. The key is the Module's (nnx.Rngs), not one the
    # user's line passes: the fix is nnx.split_rngs with StateAxes, as the thread's maintainer answered.
    import jax

    nnx = pytest.importorskip("flax.nnx")

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(4, 4, rngs=rngs)
            self.drop = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.drop(self.lin(x))

    model, xs = Model(nnx.Rngs(0)), jnp.ones((8, 4))

    @nnx.jit
    def run(model, xs):
        return nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(model, xs)

    with probes.keys() as report:
        ys = run(model, xs)
    assert bool((ys == ys[0]).all())  # the bug: one mask for the whole batch
    (shared,) = report.shared
    assert shared.api == "flax.nnx.Dropout.__call__"
    assert "nnx.split_rngs(splits=n)" in shared.fix and "nnx.StateAxes" in shared.fix, shared.fix
    assert "jax.random.split(key, n)" not in shared.fix and "not tried" in shared.fix

    # the fix as offered: each element gets its own mask
    state_axes = nnx.StateAxes({nnx.RngState: 0, ...: None})

    @nnx.split_rngs(splits=8)
    @nnx.vmap(in_axes=(state_axes, 0))
    def per_element(m, x):
        return m(x)

    fixed = per_element(model, xs)
    assert not bool((fixed == fixed[0]).all())
    jax.block_until_ready(fixed)
