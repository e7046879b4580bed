"""Arrays kept alive only by a container of the user's: a finding with its fix, whatever their number.

jax#10007 ("Memory Leak when create DeviceArray in python loop(without JIT)?"): the loop keeps
``bs = ...live_buffers()`` - today ``jax.live_arrays()`` - across its iterations, so each new ``bs`` holds
every earlier ``A`` and the count grows by one per step; the "leak" is the user's list. ``%jax_live`` named
the holders right (``bs[0..4]``, ``A``) and said [OK] with no fix. A container whose arrays nobody else
holds (a params dict, an Optax state) is the user's data and stays OK.

Every test uses array shapes of its own so that arrays other tests left alive do not disturb it.
"""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes
from jaxmagic.render import static_bundle
from jaxmagic.report import Status

_ELSEWHERE: list = []  # a holder outside the searched namespace


def test_a_live_arrays_list_kept_across_a_loop_alone_keeps_the_earlier_arrays():
    ns: dict = {}
    for _ in range(5):  # jax#10007, with jax.live_arrays() for the backend's live_buffers()
        ns["A"] = jnp.ones(7603)
        gc.collect()
        ns["bs"] = jax.live_arrays()
    report = probes.live(namespace=ns)
    group = report.group((7603,), "float32")
    assert group.count == 5 and "A" in group.holders
    (kept,) = [k for k in report.kept_alone if k.shape == (7603,)]
    assert (kept.container, kept.count, kept.bytes) == ("bs", 4, 4 * 7603 * 4)
    assert kept.others == ["A"]
    assert report.status is not Status.OK
    data = report.to_dict()["kept_alone"][0]
    assert data["fix"].startswith("Drop the reference: `del bs`")
    assert "Checked: nothing but `bs` refers to these 4 arrays" in data["fix"]
    assert "`bs` alone keeps 4 array(s) `f32[7603]` alive" in report.summary
    assert "Drop the reference: `del bs`" in static_bundle(report.document())["text/plain"]
    del ns["bs"]
    assert probes.live(namespace=ns).group((7603,), "float32").count == 1  # the fix frees them: checked


def test_an_array_something_else_also_refers_to_is_not_said_to_be_kept_by_the_container_alone():
    history = [jnp.full(7607, float(i)) for i in range(4)]
    _ELSEWHERE.append(history[0])  # held outside the namespace the search walks: the garbage collector sees it
    try:
        report = probes.live(namespace={"history": history, "x": history[3]})
        (kept,) = [k for k in report.kept_alone if k.shape == (7607,)]
        assert kept.container == "history" and kept.count == 2  # [1] and [2]; not [0] (held elsewhere), not [3] (x)
    finally:
        _ELSEWHERE.clear()


def test_a_params_dict_and_an_optax_state_are_data_not_copies():
    optax = pytest.importorskip("optax")
    w = jnp.ones((7621,))
    params = {"w": jnp.ones((7621,)), "b": jnp.zeros((7621,))}
    opt_state = optax.adam(1e-3).init(params)  # mu and nu: arrays of w's shape only opt_state holds
    report = probes.live(namespace={"w": w, "params": params, "opt_state": opt_state})
    assert report.group((7621,), "float32").count >= 5
    assert [k for k in report.kept_alone if k.shape == (7621,)] == []
    # no finding on them; the report's status also counts what other tests left alive in this process
    assert [c for c in report.containers if c.shape == (7621,)] == []


def test_the_magic_in_a_notebook_loop(shell):
    shell.run_cell(
        "import gc, jax, jax.numpy as jnp\n"
        "for step in range(4):\n"
        "    x_7639 = jnp.ones(7639) * step\n"
        "    gc.collect()\n"
        "    bs_7639 = jax.live_arrays()\n"
    )
    shell.run_cell("%jax_live -o live_7639")
    report = shell.user_ns["live_7639"]
    (kept,) = [k for k in report.kept_alone if k.shape == (7639,)]
    assert (kept.container, kept.count) == ("bs_7639", 3)
    assert report.status is not Status.OK
    assert report.document().fix.startswith("Drop the reference: `del bs_7639`")
    shell.run_cell("del bs_7639, x_7639, live_7639")


@pytest.fixture
def shell(ip):
    return ip


def test_a_list_that_gains_one_array_per_step_is_a_finding_with_the_host_side_fix():
    # markean/aimz#268: a fit loop "accumulates the per-step losses as device scalars" in a list the user keeps;
    # here also one Jacobian per step (`history.append(J)`). Nothing else holds them, so no array is "kept alone"
    # beside another holder, and fewer than 100 made no container finding: [OK] with no word. A list, tuple or
    # deque of 10 or more arrays of one shape is arrays accumulating in one container of the user's.
    @jax.jit
    def step(w):
        return w * 0.5, jnp.sum(w**2), jnp.outer(w, w)

    ns: dict = {"losses": [], "history": [], "params": {f"w{i}": jnp.ones(7607) for i in range(12)}}
    w = jnp.ones(7)
    for _ in range(25):
        w, loss, jac = step(w)
        ns["losses"].append(loss)
        ns["history"].append(jac)
    del loss, jac
    report = probes.live(namespace=ns)
    found = {c.container: c for c in report.containers}
    assert {"losses", "history"} <= set(found) and "params" not in found, found  # a dict of 12 is data
    assert (found["history"].count, found["history"].shape) == (25, (7, 7))
    assert report.status is Status.PROBLEM
    text = str(report)
    assert "accumulating in one container of yours" in text
    assert "`jax.device_get(x)`" in text and "`float(loss)`" in text and "`del history`" in text
