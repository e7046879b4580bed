"""%jax_sharding, %jax_devices and %%jax_per_device (chapter section 8).

Layouts over many devices need fake CPU devices, which must be set before the
JAX backend starts; this pytest process may already have started it with one
device. So those tests run tests/sharding_scenarios.py in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=64 (once per module) and check
the drawings it returns against golden values. The two-process test starts two
JAX processes on loopback under an outer timeout.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jaxmagic.probes._sharding.sharding_layout import device_colours, id_list
from jaxmagic.render.html import render_html
from jaxmagic.render.text import render_text
from jaxmagic.report import Status
from jaxmagic.report.document import Document, Grid, GridCell, Section

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_scenarios(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(TESTS / "sharding_scenarios.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(XLA_FLAGS="--xla_force_host_platform_device_count=64"),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def scenarios() -> dict:
    return run_scenarios()


@pytest.fixture(scope="module")
def scenarios_without_rich() -> dict:
    return run_scenarios("--no-rich")


def only_grid(scenario: dict) -> dict:
    grids = [g for g in scenario["drawing"] if "labels" in g]
    assert len(grids) == 1, grids
    return grids[0]


# -- golden drawings -------------------------------------------------------------


def test_runs_on_64_fake_devices(scenarios):
    assert scenarios["devices"] == 64


def test_one_d(scenarios):
    s = scenarios["one_d"]
    grid = only_grid(s)
    assert grid["labels"] == [["CPU 0", "CPU 1", "CPU 2", "CPU 3"]]
    assert grid["col_labels"] == ["0:4", "4:8", "8:12", "12:16"] and grid["row_labels"] == []
    layout = s["report"]["arrays"][0]
    assert layout["typeof"] == "float32[16@d]" and layout["spec"] == "P('d',)"
    assert grid["distinct_colours"] == 4


def test_two_d_matches_the_chapter(scenarios):
    s = scenarios["two_d"]
    grid = only_grid(s)
    assert grid["labels"] == [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"]]
    assert grid["row_labels"] == ["0:4", "4:8"] and grid["col_labels"] == ["0:2", "2:4"]
    layout = s["report"]["arrays"][0]
    assert layout["typeof"] == "float32[8@data,4@model]" and layout["spec"] == "P('data', 'model')"
    assert [b["index"] for b in layout["blocks"]][0] == [[0, 4], [0, 2]]
    assert layout["mesh"]["axis_names"] == ["data", "model"] and layout["mesh"]["axis_sizes"] == [2, 2]
    assert "x[0:4, 0:2]: 4x2 float32, 32 B" in grid["tooltip0"]
    assert "bytes per device  32 B on each device (whole array 128 B)" in s["text"]
    assert "shard shape       (4, 2) of (8, 4)" in s["text"]
    # the text drawing is the chapter's ascii_sharding picture, with index ranges on the edges
    lines = s["text"].splitlines()
    start = lines.index("         0:2     2:4")
    assert lines[start + 1 : start + 6] == [
        "      +-------+-------+",
        "  0:4 | CPU 0 | CPU 1 |",
        "      +-------+-------+",
        "  4:8 | CPU 2 | CPU 3 |",
        "      +-------+-------+",
    ]


def test_partially_replicated(scenarios):
    s = scenarios["partial"]
    grid = only_grid(s)
    assert grid["labels"] == [["CPU 0,2", "CPU 1,3"]]
    layout = s["report"]["arrays"][0]
    assert layout["typeof"] == "float32[8,4@model]"
    assert layout["replica_check"] == "consistent" and layout["copies_compared"] == 4
    assert "replicated over mesh axis data" in s["text"]


def test_fully_replicated_and_scalar(scenarios):
    assert only_grid(scenarios["replicated"])["labels"] == [["CPU 0,1,2,3"]]
    assert scenarios["replicated"]["report"]["arrays"][0]["typeof"] == "float32[8,4]"
    scalar = scenarios["scalar"]
    assert only_grid(scalar)["labels"] == [["CPU 0,1,2,3"]]
    assert scalar["report"]["arrays"][0]["shape"] == [] and scalar["status"] == "ok"
    assert scenarios["typeof_ones"] == "float32[3]"


def test_three_d_draws_the_split_dims(scenarios):
    s = scenarios["three_d"]  # (4, 6, 8) with P('a', None, ('b', 'c'))
    grid = only_grid(s)
    assert grid["labels"] == [["CPU 0", "CPU 1", "CPU 2", "CPU 3"], ["CPU 4", "CPU 5", "CPU 6", "CPU 7"]]
    assert grid["row_labels"] == ["0:2", "2:4"] and grid["col_labels"] == ["0:2", "2:4", "4:6", "6:8"]
    assert "Rows: dimension 0 (size 4, split over 'a'); columns: dimension 2 (size 8, split over 'b', 'c')" in s[
        "text"
    ].replace("\n  ", " ")


def test_three_d_facets(scenarios):
    facets = scenarios["three_d_facets"]["drawing"]  # P('a', 'b', 'c'): dims 1, 2 drawn, one grid per block of dim 0
    assert [g["caption"] for g in facets] == ["u[0:2, :, :]", "u[2:4, :, :]"]
    assert facets[0]["labels"] == [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"]]
    assert facets[1]["labels"] == [["CPU 4", "CPU 5"], ["CPU 6", "CPU 7"]]
    chosen = scenarios["three_d_dims01"]["drawing"]  # --dims 0,1: facets over dim 2
    assert [g["caption"] for g in chosen] == ["u[:, :, 0:4]", "u[:, :, 4:8]"]
    assert chosen[0]["labels"] == [["CPU 0", "CPU 2"], ["CPU 4", "CPU 6"]]
    assert scenarios["bad_dims"] == "dims 0,5 does not fit arrays of rank 3"


def test_sixty_four_devices_stay_readable(scenarios):
    s = scenarios["sixty_four"]
    grid = only_grid(s)
    assert (grid["rows"], grid["cols"]) == (8, 8)
    assert grid["labels"] == [[f"CPU {8 * r + c}" for c in range(8)] for r in range(8)]
    assert grid["distinct_colours"] == 64
    html = s["html"]
    assert html.count('class="jm-cell"') == 64
    assert '<div class="jm-grid" style=' in html  # 8 columns: full-size cells, not the compact style
    width = int(re.search(r'<div class="jm-grid" style="[^"]*;width:(\d+)px', html).group(1))
    assert width < 900, "the 8x8 drawing fits in the report without scrolling"
    assert max(len(line) for line in s["text"].splitlines()) <= 120
    assert "Per device (64 devices)" in html  # the long per-device table is collapsed


def test_sixty_four_blocks_in_a_row_wrap(scenarios):
    for name in ("sixty_four_1d", "sixty_four_wide"):
        grid = only_grid(scenarios[name])
        assert (grid["rows"], grid["cols"]) == (8, 8)
        assert grid["labels"][7][7] == "CPU 63"
        assert "8 per row" in grid["caption"]
    assert only_grid(scenarios["sixty_four_1d"])["details"][0][:2] == ["[0:2]", "[2:4]"]
    assert only_grid(scenarios["sixty_four_replicated"])["labels"] == [["CPU 0-63"]]


def test_replica_trap_is_found(scenarios):
    for name in ("bad_value", "bad_call"):
        s = scenarios[name]
        assert s["status"] == "problem"
        layout = s["report"]["arrays"][0]
        assert layout["replica_check"] == "differ"
        groups = layout["blocks"][0]["copy_groups"]
        assert [g["devices"] for g in groups] == [[0], [1], [2], [3]]
        assert [g["preview"] for g in groups] == ["6.0", "22.0", "38.0", "54.0"]
        assert only_grid(s)["styles"] == {"0,0": "alert"}
        assert "CPU 0 has 6.0, CPU 1 has 22.0, CPU 2 has 38.0, CPU 3 has 54.0" in s["summary"]
    assert scenarios["bad_call"]["summary"].startswith("The result of `bad(xs)`")
    assert "lax.psum" in scenarios["bad_call"]["text"]
    good = scenarios["good_call"]
    assert good["status"] == "ok" and good["report"]["arrays"][0]["replica_check"] == "consistent"
    assert scenarios["no_check"]["report"]["arrays"][0]["replica_check"] == "skipped"


def test_call_compiled_and_intermediate_shardings(scenarios):
    call = scenarios["call"]["report"]["call"]
    assert call["was_jitted"] and call["intermediates_asked"]
    assert [(leaf["path"], leaf["typeof"], leaf["spec"], leaf["matches"]) for leaf in call["inputs"]] == [
        ("x2", "float32[8@d,2]", "P('d',)", True)
    ]
    assert [(leaf["path"], leaf["spec"]) for leaf in call["outputs"]] == [("result", "P('d',)")]
    rows = [(r["op"], r["typeof"], r["spec"], r["yours"]) for r in call["intermediates"]]
    assert rows == [
        ("sin", "float32[8@d,2]", "P('d',)", False),
        ("mul", "float32[8@d,2]", "P('d',)", False),
        ("inspect_array_sharding", "float32[8@d,2]", "P('d',)", True),
        ("reduce_sum", "float32[8@d]", "P('d',)", False),
    ]
    assert call["intermediates"][0]["line"]["code"] == "b = jnp.sin(a) * 2"
    assert scenarios["call_seen"] == {"inspect": "P('d',)"}  # the user's own callback ran once, as usual


def test_auto_axes_compiler_choices(scenarios):
    call = scenarios["auto_call"]["report"]["call"]
    chosen = {r["op"]: r["spec"] for r in call["intermediates"]}
    assert chosen == {"dot_general": "P('a',)", "tanh": "P('a',)", "transpose": "P(None, 'a')"}
    assert only_grid(scenarios["auto_call"])["labels"] == [["CPU 0,1", "CPU 2,3"]]


def test_uncommitted_argument_is_moved_and_mismatch_reported(scenarios):
    call = scenarios["resharded_call"]["report"]["call"]
    moved = [leaf for leaf in call["inputs"] if leaf["matches"] is False]
    assert [leaf["path"] for leaf in moved] == ["jnp.ones((8, 4))"]
    assert moved[0]["given"] == "single device CPU 0" and moved[0]["spec"] == "P('b', None)"
    assert "JAX moves them to the compiled layout on every call" in " ".join(
        scenarios["resharded_call"]["text"].split()
    )
    mismatch = scenarios["mismatch_call"]
    assert mismatch["status"] == "error" and "does not match the sharding" in mismatch["report"]["failure"]


def test_pytree_and_shape_dtype_struct(scenarios):
    tree = scenarios["pytree"]["report"]
    assert [a["path"] for a in tree["arrays"]] == ["['b']", "['w']"]
    assert tree["other_leaves"] == [["['n']", "a Python int"]]
    sds = scenarios["shape_dtype_struct"]
    assert sds["report"]["arrays"][0]["has_data"] is False
    assert only_grid(sds)["labels"] == [["CPU 0,1"], ["CPU 2,3"]]


def test_per_device_prints(scenarios):
    per_device = scenarios["per_device"]
    assert per_device["by_device"] == {
        "0": ["local block [0. 1. 2. 3.]"],
        "1": ["local block [4. 5. 6. 7.]"],
        "2": ["local block [ 8.  9. 10. 11.]"],
        "3": ["local block [12. 13. 14. 15.]"],
    }
    assert per_device["print_restored"] == "debug_print"
    assert "device 2" in per_device["text"]


def test_without_rich(scenarios, scenarios_without_rich):
    assert scenarios["visualize"] == "ok"  # rich is installed here
    blocked = scenarios_without_rich
    assert blocked["rich_blocked"] is True
    assert blocked["visualize"] == "ValueError: `visualize_sharding` requires `rich` to be installed."
    assert only_grid(blocked["two_d"])["labels"] == [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"]]
    assert blocked["two_d"]["html"] == scenarios["two_d"]["html"]  # the notebook view never needed rich
    assert blocked["print_rich"] is False and blocked["rich_output"] == ""  # terminal falls back to text
    assert scenarios["print_rich"] is True and "CPU 3" in scenarios["rich_output"]


# -- two processes ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_on_loopback(tmp_path):
    port = free_port()
    command = [sys.executable, str(TESTS / "sharding_two_process.py"), str(port)]
    # Each process writes to a file, not a pipe: a result line past the pipe's 64 KiB (the report's HTML) would
    # block the process not read yet, and its peer then waits for it in jax.distributed.shutdown().
    outputs = [(tmp_path / f"out{i}.txt", tmp_path / f"err{i}.txt") for i in range(2)]
    procs = []
    for i, (out_path, err_path) in enumerate(outputs):
        with out_path.open("w") as out, err_path.open("w") as err:
            procs.append(subprocess.Popen(command + [str(i)], stdout=out, stderr=err, text=True, env=clean_env()))
    results = []
    try:
        for proc, (out_path, err_path) in zip(procs, outputs):
            proc.wait(timeout=180)
            assert proc.returncode == 0, err_path.read_text()[-4000:]
            results.append(json.loads(out_path.read_text().split("RESULT ", 1)[1].splitlines()[0]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    first, second = results
    assert first["global"] == second["global"] and len(first["global"]) == 4
    a, b = (r["split"] for r in results)
    assert a["fully_addressable"] is False and b["fully_addressable"] is False
    # process 0 reads the top row; the bottom row is process 1's, hatched, with its process index
    assert a["cells"]["0,0"] == {"label": "CPU 0", "detail": "", "style": ""}
    bottom_left = f"CPU {second['local'][0]}"
    assert a["cells"]["1,0"] == {"label": bottom_left, "detail": "process 1", "style": "muted"}
    assert b["cells"]["0,0"] == {"label": "CPU 0", "detail": "process 0", "style": "muted"}
    assert b["cells"]["1,0"]["style"] == "" and b["cells"]["1,0"]["label"] == bottom_left
    assert "jm-muted" in a["html"] and "~CPU" in a["text"]
    across = first["across"]  # P(None, 'model'): each block on one device of each process
    assert across["replica_check"] == "other processes"
    assert across["cells"]["0,0"]["detail"] == "also on process 1"
    assert first["magic_ok"] and first["magic_summary"].startswith("`x`: float32[8@data,4@model]")


# -- %jax_devices in a fresh kernel ----------------------------------------------------

DEVICES_SCRIPT = textwrap.dedent("""
    import json
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    ip.run_line_magic("load_ext", "jaxmagic")
    out = {}
    ip.run_cell("%jax_devices 4 -o first")
    first = ip.user_ns["first"]
    out["first"] = [first.applied, first.backend_started, first.status.value, first.summary]
    ip.run_cell("import jax; n = jax.device_count()")
    out["count"] = ip.user_ns["n"]
    ip.run_cell("%jax_devices 8 -o late")
    late = ip.user_ns["late"]
    out["late"] = [late.applied, late.cpu_devices, late.status.value, late.summary, late.document().fix]
    ip.run_cell("%jax_devices 2*2 -o same")
    out["same"] = [ip.user_ns["same"].status.value, ip.user_ns["same"].summary]
    bad = ip.run_cell("%jax_devices 0")
    out["zero"] = type(bad.error_in_exec).__name__ + ": " + str(bad.error_in_exec)
    print("RESULT " + json.dumps(out))
