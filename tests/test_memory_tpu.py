"""Out of memory on a TPU (and a GPU, on paper), replayed in CI from what the devices wrote.

A TPU's usual out-of-memory error is raised by its compiler: XLA:TPU lays out the program's buffers, finds
no room, writes its buffer assignment and live ranges, and raises CompileTimeHbmOom. The recordings
(``fixtures/accelerator/tpu-v5e-jax0.12``, from a v5e chip with JAX 0.12.0.1) are fed to the code the live
path runs: ``read_message`` for the error's text, ``read_memory_dumps`` + ``read_program`` for the dumps,
``explain_failed_call`` for the report, every compilation answered from the recordings (``memory_recordings``)
- and one nobody recorded is not tried, never measured on CPU instead (XLA:CPU needs half the temporaries).
"""

from __future__ import annotations

import glob
import importlib.util
import inspect
import json
import os

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from memory_recordings import FIXTURES, recordings, replaying  # noqa: E402

from jaxmagic._jax.compile_dumps import read_memory_dumps  # noqa: E402
from jaxmagic.probes._memory.capacity import capacity_at_failure, stats_capacity  # noqa: E402
from jaxmagic.probes._memory.failed_call import FailedCall  # noqa: E402
from jaxmagic.probes._memory.messages import read_message  # noqa: E402
from jaxmagic.probes._memory.probe import explain_failed_call, memory_of_call  # noqa: E402
from jaxmagic.probes._memory.program import program_memory, read_program  # noqa: E402
from jaxmagic.probes._memory.records import OUTPUT, SAVED_FOR_BACKWARD, HeldArrays, ProgramMemory  # noqa: E402
from jaxmagic.probes._memory.ways_down import ways_down  # noqa: E402
from jaxmagic.report import SourceLine  # noqa: E402

GPU = os.path.join(os.path.dirname(FIXTURES), "gpu-public")
GiB = 1 << 30
TEMPORARIES = 51_200_000_512  # the recorded buffer assignment's preallocated temporaries (47.68 GiB)


def _text(path: str) -> str:
    with open(path) as file:
        return "".join(line for line in file if not line.startswith("# "))


def _stats() -> dict:
    with open(os.path.join(FIXTURES, "memory_stats.json")) as file:
        return json.load(file)


@jax.jit
def nearest(x):
    d = jnp.abs(x[:, None] - x[None, :])
    return jnp.sort(d, axis=0)[1]


def _call(n: int) -> FailedCall:
    line = SourceLine("/tmp/recording/.tpu/diag.py", 26, "<module>", "nn = nearest(x)")
    return FailedCall(nearest, "nearest(x)", line, args=(jax.ShapeDtypeStruct((n,), jnp.float32),), kwargs={})


# -- the messages ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["error.txt", "error_jax0.10.2.txt"])
def test_the_compilers_message_is_read_in_both_wordings(name):
    said = read_message(_text(os.path.join(FIXTURES, "compile_time_oom", name)))
    assert said is not None and said.at_compile and said.kind == "compile"
    assert (said.module, said.function, said.memory) == ("jit_nearest", "nearest", "HBM")
    assert abs(said.required - TEMPORARIES) < 0.01 * GiB  # "47.68G": libtpu's G is GiB
    assert abs(said.capacity - _stats()["bytes_limit"]) < 0.01 * GiB
    assert said.code == ("E1000: CompileTimeHbmOom" if name == "error.txt" else "")


def test_the_run_time_message_keeps_the_program_and_the_free_memory():
    said = read_message(_text(os.path.join(FIXTURES, "run_time_oom.txt")))
    assert said.kind == "program" and said.code == "E0101: RuntimeProgramAllocationFailure"
    assert said.module == "jit_nearest" and abs(said.asked - 11.94 * GiB) < 0.01 * GiB
    assert abs(said.free - 2.76 * GiB) < 0.01 * GiB and said.reservable == said.free
    assert "Attempting to reserve 11.94G" in said.whole  # the allocator's whole message is kept


def test_a_reservation_that_more_free_memory_cannot_meet_is_read():
    """pytorch/xla#3470: 6.78G free, 3.33G reservable in one piece, 6.48G asked - fragmentation."""
    said = read_message(_text(os.path.join(GPU, "tpu_reserve_pytorch_xla_3470.txt")))
    assert said.kind == "program" and said.free > said.asked > said.reservable


