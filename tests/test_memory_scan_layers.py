"""Scan over layers (issue 63.2): the residuals a scan stacks under ``jax.grad`` are named by the line of the
body that made them, and ``jax.checkpoint`` on the scan's body is tried by compiling.

The programs are our own minimal versions of real threads: the stacked ``[NumLayers, Batch, Pos, Embed]``
activations of a scanned transformer that fill the peak (marin-community/marin#1936, "the cached activations
from a `layers.fold(x)` call"), the "well-known JAX idiom" ``scan(remat(fn))`` that took a train step from
19,558 MiB to 15,695 MiB (apple/axlearn#1171), per-layer gradient checkpointing with ``jax.lax.scan`` and
``jax.checkpoint`` (NovaSky-AI/SkyRL#906), and a scan with its body checkpointed (jax-ml/jax#2139). Compiled
only (``memory_analysis()`` cross-checks every figure); nothing of their size is allocated.
"""

from __future__ import annotations

import inspect

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from jaxmagic.probes._memory import OUTPUT, SAVED_FOR_BACKWARD, memory_of_call  # noqa: E402
from jaxmagic.probes._memory.program import program_memory  # noqa: E402

LAYERS, HIDDEN, BATCH = 8, 512, 1024


def block(x, w):
    w1, w2 = w
    h = jnp.tanh(x @ w1)
    return x + h @ w2, None


def loss(params, x):
    y, _ = jax.lax.scan(block, x, params)
    return (y**2).mean()


def loss_checkpointed(params, x):  # the fix as a user writes it
    y, _ = jax.lax.scan(jax.checkpoint(block), x, params)
    return (y**2).mean()


def _specs():
    w = jax.ShapeDtypeStruct((LAYERS, HIDDEN, HIDDEN), jnp.float32)
    return (w, w), jax.ShapeDtypeStruct((BATCH, HIDDEN), jnp.float32)


