"""Memory through the libraries (issue 63.3): programs made by ``nnx.jit``, ``eqx.filter_jit``, a Linen ``apply``
and a Haiku ``transform`` under ``jax.jit`` are measured as ``jax.jit``'s are; a layer that is a library module's
method gets the library's own remat, and donation is asked of the library's jit - each tried by compiling.

Our own minimal versions of real threads, with the real libraries:

* google/flax#5116 - an ``nnx.jit`` train step (``nnx.Optimizer``, ``nnx.value_and_grad``) whose memory
  ``memory_analysis()`` reports; before this, ``%%jax_memory`` said "the cell made none";
* p-doom/jasmine#163 and google/flax#5031 - donating the model and optimizer through ``nnx.jit``
  ("Total memory size: 9.1 GB -> 8.8 GB");
* patrick-kidger/equinox#1152 - "How to checkpoint class method?": ``eqx.filter_checkpoint`` on a module's
  method; patrick-kidger/diffrax#574 - donation through ``eqx.filter_jit`` (all arrays or none);
* jax-ml/jax#23869 - a Linen ``MLP`` block (``nn.Dense`` -> relu -> ``nn.Dense``) rematerialized with ``nn.remat``;
* the Flax scan-over-layers guide (google/flax#4289) and jax-ml/jax#14056 - ``nnx.scan`` over stacked ``Block``s;
* google-deepmind/dm-haiku#778 - ``jax.jit(net.apply)`` of an ``hk.transform``; dm-haiku#14 - ``hk.remat`` only
  inside ``hk.transform``.

Small sizes: every program compiles in well under a second; the ways' peaks are cross-checked with
``memory_analysis()`` of the program the offered code makes, compiled on its own.
"""

from __future__ import annotations

import inspect
import warnings

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
nnx = pytest.importorskip("flax.nnx")
nn = pytest.importorskip("flax.linen")
eqx = pytest.importorskip("equinox")
optax = pytest.importorskip("optax")
hk = pytest.importorskip("haiku")

from jaxmagic.probes._memory import OUTPUT, SAVED_FOR_BACKWARD, explain_out_of_memory, memory, memory_of_call  # noqa: E402

D, N, B = 256, 4, 1024  # width, layers, batch


