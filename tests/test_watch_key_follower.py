"""The keys area's cheaper follower of eager draws, and its program searches kept across cells (issue 60 item 3).

An eager draw is followed at every call (a dropout key split per training step): a draw at an instruction of
the user's seen before is counted in a few dictionary reads (``draws._DrawFollower._counted_quickly``); these
tests check that it counts exactly what the whole way counts - distinct keys, repeats, the other arguments -
that a draw of the same line under vmap with one key for the batch is still found, that the cell computes what
it computes unwatched, that the time following takes is charged to the watch's sampler, and that under the watch
the keys of a line's first draws and then of a share are compared, the report saying how many. The searches of a
jitted program for draws (``flows.searched_once``) run once per program, not once per watched cell.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmagic import probes
from jaxmagic._jax import call_sampling, prng_checks
from jaxmagic._jax.call_sampling import CallSampler
from jaxmagic.probes import Watch
from jaxmagic.probes._keys import draws, flows
from jaxmagic.probes._keys.report import KeyReport

STEPS = 48


@pytest.fixture(params=[True, False], ids=["deferred", "host"])
def deferred(request, monkeypatch):
    monkeypatch.setattr(call_sampling, "LOOKS_DEFERRED", request.param)
    return request.param


def noise(key, x):
    return x + jax.random.normal(key, x.shape)


def many_draws(reuse_at: int = 20):
    """Draws of every kind of other argument a loop gives: a shape, a dtype object, a NumPy scalar type, an array
    (read with the key: the whole way), a key reused once (at ``reuse_at``), and a line run eagerly then under
    vmap with one key for the batch."""
    key, total = jax.random.key(0), jnp.zeros(3)
    sub = key
    bounds = jnp.array([0.5, 1.0])
    for step in range(STEPS):
        if step != reuse_at:
            key, sub = jax.random.split(key)
        total = total + jax.random.normal(sub, (3,), dtype=jnp.float32)
        total = total + jax.random.uniform(sub, (3,), np.float32)
        total = total + jax.random.uniform(sub, (3,), minval=bounds[step % 2])
        total = total + noise(sub, jnp.ones(3))
    batch = jax.vmap(lambda x: noise(sub, x))(jnp.zeros((4, 3)))  # the same line, one key for the batch
    return total, batch


def _counts(report: KeyReport) -> list[tuple]:
    return sorted(
        (d.api, d.line.lineno if d.line else 0, d.calls, d.distinct, d.repeated_times, d.repeated_key)
        for d in report.draws
    )


def _followed(body, quick: bool):
    """``body`` under the keys probe (recording), counted the quick way where it can be, or always the whole way."""
    counted_quickly = draws._DrawFollower._counted_quickly
    if not quick:
        draws._DrawFollower._counted_quickly = lambda self, spot, key, frame: False  # type: ignore[method-assign]
    try:
        with probes.keys(record=True) as report:
            value = body()
    finally:
        draws._DrawFollower._counted_quickly = counted_quickly  # type: ignore[method-assign]
    return value, report


def test_the_quick_count_is_the_whole_ways_and_the_cell_computes_what_it_computes_unwatched(deferred):
    unwatched = many_draws()
    quick_value, quick = _followed(many_draws, True)
    slow_value, slow = _followed(many_draws, False)
    for value in (quick_value, slow_value):
        assert all(np.array_equal(a, b) for a, b in zip(value, unwatched))
    assert _counts(quick) == _counts(slow) and len(quick.draws) >= 5
    [normal] = [d for d in quick.draws if d.line and "jax.random.normal(sub, (3,)" in d.line.code]
    assert (normal.calls, normal.distinct, normal.repeated_times) == (STEPS, STEPS - 1, 2)  # the reuse at step 20
    [shared] = quick.shared  # the line run under vmap with one key: found though its place was known
    assert shared.line is not None and "jax.random.normal(key, x.shape)" in shared.line.code


def test_a_key_reused_once_is_found_by_the_watch_and_every_draw_is_counted(deferred):
    watch = Watch(only=["random keys"])
    watch.begin_cell("In [1]")
    try:
        many_draws(reuse_at=40)
    finally:
        found = [f.to_dict() for f in watch.end_cell().findings]
    repeated = [f for f in found if " in 2 of " in f["headline"]]
    # the lines drawing with it: each counted at every call (noise()'s line once more, under vmap), the keys of
    # the first FIRST_COMPARED quick draws compared (the reuse at 40 among them), then a share
    calls = rf"({STEPS}|{STEPS + 1})"
    assert repeated and all(
        re.search(rf"in 2 of (its {calls} calls|the \d+ calls compared \(of {calls}\))", f["headline"])
        for f in repeated
    ), [f["headline"] for f in repeated]
    assert any("whole vmapped batch" in f["headline"] or "vmapped batch" in f.get("summary", "") for f in found)


def test_the_time_following_takes_is_charged_to_the_watch_sampler(monkeypatch):
    monkeypatch.setattr(call_sampling, "LOOKS_DEFERRED", True)
    sampler = CallSampler(credit=0.0)  # no credit: any time charged moves the next look on
    with draws.random_calls_followed(KeyReport(), sampler):
        key = jax.random.key(0)
        for _ in range(200):
            key, _sub = jax.random.split(key)
    assert sampler.spent > 0 and sampler.next_look > sampler.start  # the looks get what is left of the share
    unsampled = CallSampler()
    with draws.random_calls_followed(KeyReport()):  # %%jax_keys: no sampler, nothing charged
        jax.random.split(jax.random.key(1))
    assert unsampled.spent == 0


def test_a_program_is_searched_for_draws_once_across_watched_cells(monkeypatch):
    searches = []
    shared_key_draws = prng_checks.shared_key_draws

    def counted(jaxpr):
        searches.append(id(jaxpr))
        return shared_key_draws(jaxpr)

    monkeypatch.setattr(prng_checks, "shared_key_draws", counted)
    monkeypatch.setattr(flows, "_searches", {})

    @jax.jit
    def augment(key, xs):
        return jax.vmap(lambda x: x + jax.random.normal(key, x.shape))(xs)

    watch = Watch(only=["random keys"])
    told = []
    for cell in range(3):
        watch.begin_cell(f"In [{cell + 1}]")
        try:
            for step in range(3):
                augment(jax.random.key(step), jnp.zeros((4, 2)))
        finally:
            told.append([f.to_dict() for f in watch.end_cell().findings])
    assert len(searches) == 1  # the first cell's first call searched the program; the others asked the cache
    assert any("whole vmapped batch" in f.get("summary", "") or "vmapped batch" in f["headline"] for f in told[0])
    assert watch.log.findings and all(f.count >= 1 for f in watch.log.findings)


def test_quick_draws_ask_for_their_key_data_a_batch_at_a_time(deferred, monkeypatch):
    # A read per draw was half the follower's time: the quick draws of a loop are handed to the key reads
    # BATCH at a time (one entry, one ``then``), the rest of a batch when the block ends - and counted all.
    from jaxmagic.probes._keys import key_reads

    asked: list[int] = []
    read = key_reads.KeyReads.read

    def counted(self, arrays, then):
        asked.append(len(arrays))
        return read(self, arrays, then)

    monkeypatch.setattr(key_reads.KeyReads, "read", counted)
    splits = 2 * key_reads.BATCH + 30

    def loop():
        key = jax.random.key(5)
        for _ in range(splits):
            key, _sub = jax.random.split(key)
        return key

    _, report = _followed(loop, quick=True)
    # the first split goes the whole way (its line is new), the others are quick: two full batches and the rest
    assert asked == [1, key_reads.BATCH, key_reads.BATCH, splits - 1 - 2 * key_reads.BATCH]
    (split,) = report.draws
    assert (split.calls, split.distinct, split.repeated_times) == (splits, splits, 1)  # no key drawn twice


def test_a_batch_of_quick_draws_is_stacked_apart_from_the_reads_gathered_before_it(monkeypatch):
    # Stacked together, 3 whole-way reads and a quick batch of BATCH would be padded to 2 * BATCH: a second
    # compilation of the stack program (slow on a TPU) for nothing.
    from jaxmagic._jax import own_programs
    from jaxmagic.probes._keys import key_reads

    monkeypatch.setattr(call_sampling, "LOOKS_DEFERRED", True)
    stacked: list[int] = []
    stack = own_programs.stacked
    monkeypatch.setattr(own_programs, "stacked", lambda leaves: stacked.append(len(leaves)) or stack(leaves))
    reads, counted = key_reads.KeyReads(), []
    keys = [jax.random.key_data(jax.random.key(i)) for i in range(key_reads.BATCH + 3)]
    for key in keys[:3]:
        reads.read([key], counted.append)
    reads.read(keys[3:], counted.append)
    reads.settle(wait=True)
    assert stacked == [key_reads.BATCH]  # the quick batch alone; the 3 before it copied one by one
    assert [len(rows) for rows in counted] == [1, 1, 1, key_reads.BATCH]


def _dropout_loop(steps: int, split: bool = True):
    """A loop drawing a dropout mask per step, its key split per step (or, the bug, never split)."""
    key, total = jax.random.key(0), jnp.zeros(3)
    for _ in range(steps):
        sub = key
        if split:
            key, sub = jax.random.split(key)
        total = total + jax.random.bernoulli(sub, 0.9, (3,))
    return total


def test_the_watch_compares_the_keys_of_a_share_of_a_lines_draws_and_says_how_many(deferred, monkeypatch):
    # no share past the first FIRST_COMPARED: what the watch compares is then exact, whatever the machine's speed
    monkeypatch.setattr(draws, "COMPARED_SHARE", 0.0)
    watch = Watch(only=["random keys"])
    watch.begin_cell("In [1]")
    try:
        value = _dropout_loop(100)
    finally:
        found = watch.end_cell().findings
    assert np.array_equal(value, _dropout_loop(100)) and not found
    # two lines (split, bernoulli), each counted at every call; the first draw the whole way, then 40 quick ones
    compared = 2 * (1 + draws.FIRST_COMPARED)
    assert (watch.log.draws_counted, watch.log.draws_compared) == (200, compared)
    assert f"The keys of {compared} of the 200 eager jax.random calls" in watch.log.coverage

    with probes.keys(record=True) as report:  # %%jax_keys: every call's key compared
        _dropout_loop(100)
    assert all(d.compared == d.calls == 100 for d in report.draws)


def test_a_key_never_split_is_found_by_the_watch_in_the_draws_it_compared(deferred, monkeypatch):
    monkeypatch.setattr(draws, "COMPARED_SHARE", 0.0)
    watch = Watch(only=["random keys"])
    watch.begin_cell("In [1]")
    try:
        _dropout_loop(100, split=False)
    finally:
        found = [f.to_dict() for f in watch.end_cell().findings]
    (repeated,) = [f for f in found if f["function"] == "jax.random.bernoulli"]
    compared = 1 + draws.FIRST_COMPARED
    assert f"in {compared} of the {compared} calls compared (of 100)" in repeated["headline"], repeated["headline"]
