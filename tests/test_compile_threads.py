"""An audit of %%jax_compiles, %jax_explain, %%jax_transfers, %%jax_live and %%jax_doctor on real threads
of plain JAX: each program is shaped like the thread it cites; the test asserts what was wrong before.

- PlasmaControl/DESC#1051 (host arrays Ainv_full, Z handed to a jitted projection at every call), with
  one of them read only by code whose result is unused: jit prunes it (no copy), so no report may count it.
- jax-ml/jax#6853 (`x[:d['num']]` under jit, `d` a dict holding a number and an array): the slice's length is
  one entry of a dict argument. %jax_explain offered `lax.dynamic_slice(x, (d['num'],), (2,))` (an invented
  length, the bound taken for a start) and "`d['num']` is an element of a *args parameter"; jit cannot make one
  entry static - the maintainers' answer is to pass it on its own, static, or to keep the full length.
- jax-ml/jax#5454 (`jnp.arange(i)` inside a vmapped function): vmap's tracers carry no argument names, so
  JAX's message names none; %jax_explain said "`i` is a tracer here" and could not tell where it came from.
  The failing frame shows it: `i` is the vmapped function's own parameter.
- jax-ml/jax#3701 (a config dataclass, not frozen, as a static argument), google/flax#587 (a dict of model
  settings as a static argument), jax-ml/jax#2813 (a list): JAX now raises "Non-hashable static arguments are
  not supported"; %jax_explain said nothing and %%jax_compiles / %%jax_doctor cut the message at "The error
  was:". Explained now: which argument, what the value is, the fix for its kind, tried on the value as JAX
  wrote it.
- jax-ml/jax#7332 (the tutorials' `update` reads the global `step_size`: "if step_size were to change..."),
  jax-ml/jax#1348 (a jitted function reading a global counter gives 1 at every call): a learning rate decayed
  in a Python loop around a jitted step that reads it as a global - nothing recompiles and every call computes
  with the first value. Every magic said OK.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxmagic import probes
from jaxmagic.probes._explain import explain_any
from tests.test_transfers_everywhere import findings_of_each, through_all_three

DEAD_INPUT = """
A_host = np.ones((64, 64), np.float32)
Z_host = np.ones((64,), np.float32)
@jax.jit
def project(x, A, Z):
    unused = A @ x  # dead code: its result is never used, so jit prunes A from the program
    return x * 2 + Z
x = jnp.ones(64)
"""


def test_an_input_read_only_by_dead_code_is_not_told_as_copied(ip):
    loop = "for i in range(3):\n    x = project(x, A_host, Z_host)"
    transfers, doctor, watch = through_all_three(ip, DEAD_INPUT, loop)
    told, doctor_uses, doctor_findings, watch_findings = findings_of_each(transfers, doctor, watch)
    line = "x = project(x, A_host, Z_host)"
    assert told == doctor_uses == {("Z_host", 3, line)}  # was: the doctor and the watch also told A_host
    assert not any("A_host" in title for title, _ in doctor_findings | watch_findings)


def test_an_input_jit_keeps_is_still_told(ip):
    """keep_unused=True keeps the dead input as a parameter of the program: it is copied, and told."""
    setup = DEAD_INPUT.replace("@jax.jit", "@functools.partial(jax.jit, keep_unused=True)")
    ip.run_cell("import functools", store_history=True)
    loop = "for i in range(3):\n    x = project(x, A_host, Z_host)"
    transfers, doctor, watch = through_all_three(ip, setup, loop)
    told, doctor_uses, _, _ = findings_of_each(transfers, doctor, watch)
    assert {argument for argument, _, _ in doctor_uses} == {"A_host", "Z_host"}


def raised(call) -> Exception:
    try:
        call()
    except Exception as error:
        return error
    raise AssertionError("no error")


@jax.jit
def head_plus(x, d):
    return x[: d["num"]] + d["val"]


def test_a_slice_length_from_a_dict_entry_is_made_its_own_static_argument():
    report = probes.explain(raised(lambda: head_plus(jnp.arange(10), {"num": 5, "val": np.arange(5)}))).to_dict()
    assert report["depends_on"] == ["d['num']"]
    uses = [f["use"] for f in report["fixes"]]
    assert uses[0] == "jax.jit(head_plus, static_argnames=('num',))"  # an argument of its own, static
    assert "one entry of the argument `d`" in report["fixes"][0]["when"]
    assert 'jnp.where(jnp.arange(x.shape[0]) < d["num"], x, 0)' in uses  # the full length, masked (as written)
    assert not any(
        "(2,)" in use or ", 2)" in use or "*args" in f["when"] for f in report["fixes"] for use in [f["use"]]
    )
    # a window of the traced length is tried and said not to be enough on its own
    window = next(f for f in report["fixes"] if f["use"].startswith("lax.dynamic_slice_in_dim"))
    assert window["checked"].startswith("checked: not enough on its own")


@jax.jit
def head(x, n):
    return x[:n]


def test_a_slice_length_from_a_plain_argument_is_made_static_first():
    report = probes.explain(raised(lambda: head(jnp.arange(10.0), 5))).to_dict()
    uses = [f["use"] for f in report["fixes"]]
    assert uses[0] == "@functools.partial(jax.jit, static_argnames=('n',))"  # as the decorator is written
    assert "jnp.where(jnp.arange(x.shape[0]) < n, x, 0)" in uses


@dataclasses.dataclass
class Config:
    some_value: int


@functools.partial(jax.jit, static_argnums=1)
def do_stuff(data, config):
    return data * config.some_value


@functools.partial(jax.jit, static_argnames=("model_kwargs",))
def create_model(x, model_kwargs):
    return x * model_kwargs["emb_dim"]


def test_a_dataclass_that_is_not_frozen_as_a_static_argument_gets_frozen_true():
    report = explain_any(raised(lambda: do_stuff(jnp.ones(3), Config(2)))).to_dict()
    assert (report["function"], report["parameters"], report["value_type"]) == ("do_stuff", ["config"], "Config")
    assert report["error_kind"] == "unhashable_static"
    assert "not frozen" in report["what"] and report["value_text"] == "Config(some_value=2)"
    fix = report["fixes"][0]
    assert fix["use"] == "@dataclasses.dataclass(frozen=True) on class Config"
    assert fix["checked"].startswith("checked: a frozen copy of `Config` hashes")


def test_a_dict_as_a_static_argument_gets_a_tuple_of_items_tried_on_its_values():
    report = explain_any(raised(lambda: create_model(jnp.ones(2), {"emb_dim": 4, "share": True}))).to_dict()
    assert (report["function"], report["parameters"], report["value_type"]) == (
        "create_model",
        ["model_kwargs"],
        "dict",
    )
    fix = report["fixes"][0]
    assert fix["use"] == "tuple(sorted({'emb_dim': 4, 'share': True}.items()))"
    assert fix["checked"].startswith("checked: ")
    with_list = explain_any(raised(lambda: create_model(jnp.ones(2), {"emb_dim": 4, "sizes": [1, 2]}))).to_dict()
    assert with_list["fixes"][0]["checked"].startswith("checked: still fails - unhashable type: 'list'")


def test_a_list_as_a_static_argument_gets_a_tuple(ip):
    ip.run_cell("g = jax.jit(lambda x, y: x + y[0], static_argnums=(1,))\nsizes = [2, 3]", store_history=True)
    result = ip.run_cell("%%jax_compiles -o crep\ng(1, sizes)", store_history=True)
    report = explain_any(result.error_in_exec).to_dict()
    assert report["parameters"] == ["y"] and report["value_type"] == "list"
    assert report["fixes"][0]["use"] == "tuple(sizes)" and report["fixes"][0]["checked"].startswith("checked: ")
    assert "Non-hashable" in ip.user_ns["crep"].to_dict()["other_error"]
    # the headline's account of the error goes on past "The error was:" (it stopped at the colon)
    assert "The error was: TypeError: unhashable type: 'list'" in " ".join(str(ip.user_ns["crep"]).split())


STALE = """
lr = 0.1
@jax.jit
def sgd(w, g):
    return w - lr * g
