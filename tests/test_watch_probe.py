"""%jax_watch: cells watched one after another, on programs shaped like real bugs; the log's to_dict()."""

from __future__ import annotations

import re
import sys

import jax
import pytest

from jaxmagic._jax.restore import take_snapshot


def _tools():
    monitoring = getattr(sys, "monitoring", None)
    return [monitoring.get_tool(i) for i in range(6)] if monitoring else []


def _callbacks(ip):
    return {event: list(ip.events.callbacks[event]) for event in ("pre_run_cell", "post_run_cell")}


@pytest.fixture
def shell(ip):
    ip.run_cell("import numpy as np", store_history=True)
    yield ip
    ip.run_cell("%jax_watch off", store_history=True)


def cell(ip, source: str):
    return ip.run_cell(source, store_history=True)


def findings(ip, area=None):
    found = ip.user_ns["wlog"].to_dict()["findings"]
    return [f for f in found if area is None or f["area"] == area]


def test_nan_at_call_37_of_a_loop_in_the_third_cell(shell):
    cell(shell, "%jax_watch -o wlog")
    cell(shell, "@jax.jit\ndef update(w, lr):\n    return jnp.sqrt(w - lr)\nw0 = jnp.ones(4)")
    cell(shell, "lrs = [i / 35.5 for i in range(60)]")
    result = cell(shell, "outs = []\nfor i in range(60):\n    outs.append(update(w0, lrs[i]))\nlast = outs[-1]")
    assert result.success
    (nan,) = findings(shell, "NaN")
    assert nan["function"] == "update"
    assert nan["call"] == 37
    assert "sqrt" in nan["summary"]
    # The producing line inside the jitted function; the cell's call is the context that started it.
    assert nan["line"]["code"].strip() == "return jnp.sqrt(w - lr)" and nan["line"]["function"] == "update"
    assert nan["provenance"]["made_at"] == nan["line"] and nan["provenance"]["transforms"] == ["jit(update)"]
    assert nan["provenance"]["started_by"]["code"].strip() == "outs.append(update(w0, lrs[i]))"
    assert nan["cell"] == nan["provenance"]["started_by"]["label"]
    assert "sqrt" in nan["fix"] and "safe norm" not in nan["fix"]
    assert nan["next_magic"] == "%%jax_nans"
    # The cell ran as unwatched: every result is there, NaN included.
    assert len(shell.user_ns["outs"]) == 60 and bool(jnp_isnan(shell.user_ns["last"]))
    # The same NaN again is counted, not told again.
    cell(shell, "for i in range(60):\n    update(w0, lrs[i])")
    assert len(findings(shell, "NaN")) == 1


def jnp_isnan(x):
    import numpy as np

    return np.isnan(np.asarray(x)).any()


def test_recompiling_helper_called_from_a_library_like_function(shell):
    cell(shell, "%jax_watch --budget 2 -o wlog")
    cell(
        shell,
        "@jax.jit\ndef normalize(x):\n    return x / x.sum()\n"
        "def evaluate(batches):\n    return [normalize(b) for b in batches]\n",
    )
    cell(shell, "res = evaluate([jnp.ones(n) for n in range(1, 3)])")
    assert findings(shell) == []  # two compilations: within the budget
    cell(shell, "res = evaluate([jnp.ones(n) for n in range(3, 6)])")
    (found,) = findings(shell, "recompilation")
    assert found["function"] == "normalize"
    assert found["count"] == 5
    assert "shape" in found["summary"]
    assert found["next_magic"] == "%%jax_compiles --budget 1 --fn normalize"
    cell(shell, "res = evaluate([jnp.ones(n) for n in range(6, 9)])")
    (found,) = findings(shell, "recompilation")  # counted, not told again
    assert found["count"] == 8


def test_metrics_list_growing_across_cells(shell, monkeypatch):
    from jaxmagic.probes._watch import session

    # Counted after every cell, however many arrays earlier tests left alive (the share rule that
    # skips slow counts has its own test below).
    monkeypatch.setattr(session, "COUNT_ALWAYS", 10.0)
    cell(shell, "metrics = []\n%jax_watch -o wlog")
    cell(shell, "m = jax.jit(lambda x: (x * x).mean(keepdims=True))\nmetrics += [m(jnp.ones(5)) for _ in range(4)]")
    cell(shell, "metrics += [m(jnp.ones(5)) for _ in range(4)]")
    assert findings(shell, "memory") == []
    cell(shell, "metrics += [m(jnp.ones(5)) for _ in range(4)]")
    (found,) = findings(shell, "memory")
    assert "f32[1]" in found["summary"] and "3 cells" in found["summary"]
    assert found["next_magic"] == "%jax_live"
    cell(shell, "metrics += [m(jnp.ones(5)) for _ in range(4)]")
    assert len(findings(shell, "memory")) == 1


