"""One answer to "what crossed from host to device": the same program through ``%%jax_transfers``,
``%%jax_doctor`` and ``%jax_watch`` gives the same finding - the NumPy leaf's path, its count, the
user's line - wherever the NumPy arrays sit in the call's pytree arguments.

Shapes of real threads: a batch of NumPy arrays handed to a jitted step at every iteration, copied at
the jit boundary each call (jax-ml/jax#16905: a pytree of 8 host arrays at every call; jax-ml/jax#1989:
"jax copies the data to device for every xla-run"); parameters restored from a checkpoint as NumPy
arrays (PredictiveIntelligenceLab/jaxpi#4: "'numpy.ndarray' object has no attribute 'sharding'",
fixed by converting every restored leaf to a JAX array).
"""

from __future__ import annotations

import pytest

SETUP = """
np_x = np.random.rand(80, 32, 8).astype(np.float32)
np_y = np.random.rand(80, 32).astype(np.float32)
@jax.jit
def step(params, batch):
    return params, sum(leaf.sum() for leaf in jax.tree.leaves(batch)) - params["w"].sum()
params = {"w": jnp.ones(8)}
"""


def through_all_three(ip, setup: str, loop: str) -> tuple[dict, dict, dict]:
    """The loop cell under %%jax_transfers, under %%jax_doctor, and watched by %jax_watch: the three reports."""
    ip.run_cell("import numpy as np", store_history=True)
    ip.run_cell(setup, store_history=True)
    ip.run_cell("%%jax_transfers -o trep\n" + loop, store_history=True)
    ip.run_cell("%%jax_doctor -o drep\n" + loop, store_history=True)
    ip.run_cell("%jax_watch -o wlog", store_history=True)
    try:
        ip.run_cell(loop, store_history=True)
    finally:
        ip.run_cell("%jax_watch off", store_history=True)
    return ip.user_ns["trep"].to_dict(), ip.user_ns["drep"].to_dict(), ip.user_ns["wlog"].to_dict()


def findings_of_each(transfers: dict, doctor: dict, watch: dict) -> tuple[set, set, set, set]:
    """(argument, count, line code) as each report tells it; and the doctor's titles beside the watch's."""
    told = {(t["argument"], t["count"], t["line"]["code"].strip()) for t in transfers["transfers"] if t["function"]}
    doctor_uses = {(h["argument"], h["calls"], h["line"]["code"].strip()) for h in doctor["host_arguments"]}
    doctor_findings = {
        (f["title"], f["line"]["code"].strip()) for f in doctor["findings"] if f["area"] == "implicit transfers"
    }
    watch_findings = {(f["summary"], f["line"]["code"].strip()) for f in watch["findings"] if f["area"] == "transfers"}
    watch_counts = {(f["headline"].split("argument `")[1].split("`")[0], f["count"]) for f in watch["findings"]}
    assert {(argument, count) for argument, count, _ in told} == watch_counts
    assert doctor_findings == watch_findings
    return told, doctor_uses, doctor_findings, watch_findings


def test_a_dict_batch_of_numpy_arrays_is_the_same_finding_in_transfers_doctor_and_watch(ip):
    loop = 'for i in range(80):\n    params, loss = step(params, {"x": np_x[i], "y": np_y[i]})'
    transfers, doctor, watch = through_all_three(ip, SETUP, loop)
    told, doctor_uses, doctor_findings, _ = findings_of_each(transfers, doctor, watch)
    line = 'params, loss = step(params, {"x": np_x[i], "y": np_y[i]})'
    assert told == doctor_uses == {("batch['x']", 80, line), ("batch['y']", 80, line)}
    assert transfers["total"] == 160 and [t["value"] for t in transfers["transfers"]] == ["f32[32,8]", "f32[32]"]
    assert doctor["status"] == "problem" and len(doctor_findings) == 2
    assert (
        "`step` was given a NumPy array (f32[32,8], argument `batch['x']`) in 80 calls: copied to the device "
        "every time",
        line,
    ) in doctor_findings
    # the watch looked at a share of the 80 calls, and still counted every copy
    assert all(f["count"] == 80 for f in watch["findings"])


