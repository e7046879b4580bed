"""The probes that trace, lower or compile the user's call, given a library's jit: `eqx.filter_jit`, `nnx.jit`.

Neither is `jax.jit`: each repacks the user's arguments and calls a `jax.jit` of its own. `%jax_hlo`,
`%jax_stages`, `%jax_check` and `%jax_sharding` put `jax.jit` around the wrapper (or called `nnx.jit`'s own
`trace`, which returns its own record), and failed where the user's call works: "Error interpreting argument
to ... as an abstract array" (an Equinox module holds its activation functions), "Cannot mutate Param from a
different trace level" (NNX), an AttributeError raised out of the magic. Each probe now opens the wrapper
(`_support/calls/library_wrappers.py`): the library's `jax.jit`, with the arguments the library gives it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes

eqx = pytest.importorskip("equinox")
nnx = pytest.importorskip("flax.nnx")

X = jnp.linspace(-1.0, 1.0, 32).reshape(4, 8)
RAN: list[str] = []  # the user's Python, each time it runs (traced or not)


def _equinox():
    mlp = eqx.nn.MLP(8, 2, 16, 1, key=jax.random.key(0))

    @eqx.filter_jit
    def forward(m, x):
        RAN.append("forward")
        return jnp.log(jax.vmap(m)(x))  # a NaN where a row's output is negative

    return forward, mlp


def _flax():
    layer = nnx.Linear(8, 2, rngs=nnx.Rngs(0))

    @nnx.jit
    def forward(m, x):
        RAN.append("forward")
        return jnp.log(m(x))

    return forward, layer


LIBRARIES = {"equinox": _equinox, "flax.nnx": _flax}


@pytest.fixture(params=list(LIBRARIES))
def wrapped(request):
    forward, model = LIBRARIES[request.param]()
    RAN.clear()
    return forward, model


def test_hlo_reads_the_librarys_program_without_running_the_users_python_again(wrapped):
    forward, model = wrapped
    forward(model, X)  # the user's call: traced once, its jax.jit's trace cached
    report = probes.hlo(forward, model, X, call_text="forward(model, X)")
    assert not report.failure and report.function == "jit(forward)"
    assert any("[4,2]" in output for output in report.outputs)  # the user's program's result, read
    assert report.memory is not None and report.memory.argument_bytes > 0
    assert RAN == ["forward"]  # the library's jax.jit answered from JAX's trace cache


def test_stages_times_the_librarys_jit_and_says_so(wrapped):
    forward, model = wrapped
    report = probes.stages(forward, model, X, call_text="forward(model, X)")
    assert not report.failed_stage, report.failure
    assert report.compile_seconds is not None and report.steady_run_seconds is not None
    assert any("a library's jit" in note for note in report.notes)
    assert not any("donation" in note for note in report.notes)  # eqx's jit donates its first argument: empty


def test_check_finds_the_nan_inside_the_librarys_jit(wrapped):
    forward, model = wrapped
    report = probes.check(forward, model, X, call_text="forward(model, X)")
    assert not report.failure
    [error] = [e for e in report.errors if e.kind == "nan"]
    assert error.line is not None and "jnp.log" in error.line.code


def test_check_says_ok_through_the_librarys_jit_when_nothing_is_wrong(wrapped):
    forward, model = wrapped
    report = probes.check(forward, model, X, call_text="forward(model, X)", errors="div,index")
    assert not report.failure and report.errors == [] and report.status.value == "ok"


def test_sharding_runs_the_call_as_the_user_does_and_reads_its_program(wrapped):
    forward, model = wrapped
    report, error = probes.run_sharding_call(forward, (model, X), call_text="forward(model, X)")
    assert error is None and not report.failure and report.call.was_jitted
    assert report.arrays and report.call.outputs


def test_the_librarys_arguments_are_named_as_the_users_call_names_them(wrapped):
    """The library's jax.jit takes its own repacking of the user's arrays: `%jax_hlo` listed
    `dynamic_nodonate['first'][0]: f32[16,8]` and `%jax_memory` "made by argument `dynamic_nodonate['first'][0]`"
    for Equinox. The arrays are the user's own (not copies): named by the user's parameter and path."""
    forward, model = wrapped
    inputs = probes.hlo(forward, model, X, stage="jaxpr").inputs
    memory = probes.memory_of_call(forward, (model, X), call="forward(model, X)")
    [program] = memory.programs
    arguments = {b.argument for b in program.buffers if b.argument}
    if isinstance(model, eqx.Module):
        assert inputs[0] == "m.layers[0].weight: f32[16,8]" and inputs[-1] == "x: f32[4,8]"
        assert arguments == {"m.layers[0].weight", "m.layers[0].bias", "m.layers[1].weight", "m.layers[1].bias", "x"}
        assert "argument `m.layers[0].weight`" in memory.summary
    else:  # nnx.jit names the states by the parameter already; the path is the module's
        assert {i.split(":")[0] for i in inputs} == {"m.kernel.value", "m.bias.value", "x"}
        assert arguments == {"m.kernel.value", "m.bias.value", "x"}
    assert not any("dynamic" in name or "states" in name for name in arguments)


def test_a_cells_library_jit_programs_name_the_users_arguments(wrapped, ip):
    """`%%jax_memory` sees the program a library's jit ran from JAX's dispatch, with the library's repacked
    arguments: the capture asks, while the call is on the stack, the user's names for them."""
    forward, model = wrapped
    ip.user_ns.update(forward=forward, model=model, X=X)
    ip.run_cell("%%jax_memory -o found\ny = forward(model, X)")
    [program] = ip.user_ns["found"].programs
    arguments = {b.argument for b in program.buffers if b.argument}
    assert "x" in arguments and all(name.startswith(("m.", "x")) for name in arguments), arguments