def test_host_array_at_every_call_and_keys_typed_and_legacy(shell):
    cell(shell, "%jax_watch -o wlog")
    cell(
        shell,
        "X_host = np.ones((16, 3), np.float32)\n"
        "@jax.jit\ndef predict(x, w):\n    return x @ w\n"
        "for step_i in range(5):\n    predict(X_host, jnp.ones(3))",
    )
    (found,) = findings(shell, "transfers")
    assert found["function"] == "predict" and "f32[16,3]" in found["summary"] and "`X_host`" in found["summary"]
    assert found["line"]["code"].strip() == "predict(X_host, jnp.ones(3))"
    cell(
        shell,
        "@jax.jit\ndef noisy(key, x):\n    return x + jax.random.normal(key, x.shape)\n"
        "legacy = jax.random.PRNGKey(0)\ntyped = jax.random.key(1)\n"
        "for step_i in range(4):\n    noisy(legacy, jnp.ones(2))\n    noisy(typed, jnp.ones(2))",
    )
    keys = findings(shell, "random keys")
    assert keys and all(k["function"] == "noisy" for k in keys)
    assert keys[0]["line"]["code"].strip().startswith("noisy(")


def test_eager_draws_with_one_key_and_one_key_for_a_vmapped_batch(shell):
    # Two shapes of user threads: noise drawn in a Python loop with a key never split (the same
    # numbers every pass), and a per-example draw under vmap closing over one key (every example
    # gets the same numbers).
    cell(shell, "%jax_watch -o wlog")
    cell(shell, "key = jax.random.key(0)\nfor step in range(4):\n    noise = jax.random.normal(key, (3,))")
    (draw,) = findings(shell, "random keys")
    assert draw["function"] == "jax.random.normal" and "4 of its 4 calls" in draw["summary"]
    assert draw["line"]["code"].strip() == "noise = jax.random.normal(key, (3,))"
    cell(
        shell,
        "@jax.jit\ndef augment(key, xs):\n    return jax.vmap(lambda x: x + jax.random.normal(key, x.shape))(xs)\n"
        "out = augment(jax.random.key(1), jnp.ones((8, 2)))",
    )
    shared = findings(shell, "random keys")[1:]
    assert len(shared) == 1 and shared[0]["function"] == "augment" and "whole vmapped batch" in shared[0]["summary"]
    assert "jax.random.normal(key, x.shape)" in shared[0]["line"]["code"]


def test_clean_cell_prints_nothing_and_magic_cells_are_not_watched_twice(shell, capsys):
    cell(shell, "%jax_watch -o wlog")
    capsys.readouterr()
    result = cell(shell, "ok = jax.jit(lambda x: x + 1)(jnp.ones(3))")
    assert result.success and capsys.readouterr().out == ""
    result = cell(shell, "%%jax_nans -o nrep\nbad = jnp.log(-jnp.ones(2))")  # the magic's own probe: no AlreadyActive
    assert result.error_in_exec is not None and "AlreadyActive" not in repr(result.error_in_exec)
    assert findings(shell) == []
    assert shell.user_ns["wlog"].to_dict()["on"] is True


def test_contract_on_off_ok_raising_interrupt(shell):
    before, tools, callbacks = take_snapshot(), _tools(), _callbacks(shell)
    cell(shell, "%jax_watch -o wlog")
    for source in (
        "y_ok = jax.jit(lambda x: x * 3)(jnp.ones(3))",
        "jax.jit(lambda x: x * 3)(jnp.ones(3))\nraise ValueError('mine')",
        "jax.jit(lambda x: x * 3)(jnp.ones(2))\nraise KeyboardInterrupt",
    ):
        result = cell(shell, source)
        assert take_snapshot().differences(before) == [] and _tools() == tools
        if "ValueError" in source:
            assert isinstance(result.error_in_exec, ValueError) and str(result.error_in_exec) == "mine"
        if "Keyboard" in source:
            assert isinstance(result.error_in_exec, KeyboardInterrupt)
    cell(shell, "%jax_watch status")
    cell(shell, "%jax_watch off")
    assert shell.user_ns["wlog"].to_dict()["on"] is False
    assert take_snapshot().differences(before) == [] and _tools() == tools and _callbacks(shell) == callbacks


