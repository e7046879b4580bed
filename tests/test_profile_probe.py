"""The profile probe and %%jax_profile: time by line, scope and kernel, on small JAX programs."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest
from IPython.core.error import UsageError

from jaxmagic import probes
from jaxmagic._jax.jit_programs import CompiledProgram
from jaxmagic._jax.runtime import profiler_session_active
from jaxmagic.probes._profile import NO_SCOPE, build_report
from jaxmagic.probes._profile.kernel_sources import program_sources, scope_of
from jaxmagic.probes._profile.trace_events import events_from_trace_json, self_times, union_ns


def two_scopes(w, x):
    with jax.named_scope("big_matmul"):
        y = jnp.tanh(x @ w)  # the dominant line
    with jax.named_scope("small_reduction"):
        s = jnp.sum(y[:4, :4])
    return s


@pytest.fixture(scope="module")
def two_scope_report():
    fn = jax.jit(two_scopes)
    w, x = jnp.ones((512, 512)) * 0.01, jnp.ones((256, 512))
    fn(w, x).block_until_ready()
    with probes.profile() as report:
        for _ in range(3):
            fn(w, x).block_until_ready()
    return report


def test_dominant_line_and_scope_rank_first(two_scope_report):
    report = two_scope_report
    assert not profiler_session_active()
    top = report.lines[0]
    assert top.line is not None and top.line.code.startswith("y = jnp.tanh(x @ w)")
    assert top.line.function == "two_scopes"
    assert top.share > 0.5
    assert report.line("jnp.sum(y[:4, :4])") is not None
    assert report.line("jnp.sum(y[:4, :4])").seconds < top.seconds
    assert report.scopes[0].path == "big_matmul"
    assert report.scope("small_reduction").seconds < report.scope("big_matmul").seconds
    assert report.kernels[0].scopes == ["big_matmul"]
    assert report.bound in ("device", "host")
    assert "y = jnp.tanh(x @ w)" in report.summary


def test_programs_have_calls_and_memory(two_scope_report):
    program = two_scope_report.program("two_scopes")
    assert program is not None and program.identified
    assert program.calls == 3
    assert program.memory["arguments"] == (512 * 512 + 256 * 512) * 4
    assert two_scope_report.time.compilations == 0  # warmed up before the block


def test_report_holds_no_arrays_and_serialises(two_scope_report):
    data = json.dumps(two_scope_report.to_dict())
    assert "big_matmul" in data
    html = two_scope_report._repr_mimebundle_()["text/html"]
    assert "By named_scope" in html and "By your source line" in html


def step(x):
    return jnp.sin(x) * 0.5 + 1.0


def test_function_called_in_a_loop_counts_calls():
    fn = jax.jit(step)
    x = jnp.ones((64, 64))
    with probes.profile() as report:
        for _ in range(25):
            x = fn(x)
        x.block_until_ready()
    program = report.program("step")
    assert program is not None and program.calls == 25
    assert report.time.calls >= 25
    line = report.line("jnp.sin(x) * 0.5 + 1.0")
    assert line is not None and line.kernel_runs >= 25 and line.kernel_runs % 25 == 0
    assert report.time.compilations >= 1  # step compiled inside the block
    assert report.time.user_compilations == 1


def test_block_raising_keeps_the_users_exception_and_stops_the_trace():
    fn = jax.jit(step)
    error = ValueError("mine")
    with pytest.raises(ValueError) as raised, probes.profile() as report:
        fn(jnp.ones(3)).block_until_ready()
        raise error
    assert raised.value is error
    assert not profiler_session_active()
    assert report.other_error == "ValueError: mine"
    assert "The cell failed with ValueError: mine" in report.summary
    assert report.program("step") is not None


def test_keyboard_interrupt_stops_the_trace():
    with pytest.raises(KeyboardInterrupt), probes.profile():
        raise KeyboardInterrupt
    assert not profiler_session_active()


def test_no_jitted_code_is_all_host_side():
    with probes.profile() as report:
        total = sum(i * i for i in range(20_000))
    assert total > 0
    assert report.host_only and report.kernel_events == 0
    assert "the time was all host-side" in report.summary
    assert report.time.wall > 0 and report.time.python > 0


def test_a_running_trace_is_refused(tmp_path):
    jax.profiler.start_trace(str(tmp_path))
    try:
        with pytest.raises(probes.ProfilerBusy, match="already running"), probes.profile():
            pass
    finally:
        jax.profiler.stop_trace()
    assert not profiler_session_active()


# -- the magic -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def shell(ip):
    ip.run_cell("import jax, jax.numpy as jnp\ndef prof_step(x):\n    return jnp.cos(x) * 2.0\n")
    return ip


def test_magic_reports_and_raises_the_cells_error(shell):
    shell.user_ns.pop("prof_rep", None)
    result = shell.run_cell(
        "%%jax_profile -o prof_rep\nf = jax.jit(prof_step)\nf(jnp.ones(8)).block_until_ready()\nraise ValueError('boom')"
    )
    assert isinstance(result.error_in_exec, ValueError) and str(result.error_in_exec) == "boom"
    report = shell.user_ns["prof_rep"]
    assert report.other_error == "ValueError: boom"
    assert report.program("prof_step") is not None
    assert not profiler_session_active()


def test_magic_warmup_leaves_out_compilation(shell):
    result = shell.run_cell(
        "%%jax_profile --warmup 1 -o prof_warm\ng = jax.jit(prof_step)\ng(jnp.ones(16)).block_until_ready()"
    )
    assert result.success
    report = shell.user_ns["prof_warm"]
    assert report.warmup_runs == 1 and report.time.compilations == 0
    assert report.line("jnp.cos(x) * 2.0") is not None


def test_magic_save_keeps_the_trace(shell, tmp_path):
    result = shell.run_cell(f"%%jax_profile --save {tmp_path} -o prof_saved\nprof_step(jnp.ones(4))")
    assert result.success
    report = shell.user_ns["prof_saved"]
    assert any(f.endswith("perfetto_trace.json.gz") for f in report.saved_files)
    assert any(f.endswith(".xplane.pb") for f in report.saved_files)
    assert "ui.perfetto.dev" in str(report)


def test_magic_usage_errors(shell, tmp_path):
    result = shell.run_cell("%%jax_profile --warmup -1\n1")
    assert isinstance(result.error_in_exec, UsageError)
    file = tmp_path / "a_file"
    file.write_text("x")
    result = shell.run_cell(f"%%jax_profile --save {file}\n1")
    assert isinstance(result.error_in_exec, UsageError) and "directory" in str(result.error_in_exec)
    jax.profiler.start_trace(str(tmp_path))
    try:
        result = shell.run_cell("%%jax_profile\n1")
    finally:
        jax.profiler.stop_trace()
    assert isinstance(result.error_in_exec, UsageError) and "already running" in str(result.error_in_exec)


# -- reading traces and HLO -------------------------------------------------------------


def test_scope_of_op_names():
    assert scope_of("jit(mlp)/encoder/dot_general") == "encoder"
    assert scope_of("jit(mlp)/encoder/attn/dot_general") == "encoder/attn"
    assert scope_of("jit(f)/transpose(jvp(encoder))/dot_general") == "encoder"
    assert scope_of("jit(f)/jit(inner)/layer/add") == "jit(inner)/layer"
    assert scope_of("jit(f)/tanh") == ""
    assert scope_of("w1") == ""


def test_interval_helpers():
    assert union_ns([(0, 10), (5, 20), (30, 40)]) == 30
    from jaxmagic.probes._profile.trace_events import TraceEvent

    outer = TraceEvent("while", 1, 0, 100, op="while")
    inner = TraceEvent("body", 1, 10, 30, op="body")
    assert self_times([outer, inner]) == [70, 30]


SYNTHETIC_EVENTS = 10_000


def synthetic_trace(n_events: int = SYNTHETIC_EVENTS) -> tuple[dict, list[CompiledProgram]]:
    """A Chrome-format trace of ``n_events`` kernel events of two_scopes' program, and that program."""
    fn = jax.jit(two_scopes)
    specs = (jax.ShapeDtypeStruct((64, 64), jnp.float32), jax.ShapeDtypeStruct((32, 64), jnp.float32))
    text = fn.lower(*specs).compile().as_text()
    names = list(program_sources(text).kernels)
    events, ts, run = [], 0.0, 0
    while len(events) < n_events:
        run += 1
        events.append({"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": 5.0, "name": "PjitFunction(two_scopes)"})
        for name in names:
            dur = 50.0 if name == names[0] else 2.0
            args = {"hlo_module": "jit_two_scopes", "hlo_op": name, "run_id": str(run), "program_id": "7"}
            events.append({"ph": "X", "pid": 1, "tid": 2, "ts": ts + 6, "dur": dur, "name": name, "args": args})
            ts += dur + 1
        ts += 10
    program = CompiledProgram("two_scopes", "jit_two_scopes", text, {"arguments": 1}, None)
    return {"traceEvents": events[:n_events]}, [program]