def test_gpu_buffer_assignment_messages_are_read():
    said = read_message(_text(os.path.join(GPU, "bfc_buffer_assignment_13428.txt")))
    assert said.kind == "allocation" and said.asked == 6291456
    assert said.stats["parameter"] == 6 * (1 << 20) and said.stats["total"] == 12 * (1 << 20)
    first, second = said.buffers
    assert (first.shape, first.label, first.source_line) == ("f32[4096,128,3]", "concatenate", 689)
    assert first.op_name.endswith("concatenate[dimension=0]") and first.size == 6 * (1 << 20)
    assert second.parameter and second.shape == "f32[256,128,3]" and second.size == 384 * 1024

    said = read_message(_text(os.path.join(GPU, "bfc_allocator_t5x_870.txt")))
    assert said.allocator == "GPU_1_bfc" and said.asked == 29995136256  # "rounded to", exact
    assert [b.label for b in said.buffers] == ["custom-call", "fusion"]
    assert said.buffers[1].source_file.endswith("layers.py") and said.buffers[1].source_line == 652

    said = read_message(_text(os.path.join(GPU, "bfc_stats_afprofile_8.txt")))
    assert said.asked == 4770354232 and said.stats["preallocated temp"] > 4 * GiB and not said.buffers


def test_gpu_listed_buffers_are_shown_when_the_call_cannot_be_measured():
    said = read_message(_text(os.path.join(GPU, "bfc_buffer_assignment_13428.txt")))
    report = explain_failed_call(said, None, None, [])
    text = str(report)
    assert "The peak buffers XLA's message lists" in text and "models.py, line 689" in text
    assert report.status.value == "error"  # the call was not told: said so, never OK


# -- the dumps -------------------------------------------------------------------------------------------


def test_the_recorded_dumps_name_xlas_own_buffers_by_their_neighbours_lines():
    """A layout `copy` of abs's output and an `iota.clone` for the sort's indices fill the TPU's peak: neither
    has op metadata; each takes the line of the value it moves or the instruction it was made for."""
    dumps = read_memory_dumps(os.path.join(FIXTURES, "compile_time_oom"), "tpu")
    program = read_program(ProgramMemory("nearest"), dumps)
    assert program.figures.temp_bytes == TEMPORARIES
    assert program.peak_bytes == TEMPORARIES + 2 * 323584  # arguments + outputs + temporaries
    made = {(b.shape, b.operation, b.made_at.lineno) for b in program.buffers if b.made_at is not None}
    assert made == {
        ("f32[80000,80000]", "copy of `abs`", 5),
        ("s32[80000,80000]", "iota for `sort`", 6),
        ("f32[80000]", "slice", 6),  # the output: XLA holds it for the whole run, listed since session 23
    }
    assert all(b.made_by != "-" and (b.operation or b.argument) for b in program.buffers)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's peak; a TPU fuses exp into the dot")
def test_xlas_own_peak_time_is_checked_against_every_live_range():
    """XLA:CPU names a time after exp's 64 GiB temporary died as the peak of exp(...) @ w (2 MiB live); the
    peak here is counted from every buffer's range, and never below what memory_analysis() reserves."""
    big = 2**17

    @jax.jit
    def kern(pts, w):
        k = jnp.exp(-((pts[:, None] - pts[None, :]) ** 2))
        return k @ w

    specs = (jax.ShapeDtypeStruct((big,), jnp.float32), jax.ShapeDtypeStruct((big, 1), jnp.float32))
    compiled = kern.lower(*specs).compile()
    needs = compiled.memory_analysis().temp_size_in_bytes
    [program] = memory_of_call(kern, specs, try_ways=False).programs
    assert needs >= big * big * 4 and program.peak_bytes >= needs
    assert program.buffers[0].shape == f"f32[{big},{big}]" and program.buffers[0].operation == "exp"


# -- the report, replayed ----------------------------------------------------------------------------------