def test_a_numpy_argument_the_program_never_reads_is_not_copied_nor_told(ip):
    """jit prunes an unused input: the guard logs no copy of it, and no report says it was copied."""
    setup = SETUP + "@jax.jit\ndef only_x(params, batch):\n    return batch['x'].sum()\n"
    loop = 'for i in range(10):\n    loss = only_x(params, {"x": np_x[i], "unused": np_y[i]})'
    transfers, doctor, watch = through_all_three(ip, setup, loop)
    told, doctor_uses, _, _ = findings_of_each(transfers, doctor, watch)
    line = 'loss = only_x(params, {"x": np_x[i], "unused": np_y[i]})'
    assert told == doctor_uses == {("batch['x']", 10, line)} and transfers["total"] == 10


def test_nested_dicts_tuples_and_a_list_literal_are_named_by_their_paths(ip):
    loop = (
        "for i in range(30):\n"
        '    batch = {"inputs": {"image": np_x[i]}, "targets": (np_y[i],)}\n'
        "    params, loss = step(params, batch)\n"
        "    params, loss = step(params, [np_x[i], jnp.ones(3)])"
    )
    transfers, doctor, watch = through_all_three(ip, SETUP, loop)
    told, doctor_uses, _, _ = findings_of_each(transfers, doctor, watch)
    named = "params, loss = step(params, batch)"
    literal = "params, loss = step(params, [np_x[i], jnp.ones(3)])"
    assert (
        told
        == doctor_uses
        == {
            ("batch['inputs']['image']", 30, named),  # what the line passed (`batch`), then the path inside
            ("batch['targets'][0]", 30, named),
            ("batch[0]", 30, literal),  # a list literal: the path in the function's parameter `batch`
        }
    )


def test_params_restored_as_numpy_in_a_flax_variables_pytree(ip):
    pytest.importorskip("flax")
    setup = (
        "import flax.linen as nn\n"
        "model = nn.Dense(4)\n"
        "variables = model.init(jax.random.key(0), jnp.ones((1, 8)))\n"
        "variables = jax.tree.map(np.asarray, variables)  # as restored from a checkpoint\n"
        "x_dev = jnp.ones((16, 8))\n"
        "@jax.jit\ndef predict(variables, x):\n    return model.apply(variables, x)\n"
    )
    loop = "for i in range(12):\n    out = predict(variables, x_dev)"
    transfers, doctor, watch = through_all_three(ip, setup, loop)
    told, doctor_uses, _, _ = findings_of_each(transfers, doctor, watch)
    line = "out = predict(variables, x_dev)"
    assert (
        told == doctor_uses == {("variables['params']['bias']", 12, line), ("variables['params']['kernel']", 12, line)}
    )


@pytest.fixture
def looks_at_two_calls(monkeypatch):
    """The watch's and %%jax_transfers' samplers look only at each function's first two calls (on a fast
    loop they look at a share of the calls, by time): the others are counted at the paths seen."""
    from jaxmagic._jax import call_sampling
    from jaxmagic.probes._transfers import probe
    from jaxmagic.probes._watch import session

    def sampler():
        return call_sampling.CallSampler(share=0.0, credit=0.0, first_calls=2)

    monkeypatch.setattr(session, "CallSampler", sampler)
    monkeypatch.setattr(probe, "CallSampler", sampler)


def test_calls_not_looked_at_are_counted_where_a_looked_at_call_held_numpy(ip, looks_at_two_calls):
    loop = 'for i in range(80):\n    params, loss = step(params, {"x": np_x[i], "y": np_y[i]})'
    transfers, doctor, watch = through_all_three(ip, SETUP, loop)
    told, doctor_uses, _, _ = findings_of_each(transfers, doctor, watch)
    assert {(argument, count) for argument, count, _ in told} == {("batch['x']", 80), ("batch['y']", 80)}
    assert told == doctor_uses
    log = ip.user_ns["wlog"]
    assert log.calls_counted == 80 and log.calls_looked_at < 80  # most calls were skipped, and counted


def test_an_array_first_given_in_a_call_not_looked_at_is_told_so(ip, looks_at_two_calls):
    """`%%jax_transfers`' log saw every copy: it gives the count; the watch says what it could not see."""
    setup = SETUP + "x_dev = jnp.asarray(np_x[0])\n"
    loop = "for i in range(20):\n    params, loss = step(params, {'x': x_dev if i < 10 else np_x[i]})"
    transfers, _, watch = through_all_three(ip, setup, loop)
    (row,) = [t for t in transfers["transfers"] if t["function"]]
    assert (row["argument"], row["count"]) == ("batch['x']", 10) and transfers["total"] == 10
    (found,) = [f for f in watch["findings"] if f["area"] == "transfers"]
    assert "not looked at" in found["headline"] and found["count"] < 10