def test_a_ten_thousand_event_trace_builds_a_report():
    trace, programs = synthetic_trace()
    events = events_from_trace_json(trace)
    assert len(events) == SYNTHETIC_EVENTS
    report = build_report(events, programs)
    assert report.kernel_events > 5_000
    program = report.program("two_scopes")
    assert program is not None and program.identified and program.calls > 500
    assert sum(s.share for s in report.scopes if s.depth == 0 or s.path == NO_SCOPE) == pytest.approx(1.0)
    assert abs(sum(lt.share for lt in report.lines) - 1.0) < 1e-9
    assert report.document().sections


def test_a_compiled_object_called_directly_is_named():
    compiled = jax.jit(step).lower(jnp.ones((8, 8))).compile()
    with probes.profile() as report:
        for _ in range(4):
            compiled(jnp.ones((8, 8))).block_until_ready()
    program = report.program("step")
    assert program is not None and program.identified and program.calls == 4
    assert report.line("jnp.sin(x) * 0.5 + 1.0") is not None


def test_a_trace_started_inside_the_block_is_the_users_error(tmp_path):
    with pytest.raises(RuntimeError), probes.profile() as report:
        jax.profiler.start_trace(str(tmp_path))
    assert not profiler_session_active()
    assert "traces do not nest" in report.summary