""")


def test_jax_devices_in_a_fresh_kernel():
    proc = subprocess.run(
        [sys.executable, "-c", DEVICES_SCRIPT], capture_output=True, text=True, timeout=300, env=clean_env()
    )
    assert "RESULT " in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert out["first"][:3] == [True, False, "ok"]
    assert out["count"] == 4
    applied, cpu_devices, status, summary, fix = out["late"]
    assert (applied, cpu_devices, status) == (False, 4, "problem")
    assert "already started with 4" in summary and fix.startswith("Restart the kernel")  # the fix under it
    assert out["same"][0] == "ok" and "already has 4 CPU devices" in out["same"][1]
    assert out["zero"].startswith("UsageError: %jax_devices: count must be a positive whole number")


# -- in this process (one device is enough) ---------------------------------------------


def test_magic_on_values_and_calls(ip):
    ip.run_cell("import numpy as np\nv = jnp.arange(6.0).reshape(2, 3)\n@jax.jit\ndef double(a):\n    return a * 2\n")
    assert ip.run_cell("%jax_sharding v -o rep_v").success
    rep = ip.user_ns["rep_v"]
    assert rep.layout.typeof == "float32[2,3]" and rep.call is None
    assert rep.layout.blocks[0].holders == [0]
    assert ip.run_cell("%jax_sharding double(v) -o rep_call").success
    call_rep = ip.user_ns["rep_call"]
    assert call_rep.call is not None and call_rep.call.inputs[0].path == "v"
    assert ip.run_cell("%jax_sharding np.ones(3) -o rep_np").success
    assert ip.user_ns["rep_np"].other_leaves[0][1].startswith("a NumPy array float64[3] in host memory")
    assert ip.run_cell("%jax_sharding v[0] --no-check -o rep_idx").success
    assert ip.user_ns["rep_idx"].expression == "v[0]"


@pytest.mark.parametrize(
    "line, message",
    [
        ("%jax_sharding", "needs an array expression"),
        ("%jax_sharding undefined_name", "does not evaluate: NameError"),
        ("%jax_sharding v --dims 0", "argument --dims: takes two dimensions such as 0,2"),
        ("%jax_sharding v --dims 1,1", "--dims must be two different dimensions"),
        ("%jax_sharding v --dims a,b", "argument --dims: takes two dimensions such as 0,2"),
        ("%jax_sharding v --dims 0,4", "does not fit arrays of rank 2"),
    ],
)
def test_magic_usage_errors(ip, line, message):
    from IPython.core.error import UsageError

    ip.run_cell("v = jnp.arange(6.0).reshape(2, 3)")
    result = ip.run_cell(line)
    assert isinstance(result.error_in_exec, UsageError) and message in str(result.error_in_exec)


def test_call_error_is_reported_then_raised(ip):
    ip.run_cell("@jax.jit\ndef broken(a):\n    return a.reshape(7)\n")
    result = ip.run_cell("%jax_sharding broken(jnp.ones(3)) -o rep_broken")
    assert isinstance(result.error_in_exec, TypeError)  # the user's own exception
    rep = ip.user_ns["rep_broken"]
    assert rep.status is Status.ERROR and rep.failure.startswith("TypeError")


def test_report_keeps_no_array_alive(ip):
    import gc
    import weakref

    ip.run_cell("held = jnp.ones((64, 64))")
    ref = weakref.ref(ip.user_ns["held"])
    ip.run_cell("%jax_sharding held -o rep_held")
    ip.run_cell("del held")
    gc.collect()
    assert ref() is None
    assert "float32[64,64]" in json.dumps(ip.user_ns["rep_held"].to_dict())


# -- the Grid block, drawn by every renderer ---------------------------------------------------

EVIL = "<script>alert(1)</script>"


def test_grid_html_is_escaped_and_colours_checked():
    grid = Grid(
        1,
        2,
        [
            GridCell(0, 0, EVIL, detail=EVIL, colour="#a6cee3", tooltip=EVIL + '"'),
            GridCell(0, 1, "b", colour="red;background:url(x)", style="muted"),
        ],
        caption=EVIL,
        col_labels=[EVIL, "1"],
        row_labels=["r"],
    )
    html = render_html(Document("t", Status.OK, "h", [Section("S", [grid])]))
    assert "<script>" not in html and "&lt;script&gt;" in html and "&quot;" in html
    assert "background:#a6cee3" in html and "url(x)" not in html
    assert "jm-muted" in html


def test_grid_text_drawing():
    grid = Grid(
        2,
        2,
        [GridCell(0, 0, "CPU 0"), GridCell(0, 1, "CPU 1", style="muted"), GridCell(1, 0, "CPU 2,3", style="alert")],
        col_labels=["0:2", "2:4"],
        row_labels=["0:4", "4:8"],
    )
    text = render_text(Document("t", Status.OK, "h", [Section("", [grid])]))
    assert text.splitlines()[1:] == [
        "           0:2         2:4",
        "      +-----------+-----------+",
        "  0:4 |   CPU 0   |  ~CPU 1~  |",
        "      +-----------+-----------+",
        "  4:8 | !CPU 2,3! |           |",
        "      +-----------+-----------+",
    ]


def test_colours_and_id_lists():
    assert len(set(device_colours(list(range(64))).values())) == 64
    assert device_colours([5, 3])[5] != device_colours([5, 3])[3]
    assert id_list([0, 2]) == "0,2" and id_list([0, 1, 2, 3]) == "0,1,2,3"
    assert id_list(list(range(8)) + list(range(16, 24)) + [30, 31]) == "0-7,16-23,30,31"


def test_wide_grid_text_is_listed_cell_by_cell():
    cells = [GridCell(0, c, f"device {c}", detail="x" * 30) for c in range(4)]
    text = render_text(
        Document("t", Status.OK, "h", [Section("", [Grid(1, 4, cells, col_labels=["a", "b", "c", "d"])])])
    )
    assert text.splitlines()[1:] == [f"  [{n}] device {c}  {'x' * 30}" for c, n in enumerate("abcd")]


def test_uneven_sharding_constraint_is_a_finding(scenarios):
    # "with_sharding_constraint not applied": asked P('data') on 17 rows over 8 devices, came out replicated
    s = scenarios["uneven_constraint"]
    assert s["status"] == "problem"
    [check] = s["report"]["call"]["constraints"]
    assert check["requested"] == "P('data',)" and check["came_out"] == "P()" and check["copies"] == 8
    assert check["uneven"] == ["dimension 0 (17) over 'data' (8 devices)"]
    assert "asked for P('data',) on a float32[17,4] value" in s["summary"]
    assert "came out P() (8 full copies)" in s["summary"] and "does not divide evenly" in s["summary"]
    assert "Sharding constraints not honoured" in s["text"] and "pad it" in " ".join(s["text"].split())
    even = scenarios["even_constraint"]
    assert even["report"]["call"]["constraints"][0]["uneven"] == []
    # The constraint is honoured; its argument, made on one device, is copied to the 8 at every call: that
    # is what the report tells to act on (tests/test_one_verdict.py), never an OK beside the table saying so.
    assert [c["text"] for c in even["report"]["concerns"]] == [
        "`x16` arrives as single device CPU 0 but was compiled as GSPMDSharding({devices=[8,1]<=[8]}, "
        "memory_kind=device): JAX copies it there at every call"
    ]
    assert even["status"] == "problem" and "Sharding constraints not honoured" not in even["text"]