def test_bad_area_is_a_usage_error(shell):
    from IPython.core.error import UsageError

    result = cell(shell, "%jax_watch --only NaN,bogus")
    assert isinstance(result.error_in_exec, UsageError) and "--only" in str(result.error_in_exec)
    result = cell(shell, "%jax_watch --only NaN,memory -o wlog")
    assert result.success and shell.user_ns["wlog"].to_dict()["areas"] == ["NaN", "memory"]


def test_arrays_shown_as_cell_results_are_not_growing_memory(shell):
    cell(shell, "%jax_watch -o wlog")
    for _ in range(4):
        cell(shell, "jnp.ones(7) * 2")  # each result stays in Out: IPython's history, not the user's list
    assert findings(shell, "memory") == []


def test_nan_in_a_donated_training_step_is_replayed_at_the_users_call_number(shell):
    # The Optax/Flax shape: params donated to a jitted step, the NaN first returned by call 2.
    cell(shell, "%jax_watch -o wlog")
    cell(
        shell,
        "def loss_fn(w, x):\n    return jnp.sum(jnp.log(x @ w))\n"
        "def step(w, x):\n    loss, g = jax.value_and_grad(loss_fn)(w, x)\n    return w - 0.1 * g, loss\n"
        "train_step = jax.jit(step, donate_argnums=(0,))\n"
        "batches = [jnp.ones((4, 3)), -jnp.ones((4, 3)), jnp.ones((4, 3))]",
    )
    result = cell(shell, "w = jnp.ones((3, 2))\nfor x in batches:\n    w, loss = train_step(w, x)")
    assert result.success
    (nan,) = findings(shell, "NaN")
    assert nan["call"] == 2 and nan["function"] == "step"
    assert nan["line"]["code"].strip() == "return jnp.sum(jnp.log(x @ w))" and nan["line"]["function"] == "loss_fn"
    assert nan["provenance"]["started_by"]["code"].strip() == "w, loss = train_step(w, x)"
    assert nan["provenance"]["transforms"][0] == "jit(step)"
    assert "`step` donates argument 0: the re-run used the copies the watch kept" in nan["details"]


def test_sampler_counts_every_call_and_looks_within_its_share():
    from jaxmagic._jax.call_sampling import CallSampler

    sampler = CallSampler(share=0.0, credit=0.0, first_calls=0)
    f, g = object(), object()
    assert sampler.take(f) == 1  # nothing spent yet: due
    sampler.spent_looking(1e-6)
    assert [sampler.take(f), sampler.take(g), sampler.take(f)] == [0, 0, 0]
    assert sampler.calls == {f: 3, g: 1} and sampler.total_skipped == 3 and sampler.skipped == {f: 2, g: 1}
    every = CallSampler(share=None)
    every.spent_looking(1.0)
    assert [every.take(f), every.take(f)] == [1, 2]
    first = CallSampler(share=0.0, credit=0.0, first_calls=2)
    first.spent_looking(1.0)  # however much was spent, each function's first calls are looked at
    assert [first.take(f), first.take(g), first.take(f), first.take(f)] == [1, 1, 2, 0]
    half = CallSampler(share=0.5, credit=0.0, first_calls=0)
    half.spent_looking(3600.0)  # an hour spent looking: the next look is due two hours after the start
    assert half.take(f) == 0
    half.start -= 7300.0
    half.spent_looking(0.0)
    assert half.take(f) == 2


