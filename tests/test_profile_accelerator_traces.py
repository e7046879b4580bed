"""%%jax_profile's reading of accelerator traces, replayed from recorded and hand-made fixtures (CI has no TPU/GPU).

The fixtures (tests/fixtures/accelerator/README.md says where each came from):

* ``tpu-v5e-jax0.12/``: ``jax.profiler.trace`` around a jitted bf16 2048x2048 matmul + tanh + sum on a TPU
  v5e (JAX 0.12.0.1), the matmul inside ``jax.named_scope("matmul")`` on line 15 of the recorded
  ``q1.py`` (tanh and sum on line 16): the first call (compiling) and two more, 3 runs in all. The
  in-memory trace (``.xplane.pb``, read by ``ProfileData`` as the probe reads the live one), the optimized
  HLO of ``jit_mm`` that trace embeds (what the probe's program capture gives it live), and the JSON trace
  that ``%%jax_profile --save`` wrote for the same function.
* ``gpu-handmade/``: a GPU trace of the same program, made by hand after XLA's CUPTI collector.
"""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest
from jax.profiler import ProfileData

from jaxmagic._jax.jit_programs import CompiledProgram
from jaxmagic.probes._profile import build_report
from jaxmagic.probes._profile.device_planes import PlaneEvent, PlaneLine, op_name, read_device_plane
from jaxmagic.probes._profile.events import TraceReading
from jaxmagic.probes._profile.trace_events import read_profile_data, read_trace_json

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "accelerator"
TPU = FIXTURES / "tpu-v5e-jax0.12"
GPU = FIXTURES / "gpu-handmade"
TPU_SOURCE = "/tmp/recording/.tpu/run2/q1.py"  # the recorded program's file, as its trace and HLO name it

# The recorded TPU ops (XLA Ops line), in ns: 3 runs of copy-start, copy-done, fusion. The Async XLA Ops
# line repeats each copy's span (11,678 ns in the first run): not counted again.
TPU_KERNEL_NS = (13 + 11_653 + 90_206) + (13 + 3 + 90_271) + (13 + 2 + 90_272)


def program(function: str, module: str, hlo_path: pathlib.Path) -> CompiledProgram:
    """What the probe's program capture gives for one jitted function: its optimized HLO text."""
    return CompiledProgram(function, module, hlo_path.read_text(), {}, None)


@pytest.fixture(scope="module")
def tpu_report():
    data = ProfileData.from_serialized_xspace((TPU / "profile_plain_trace.xplane.pb").read_bytes())
    return build_report(read_profile_data(data), [program("mm", "jit_mm", TPU / "profile_plain_trace.jit_mm.hlo.txt")])


def test_tpu_device_time_is_split_by_line(tpu_report):
    data = tpu_report.to_dict()
    assert data["devices"] == ["TPU 0 (its XLA Ops line)"] and data["trace_notes"] == []
    assert data["events_supported"] and data["kernel_events"] == 9 and data["kernel_count"] == 3
    assert data["device_seconds"] == pytest.approx(TPU_KERNEL_NS / 1e9)
    top = data["lines"][0]
    assert (top["line"]["filename"], top["line"]["lineno"], top["line"]["function"]) == (TPU_SOURCE, 15, "mm")
    assert top["scopes"] == ["matmul"] and top["share"] > 0.9
    assert (top["calls"], top["kernel_runs"]) == (3, 3)  # the fusion, once in each of the 3 runs
    tail = next(lt for lt in data["lines"] if lt["line"] and lt["line"]["lineno"] == 16)
    assert tail["scopes"] == ["(no named_scope)"] and tail["seconds"] < top["seconds"]
    copies = next(lt for lt in data["lines"] if lt["line"] is None)
    assert copies["kernels"] == 2 and "ops XLA added" in copies["what"]  # copy-start/-done: no metadata
    assert sum(lt["share"] for lt in data["lines"]) == pytest.approx(1.0)
    assert "q1.py:15" in data["summary"] and "scope `matmul`" in data["summary"]