def _line(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _reserved(compiled) -> int:
    stats = compiled.memory_analysis()
    return (
        stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes
    )


def _only_program(report):
    [program] = report.programs
    return program


# -- Flax NNX -----------------------------------------------------------------------------------------------


class NnxBlock(nnx.Module):
    def __init__(self, d, rngs):
        self.l1 = nnx.Linear(d, d, rngs=rngs)
        self.l2 = nnx.Linear(d, d, rngs=rngs)

    def __call__(self, x):
        h = jnp.tanh(self.l1(x))
        return x + self.l2(h)


NNX_CALL = NnxBlock.__dict__["__call__"]


class NnxRematBlock(NnxBlock):  # the offered fix, as written
    @nnx.remat
    def __call__(self, x):
        h = jnp.tanh(self.l1(x))
        return x + self.l2(h)


class NnxModel(nnx.Module):
    def __init__(self, block, rngs):
        self.blocks = nnx.List([block(D, rngs) for _ in range(N)])

    def __call__(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def nnx_train_step(model, optimizer, x):
    def loss_fn(model):
        return (model(x) ** 2).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def _run_nnx_cell():
    model = NnxModel(NnxBlock, nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    train_step = nnx.jit(nnx_train_step)
    x = jnp.ones((B, D))
    with memory() as report:
        for _ in range(3):
            train_step(model, optimizer, x)  # the cell's call
    return report, model, optimizer, x


@pytest.fixture(scope="module")
def nnx_cell():
    return _run_nnx_cell()


def test_an_nnx_jit_train_step_is_measured_at_the_users_line(nnx_cell):
    """google/flax#5116: the program nnx.jit made is the cell's program, not "the cell made none"."""
    report, *_ = nnx_cell
    program = _only_program(report)
    assert program.function == "nnx_train_step" and program.problem == ""
    assert program.called_at.lineno == _line(_run_nnx_cell, "train_step(model, optimizer, x)  # the cell's")
    assert "made none" not in str(report)
    saved = [b for b in program.buffers if b.role == SAVED_FOR_BACKWARD]
    assert {b.made_at.function for b in saved} >= {"NnxBlock.__call__"}


def test_nnx_remat_on_the_blocks_method_is_tried_and_offered(nnx_cell):
    """The activations are made in `NnxBlock.__call__`, a method: `@nnx.remat` on it, compiled - the same
    program as the class decorated by hand, and the user's class as it was."""
    report, model, optimizer, x = nnx_cell
    program = _only_program(report)
    [remat] = [w for w in program.ways_down if w.kind == "checkpoint" and "keeping" not in w.title]
    assert remat.title == "@nnx.remat on `NnxBlock.__call__`" and remat.code.startswith("@nnx.remat  # above")
    assert remat.lowers and remat.traced_again and remat in program.offered
    assert NnxBlock.__dict__["__call__"] is NNX_CALL  # the user's class as it was
    written_model = NnxModel(NnxRematBlock, nnx.Rngs(0))
    written = nnx.jit(nnx_train_step).lower(
        written_model, nnx.Optimizer(written_model, optax.adam(1e-3), wrt=nnx.Param), x
    )
    assert remat.peak_after >= _reserved(written.compile())
    assert program.peak_bytes >= _reserved(nnx.jit(nnx_train_step).lower(model, optimizer, x).compile())


def test_donation_through_nnx_jit_is_spelled_as_nnx_jit_and_frees_only_arguments(nnx_cell):
    """p-doom/jasmine#163: `nnx.jit(train_step, donate_argnames=("model", "optimizer"))`, never a jax.jit the
    user cannot reach; what it takes off is at most the donated arguments' bytes."""
    report, model, optimizer, x = nnx_cell
    program = _only_program(report)
    [donate] = [w for w in program.ways_down if w.kind == "donate"]
    assert donate.code.startswith('nnx.jit(nnx_train_step, donate_argnames=("model", "optimizer"))')
    assert "jax.jit" not in donate.title and "nnx.jit(" in donate.title
    # nnx.jit writes the new state back into `model` and `optimizer`: nothing to rebind (it said "rebind them")
    assert "nnx.jit puts the new state back into model, optimizer" in donate.code and "rebind" not in donate.code
    arguments = program.figures.argument_bytes
    assert donate.peak_after is not None and program.peak_bytes - donate.peak_after <= arguments
    donated = nnx.jit(nnx_train_step, donate_argnames=("model", "optimizer")).lower(model, optimizer, x).compile()
    assert donate.peak_after >= _reserved(donated)


def test_jax_memory_call_of_an_nnx_jit_function_opens_it_as_the_cell_does(nnx_cell):
    """`%jax_memory train_step(model, optimizer, x)`: the wrapper is opened as nnx.jit's own `trace` opens it
    (its graph split into states), never traced under a jax.jit of ours - where the updates nnx.jit makes in
    place are no output, and the backward pass they need would be measured away."""
    report, model, optimizer, x = nnx_cell
    cell = _only_program(report)
    train_step = nnx.jit(nnx_train_step)
    called = _only_program(memory_of_call(train_step, (model, optimizer, x), call="train_step(model, optimizer, x)"))
    assert called.function == "train_step" and called.peak_bytes == cell.peak_bytes
    [remat] = [w for w in called.ways_down if w.kind == "checkpoint" and "keeping" not in w.title]
    [cell_remat] = [w for w in cell.ways_down if w.kind == "checkpoint" and "keeping" not in w.title]
    assert remat.peak_after == cell_remat.peak_after and remat.lowers


@eqx.filter_jit
def eqx_nearest(x):
    d = jnp.abs(x[:, None] - x[None, :])
    return jnp.sort(d, axis=0)[1]  # the 64 GiB sort


def test_an_out_of_memory_error_inside_eqx_filter_jit_is_explained_with_its_program():
    """A real RESOURCE_EXHAUSTED raised inside `eqx.filter_jit`'s call: the call on the user's line is the
    library's wrapper, opened to its program with the arguments rebuilt as shapes (eqx keeps non-arrays
    static: the shapes stand in as arrays while it partitions them)."""
    try:
        eqx_nearest(jnp.linspace(0.0, 1.0, 2**17))
    except Exception as raised:
        error = raised
    else:
        pytest.fail("the 64 GiB program ran")
    report = explain_out_of_memory(error)
    assert report is not None and report.program is not None, report and report.problem
    assert report.program.function == "eqx_nearest"
    top = report.program.buffers[0]
    assert top.shape == "f32[131072,131072]" and top.operation == "sort"
    assert top.made_at.lineno == _line(eqx_nearest.__wrapped__, "jnp.sort(d, axis=0)")


# -- Flax NNX: scan over layers --------------------------------------------------------------------------------


class ScannedModel(nnx.Module):
    def __init__(self, rngs):
        @nnx.split_rngs(splits=N)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(rngs):
            return NnxBlock(D, rngs)

        self.layers = make(rngs)

    def __call__(self, x):
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def forward(x, block):
            return block(x)

        return forward(x, self.layers)


def test_nnx_scan_over_layers_names_the_blocks_lines_and_offers_nnx_remat():
    model = ScannedModel(nnx.Rngs(0))
    grads = nnx.jit(lambda model, x: nnx.grad(lambda m: (m(x) ** 2).mean())(model))
    x = jnp.ones((B, D))
    with memory() as report:
        grads(model, x)
    program = _only_program(report)
    stacks = [b for b in program.buffers if b.stacked and b.role != OUTPUT]  # the gradients are stacks too
    assert stacks and all(b.stacked == N and b.role == SAVED_FOR_BACKWARD for b in stacks)
    assert {b.made_at.function for b in stacks} == {"NnxBlock.__call__"}
    assert {b.scan_at.lineno for b in stacks} == {_line(ScannedModel.__call__, "return forward(x, self.layers)")}
    best = program.offered[0]
    assert best.kind == "checkpoint" and best.code.startswith("@nnx.remat") and best.lowers
    body = [w for w in program.ways_down if w.title.startswith("jax.checkpoint around the body of the scan")]
    assert body and body[0].code == ""  # nnx.scan's line is no `scan(f, ...)` call: no code it could not write


# -- Equinox -----------------------------------------------------------------------------------------------------


class EqxBlock(eqx.Module):
    l1: eqx.nn.Linear
    l2: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.l1, self.l2 = eqx.nn.Linear(D, D, key=k1), eqx.nn.Linear(D, D, key=k2)

    def __call__(self, x):
        h = jnp.tanh(x @ self.l1.weight.T)
        return x + h @ self.l2.weight.T


class EqxModel(eqx.Module):
    blocks: list

    def __init__(self, key):
        self.blocks = [EqxBlock(k) for k in jax.random.split(key, N)]

    def __call__(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def eqx_step(model, x):
    grads = eqx.filter_grad(lambda m: (m(x) ** 2).mean())(model)
    return jax.tree.map(lambda p, g: p - 0.1 * g, model, grads)


def test_eqx_filter_jit_program_gets_filter_checkpoint_on_the_method_and_donate_all():
    """equinox#1152 (checkpoint a class method) and diffrax#574 (donation through filter_jit)."""
    step = eqx.filter_jit(eqx_step)
    model, x = EqxModel(jax.random.key(0)), jnp.ones((B, D))
    with memory() as report:
        for _ in range(2):
            model = step(model, x)
    program = _only_program(report)
    assert program.function == "eqx_step"
    [remat] = [w for w in program.ways_down if w.kind == "checkpoint" and "keeping" not in w.title]
    assert remat.title == "@eqx.filter_checkpoint on `EqxBlock.__call__`" and remat.lowers
    assert remat.code.startswith("@eqx.filter_checkpoint  # above `def __call__` in `class EqxBlock`")
    [donate] = [w for w in program.ways_down if w.kind == "donate"]
    assert donate.code.startswith('eqx.filter_jit(eqx_step, donate="all")') and "every array" in donate.title
    with warnings.catch_warnings():  # `x` has no output to be written over: JAX says so of our own lowering
        warnings.simplefilter("ignore")
        donated = eqx.filter_jit(eqx_step, donate="all").lower(model, x).compile().compiled
    assert donate.peak_after >= _reserved(donated)


# -- Flax Linen under jax.jit ------------------------------------------------------------------------------------


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(4 * D, use_bias=False)(x))
        return x + nn.Dense(D, use_bias=False)(h)


class LinenModel(nn.Module):
    @nn.compact
    def __call__(self, x):
        for _ in range(N):
            x = LinenMLP()(x)
        return x


def test_linen_apply_under_jax_jit_gets_nn_remat_on_the_method_its_parameters_named_as_before():
    """jax-ml/jax#23869's MLP block: `@nn.remat` above `@nn.compact` on its `__call__` - compiled; as a method
    decorator it keeps `LinenMLP_0` (``nn.remat(LinenMLP)`` would rename the parameters `CheckpointLinenMLP_0`)."""
    original = LinenMLP.__dict__["__call__"]
    model, x = LinenModel(), jnp.ones((B, D))
    params = model.init(jax.random.key(0), x)
    grads = jax.jit(lambda p, x: jax.grad(lambda p: (model.apply(p, x) ** 2).mean())(p))
    with memory() as report:
        grads(params, x)
    program = _only_program(report)
    [remat] = [w for w in program.ways_down if w.kind == "checkpoint" and "keeping" not in w.title]
    assert remat.title == "@nn.remat on `LinenMLP.__call__`" and remat.lowers and remat in program.offered
    assert remat.code == "@nn.remat  # above `def __call__` in `class LinenMLP`, above @nn.compact"
    assert sorted(params["params"]) == [f"LinenMLP_{i}" for i in range(N)]

    class RematMLP(nn.Module):  # the fix as written
        @nn.remat
        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.Dense(4 * D, use_bias=False)(x))
            return x + nn.Dense(D, use_bias=False)(h)

    class Written(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(N):
                x = RematMLP()(x)
            return x

    written = Written()
    written_params = written.init(jax.random.key(0), x)
    written_grads = jax.jit(lambda p, x: jax.grad(lambda p: (written.apply(p, x) ** 2).mean())(p))
    assert remat.peak_after >= _reserved(written_grads.lower(written_params, x).compile())
    assert LinenMLP.__dict__["__call__"] is original


# -- Haiku under jax.jit -----------------------------------------------------------------------------------------


class HkBlock(hk.Module):
    def __call__(self, x):
        h = jnp.tanh(hk.Linear(D)(x))
        return x + hk.Linear(D)(h)


def _hk_forward(x):
    for _ in range(N):
        x = HkBlock()(x)
    return x


def test_haiku_apply_under_jax_jit_is_measured_and_hk_remat_is_said_not_tried():
    """dm-haiku#778's `jax.jit(net.apply)` shape, under grad: measured as a jax.jit program; `hk.remat` runs only
    inside `hk.transform` (dm-haiku#14), so no decorator is offered - the report says why, never a fix untried."""
    net = hk.without_apply_rng(hk.transform(_hk_forward))
    x = jnp.ones((B, D))
    params = net.init(jax.random.key(0), x)
    grads = jax.jit(jax.grad(lambda p, x: (net.apply(p, x) ** 2).mean()))
    with memory() as report:
        grads(params, x)
    program = _only_program(report)
    [remat] = [w for w in program.ways_down if w.kind == "checkpoint"]
    assert remat.peak_after is None and "hk.transform" in remat.problem and remat not in program.offered
    assert "hk.remat" not in report.fix


def test_on_python_3_11_the_post_hook_sees_an_nnx_jit_call_as_the_users(monkeypatch, nnx_cell):
    """Where there are no CALL events (``monitoring_tool`` as on Python 3.11), jitted calls are seen by JAX's
    post hook: nnx.jit's call of its `jitted_fn`, served from the C++ cache, is the user's too."""
    from jaxmagic._jax import monitoring_tool

    monkeypatch.setattr(monitoring_tool, "HAS_MONITORING", False)
    _, model, optimizer, x = nnx_cell
    train_step = nnx.jit(nnx_train_step)
    train_step(model, optimizer, x)  # compiled before the block: the block's call is a fast-path one
    with memory(try_ways=False) as report:
        train_step(model, optimizer, x)
    assert [p.function for p in report.programs] == ["nnx_train_step"]
    assert report.programs[0].called_at.lineno == _line(
        test_on_python_3_11_the_post_hook_sees_an_nnx_jit_call_as_the_users, "        train_step(model, optimizer, x)\n"
    )