def _line(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _reserved(jitted, *args) -> int:
    stats = jitted.lower(*args).compile().memory_analysis()
    return (
        stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes
    )


@pytest.fixture(scope="module")
def scan_report():
    step = jax.jit(jax.grad(loss))
    return memory_of_call(step, _specs(), call="step(params, x)")


def test_stacked_residuals_are_named_by_the_body_line_that_made_them(scan_report):
    """Not "dynamic_update_slice" on the `lax.scan(...)` line: XLA's stacking update writes the body's value,
    and that value's line (`h = jnp.tanh(x @ w1)`) is what the report names, with the scan's line beside it."""
    [program] = scan_report.programs
    stacks = [b for b in program.buffers if b.stacked and b.role != OUTPUT]
    assert stacks and all(b.stacked == LAYERS and b.shape == f"f32[{LAYERS},{BATCH},{HIDDEN}]" for b in stacks)
    assert all(b.role == SAVED_FOR_BACKWARD for b in stacks)  # read by the backward loop, across the loop's edge
    assert all(b.scan_at.lineno == _line(loss, "jax.lax.scan(block") for b in stacks)
    assert {b.made_at.function for b in stacks} == {"block"}
    tanh_line = _line(block, "jnp.tanh(x @ w1)")
    assert {b.operation for b in stacks if b.made_at.lineno == tanh_line} >= {"tanh"}
    carry = [b for b in stacks if b.carry]  # the value each layer got: named by the line making the next one
    assert [b.made_at.lineno for b in carry] == [_line(block, "return x + h @ w2")]
    assert not any(b.operation == "dynamic_update_slice" for b in stacks)
    data = scan_report.to_dict()["programs"][0]["buffers"]
    assert any(d["stacked"] == LAYERS and d["made_at"]["lineno"] == tanh_line for d in data)
    assert "what the scan at line" in scan_report.summary and "stacks for the backward pass" in scan_report.summary


def test_the_gradients_the_backward_loop_stacks_are_named_by_the_lines_of_their_weights(scan_report):
    """The outputs of `jax.grad` are stacks too: the backward loop writes one layer's gradient per iteration into
    a buffer that starts as zeros before the loop (XLA names those zeros, not the update, as live at the peak).
    Each is named by the body's line that reads its weight - `w1`'s at `h = jnp.tanh(x @ w1)` - never "fusion"."""
    [program] = scan_report.programs
    outputs = [b for b in program.buffers if b.role == OUTPUT]
    assert outputs and all(b.stacked == LAYERS and b.shape == f"f32[{LAYERS},{HIDDEN},{HIDDEN}]" for b in outputs)
    lines = {b.made_at.lineno for b in outputs}
    assert lines == {_line(block, "jnp.tanh(x @ w1)"), _line(block, "return x + h @ w2")}
    assert "what the scan at line" in scan_report.summary  # the residuals' stacks, not the gradients'


def test_checkpoint_on_the_scan_body_is_compiled_and_offered_as_code_to_paste(scan_report):
    """`jax.lax.scan(jax.checkpoint(block), x, params)`: compiled by tracing the call again with the scan at that
    line given the checkpointed body - the same program the user's rewrite makes, to the byte."""
    [program] = scan_report.programs
    best = program.offered[0]
    assert best.kind == "checkpoint" and best.traced_again and best.platform
    assert best.code == "jax.lax.scan(jax.checkpoint(block), x, params)"
    assert best.peak_after < program.peak_bytes * 0.8
    written = jax.jit(jax.grad(loss_checkpointed))
    [rewritten] = memory_of_call(written, _specs(), try_ways=False).programs
    assert best.peak_after == rewritten.peak_bytes  # the trial is the rewrite
    assert best.peak_after >= _reserved(written, *_specs())  # never below what XLA reserves for it
    assert program.peak_bytes >= _reserved(jax.jit(jax.grad(loss)), *_specs())
    policy = [w for w in program.ways_down if "keeping matrix products" in w.title]
    assert policy and "dots_with_no_batch_dims_saveable" in policy[0].code and policy[0].peak_after is not None
    assert "Write `jax.lax.scan(jax.checkpoint(block), x, params)`" in scan_report.fix


def test_the_trial_leaves_jax_lax_scan_as_it_was(scan_report):
    from jax._src.lax.control_flow import loops

    assert jax.lax.scan is loops.scan and loops.scan.__module__ == "jax._src.lax.control_flow.loops"


def test_a_scan_imported_under_another_name_is_said_untried_never_measured_as_the_same_program():
    """`from jax.lax import scan`: the stand-in is never met; the way says so instead of "not lower"."""
    namespace: dict = {"jnp": jnp, "block": block}
    exec(  # a module of the user's that imported scan by name
        "from jax.lax import scan\ndef loss_named(params, x):\n    y, _ = scan(block, x, params)\n    return (y ** 2).mean()\n",
        namespace,
    )
    step = jax.jit(jax.grad(namespace["loss_named"]))
    program, compiled = program_memory(step, _specs())
    from jaxmagic.probes._memory.ways_down import ways_down

    ways = [w for w in ways_down(compiled, program, None) if w.kind == "checkpoint"]
    assert ways and all(w.peak_after is None and "not called through `jax.lax.scan`" in w.problem for w in ways)
    assert not any(w.lowers for w in ways)


def test_a_forward_scan_stacks_its_outputs_and_no_checkpoint_is_tried():
    """Without a gradient the stacks are the scan's outputs (ys): named by the body's line, never "saved for
    the backward pass", and no checkpoint is offered for them."""

    def body(c, w):
        y = jnp.tanh(c @ w)
        return y, y

    step = jax.jit(lambda params, x: jax.lax.scan(body, x, params)[1])
    [program] = memory_of_call(step, (_specs()[0][0], _specs()[1])).programs
    stacks = [b for b in program.buffers if b.stacked]
    assert stacks and all(b.role != SAVED_FOR_BACKWARD for b in stacks)
    assert {b.made_at.lineno for b in stacks} == {_line(body, "jnp.tanh(c @ w)")}
    assert not any(w.kind == "checkpoint" for w in program.ways_down)