def test_tpu_device_time_is_split_by_scope_and_program(tpu_report):
    data = tpu_report.to_dict()
    assert [s["path"] for s in data["scopes"]] == ["matmul", "(no named_scope)"]
    assert data["scopes"][0]["share"] > 0.9
    (mm,) = data["programs"]
    assert (mm["function"], mm["module"], mm["calls"], mm["identified"]) == ("mm", "jit_mm", 3, True)
    assert mm["device_seconds"] == pytest.approx(TPU_KERNEL_NS / 1e9)


def test_tpu_op_names_come_from_the_instruction_text(tpu_report):
    kernels = {k["name"]: k for k in tpu_report.to_dict()["kernels"]}
    assert set(kernels) == {"fusion", "copy-start", "copy-done"}
    fusion = kernels["fusion"]
    assert fusion["runs"] == 3 and fusion["scopes"][0] == "matmul" and fusion["lines"][0] == "q1.py:15"
    assert fusion["opcode"] == "fusion (kOutput)" and "calls=%fused_computation.1" in fusion["hlo"]
    text = "%fusion = bf16[]{:T(256)} fusion(bf16[2048,2048]{1,0:T(8,128)(2,1)S(1)} %copy-done), kind=kOutput"
    assert op_name(text, {}) == ("fusion", text)
    assert op_name("fusion", {"long_name": text}) == ("fusion", text)  # the JSON trace's form
    assert op_name("%copy-start = (bf16[8]{0}, u32[]) copy-start(bf16[8]{0} %a.1)", {})[0] == "copy-start"


def test_tpu_saved_json_places_ops_by_their_own_source():
    # A saved trace read without the program's HLO: the op's tf_op and source_stack give scope and line.
    with gzip.open(TPU / "profile_magic_save.trace.json.gz", "rt") as stream:
        reading = read_trace_json(json.load(stream))
    data = build_report(reading).to_dict()
    assert data["devices"] == ["TPU 0 (its XLA Ops line)"] and data["kernel_events"] == 9
    top = data["lines"][0]
    assert (top["line"]["filename"], top["line"]["lineno"]) == (TPU_SOURCE, 15)
    assert top["scopes"] == ["matmul"] and (top["calls"], top["kernel_runs"]) == (3, 3)
    assert data["scopes"][0]["path"] == "matmul"
    fusion = next(k for k in data["kernels"] if k["name"] == "fusion")
    assert fusion["opcode"] == "convolution fusion" and fusion["hlo"].startswith("%fusion = bf16[]")
    (mm,) = data["programs"]
    assert (mm["function"], mm["calls"], mm["identified"]) == ("mm", 3, False)  # its HLO text was not had


def test_gpu_kernels_are_split_by_line_and_scope():
    data = ProfileData.from_text_proto((GPU / "profile_mm.xspace.txt").read_text())
    report = build_report(read_profile_data(data), [program("mm", "jit_mm", GPU / "jit_mm.hlo.txt")])
    d = report.to_dict()
    assert d["devices"] == ["GPU 0 (its kernels' XLA op stats)"]
    assert d["kernel_events"] == 6 and d["device_seconds"] == pytest.approx(3 * (80e-6 + 10e-6))
    top = d["lines"][0]
    assert (top["line"]["filename"], top["line"]["lineno"], top["line"]["function"]) == (
        "/tmp/recording/gpu/q1.py",
        15,
        "mm",
    )
    assert top["scopes"] == ["matmul"] and (top["calls"], top["kernel_runs"]) == (3, 3)
    assert d["lines"][1]["line"]["lineno"] == 16
    assert [s["path"] for s in d["scopes"]] == ["matmul", "(no named_scope)"]
    assert [k["name"] for k in d["kernels"]] == ["gemm_fusion_dot_general.0", "input_reduce_fusion"]
    (mm,) = d["programs"]
    assert (mm["function"], mm["calls"], mm["identified"]) == ("mm", 3, True)
    # what the trace could not give is said: the host's copy outside XLA, and how runs were counted
    notes = d["trace_notes"]
    assert any("1 device activity (0.005 ms) named no XLA op" in n for n in notes)
    assert any("no run id for `jit_mm`" in n for n in notes)
    assert any(s.title == "What the trace could not give" for s in report.document().sections)