def test_stages_and_check_of_a_donating_library_jit_leave_the_users_arrays_alive():
    """`%jax_stages` timed nnx.jit's own function (not a plain function: no copy) with its donation on, and
    its runs deleted the module's parameters ("Array has been deleted" at the second run, the user's model
    gone). It is jitted again without donation, as a copy is; nothing of the user's is donated."""
    layer = nnx.Linear(8, 2, rngs=nnx.Rngs(0))
    mlp = eqx.nn.MLP(8, 2, 16, 1, key=jax.random.key(0))
    calls = {
        "nnx": (nnx.jit(lambda m, x: m(x), donate_argnames=("m",)), layer),
        "eqx": (eqx.filter_jit(lambda m, x: jax.vmap(m)(x), donate="all"), mlp),
    }
    for name, (step, model) in calls.items():
        report = probes.stages(step, model, X, call_text=f"step({name}, X)")
        assert not report.failed_stage and report.steady_run_seconds is not None, report.failure
        assert any("donation is left off" in note for note in report.notes)
        assert probes.check(step, model, X).failure == ""
        assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(model) if isinstance(leaf, jax.Array))


def test_sharding_of_a_donating_call_runs_on_copies_and_says_so():
    """`%jax_sharding update(P, G)` ran the call as written, and its donation deleted `P`: the layouts it reads
    are the same on copies, so it runs on those and says so."""
    update = jax.jit(lambda p, g: p - 0.1 * g, donate_argnums=0)
    p, g = jnp.ones(4), jnp.ones(4)
    report, error = probes.run_sharding_call(update, (p, g), call_text="update(p, g)")
    assert error is None and report.call.ran_on_copies and not p.is_deleted()
    assert "it ran on copies of them" in str(report)
    mlp = eqx.nn.MLP(4, 4, 8, 1, key=jax.random.key(0))
    step = eqx.filter_jit(lambda m, x: m.layers[0].weight * 2, donate="all")
    report, error = probes.run_sharding_call(step, (mlp, p), call_text="step(mlp, p)")
    assert error is None and report.call.ran_on_copies and not mlp.layers[0].weight.is_deleted()
