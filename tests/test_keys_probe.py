"""%%jax_keys's probe: reused keys in eager and jitted code, keys per jitted function, legacy keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic._jax.restore import take_snapshot


@jax.jit
def noisy_step(w, key, step):
    return w + 0.01 * jax.random.normal(key, w.shape) * step


def loop_same_key(n):  # the chapter's bug: the key never advances
    key = jax.random.key(0)
    w = jnp.zeros(3)
    for step in range(n):
        step_key = jax.random.split(key)[0]
        w = noisy_step(w, step_key, jnp.float32(step))
    return w


def loop_fixed(n):
    key = jax.random.key(0)
    w = jnp.zeros(3)
    for step in range(n):
        key, step_key = jax.random.split(key)
        w = noisy_step(w, step_key, jnp.float32(step))
    return w


def loop_reseeded(n):  # no error anywhere: a fresh key with the same seed every step
    w = jnp.zeros(3)
    for step in range(n):
        w = noisy_step(w, jax.random.key(7), jnp.float32(step))
    return w


def test_eager_reuse_names_the_consumer_the_line_and_the_first_use():
    before = take_snapshot()
    with pytest.raises(jax.errors.KeyReuseError, match="random_split"):
        with probes.keys() as report:
            loop_same_key(4)
    reuse = report.reuse[0]
    assert (reuse.consumer, reuse.index, reuse.where) == ("random_split", 0, "call")
    assert reuse.reused_at.function == "loop_same_key" and "jax.random.split(key)[0]" in reuse.reused_at.code
    assert reuse.same_line and "never replaces it" in reuse.explanation
    assert report.status.value == "problem" and "key, sub = jax.random.split(key)" in str(report)
    assert take_snapshot().differences(before) == [] and jax.config.jax_debug_key_reuse is False


def test_record_mode_runs_on_and_counts_the_same_key_every_step():
    with probes.keys(record=True) as report:
        w = loop_same_key(5)
    assert w.shape == (3,)  # the loop ran to the end
    assert report.reuse[0].consumer == "random_split" and report.reuse[0].count == 4
    flow = report.flow("noisy_step")
    assert (flow.argument, flow.calls, flow.distinct, flow.repeated_times) == ("key", 5, 1, 5)
    assert report.repeated_flows == [flow]


def test_results_are_those_of_a_run_without_the_checker():
    plain = loop_same_key(5)
    with probes.keys(record=True):
        watched = loop_same_key(5)
    assert jnp.array_equal(plain, watched)


def test_fixed_loop_is_clean_and_gets_a_new_key_every_step():
    with probes.keys() as report:
        loop_fixed(5)
    assert report.reuse == [] and report.legacy == [] and report.status.value == "ok"
    assert (report.flow("noisy_step").calls, report.flow("noisy_step").distinct) == (5, 5)


def test_same_key_without_any_error_is_still_counted():
    with probes.keys() as report:
        loop_reseeded(4)
    assert report.reuse == []
    assert report.flow("noisy_step").distinct == 1 and report.status.value == "problem"
    assert "got the same key in 4 of its 4 calls" in report.summary and "1 distinct key(s)" in report.summary


def test_reuse_inside_a_jitted_function_is_found_when_traced():
    @jax.jit
    def two_draws(key):
        return jax.random.normal(key) + jax.random.uniform(key)

    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            two_draws(jax.random.key(1))
    reuse = report.reuse[0]
    assert reuse.where == "trace" and reuse.function == "two_draws"
    assert reuse.consumer == "jax.random.uniform"
    assert "jax.random.uniform(key)" in reuse.reused_at.code


def test_passing_a_consumed_key_to_a_jitted_function_names_the_argument():
    key = jax.random.key(3)
    noisy_step(jnp.zeros(3), key, jnp.float32(1.0))  # outside the probe: not tracked
    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            k = jax.random.key(4)
            noisy_step(jnp.zeros(3), k, jnp.float32(1.0))
            noisy_step(jnp.zeros(3), k, jnp.float32(2.0))
    reuse = report.reuse[0]
    assert (reuse.consumer, reuse.index, reuse.argument) == ("noisy_step", 1, "key")


def test_legacy_keys_are_listed_and_followed_by_their_data():
    with probes.keys() as report:
        raw = jax.random.PRNGKey(0)
        a, b = jax.random.normal(raw, (3,)), jax.random.normal(raw, (3,))
    assert bool(jnp.all(a == b))  # reused without any error from JAX's checker
    assert [(u.api, u.count) for u in report.legacy] == [("normal", 2)]
    assert report.legacy[0].line.function == "test_legacy_keys_are_listed_and_followed_by_their_data"
    [draw] = report.repeated_draws
    assert (draw.api, draw.calls, draw.distinct, draw.legacy) == ("normal", 2, 1, True)
    assert report.status.value == "problem" and "same legacy uint32 key data" in " ".join(
        [report.summary, *report.also_found]
    )


def test_a_typed_key_drawn_first_leaves_legacy_keys_legacy():
    # Typed and uint32 keys are both jax.Array (ArrayImpl): only the dtype tells them apart, so
    # nothing learnt from a typed key's class may mark the next raw key typed.
    with probes.keys() as report:
        jax.random.normal(jax.random.key(1), (2,))
        raw = jax.random.PRNGKey(0)
        jax.random.normal(raw, (3,)), jax.random.normal(raw, (3,))
    assert [(u.api, u.count) for u in report.legacy] == [("normal", 2)]
    [draw] = report.repeated_draws
    assert (draw.api, draw.calls, draw.legacy) == ("normal", 2, True)


# -- shapes from public issue threads: legacy PRNGKey code, eager reuse per epoch -------------


@jax.jit
def dropout_step(w, key):
    keep = jax.random.bernoulli(key, 0.5, w.shape)
    return jnp.where(keep, w, 0.0)


def test_legacy_key_passed_to_a_jitted_function_every_step_is_followed():
    # most public code: `rng = jax.random.PRNGKey(0)` then `train_step(state, batch, rng)` every step
    with probes.keys(record=True) as report:
        rng = jax.random.PRNGKey(0)
        w = jnp.ones(4)
        for _ in range(4):
            w = dropout_step(w, rng)
    flow = report.flow("dropout_step")
    assert flow.legacy and (flow.calls, flow.distinct, flow.repeated_times) == (4, 1, 4)
    assert flow.argument == "key"
    assert report.status.value == "problem"
    assert "`dropout_step` got the same legacy uint32 key in 4 of its 4 calls (argument `key`)" in report.summary


def test_legacy_keys_split_every_step_are_fine():
    with probes.keys(record=True) as report:
        rng = jax.random.PRNGKey(0)
        w = jnp.ones(4)
        for _ in range(4):
            rng, sub = jax.random.split(rng)
            w = dropout_step(w, sub)
    assert report.flow("dropout_step").distinct == 4
    assert report.repeated_draws == [] and report.status.value == "ok"
    assert "No key was reused" in report.summary


def init_weights(key):
    return jax.random.normal(key, (3,))


def add_noise(key, w):
    return w + 0.1 * jax.random.normal(key, (3,))


def test_one_legacy_key_for_init_and_for_noise_is_a_reuse_across_lines():
    # the same PRNGKey for parameter init and for later noise/dropout (NumPyro/Flax threads): JAX's
    # checker cannot follow a raw key, and each line alone draws once - it used to say OK
    with probes.keys() as report:
        key = jax.random.PRNGKey(0)
        w = add_noise(key, init_weights(key))
    assert report.status.value == "problem"
    [reuse] = report.reuse
    assert reuse.consumer == "jax.random.normal"
    assert (reuse.first_used_at.function, reuse.reused_at.function) == ("init_weights", "add_noise")
    assert reuse.first_used_at.code == "return jax.random.normal(key, (3,))"
    assert "Key reused: `jax.random.normal` got an already consumed key" in report.summary
    assert w.shape == (3,)


def test_a_legacy_key_split_and_then_drawn_from_is_a_reuse_but_fold_in_is_not():
    with probes.keys() as report:
        key = jax.random.PRNGKey(1)
        a = jax.random.normal(jax.random.fold_in(key, 0), (2,))  # fold_in does not consume key
        b = jax.random.normal(jax.random.fold_in(key, 1), (2,))
    assert report.reuse == [] and report.status.value == "ok" and not bool(jnp.all(a == b))
    with probes.keys() as report:
        key = jax.random.PRNGKey(1)
        key, sub = jax.random.split(key)
        jax.random.normal(sub, (2,))
        jax.random.normal(key, (2,))  # fine: key is the new half of the split
        old = jax.random.PRNGKey(1)
        jax.random.uniform(old, (2,))  # the data split consumed above, drawn from again
    [reuse] = report.reuse
    assert reuse.consumer == "jax.random.uniform" and "split" in reuse.message


def test_fold_in_with_the_step_is_not_a_reuse():
    with probes.keys(record=True) as report:
        base = jax.random.PRNGKey(0)
        for step in range(3):
            jax.random.normal(jax.random.fold_in(base, step), (2,))
    assert report.repeated_draws == [] and report.status.value == "ok"


def test_eager_permutation_every_epoch_with_a_key_never_advanced():
    # the classic data-loader bug: the same shuffle every epoch
    with probes.keys(record=True, check_calls=False, only_user_calls=True) as report:  # the doctor's settings
        key = jax.random.key(0)
        for _epoch in range(3):
            perm = jax.random.permutation(key, 10)
    assert perm.shape == (10,)
    [draw] = report.repeated_draws
    assert (draw.api, draw.calls, draw.distinct, draw.legacy) == ("permutation", 3, 1, False)
    assert draw.line.code == "perm = jax.random.permutation(key, 10)"
    assert "in 3 of its 3 calls" in report.summary


def unpacked_split_loop(n, advance):
    """``a, b = jax.random.split(key)`` unstacks the keys: JAX learns which outputs are fresh keys
    by tracing the unstack, a signature the probe traces once and reuses at every later call."""
    key = jax.random.key(3)
    for _ in range(n):
        if advance:
            key, sub = jax.random.split(key)
        else:
            sub, _ = jax.random.split(key)
        jax.random.normal(sub, (2,))


def test_unpacked_split_signatures_reused_across_calls_and_blocks():
    for _ in range(2):  # the second block reuses the signatures the first one traced
        with probes.keys(record=True) as report:
            unpacked_split_loop(4, advance=True)
        assert report.reuse == []
        with probes.keys(record=True) as report:
            unpacked_split_loop(4, advance=False)
        assert [r.consumer for r in report.reuse] == ["random_split"]
        assert report.reuse[0].count == 3 and report.reuse[0].same_line


# -- keys reused from one pass of a loop body to the next (issue 23) -----------------------------
# Shapes from public threads: the TF_JAX_tutorials report "key, subkey = random.split(key), then
# random.randint(key, ...) - subkey is never used", inside a fori_loop body the way BlackJAX's
# kernels carry rng_key in the loop state (blackjax#53); a dropout key closed over by a scan body
# (every step draws the same mask); the same loop with a traced trip count (a while loop).


def augment(key, images, n_rounds):
    def body(i, carry):
        key, images = carry
        key, subkey = jax.random.split(key)
        flips = jax.random.bernoulli(key, 0.5, images.shape[:1])
        return key, jnp.where(flips[:, None], images[:, ::-1], images)

    return jax.lax.fori_loop(0, n_rounds, body, (key, images))


def _line_of(fn, text):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_key_reused_in_a_fori_loop_body_is_put_on_the_draw_inside_the_body():
    step = jax.jit(augment, static_argnums=2)
    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            step(jax.random.key(0), jnp.ones((4, 3)), 5)
    data = report.to_dict()["reuse"][0]
    assert data["reused_at"]["code"] == "flips = jax.random.bernoulli(key, 0.5, images.shape[:1])"
    assert data["reused_at"]["lineno"] == _line_of(augment, "flips = ")
    assert data["consumer"] == "jax.random.bernoulli" and data["function"] == "body"
    assert data["loop_call"]["code"] == "return jax.lax.fori_loop(0, n_rounds, body, (key, images))"
    prov = data["provenance"]
    assert prov["made_at"] == data["reused_at"] and prov["function"] == "body"
    assert prov["transforms"] == ["jit(augment)", "scan body"]
    assert prov["library_function"] == "jax.random.bernoulli"
    assert prov["started_by"]["code"] == "step(jax.random.key(0), jnp.ones((4, 3)), 5)"
    # the fix names the variables as written, and was tried on the traced loop
    fix = data["fix"]
    assert "`key, subkey = jax.random.split(key)`" in fix and "Draw with `subkey`" in fix
    assert "`jax.random.bernoulli(subkey, 0.5, images.shape[:1])`" in fix
    assert "checked: with `subkey` in that draw, JAX's key-reuse check of the traced loop passes" in fix
    text = str(report)
    assert "jit(augment) > scan body" in text and text.index("flips = ") < text.index("fori_loop(0, n_rounds")


def test_the_fixed_fori_loop_body_is_clean():
    def fixed(key, images, n_rounds):
        def body(i, carry):
            key, images = carry
            key, subkey = jax.random.split(key)
            flips = jax.random.bernoulli(subkey, 0.5, images.shape[:1])
            return key, jnp.where(flips[:, None], images[:, ::-1], images)

        return jax.lax.fori_loop(0, n_rounds, body, (key, images))

    with probes.keys() as report:
        jax.jit(fixed, static_argnums=2)(jax.random.key(0), jnp.ones((4, 3)), 5)
    assert report.reuse == [] and report.status.value == "ok"


def test_traced_trip_count_is_a_while_loop_and_still_names_the_body_line():
    step = jax.jit(augment)  # n_rounds traced: fori_loop becomes a while loop
    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            step(jax.random.key(0), jnp.ones((4, 3)), jnp.int32(5))
    reuse = report.reuse[0]
    assert reuse.reused_at.lineno == _line_of(augment, "flips = ")
    assert reuse.provenance.transforms == ["jit(augment)", "while loop"]
    assert "Draw with `subkey`" in reuse.fix


def test_dropout_key_closed_over_by_a_scan_body_gets_the_loop_fix_not_a_split_off_one():
    def train(params, key, batches):
        def step(w, batch):
            mask = jax.random.bernoulli(key, 0.9, w.shape)  # the same mask at every step
            return w - 0.1 * jnp.where(mask, batch, 0.0), None

        w, _ = jax.lax.scan(step, params, batches)
        return w

    with probes.keys(record=True) as report:
        jax.jit(train)(jnp.ones(3), jax.random.key(1), jnp.ones((6, 3)))
    reuse = report.reuse[0]
    assert reuse.reused_at.code == "mask = jax.random.bernoulli(key, 0.9, w.shape)  # the same mask at every step"
    assert reuse.function == "step" and reuse.loop_call.code == "w, _ = jax.lax.scan(step, params, batches)"
    assert reuse.provenance.transforms == ["jit(train)", "scan body"]
    assert "jax.random.fold_in(key, i)" in reuse.fix and "Draw with" not in reuse.fix
    assert report.to_dict()["reuse"][0]["provenance"]["made_at"]["function"] == "step"


def test_eager_loop_drawing_with_the_carried_key_names_the_split_off_key():
    def sample_chain(n):
        key = jax.random.key(0)
        total = 0.0
        for _ in range(n):
            key, sub = jax.random.split(key)
            noise = jax.random.normal(key, (2,))
            total = total + noise.sum()
        return total

    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            sample_chain(3)
    data = report.to_dict()["reuse"][0]
    assert data["first_used_at"]["code"] == "noise = jax.random.normal(key, (2,))"
    assert data["reused_at"]["code"] == "key, sub = jax.random.split(key)"
    assert "Draw with `sub`: `jax.random.normal(sub, (2,))`" in data["fix"]
    assert "a suggestion" in data["fix"]
    assert data["provenance"]["made_at"] == data["reused_at"]
    assert data["provenance"]["started_by"]["code"] == "sample_chain(3)"


def test_split_off_key_that_is_used_elsewhere_keeps_the_general_fix():
    def chain(n):
        key = jax.random.key(0)
        for _ in range(n):
            key, sub = jax.random.split(key)
            jax.random.normal(key, (2,)) + jax.random.uniform(sub, (2,))

    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            chain(3)
    from jaxmagic.probes._keys import FIX

    assert report.reuse[0].fix == FIX  # `sub` is read: the code is not the split-off shape


def test_two_draws_under_vmap_in_jit_name_the_vmapped_function():
    @jax.jit
    def per_sample(keys, x):
        def one(k, xi):
            return xi + jax.random.normal(k) + jax.random.uniform(k)

        return jax.vmap(one)(keys, x)

    with pytest.raises(jax.errors.KeyReuseError):
        with probes.keys() as report:
            per_sample(jax.random.split(jax.random.key(0), 4), jnp.ones(4))
    prov = report.to_dict()["reuse"][0]["provenance"]
    assert prov["function"] == "one" and prov["transforms"] == ["jit(per_sample)", "vmap"]
    assert prov["library_function"] == "jax.random.uniform"
    assert "jax.random.uniform(k)" in prov["made_at"]["code"]
    fix = report.reuse[0].fix  # the two draws, named as written, each given its own key
    assert "`jax.random.normal(k)` and `jax.random.uniform(k)` both draw with `k`" in fix
    assert "`k1, k2 = jax.random.split(k)`" in fix and "`jax.random.uniform(k2)`" in fix


def test_flows_and_draws_carry_provenance():
    with probes.keys(record=True) as report:
        rng = jax.random.PRNGKey(0)
        w = jnp.ones(4)
        for _ in range(3):
            w = dropout_step(w, rng)
            jax.random.normal(rng, (2,))
    flow = report.to_dict()["flows"][0]
    assert flow["provenance"]["made_at"]["code"] == "w = dropout_step(w, rng)"
    assert flow["provenance"]["transforms"] == ["jit(dropout_step)"]
    [draw] = report.repeated_draws
    assert draw.provenance.made_at.code == "jax.random.normal(rng, (2,))"


def test_eager_fori_loop_names_the_body_line_and_the_loop_without_a_jit():
    with probes.keys(record=True) as report:
        augment(jax.random.key(0), jnp.ones((4, 3)), 5)  # not jitted: JAX traces the loop itself
    data = report.to_dict()["reuse"][0]
    assert data["reused_at"]["lineno"] == _line_of(augment, "flips = ")
    assert data["loop_call"]["code"] == "return jax.lax.fori_loop(0, n_rounds, body, (key, images))"
    assert data["provenance"]["transforms"] == ["scan body"]  # no jit of the user's around it
    assert "Draw with `subkey`" in data["fix"]


def _loop_reuse(draw_sub_too):
    from jax.experimental.key_reuse import _core

    from jaxmagic._jax import prng_checks

    def f(key):
        def body(i, carry):
            key, x = carry
            key, sub = jax.random.split(key)
            x = x + jax.random.normal(key)
            if draw_sub_too:
                x = x + jax.random.uniform(sub)
            return key, x

        return jax.lax.fori_loop(0, 3, body, (key, 0.0))

    with pytest.raises(jax.errors.KeyReuseError) as info:
        _core.check_key_reuse_jaxpr(jax.make_jaxpr(f)(jax.random.key(0)).jaxpr)
    loop = prng_checks.reuse_equations(info.value)[-1]
    culprit, _calls, program = prng_checks.loop_reuse_culprit(loop, str(info.value))
    return prng_checks.passes_with_sibling(loop, program, culprit)


def test_trying_the_split_off_fix_on_the_traced_loop_can_fail():
    assert _loop_reuse(draw_sub_too=False) is True
    assert _loop_reuse(draw_sub_too=True) is False  # `sub` is drawn from too: using it twice is no fix


# -- one key for a whole vmapped batch (flax#4973 shape: one key given to a model vmapped over
# streams, in_axes None for the key, so every stream gets the same noise) -------------------------


def stream_noise(x, key):
    noise = jax.random.normal(key, x.shape)
    return x + 0.1 * noise


@jax.jit
def all_streams(xs, key):
    return jax.vmap(stream_noise, in_axes=(0, None))(xs, key)


@jax.jit
def all_streams_fixed(xs, key):
    keys = jax.random.split(key, xs.shape[0])
    return jax.vmap(stream_noise)(xs, keys)


def test_one_key_for_a_whole_vmapped_batch_is_named_at_the_draw():
    with probes.keys(record=True) as report:
        key = jax.random.key(0)
        for _ in range(2):
            key, sub = jax.random.split(key)
            ys = all_streams(jnp.zeros((4, 2)), sub)
    assert bool(jnp.all(ys == ys[0]))  # every stream got the same noise: the finding is true
    [shared] = report.to_dict()["shared"]
    assert shared["line"]["code"] == "noise = jax.random.normal(key, x.shape)"
    assert shared["api"] == "jax.random.normal" and shared["key"] == "key" and shared["calls"] == 2
    prov = shared["provenance"]
    assert prov["function"] == "stream_noise" and prov["transforms"] == ["jit(all_streams)", "vmap"]
    assert prov["started_by"]["code"] == "ys = all_streams(jnp.zeros((4, 2)), sub)"
    assert "Split `key` into one key per element" in shared["fix"]
    assert report.status.value == "problem" and "one key for the whole vmapped batch" in report.summary


def test_one_key_per_element_is_not_flagged():
    with probes.keys(record=True) as report:
        ys = all_streams_fixed(jnp.zeros((4, 2)), jax.random.key(0))
    assert not bool(jnp.all(ys == ys[0]))
    assert report.shared == [] and report.status.value == "ok"


def test_one_key_for_a_whole_batch_vmapped_without_jit_is_found_at_the_eager_draw():
    # The same shape run eagerly (no jit around the vmap: no program to search) - the draw runs under vmap's trace
    # with the key unbatched, so every stream still gets the same noise; with a key per element, nothing.
    with probes.keys() as report:
        key = jax.random.key(0)
        ys = jax.vmap(stream_noise, in_axes=(0, None))(jnp.zeros((4, 2)), key)
        fixed = jax.vmap(stream_noise)(jnp.zeros((4, 2)), jax.random.split(jax.random.key(1), 4))
    assert bool(jnp.all(ys == ys[0])) and not bool(jnp.all(fixed == fixed[0]))
    [shared] = report.shared
    assert shared.api == "jax.random.normal" and shared.key == "key" and shared.calls == 1
    assert shared.line is not None and shared.line.code.strip() == "noise = jax.random.normal(key, x.shape)"
    assert "Split `key` into one key per element" in shared.fix
    assert report.status.value == "problem" and "one key for the whole vmapped batch" in report.summary


def test_the_legacy_keys_remembered_are_bounded_and_the_report_says_so(monkeypatch):
    from jaxmagic.probes._keys import draws

    monkeypatch.setattr(draws, "MAX_CONSUMED_KEYS", 2)
    with probes.keys() as report:
        key = jax.random.PRNGKey(0)
        for _ in range(4):
            key, sub = jax.random.split(key)
            jax.random.normal(sub, (2,))
    assert report.status.value == "ok"
    assert (report.legacy_keys_followed, report.legacy_keys_limit) == (2, 2)
    assert "the first 2 only (the limit): a reuse of a later one is not seen" in " ".join(str(report).split())