def _device_trace(process: str, threads: dict[int, str], events: list[dict]) -> dict:
    """A JSON trace: one host call of ``f``, and ``events`` on the device process ``process``."""
    meta = [{"ph": "M", "pid": 9, "name": "process_name", "args": {"name": process}}]
    meta += [
        {"ph": "M", "pid": 9, "tid": tid, "name": "thread_name", "args": {"name": n}} for tid, n in threads.items()
    ]
    host = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 50, "name": "PjitFunction(f)"},
    ]
    return {"traceEvents": host + meta + [{"ph": "X", "pid": 9, **e} for e in events]}


def test_a_device_plane_without_an_op_line_says_why():
    trace = _device_trace("/device:TPU:0", {1: "Steps"}, [{"tid": 1, "ts": 10, "dur": 30, "name": "0"}])
    report = build_report(read_trace_json(trace), wall_seconds=0.001)
    assert not report.events_supported
    assert report.summary.startswith("1.00 ms: no kernel time could be read from the trace (TPU 0: its trace has")
    assert "no XLA op events" in report.summary and "it recorded events on: Steps" in report.summary
    assert report.to_dict()["status"] == "ok" and report.to_dict()["concerns"][0]["severity"] == "note"


def test_kernels_with_their_own_op_are_read_not_a_line_made_from_them():
    # A post-processed GPU trace may carry an "XLA Ops" line built from the stream's kernels: read once.
    kernel = {"hlo_op": "fusion.1", "hlo_module": "jit_f", "correlation_id": "5"}
    events = [
        {"tid": 7, "ts": 10, "dur": 20, "name": "loop_fusion_1", "args": kernel},
        {"tid": 2, "ts": 10, "dur": 20, "name": "fusion.1", "args": {}},
    ]
    reading = read_trace_json(_device_trace("/device:GPU:0", {7: "Stream #7(Kernel)", 2: "XLA Ops"}, events))
    assert [(e.op, e.module) for e in reading.events if e.op] == [("fusion.1", "jit_f")]
    assert build_report(reading).device_seconds == pytest.approx(20e-6)


def test_ops_outside_every_program_run_are_said():
    events = [
        {"tid": 2, "ts": 0, "dur": 10, "name": "jit_f(12)", "args": {"run_id": "1"}},
        {"tid": 3, "ts": 1, "dur": 5, "name": "fusion", "args": {}},
        {"tid": 3, "ts": 40, "dur": 5, "name": "fusion", "args": {}},  # the trace stopped mid-run
    ]
    reading = read_trace_json(_device_trace("/device:TPU:1", {2: "XLA Modules", 3: "XLA Ops"}, events))
    ops = [(e.module, e.program_id, e.run_id) for e in reading.events if e.op]
    assert ops == [("jit_f", "12", "1"), ("", "", "")]
    assert reading.notes == [
        "TPU 1: 1 op run(s) fell outside every program run of its `XLA Modules` line (the trace started or "
        "stopped during a run); they are counted without a program."
    ]


def test_an_idle_device_is_not_a_reading_problem():
    # A cell with no device work on a TPU: the plane and its lines are there, empty; nothing to say.
    samples = PlaneLine("_counters_", 3, lambda: [PlaneEvent("power", 0.0, 0.0, {"power": 1.0})])
    reading = TraceReading()
    read_device_plane(
        "/device:TPU:0", [PlaneLine("XLA Modules", 1, list), PlaneLine("XLA Ops", 2, list), samples], reading
    )
    assert (reading.events, reading.devices, reading.notes) == ([], [], [])
