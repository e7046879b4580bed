"""The memory probe on real programs on CPU: what fills a peak by line, real out-of-memory errors (XLA's CPU
client raises RESOURCE_EXHAUSTED for a buffer the host cannot give), and ways down tried by compiling.

The shapes follow real threads: jax-ml/jax#13428 (an out-of-memory error where the program needs little:
the allocator, not the size), jax-ml/jax#19822 (jax.checkpoint around a whole function does not lower the
peak), jax-ml/jax#12792 (which residuals are saved), the chapter's section 7.1 (per-example gradients).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from jaxmagic import probes  # noqa: E402
from jaxmagic._jax.compile_dumps import compile_with_memory_dumps  # noqa: E402
from jaxmagic.probes._memory import (  # noqa: E402
    ARGUMENT,
    OUTPUT,
    SAVED_FOR_BACKWARD,
    TEMPORARY,
    explain_out_of_memory,
    memory_of_call,
)
from jaxmagic.probes._memory.buffer_assignment import parse_buffer_assignment  # noqa: E402
from jaxmagic.probes._memory.program import program_memory  # noqa: E402

BIG = 2**17  # 131072 points: a 64 GiB f32[131072,131072] temporary, more than this machine's host has


@jax.jit
def nearest(x):
    d = jnp.abs(x[:, None] - x[None, :])  # line of the pairwise buffer
    return jnp.sort(d, axis=0)[1]  # line of the sort over it


def _line_of(fn, text: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(getattr(fn, "__wrapped__", fn))
    return first + next(i for i, line in enumerate(lines) if text in line)


# -- XLA's buffer assignment, read from real dumps ---------------------------------------------------------


def test_buffer_assignment_of_a_real_compilation_is_read():
    lowered = nearest.trace(jax.ShapeDtypeStruct((BIG,), jnp.float32)).lower()
    _, dumps = compile_with_memory_dumps(lowered)
    assert dumps.hlo.startswith("HloModule") and "Live ranges at" in dumps.live_range
    assignment = parse_buffer_assignment(dumps.buffer_assignment, dumps.live_range)
    temps = [a for a in assignment.allocations if a.temporary]
    assert [a.size for a in temps] == [BIG * BIG * 4]
    parameters = [a for a in assignment.allocations if a.parameter is not None]
    assert [(a.parameter, a.size) for a in parameters] == [(0, BIG * 4)]
    assert any(a.live_out for a in assignment.allocations)
    assert assignment.peak[0].size == BIG * BIG * 4  # the sort's buffer, largest first
    # the sort is made in place over the pairwise differences: the same memory, two values
    assert assignment.sharing(assignment.peak[0].instruction)
    assert assignment.peak_bytes == BIG * BIG * 4 + 2 * BIG * 4


def test_without_live_ranges_the_allocations_are_still_read():
    """A platform whose XLA writes no live-range file: allocations, no peak list - and the program says so."""
    lowered = nearest.trace(jax.ShapeDtypeStruct((16,), jnp.float32)).lower()
    _, dumps = compile_with_memory_dumps(lowered)
    assignment = parse_buffer_assignment(dumps.buffer_assignment, "")
    assert assignment.allocations and assignment.peak == [] and assignment.peak_bytes == 0


def test_a_text_it_does_not_know_is_skipped():
    assignment = parse_buffer_assignment("allocation x: what\nnonsense\n", "Live ranges at 3 (peak):\n  ??\n")
    assert assignment.allocations == [] and assignment.peak == []


# -- what fills the peak, by line ----------------------------------------------------------------------------


def test_the_peak_is_named_by_the_users_line_and_role():
    report = memory_of_call(nearest, (jax.ShapeDtypeStruct((BIG,), jnp.float32),), try_ways=False)
    [program] = report.programs
    top = program.buffers[0]
    assert (top.shape, top.bytes, top.role, top.operation) == (f"f32[{BIG},{BIG}]", BIG * BIG * 4, TEMPORARY, "sort")
    assert top.made_at.lineno == _line_of(nearest, "jnp.sort(d, axis=0)")
    assert top.reuses == [f"`abs` at line {_line_of(nearest, 'x[:, None] - x[None, :]')}"]
    roles = {b.role for b in program.buffers}
    assert {ARGUMENT, OUTPUT} <= roles
    assert [b.argument for b in program.buffers if b.role == ARGUMENT] == ["x"]
    assert program.peak_bytes >= BIG * BIG * 4 and not program.traced_again
    assert report.status.value == "problem"  # more than this host can give: something to act on


def _block(p, x):
    h = jax.nn.gelu(x @ p["w1"])
    return x + h @ p["w2"]


def _loss(params, x):
    for p in params:
        x = _block(p, x)
    return jnp.mean(x**2)


@jax.jit
def _train_step(params, x):
    grads = jax.grad(_loss)(params, x)
    return jax.tree.map(lambda a, g: a - 0.01 * g, params, grads)


def _block_specs(d=128, layers=6, batch=2048):
    params = [
        {"w1": jax.ShapeDtypeStruct((d, 4 * d), jnp.float32), "w2": jax.ShapeDtypeStruct((4 * d, d), jnp.float32)}
    ] * layers
    return params, jax.ShapeDtypeStruct((batch, d), jnp.float32)


def test_activations_saved_for_the_backward_pass_are_told_and_checkpoint_is_tried():
    """A transformer-style MLP block (4x hidden) under grad: its activations fill the peak; jax.checkpoint
    around the block, tried by compiling, lowers it (the block's input is kept, its hidden activations not)."""
    params, x = _block_specs()
    report = memory_of_call(_train_step, (params, x))
    [program] = report.programs
    saved = [b for b in program.buffers if b.role == SAVED_FOR_BACKWARD]
    assert sum(b.bytes for b in saved) > program.peak_bytes / 2
    assert {b.made_at.function for b in saved} == {"_block"}
    checkpoint = [w for w in program.ways_down if w.kind == "checkpoint"]
    assert checkpoint and all(w.traced_again for w in checkpoint)
    best = program.offered[0]
    assert best.kind == "checkpoint" and best.code == "_block = jax.checkpoint(_block)"
    assert best.peak_after < program.peak_bytes / 2
    assert "jax.checkpoint" in report.fix and "tried by compiling" in report.fix
    # the user's module is untouched: the trial rebound _block in a copy of its globals
    assert _train_step.__wrapped__.__globals__["_block"] is _block


def test_checkpoint_around_the_whole_function_is_tried_and_not_offered():
    """jax-ml/jax#19822: checkpointing the whole differentiated function keeps the same peak."""

    def foobar(w, x):
        for _ in range(6):
            x = jax.nn.relu(jnp.dot(w, x) + 1)
        return x.sum()

    globals()["foobar"] = foobar
    try:
        step = jax.jit(jax.grad(foobar))
        w, x = jax.ShapeDtypeStruct((512, 512), jnp.float32), jax.ShapeDtypeStruct((512, 256), jnp.float32)
        [program] = memory_of_call(step, (w, x)).programs
    finally:
        del globals()["foobar"]
    tried = [w for w in program.ways_down if w.kind == "checkpoint"]
    assert tried, program.ways_down
    assert not any(w in program.offered for w in tried)


def test_an_update_without_donation_is_offered_donate_argnums():
    """Parameters updated out of place: donating them lets the output reuse their buffers."""

    @jax.jit
    def update(params, grads):
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w": jax.ShapeDtypeStruct((2048, 2048), jnp.float32), "b": jax.ShapeDtypeStruct((2048,), jnp.float32)}
    [program] = memory_of_call(update, (params, params)).programs
    [donate] = [w for w in program.ways_down if w.kind == "donate"]
    assert donate.lowers and donate.title.startswith("donate `params`, `grads`")
    assert "donate_argnums=(0, 1)" in donate.code
    assert donate.peak_after <= program.peak_bytes * 2 / 3 + 1024


def test_per_example_gradients_are_offered_the_batch_gradient():
    """The chapter's section 7.1: vmap(grad) makes B x P numbers; the gradient of the mean makes P."""

    def per_example_loss(w, x, y):
        return (jnp.dot(x, w) - y) ** 2

    per_ex_grad = jax.jit(jax.vmap(jax.grad(per_example_loss), in_axes=(None, 0, 0)))
    B, P = 1024, 4096
    specs = (
        jax.ShapeDtypeStruct((P,), jnp.float32),
        jax.ShapeDtypeStruct((B, P), jnp.float32),
        jax.ShapeDtypeStruct((B,), jnp.float32),
    )
    [program] = memory_of_call(per_ex_grad, specs).programs
    assert program.buffers[0].role == OUTPUT and program.buffers[0].shape == f"f32[{B},{P}]"
    [batch] = [w for w in program.ways_down if w.kind == "batch_gradient"]
    assert batch.lowers and "jnp.mean(jax.vmap(per_example_loss, in_axes=(None, 0, 0))(w, x, y))" in batch.code
    assert batch.peak_after <= program.peak_bytes - B * P * 4 + 64 * 1024  # the arguments stay


def test_a_vmap_whose_temporaries_fill_the_peak_is_offered_lax_map_chunks():
    """The pairwise computation written with vmap materialises every pair at once; jax.lax.map with a
    batch_size (the chapter's chunking) keeps a chunk of them, compiled at an eighth of the examples."""

    def second_nearest(xj, x):
        return jnp.sort(jnp.abs(x - xj))[1]

    nearest_v = jax.jit(jax.vmap(second_nearest, in_axes=(0, None)))
    x = jax.ShapeDtypeStruct((BIG,), jnp.float32)
    [program] = memory_of_call(nearest_v, (x, x), call="nearest_v(x, x)").programs
    [chunks] = [w for w in program.offered if w.kind == "chunk"]
    assert chunks.peak_after <= program.peak_bytes / 8 + (1 << 24)
    assert chunks.code == f"jax.lax.map(lambda m: second_nearest(m, x), x, batch_size={BIG // 8})"
    # Its 8 GiB fits when the host has that much free (a quiet machine): then it is offered first. Under load
    # a smaller input, halved until it fits, comes first - what fits is ranked by the memory free right then.
    if chunks.fits:
        assert program.offered[0] is chunks
    else:
        assert program.offered[0].fits or not any(w.fits for w in program.offered)


# -- real out-of-memory errors ---------------------------------------------------------------------------


def test_an_error_surfacing_at_a_later_read_is_traced_back_to_the_call():
    """Asynchronous dispatch: the call returns, the error is raised where its result is read."""
    nn = nearest(jnp.linspace(0.0, 1.0, BIG))
    with pytest.raises(Exception) as caught:
        print(nn[:3])  # the read
    report = explain_out_of_memory(caught.value)
    assert report is not None and report.asked == BIG * BIG * 4
    assert report.read == "nn" and "print(nn[:3])" in report.surfaced_at.code
    assert report.program.call == "nearest(jnp.linspace(0.0, 1.0, BIG))"
    assert report.program.buffers[0].made_at.lineno == _line_of(nearest, "jnp.sort(d, axis=0)")
    assert not report.allocator and not report.program.traced_again
    # the sort runs down axis 0, so each result reads every row of `x[:, None]`: the blocks are of `x[None, :]`
    [rows] = [w for w in report.program.ways_down if w.kind == "rows"]
    assert rows.peak_after < report.program.peak_bytes / 4 and "`x[None, :]`" in rows.code
    assert rows.fits == (rows.peak_after <= report.capacity.available * 0.9)  # free memory moves: either
    assert report.fix.startswith("`nearest` on ") and "against all of `x`" in report.fix
    assert report.status.value == "problem"
    assert explain_out_of_memory(caught.value) is report  # kept on the exception: measured once


def test_an_error_at_the_call_itself_is_told_at_the_call():
    x = jnp.linspace(0.0, 1.0, BIG)
    with pytest.raises(Exception) as caught:
        nearest(x).block_until_ready()
    report = explain_out_of_memory(caught.value)
    assert report.surfaced_at is None and report.program.call == "nearest(x)"
    assert report.program.called_at.code.startswith("nearest(x).block_until_ready()")


def test_an_allocation_outside_any_program_is_told_as_that():
    with pytest.raises(Exception) as caught:
        jnp.zeros((BIG, BIG))
    report = explain_out_of_memory(caught.value)
    assert report.program is None and report.eager is not None
    assert (report.eager.shape, report.eager.bytes) == (f"f32[{BIG},{BIG}]", BIG * BIG * 4)
    assert "outside any jitted program" in report.summary


def test_a_copy_to_the_device_too_large_is_told_as_an_allocation():
    host = np.broadcast_to(np.float32(1.0), (BIG, BIG))  # a view: no host memory behind it
    with pytest.raises(Exception) as caught:
        jax.device_put(host)
    report = explain_out_of_memory(caught.value)
    assert report.eager is not None and report.eager.call == "jax.device_put(host)"


def test_an_allocator_failure_is_not_blamed_on_the_program():
    """jax-ml/jax#13428: 'Out of memory while trying to allocate 6291456 bytes' for a program that needs
    little - the allocator failed (another process, preallocation, fragmentation), not the program's size.
    A GPU's message is raised from inside the program here (a host callback), as XLA raises it on a GPU."""

    def allocator_fails(x):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.")

    @jax.jit
    def small(x):
        jax.debug.callback(allocator_fails, x)
        return jnp.concatenate([x, x])

    x = jnp.ones((256, 128, 3))
    with pytest.raises(RuntimeError) as caught:
        small(x).block_until_ready()
    report = explain_out_of_memory(caught.value)
    assert report.asked == 6291456 and report.allocator
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" in report.fix
    assert "not the program's size" in report.summary


def test_other_errors_are_not_out_of_memory():
    assert explain_out_of_memory(ValueError("Out of memory allocating 5 bytes")) is None
    assert explain_out_of_memory(RuntimeError("INVALID_ARGUMENT: shapes")) is None
    assert explain_out_of_memory(MemoryError("Unable to allocate 64. GiB for an array")) is None


def test_measuring_reads_the_program_from_jaxs_cache():
    """The user's Python does not run again to measure a call the user made."""
    runs = []

    @jax.jit
    def counted(x):
        runs.append(1)
        return jnp.tanh(x) * 2

    counted(jnp.ones((64, 64)))
    program, _ = program_memory(counted, (jnp.ones((64, 64)),))
    assert runs == [1] and not program.traced_again


def test_a_read_by_a_jax_function_is_not_taken_for_an_allocation_of_its_own():
    """`jnp.sum(nn)` after nn's program failed: the read of a failed result, not an eager operation's own."""
    nn = nearest(jnp.linspace(0.0, 1.0, BIG))
    with pytest.raises(Exception) as caught:
        jnp.sum(nn).block_until_ready()
    report = explain_out_of_memory(caught.value)
    assert report.eager is None and report.read == "nn" and report.program.function == "nearest"


def test_explain_any_and_the_explainer_take_it():
    nn = nearest(jnp.linspace(0.0, 1.0, BIG))
    with pytest.raises(Exception) as caught:
        float(nn[0])
    report = probes.explain_any(caught.value)
    assert type(report).__name__ == "OutOfMemoryReport" and report.error_kind == "out_of_memory"


def test_one_dump_folder_for_the_process_and_a_program_compiled_again_keeps_its_buffers():
    # issue 63.11: a new xla_dump_to folder per compilation was a new compiler option each time, so JAX kept one
    # more executable per %%jax_memory run (~1.1 MB that never came back). With one folder, the same program
    # compiled again is served from JAX's cache and XLA writes nothing: its texts are the ones kept.
    import os

    import jax.numpy as jnp

    from jaxmagic._jax import compile_dumps

    @jax.jit
    def twice(x):
        return jnp.sin(x) @ x.T

    x = jnp.ones((32, 32))
    twice(x)
    peaks, folders = [], set()
    for _ in range(3):
        with probes.memory() as report:
            twice(x)
        (program,) = report.programs
        peaks.append((program.peak_bytes, len(program.buffers)))
        folders.add(compile_dumps._dump_folder())
    assert len(folders) == 1 and os.listdir(folders.pop()) == []  # one folder, emptied after each compilation
    assert peaks[0][1] > 0 and peaks == [peaks[0]] * 3, peaks  # the buffers at the peak, every time
