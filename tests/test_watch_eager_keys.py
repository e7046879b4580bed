"""The keys area's eager draws on an accelerator, checked on the CPU (issue 60 item 3).

Every eager ``jax.random`` call is followed (not a share of them): a key reused once in a 300-step loop is a
finding. On a TPU v5e reading each draw's key on the host cost +186 us a ``split`` (1.28x a dropout loop), so
where looks are deferred the keys' data is read in batches (``probes/_keys/key_reads.py``): one program of
jaxmagic's own stacks 128 draws' key data and one copy reaches the host. These tests force that path on the
CPU (``call_sampling.LOOKS_DEFERRED``) and check what it promises: a reuse at step 37 is still found, named
at its line, with as many host reads as batches; the cell computes what it computes unwatched and keeps
nothing alive.
"""

from __future__ import annotations

import gc
import re
import weakref

import jax
import numpy as np
import pytest

from jaxmagic._jax import call_sampling, own_programs
from jaxmagic.probes import Watch
from jaxmagic.probes._keys import key_reads

STEPS = 300


@pytest.fixture
def on_device(monkeypatch):
    monkeypatch.setattr(call_sampling, "LOOKS_DEFERRED", True)


@pytest.fixture
def reads(monkeypatch):
    """What the keys area read on the host (the shapes), and the batches its stack program made."""
    seen: dict[str, list] = {"host": [], "stacks": []}
    host_array, program = key_reads.host_array, own_programs._stack_program()

    def read(value):
        seen["host"].append(tuple(getattr(value, "shape", ())))
        return host_array(value)

    def stack(*leaves):
        assert own_programs.running()  # inside OWN_PROGRAMS: no compilation of the user's
        seen["stacks"].append(len(leaves))
        return program(*leaves)

    monkeypatch.setattr(key_reads, "host_array", read)
    monkeypatch.setattr(own_programs, "_stack_program", lambda: stack)
    return seen


def _watched(body, areas=("random keys", "recompilation")):
    watch = Watch(only=list(areas))
    watch.begin_cell("In [1]")
    try:
        value = body()
    finally:
        findings = watch.end_cell().findings
    return value, [f.to_dict() for f in findings]


def noise_loop(reuse_at: int | None):
    key, total = jax.random.key(0), 0.0
    sub = key
    for step in range(STEPS):
        if step != reuse_at:  # at step 37 the key is not split: the draw below gets last step's key again
            key, sub = jax.random.split(key)
        total += float(jax.random.normal(sub, (3,)).sum()) if step % 100 == 0 else 0.0
        jax.random.normal(sub, (3,))
    return total, key


def test_a_key_reused_at_step_37_of_a_300_step_deferred_loop_is_found_from_batched_reads(on_device, reads):
    unwatched = noise_loop(37)
    (total, key), found = _watched(lambda: noise_loop(37))
    assert total == unwatched[0] and np.array_equal(jax.random.key_data(key), jax.random.key_data(unwatched[1]))
    draws = [f for f in found if f["area"] == "random keys"]
    (repeated,) = [f for f in draws if " in 2 of " in f["headline"]]
    # every call counted; the keys compared: the first FIRST_COMPARED at the line, then a share of the time
    assert repeated["function"] == "jax.random.normal"
    assert re.search(rf"in 2 of the \d+ calls compared \(of {STEPS}\)", repeated["headline"]), repeated["headline"]
    assert repeated["line"]["code"] == "jax.random.normal(sub, (3,))"
    # ~900 draws (299 splits, 600 normals): their keys read in batches of 128, never one by one in the loop
    assert reads["stacks"] and all(n % key_reads.BATCH == 0 for n in reads["stacks"])
    assert len(reads["host"]) <= len(reads["stacks"]) + key_reads.MIN_BATCH
    assert not [f for f in found if f["area"] == "recompilation"]  # the stack program is none of the user's

    clean = _watched(lambda: noise_loop(None))[1]
    assert not [f for f in clean if f["area"] == "random keys"]  # no reuse: no finding, however it was read


def legacy_loop():
    key = jax.random.PRNGKey(0)
    for step in range(STEPS):
        key, sub = jax.random.split(key)
        jax.random.normal(sub, (2,))
        if step == 37:
            jax.random.uniform(sub, (2,))  # the same legacy key data drawn from again, on another line
    return key


def test_a_legacy_key_drawn_from_twice_at_step_37_is_found_with_its_lines(on_device, reads):
    key, found = _watched(legacy_loop)
    (reuse,) = [f for f in found if f["area"] == "random keys"]
    assert reuse["headline"].startswith("`jax.random.uniform` got an already consumed key")
    assert reuse["line"]["code"].startswith("jax.random.uniform(sub, (2,))")
    assert reuse["provenance"]["started_by"]["code"] == "key, found = _watched(legacy_loop)"
    assert reads["stacks"] and np.array_equal(np.asarray(key), np.asarray(legacy_loop()))


def test_a_deferred_loop_keeps_no_key_alive_and_a_few_draws_are_read_one_by_one(on_device, reads):
    kept: list = []

    def few():
        key = jax.random.key(5)
        for _ in range(3):
            key, sub = jax.random.split(key)
            kept.append(weakref.ref(sub))
        return None

    _watched(few)
    assert reads["stacks"] == [] and len(reads["host"]) == 3  # under MIN_BATCH: no program compiled for them
    _watched(lambda: noise_loop(None))
    gc.collect()
    assert [ref() for ref in kept] == [None] * 3


def test_a_loop_of_more_draws_than_the_keys_kept_is_no_finding(on_device):
    # 1,100 fresh keys at one line: past the first 1,000 kept, a new key is still counted as distinct (once
    # reported as "the same key data in 1 of its 1100 calls").
    def long_loop():
        key = jax.random.key(7)
        for _ in range(1100):
            key, _sub = jax.random.split(key)

    assert not [f for f in _watched(long_loop)[1] if f["area"] == "random keys"]