"""
DECAY = "w = jnp.ones(3)\nfor epoch in range(3):\n    lr = 0.1 / (epoch + 1)\n    w = sgd(w, jnp.ones(3))"


def test_a_global_changed_after_tracing_is_told_by_compiles_doctor_and_watch(ip):
    ip.run_cell(STALE, store_history=True)
    ip.run_cell("%%jax_compiles -o crep\n" + DECAY, store_history=True)
    ip.run_cell(STALE, store_history=True)
    ip.run_cell("%%jax_doctor -o drep\n" + DECAY, store_history=True)
    ip.run_cell(STALE, store_history=True)
    ip.run_cell("%jax_watch -o wlog", store_history=True)
    try:
        ip.run_cell(DECAY, store_history=True)
    finally:
        ip.run_cell("%jax_watch off", store_history=True)
    compiles = ip.user_ns["crep"].to_dict()
    assert [(g["function"], g["name"], g["traced"], g["now"]) for g in compiles["stale_globals"]] == [
        ("sgd", "lr", "0.1", "0.03333333333333333")
    ]
    headline = " ".join(str(ip.user_ns["crep"]).split())
    assert headline.startswith("%%jax_compiles [FOUND] `sgd` read the global `lr` when jit traced it (0.1)")
    told = [f["title"] for f in ip.user_ns["drep"].to_dict()["findings"] if "global `lr`" in f["title"]]
    watched = [f["summary"] for f in ip.user_ns["wlog"].to_dict()["findings"] if "global `lr`" in f["summary"]]
    assert len(told) == 1 and watched == told


def test_a_global_changed_and_traced_again_is_not_stale(ip):
    """A new argument shape traces again and reads the new value: nothing stale."""
    ip.run_cell(STALE, store_history=True)
    loop = "for n in (2, 3):\n    lr = 0.1 / n\n    w = sgd(jnp.ones(n), jnp.ones(n))"
    ip.run_cell("%%jax_compiles -o crep\n" + loop, store_history=True)
    assert ip.user_ns["crep"].to_dict()["stale_globals"] == []


PARTS = jnp.ones((40, 2))


def inner_range(i):
    inds = jnp.arange(i)
    return jnp.sum(PARTS[inds], axis=0)


def test_a_vmapped_argument_used_as_a_size_is_named_as_the_argument():
    report = probes.explain(raised(lambda: jax.vmap(inner_range)(jnp.array([3, 4])))).to_dict()
    assert report["depends_on"] == ["i"] and report["traced_function"] == "inner_range"
    assert "the argument `i` of `inner_range`" in report["provenance"]["unknown"]