def test_nan_made_by_a_call_not_looked_at_is_seen_at_the_end_and_said_so(shell, monkeypatch):
    # A fast loop whose carry turns NaN at call 302 and stays NaN (the shape of a diverging training
    # loop). With a sampler that looks only at the first calls (call 1 runs on jit's Python path and
    # is always looked at, call 2 while nothing was spent yet), the last call is looked at when the
    # cell ends: the NaN is told, and the report says which calls were not looked at - never that
    # the last call made it.
    from jaxmagic._jax import call_sampling
    from jaxmagic.probes._watch import session

    monkeypatch.setattr(session, "CallSampler", lambda: call_sampling.CallSampler(share=0.0, credit=0.0, first_calls=0))
    cell(shell, "%jax_watch -o wlog")
    cell(shell, "@jax.jit\ndef drift(s, i):\n    return s + jnp.log(300.5 - i)\n")
    result = cell(shell, "s = jnp.zeros(3)\nfor i in range(400):\n    s = drift(s, i)")
    assert result.success and bool(jnp_isnan(shell.user_ns["s"]))
    (nan,) = findings(shell, "NaN")
    assert nan["call"] == 400 and "already in the arguments" in nan["summary"]
    assert "calls 3-399 of `drift`" in nan["provenance"]["unknown"] and "%%jax_nans" in nan["provenance"]["unknown"]
    assert nan["line"]["code"].strip() == "s = drift(s, i)"
    log = shell.user_ns["wlog"]
    assert (log.calls_counted, log.calls_looked_at) == (400, 3)
    assert "3 of the 400 calls" in log.coverage


def test_counts_stay_exact_when_skipped_calls_are_only_counted(shell, monkeypatch):
    # A function the sampler skipped is settled: its calls are only counted until a look is due (issue 56).
    # A call on jit's Python path (a new shape: compiled) in the middle, and a second line calling the same
    # function, leave the counts exact; the NaN the last call returns is still seen, at its own line.
    from jaxmagic._jax import call_sampling
    from jaxmagic.probes._watch import session

    monkeypatch.setattr(session, "CallSampler", lambda: call_sampling.CallSampler(share=0.0, credit=0.0, first_calls=0))
    cell(shell, "%jax_watch -o wlog")
    cell(shell, "@jax.jit\ndef tock(s, i):\n    return s + jnp.log(500.5 - i)\n")
    source = (
        "s = jnp.zeros(3)\nfor i in range(300):\n    s = tock(s, i)\n"
        "t = tock(jnp.zeros(5), 0)\n"
        "for i in range(300, 450):\n    s = tock(s, i)\n"
        "for i in range(450, 520):\n    s = tock(s, i) if i % 2 else tock(s, i)\n"
    )
    result = cell(shell, source)
    assert result.success and bool(jnp_isnan(shell.user_ns["s"]))
    log = shell.user_ns["wlog"]
    assert log.calls_counted == 521
    (nan,) = findings(shell, "NaN")
    assert nan["call"] == 521 and "already in the arguments" in nan["summary"]
    assert nan["line"]["code"].strip() == "s = tock(s, i) if i % 2 else tock(s, i)"


def test_a_fast_loop_watched_with_the_default_share_never_misplaces_the_first_nan(shell):
    # 3,000 calls of a tiny step; call 2,500 makes a NaN that the carry keeps. The watch looks at a
    # share of the calls only: it names call 2,500, or says which calls before it did not look at.
    cell(shell, "%jax_watch -o wlog")
    cell(shell, "@jax.jit\ndef tick(s, i):\n    return s * 0.5 + jnp.sqrt(jnp.abs(i - 2500.0) - 0.5)\n")
    result = cell(shell, "s = jnp.ones(2)\nfor i in range(1, 3001):\n    s = tick(s, i)")
    assert result.success
    log = shell.user_ns["wlog"]
    assert log.calls_counted == 3000 and 40 <= log.calls_looked_at <= 3000
    (nan,) = findings(shell, "NaN")
    if nan["call"] != 2500:
        assert nan["call"] > 2500
        said = nan["summary"] + nan["details"] + (nan["provenance"] or {}).get("unknown", "")
        assert "not look at" in said or "not looked at" in said
        first, last = re.search(r"calls (\d+)-(\d+)", said).groups()
        assert int(first) <= 2500 <= int(last)  # the calls not looked at hold the one that made it


def test_live_arrays_are_counted_after_a_share_of_the_cells_when_counting_is_slow():
    # Counting walks every live array: with 100,000 of them (~7 ms) it is not done after every short cell,
    # but at least every COUNT_EVERY cells; a cheap count is done after every cell.
    import time

    from jaxmagic.probes._watch import session

    watch = session.Watch()
    watch._cell_began = time.perf_counter()  # a cell that began now: short
    watch._count_seconds = 1.0  # the last count took a second
    assert [watch._count_due() for _ in range(session.COUNT_EVERY)] == [False] * (session.COUNT_EVERY - 1) + [True]
    assert watch._counts_in_consecutive_cells is False  # memory findings then say "counts", not "cells"
    watch._count_seconds = 0.0001
    assert all(watch._count_due() for _ in range(3))