def test_line_calls_count_program_executions():
    fn = jax.jit(step)
    x = jnp.ones((16, 16))
    fn(x)
    with probes.profile() as report:
        for _ in range(7):
            x = fn(x)
        x.block_until_ready()
    assert report.line("jnp.sin(x) * 0.5 + 1.0").calls == 7


def test_profile_inside_profile_is_a_usage_error(shell):
    result = shell.run_cell("%%jax_profile -o outer_prof\n%%jax_profile\nprof_step(jnp.ones(2))")
    assert isinstance(result.error_in_exec, UsageError)
    assert "%%jax_profile cannot run while a jax.profiler trace is already running" in str(result.error_in_exec)
    assert not profiler_session_active()


def test_compiles_nested_inside_profile(shell):
    result = shell.run_cell(
        "%%jax_profile -o outer_prof\n%%jax_compiles -o inner_comp\njax.jit(prof_step)(jnp.ones(5))"
    )
    assert result.success, result.error_in_exec
    assert shell.user_ns["inner_comp"].count("prof_step") == 1
    assert shell.user_ns["outer_prof"].time.user_compilations == 1


def test_a_trace_without_kernel_events_says_so():
    trace = {"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 50, "name": "PjitFunction(f)"}]}
    report = build_report(events_from_trace_json(trace), wall_seconds=0.001)
    assert not report.events_supported and not report.host_only
    assert "emitted no kernel events" in report.summary
    assert any(section.title == "No kernel events" for section in report.document().sections)


def test_the_time_split_is_one_labelled_account(two_scope_report):
    # The report said "device 31%" in the headline, "busy (35%)" below and "device, inside the call 0 us"
    # in its table, unlabelled. Now the headline's device share is the table's two device rows together,
    # the rows split the wall time, and the busy span and the kernel-time sum are named as other measures.
    report = two_scope_report
    data = report.to_dict()
    t = data["time"]
    pct = lambda part: f"{100 * part / t['wall']:.0f}%"  # noqa: E731
    device = t["device_inline"] + t["waiting"]
    assert f"wall time: on the device {pct(device)}," in (data["summary"])
    assert "of kernel time" in data["summary"]  # the top line's share names its whole
    section = next(s for s in report.document().sections if s.title == "Where the wall time went")
    table, paragraph = section.blocks[0], section.blocks[1]
    assert table.columns == ["what the calling thread did", "time", "share of wall time", "detail"]
    labels = [row[0] for row in table.rows]
    assert labels[2] == "device: running kernels inside a call, on the calling thread"
    assert labels[3] == "device: waiting outside calls while kernels ran"
    assert sum(t[k] for k in ("compile", "dispatch", "device_inline", "waiting", "python")) == pytest.approx(t["wall"])
    assert f'The headline\'s "on the device" {pct(device)} is the two device rows together' in paragraph.text
    assert "kernels were running on some thread during" in paragraph.text
    assert f"({pct(t['device_busy'])} of the wall time)" in paragraph.text
    assert f"{data['kernel_events']} kernel run(s)" in paragraph.text
    by_line = next(s for s in report.document().sections if s.title == "By your source line").blocks[0]
    assert by_line.columns[1:3] == ["kernel time", "of kernel time"]