def test_the_compile_time_oom_is_explained_from_the_recording():
    said = read_message(_text(os.path.join(FIXTURES, "compile_time_oom", "error.txt")))
    cap = capacity_at_failure(said, stats_capacity(_stats(), "tpu:0"))
    with replaying(os.path.join(FIXTURES, "compile_time_oom"), os.path.join(FIXTURES, "fits")) as asked:
        report = explain_failed_call(said, _call(80_000), cap, [])
    program = report.program
    assert asked[0] == "jit_nearest(float32[80000])#0"
    assert program is not None and program.compile_error is not None and program.platform == "tpu"
    assert report.summary.startswith("Out of memory while compiling (47.7 GiB of temporaries for 15.8 GiB of HBM)")
    assert "XLA's iota for `sort` at diag.py, line 6" in report.summary
    assert report.status.value == "problem"
    text = str(report)
    assert "XLA's compiler refused it" not in report.summary and "refused by XLA's compiler for tpu" in text
    assert "Why" in text and "CompileTimeHbmOom" in text
    # the way down that applies (the sort's keys in blocks) compiles for the TPU; not recorded here, so not tried
    [rows] = [w for w in program.ways_down if w.kind == "rows"]
    assert rows.peak_after is None and "no recording" in rows.problem and not program.offered
    assert report.fix.startswith("No way down could be measured (`nearest` on 10,000 of `x`'s 80,000 rows")
    assert not any(w.platform == "cpu" for w in program.ways_down)  # never a CPU stand-in


def test_jax_memory_call_measures_a_program_the_compiler_refuses():
    """`%jax_memory nearest(x)` on the TPU: the compiler refuses the program; the report is of it, not "no call"."""
    with replaying(os.path.join(FIXTURES, "compile_time_oom")):
        report = memory_of_call(nearest, (jax.ShapeDtypeStruct((80_000,), jnp.float32),), call="nearest(x)")
    [program] = report.programs
    assert program.compile_error is not None and program.peak_bytes > TEMPORARIES
    assert "No jitted call" not in report.summary and report.status.value == "problem"
    assert any("refused" in c.text for c in report.concerns())


def test_a_smaller_program_that_fits_is_read_as_the_device_wrote_it():
    with replaying(os.path.join(FIXTURES, "fits")):
        report = memory_of_call(nearest, (jax.ShapeDtypeStruct((20_000,), jnp.float32),), try_ways=False)
    [program] = report.programs
    assert program.compile_error is None and program.platform == "tpu"
    assert 3.2e9 < program.peak_bytes < 3.3e9


def test_the_run_time_oom_offers_freeing_what_is_held_first():
    """8 arrays of f32[20000,20000] held, then a program of 11.94 GiB that alone fits the 15.75 GiB chip."""
    said = read_message(_text(os.path.join(FIXTURES, "run_time_oom.txt")))
    cap = capacity_at_failure(said, stats_capacity(_stats(), "tpu:0"))
    held = [HeldArrays("8 x f32[20000,20000]", 8 * 20_000 * 20_000 * 4, ["held[0..7]"])]
    with replaying(os.path.join(FIXTURES, "fits")):  # nearest on 40,000 points: not recorded, so not measured
        report = explain_failed_call(said, _call(40_000), cap, held)
    assert report.free_held is not None and report.free_held.fits_after
    assert report.fix.startswith("Free what is held first: `held[0..7]` holds 11.9 GiB; `del held`")
    assert "jax.device_get" in report.fix and ".delete()" in report.fix
    assert "arrays you hold take 11.9 GiB" in report.summary
    assert "Attempting to reserve 11.94G" in str(report)  # the allocator's whole message


def test_every_recorded_tpu_text_is_a_fixture_the_tests_read():
    """The memory recordings hold only what these tests read (no stray recording left unused)."""
    used = {"error.txt", "error_jax0.10.2.txt", "index.json", "run_time_oom.txt", "memory_stats.json", "README.md"}
    recorded = (".error.txt", ".memory_stats.json", ".report.json")  # record_memory.py's files per program
    folders = ("compile_time_oom", "fits", "ways_recorded")
    for folder in folders:
        for path in glob.glob(os.path.join(FIXTURES, folder, "**", "*"), recursive=True):
            name = os.path.basename(path)
            assert os.path.isdir(path) or name in used or name.endswith(recorded) or "after_optimizations" in name