# -- avoidable recompilations are told at their first repeat (issue 63.5) ---------------------------------


def test_a_python_float_accumulator_fed_back_as_an_array_is_told_at_its_first_repeat(shell):
    # jax-ml/jax#4274 (and google/jaxopt#451): a scalar started as a Python float is weakly typed; the jitted
    # step returns a float32 array, so the second call compiles again - within the budget, but avoidable.
    cell(shell, "%jax_watch -o wlog")
    cell(shell, "@jax.jit\ndef accumulate(total, x):\n    return total + jnp.sum(x)\n")
    result = cell(shell, "total = 0.0\nfor batch in range(5):\n    total = accumulate(total, jnp.ones(3))")
    assert result.success and float(shell.user_ns["total"]) == 15.0
    (found,) = findings(shell, "recompilation")
    assert found["function"] == "accumulate" and found["count"] == 2
    assert found["cause"]["kind"] == "weak_type" and "avoidable" in found["summary"]
    assert "dtype" in found["fix"]
    cell(shell, "for batch in range(3):\n    total = accumulate(total, jnp.ones(3))")
    assert len(findings(shell, "recompilation")) == 1  # compiled no more: nothing new


def test_an_optional_argument_left_to_none_then_given_a_float_is_told_at_its_first_repeat(shell):
    # jax-ml/jax#2720's shape: an optional argument defaulting to None, given a Python float later - a new
    # cache key (left to its default in one call), and a new program, compiled within the budget.
    cell(shell, "%jax_watch -o wlog")
    cell(shell, "@jax.jit\ndef shrink(w, decay=None):\n    return w if decay is None else w * (1.0 - decay)\n")
    cell(shell, "w = shrink(jnp.ones(3))")
    assert findings(shell) == []  # one compilation
    cell(shell, "w = shrink(w, 0.01)")
    (found,) = findings(shell, "recompilation")
    assert found["function"] == "shrink" and found["count"] == 2 and found["cause"]["kind"] == "passing"
    assert "`decay`" in found["summary"] or "decay" in found["details"]


def test_a_new_jit_wrapper_per_call_is_told_at_its_first_repeat(shell):
    # jax-ml/jax#9288: jax.jit(lambda ...) built inside the loop compiles at every iteration.
    cell(shell, "%jax_watch -o wlog")
    cell(
        shell,
        "def body(i):\n    return i + 1\ni = jnp.int32(0)\nfor step in range(2):\n    i = jax.jit(lambda v: body(v))(i)",
    )
    (found,) = findings(shell, "recompilation")
    assert found["count"] == 2 and found["cause"]["kind"] == "new_function"


def test_a_last_partial_batch_and_a_static_mode_stay_within_the_budget(shell):
    # A new shape (the epoch's last, smaller batch) and a static flag's two values (train, then eval) compile
    # twice by design: told only past the budget.
    cell(shell, "%jax_watch -o wlog")
    cell(
        shell,
        "@jax.jit\ndef batch_mean(x):\n    return x.mean(axis=0)\n"
        "from functools import partial\n"
        "@partial(jax.jit, static_argnames='train')\ndef forward(x, train):\n    return x * 0.5 if train else x\n",
    )
    cell(
        shell, "data = jnp.ones((100, 4))\nfor start in range(0, 100, 32):\n    m = batch_mean(data[start:start + 32])"
    )
    cell(shell, "y = forward(data, train=True)\ny = forward(data, train=False)")
    assert findings(shell) == []
    cell(shell, "m = batch_mean(jnp.ones((3, 4)))")  # a third shape: past the budget of 2
    (found,) = findings(shell, "recompilation")
    assert found["function"] == "batch_mean" and found["count"] == 3 and "avoidable" not in found["summary"]


def test_the_live_view_shows_an_avoidable_recompilation_while_the_cell_runs():
    from jaxmagic.probes import Watch

    watch = Watch(only=["recompilation"])

    @jax.jit
    def halve(x):
        return x / 2

    watch.begin_cell("In [1]")
    try:
        halve(1.0)
        halve(jax.numpy.float32(1.0))  # a float32 array after a Python float: weak type
        _, live = watch.live_progress()
    finally:
        watch.end_cell()
    assert live and "`halve` compiled 2 times so far (budget 2, avoidable)" in live[0]