# -- ways down measured on the TPU (tools/accelerator/record_memory.py, 2026-12-06) ---------------------------

WAYS = os.path.join(FIXTURES, "ways_recorded")


def _recorded(case: str) -> tuple[str, dict]:
    folder = os.path.join(WAYS, case)
    with open(os.path.join(folder, f"{case}.report.json")) as file:
        return _text(os.path.join(folder, f"{case}.error.txt")), json.load(file)


def _ways(report) -> dict[str, object]:
    return {way.kind: way for way in report.program.ways_down}


def test_the_compile_time_oom_is_answered_by_a_way_down_compiled_for_the_tpu():
    """The recording's second compilation is the way down the live report offered, compiled by XLA:TPU: 80,000
    points sorted in blocks of 10,000 rows need 5.96 GiB. Replayed, the report offers it as measured there."""
    error, live = _recorded("compile_time_oom")
    said = read_message(error)
    cap = capacity_at_failure(said, stats_capacity(_stats(), "tpu:0"))
    with replaying(os.path.join(WAYS, "compile_time_oom")) as asked:
        report = explain_failed_call(said, _call(80_000), cap, [])
    assert asked == ["jit_nearest(float32[80000])#0", "jit_run(float32[80000])#0"]
    rows = _ways(report)["rows"]
    assert (rows.platform, rows.fits, rows.peak_after) == ("tpu", True, 6_401_763_840)
    assert report.fix.startswith("`nearest` on 10,000 of `x`'s 80,000 rows at a time, against all of `x`: peak")
    assert "tried by compiling for tpu" in report.fix and "jax.lax.map(" in report.fix
    live_rows = next(w for w in live["program"]["ways_down"] if w["kind"] == "rows")
    assert (live_rows["peak_after"], live_rows["platform"]) == (rows.peak_after, "tpu")  # as the device said


def test_the_run_time_oom_frees_what_is_held_and_measures_the_program_on_the_tpu():
    """8 x f32[20000,20000] held (11.9 GiB), then nearest on 40,000 points: 11.94 GiB that alone fits."""
    error, live = _recorded("run_time_oom")
    said = read_message(error)
    cap = capacity_at_failure(said, stats_capacity(_stats(), "tpu:0"))
    held = [HeldArrays("8 x f32[20000,20000]", 8 * 20_000 * 20_000 * 4, ["held[0..7]"])]
    with replaying(os.path.join(WAYS, "run_time_oom")):
        report = explain_failed_call(said, _call(40_000), cap, held)
    assert report.program.peak_bytes == live["program"]["peak_bytes"] == 12_820_839_936
    assert report.fix.startswith("Free what is held first: `held[0..7]` holds 11.9 GiB")
    assert "There are 3.77G free" in str(report)  # the allocator's whole message, as recorded
    assert _ways(report)["rows"].platform == "tpu"


# -- scan over layers compiled by XLA:TPU (record_memory.py's `scan_layers`, 2026-12-06) ----------------------

RECORDER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "tools", "accelerator", "record_memory.py")
SCAN = os.path.join(WAYS, "scan_layers")
# the recording's frames name the recorder's file where the device's checkout had it: read from this one
SOURCES = {"tools/accelerator/record_memory.py": RECORDER}


@pytest.fixture(scope="module")
def recorder():
    """The recorder's own module: the program the TPU compiled, at the lines its frames name."""
    spec = importlib.util.spec_from_file_location("record_memory_replayed", RECORDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scan_specs():
    w = jax.ShapeDtypeStruct((8, 2048, 2048), jnp.float32)
    return (w, w), jax.ShapeDtypeStruct((2048, 2048), jnp.float32)


def _line(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture(scope="module")
def scan_replayed(recorder):
    """`memory_of_call(jax.jit(jax.grad(scan_loss)), specs)` as the recorder made it, every compilation
    answered by XLA:TPU's dumps (one nobody recorded raises, as a machine without a TPU would)."""
    with replaying(SCAN, sources=SOURCES) as asked:
        report = memory_of_call(jax.jit(jax.grad(recorder.scan_loss)), _scan_specs())
    return report, asked


def test_the_tpus_scan_stacks_are_named_by_the_body_lines_that_made_them(recorder, scan_replayed):
    """XLA:TPU keeps the stacks as the zeros the loop starts from (a `broadcast`, its layout `copy`, a bf16
    `fusion`) and updates them in place with multi-output fusions in the loop body, the carry read straight
    from the loop's parameter: the live report named them `broadcast`, `copy`, `fusion` with no line. Read
    through the same mechanism as XLA:CPU's, they are the body's values, one row per layer.

    At the peak the carry's stack (line `return x + h`, a bf16 `fusion.41`) sits in the TPU's alternate
    memory (color 1, layout S(1)), not in HBM: since session 22 it is not listed there (buffer_assignment.py).
    The outputs, the gradients the backward scan writes a layer at a time, are held for the whole run: since
    session 23 they are listed too, and what is listed adds up to what the device reserved."""
    report, _ = scan_replayed
    [program] = report.programs
    assert program.platform == "tpu" and program.peak_bytes == 889_645_056  # 848 MiB, as the device said
    assert abs(sum(b.bytes for b in program.buffers) - program.peak_bytes) < 2**20
    tanh_line, out_line = _line(recorder.scan_block, "jnp.tanh(x @ w1)"), _line(recorder.scan_block, "h @ w2")
    gradients = [b for b in program.buffers if b.role == OUTPUT]
    assert {(b.shape, b.operation, b.made_at.lineno) for b in gradients} == {
        ("f32[8,2048,2048]", "dot_general", tanh_line),  # the gradient of w1 (made at w1's line)
        ("f32[8,2048,2048]", "dot_general", out_line),  # of w2
    }
    stacks = [b for b in program.buffers if b.stacked and b.role != OUTPUT]
    carry_line = _line(recorder.scan_block, "return x + h")
    assert {(b.shape, b.operation, b.made_at.lineno, b.carry) for b in stacks} == {
        ("f32[8,2048,2048]", "mul", tanh_line, False),  # tanh's derivative, kept in f32
        ("bf16[8,2048,2048]", "tanh", tanh_line, False),  # h, kept in bf16 for the backward matmul
    }
    carry = [b for b in stacks if b.made_at.lineno == carry_line]
    assert not carry  # in the alternate memory at the peak
    assert all(b.stacked == 8 and b.role == SAVED_FOR_BACKWARD for b in stacks)
    assert {b.scan_at.lineno for b in stacks} == {_line(recorder.scan_loss, "jax.lax.scan(scan_block")}
    converts = {b.operation for b in program.buffers if b.shape == "bf16[8,2048,2048]" and not b.stacked}
    assert converts == {"convert of argument `params[0]`", "convert of argument `params[1]`"}  # weights, no activation
    assert report.summary.startswith("`scan_loss` needs 848 MiB at its peak")
    assert "192 MiB of it is what the scan at line" in report.summary and "for the backward pass" in report.summary
    # the device's own report (2026-12-06, before this reading) said "128 MiB of it is one f32[8,2048,2048]
    # temporary made by `broadcast`": the zeros the f32 stack starts from
    assert "`broadcast`" not in report.summary and not any(b.operation in ("broadcast", "fusion") for b in stacks)


def test_checkpointing_the_tpus_scan_body_is_not_measured_here_and_never_on_cpu(recorder, scan_replayed):
    """The trial retraces the recorder's scan with its body checkpointed and compiles it for the TPU: nothing
    here compiles for the TPU until a device run records it, so it is said not measured - naming the body and
    the lines of its stacks - never measured on CPU in its place."""
    report, asked = scan_replayed
    [program] = report.programs
    ways = [w for w in program.ways_down if w.kind == "checkpoint"]
    trials = [k for k in asked if k.startswith("jit_scan_loss(") and not k.endswith("#0")]
    assert len(ways) == 2 and len(trials) == 2  # no policy, then keeping matrix products: each compiled
    lines = f"(line {_line(recorder.scan_block, 'jnp.tanh(x @ w1)')})"  # the carry's stack: in alternate memory
    assert all(f"body of the scan at line {_line(recorder.scan_loss, 'jax.lax.scan(')}" in w.title for w in ways)
    assert all(lines in w.title for w in ways)
    assert ways[0].code == "jax.lax.scan(jax.checkpoint(scan_block), x, params)"
    assert not any(w.platform == "cpu" for w in program.ways_down)
    recorded = set(recordings(SCAN))
    if not recorded.issuperset(trials):  # today's recording: made before its stacks were read on the TPU
        assert all(w.peak_after is None and "nothing here compiles for the TPU" in w.problem for w in ways)
        assert report.fix.startswith("No way down offered. Not measured: jax.checkpoint around the body")
        assert lines in report.fix
    else:  # once tools/accelerator/record_memory.py has run again on the device, the trials are measured there
        assert all(w.platform == "tpu" and w.peak_after is not None for w in ways)
        assert program.offered and program.offered[0].kind == "checkpoint"


def test_the_tpus_donation_of_a_gradient_functions_params_is_measured_and_not_offered(recorder):
    """The live report's headline fix was donating `params`: XLA:TPU writes the gradients over them (848 ->
    592 MiB, compiled there), and the caller's `params - lr * grads` then reads a deleted array. Replayed with
    the call's line, it is measured as the device measured it and not offered; without one, it cannot be told."""
    line = SourceLine(RECORDER, 1, "train", "grads = grad_step(params, x)")
    with replaying(SCAN, sources=SOURCES):
        program, compiled = program_memory(jax.jit(jax.grad(recorder.scan_loss)), _scan_specs(), called_at=line)
        ways = ways_down(compiled, program, None)
    [donate] = [w for w in ways if w.kind == "donate"]
    assert (donate.platform, donate.peak_after) == ("tpu", 621_209_600) and donate.lowers
    assert donate.withheld.startswith("`params` may be used after the call (the line does not rebind it)")
    program.ways_down = ways
    assert donate not in program.offered
    with open(os.path.join(SCAN, "scan_layers.report.json")) as file:
        live = json.load(file)
    recorded = live["programs"][0]["ways_down"][0]
    assert recorded["kind"] == "donate" and recorded["peak_after"] == donate.peak_after  # as the device said


def test_without_the_calls_line_the_tpus_donation_cannot_be_told_and_is_not_offered(scan_replayed):
    """The recorder measured the call with no line of its own: whether `params` is needed after it is unknown."""
    report, _ = scan_replayed
    [donate] = [w for w in report.programs[0].ways_down if w.kind == "donate"]
    assert donate.lowers and donate.withheld.startswith("whether `params` is used after the call cannot be told")
    assert "Not offered: donate `params`" in report.fix and not report.fix.startswith("donate")


ALTERNATE = os.path.join(os.path.dirname(SCAN), "..", "alternate_memory")


def test_the_tpus_alternate_memory_is_no_part_of_the_hbm_peak():
    """XLA:TPU prefetched the 16 MiB argument `x` of per-example gradients into its alternate memory (copy-start
    to S(1), allocation color 1); XLA's own peak list counts it beside the HBM buffers, and the report said
    "needs 48 MiB; 16 MiB of it is one f32[1024,4096] temporary made by XLA's copy-start of argument `x`". On
    the device the peak in use grew by the output only: arguments + output (measured.json)."""
    from jaxmagic.probes._memory.buffer_assignment import parse_buffer_assignment

    def read(suffix):
        with open(os.path.join(ALTERNATE, f"per_ex_grad.after_optimizations{suffix}.txt")) as file:
            return file.read()

    with open(os.path.join(ALTERNATE, "measured.json")) as file:
        measured = json.load(file)
    assignment = parse_buffer_assignment(read("-buffer-assignment"), read("-live-range"))
    listed = [(value.instruction, value.shape_index) for value in assignment.peak]
    assert ("copy-start", "0") not in listed  # the copy itself; its 512-byte index tuple is in HBM, listed
    assert {name for name, _ in listed[:2]} == {"broadcast_multiply_fusion", "x.1"}  # argument, output
    run = measured["run_jax0.10.2_same_s1_prefetch"]
    assert assignment.peak_bytes <= run["peak_bytes_in_use_after"] < 40 * 2**20  # not 48 MiB
    assert [a.color for a in assignment.allocations if a.size == 16789504] == [1]
    assert assignment.totals().temporaries < 2**20  # the 16 MiB of alternate memory is no temporary of HBM's
