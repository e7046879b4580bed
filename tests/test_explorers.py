"""Explorers (``--explore``, ``--panel``): nothing without the flag, a real fallback line, built from the typed report.

The programs are shaped like real threads: a 4-D activation sharded over a 2x4 mesh and a
replicated weight (jax#18324: "which device has which block of my 4-D array"), a NaN from a
log of negative input found by the watch (jax#1052), a jit wrapper rebuilt per call (jax#4572),
and a model whose layers are ``jax.named_scope``s (jax#12883: finding a scope in the HLO).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from IPython.core.error import UsageError

ROOT = Path(__file__).resolve().parent.parent
VIEW = "application/vnd.jupyter.widget-view+json"


def _python(code: str, devices: int = 1) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.kernel  # a fresh Python process
def test_without_the_flag_ipywidgets_is_not_imported():
    out = _python(
        """
        import sys
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_line_magic("load_ext", "jaxmagic")
        ip.run_cell("import jax, jax.numpy as jnp\\ndef f(x):\\n    return jnp.sin(x)\\nx = jnp.ones(4)")
        ip.kernel = object()  # as in a notebook: explorers would be drawn
        for line in ("%jax_sharding x", "%jax_hlo f(x)", "%jax_watch on", "%jax_watch off", "%jax_live"):
            ip.run_cell(line)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("ipywidgets", "comm")
                     or m.startswith("jaxmagic.ipython.explorers")))
        """
    )
    assert out.strip().splitlines()[-1] == "[]"


@pytest.fixture
def shown(ip, monkeypatch):
    """The bundles explorers display, with the shell taken for a notebook kernel."""
    import jaxmagic.ipython.explorers.shown as module

    bundles: list[dict] = []
    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    monkeypatch.setattr(module, "display", lambda bundle, raw=False: bundles.append(bundle))
    return bundles


def _text(html: str) -> str:
    """What an HTML value reads as: its tags (``<wbr>`` break points, code spans) left out."""
    return re.sub(r"<[^>]+>", "", html)


def _explorer_outputs(bundles: list[dict]) -> tuple[dict, dict]:
    """The fallback line's bundle and the view's, checked to come in that order."""
    assert len(bundles) == 2, bundles
    line, view = bundles
    assert VIEW not in line and VIEW in view
    return line, view


def test_the_fallback_line_is_a_static_output_just_before_the_view(ip, shown):
    ip.run_cell("def f_scoped(x):\n    with jax.named_scope('layer'):\n        return jnp.tanh(x) * 2")
    result = ip.run_cell("%jax_hlo f_scoped(jnp.ones(3)) --explore")
    assert result.success
    line, view = _explorer_outputs(shown)
    assert "run this cell to explore again" in line["text/plain"]
    assert line["text/plain"].startswith("Explorer of the program's named scopes")
    assert "<script" not in line["text/html"] and "run this cell to explore again" in line["text/html"]
    # the one rule it carries hides only jupyterlab_widgets' error in the output right after it
    assert "<style>" in line["text/html"] and ".jp-OutputArea-output.jupyter-widgets)" in line["text/html"]
    assert view["text/plain"] == "", "the line before speaks for the view: an export shows it once"
    assert view[VIEW]["model_id"]


def test_a_failing_call_still_raises_after_report_and_explorer(ip, shown):
    ip.run_cell("def f_fails(x):\n    with jax.named_scope('bad'):\n        return x @ jnp.ones((5, 5))")
    result = ip.run_cell("%jax_hlo f_fails(jnp.ones(3)) --explore")
    assert isinstance(result.error_in_exec, TypeError), "the user's error, unchanged"
    assert shown == [], "a program that did not trace has no scopes to explore: a line says so, no empty widget"


def test_an_explorer_that_cannot_be_built_says_so_in_one_line(capsys, shown):
    from jaxmagic.ipython.explorers import show_explorer

    def broken():
        raise RuntimeError("a bug of ours")

    assert show_explorer(broken, "something") is None
    assert shown == []
    assert "could not build the explorer of something (RuntimeError: a bug of ours)" in capsys.readouterr().out


def test_in_a_terminal_no_widget_is_built(ip, capsys):
    ip.run_cell("def f_term(x):\n    return x + 1")
    ip.run_cell("%jax_hlo f_term(jnp.ones(3)) --explore")
    assert "needs a notebook front end" in capsys.readouterr().out


def test_panel_with_off_is_a_usage_error(ip):
    with pytest.raises(UsageError, match="--panel shows the running watch"):
        ip.run_line_magic("jax_watch", "off --panel")


def test_the_watch_panel_lists_every_finding_and_clean_cells_add_nothing(ip, shown):
    from jaxmagic.ipython import watch_hook

    ip.run_line_magic("jax_watch", "on --panel")
    try:
        line, _view = _explorer_outputs(shown)
        assert "every finding of this watch session" in line["text/plain"]
        # running this cell alone starts an empty session: the caption says to run the cells after it too
        assert "run this cell and the cells after it again" in line["text/plain"]
        assert "run this cell to explore again" not in line["text/plain"]
        panel = watch_hook.current_panel(ip)
        assert "Nothing found yet" in panel.header.value
        ip.run_cell("def log_step(v):\n    return jnp.log(v)\ny_nan = jax.jit(log_step)(-jnp.ones(3))")
        cell = panel.shown[0].cell
        assert [row for row, _ in panel.findings.options][0].split(" | ") == [
            f"{cell}, line 2",  # the line is in the cell that ran: the cell is said once (issue 53)
            "NaN",
            "seen 1x",
            "%%jax_nans",
        ]
        shown_before = panel.shown
        ip.run_cell("z_clean = jnp.ones(2) + 1")
        assert panel.shown is shown_before, "a clean cell redraws nothing"
        ip.run_cell("for n in (1, 2, 3):\n    jax.jit(lambda a: a * 2)(jnp.ones(n))")
        rows = [row for row, _ in panel.findings.options]
        assert [r.split(" | ")[1] for r in rows] == ["NaN", "recompilation"], rows
        assert "`" not in panel.details.value.replace("<code", "")  # Markdown's code is drawn as code
        assert rows[1].endswith("%%jax_compiles --budget 1")  # a `<lambda>` cannot be named after --fn (issue 53)
        assert "2 finding(s)" in panel.header.value
        panel.areas.value = "NaN"
        assert len(panel.findings.options) == 1
        assert "jnp.log" in panel.details.value and "Fix:" in panel.details.value
        # the panel holds the findings as drawn (copies: the log's count on), plain data only
        assert all(shown is not found for shown, found in zip(panel.shown, watch_hook.current(ip).log.findings))
        json.dumps([finding.to_dict() for finding in panel.shown])
    finally:
        ip.run_line_magic("jax_watch", "off")


SHARDING_SCENARIO = """
import json
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P, AxisType
import jaxmagic.probes as probes
from jaxmagic.ipython.explorers.sharding import ShardingExplorer, input_layouts, sharding_sources
mesh = jax.make_mesh((2, 4), ('data', 'model'), axis_types=(AxisType.Explicit,) * 2)
acts = jax.device_put(jnp.ones((4, 6, 8, 3)), NamedSharding(mesh, P('data', None, 'model')))
w = jax.device_put(jnp.ones((8, 5)), NamedSharding(mesh, P('model', None)))   # copies along 'data'
def layer(a, w):
    return a.sum(axis=1), w * 2
report, error = probes.run_sharding_call(jax.jit(layer), (acts, w), {}, call_text="layer(acts, w)")
assert error is None, error
ex = ShardingExplorer(sharding_sources(report, input_layouts((acts, w), {})))
out = {"arrays": [label for label, _ in ex.array.options], "dims": [ex.rows.value, ex.cols.value],
       "slices": sorted(ex._slice_widgets)}
ex.rows.value = 1
out["slices_after"] = sorted(ex._slice_widgets)
ex.select(6)
out["slice_moved"] = list(ex._slice_widgets[0].value)
out["selected_cells"] = ex.grid.value.count("jm-selected")
out["info_acts"] = ex.info.value
ex.cols.value = 3  # draw dimensions 1 and 3: dimension 2 is sliced anew, at device 6's block
out["slice_after_dims"] = [list(ex._slice_widgets[d].value) for d in (0, 2)]
out["selected_after_dims"] = ex.grid.value.count("jm-selected")
out["device_text"] = sorted({b.style.text_color for b in ex._device_buttons.values()})
ex.array.value = 1
ex.select(1)
out["info_w"] = ex.info.value
out["borders"] = {d: b.layout.border for d, b in ex._device_buttons.items() if b.layout.border}
print(json.dumps(out))
"""


@pytest.mark.kernel  # a fresh Python process
def test_the_sharding_explorer_slices_a_4d_layout_and_shows_a_devices_replicas():
    from jaxmagic.ipython.explorers.sharding import CHOSEN_BORDER, REPLICA_BORDER

    out = json.loads(_python(SHARDING_SCENARIO, devices=8).strip().splitlines()[-1])
    assert out["arrays"][:2] == ["input: args[0] float32[4@data,6,8@model,3]", "input: args[1] float32[8@model,5]"]
    assert out["arrays"][2:] == ["output: result[0] float32[4@data,8@model,3]", "output: result[1] float32[8@model,5]"]
    assert out["dims"] == [0, 2] and out["slices"] == [1, 3]  # the split dimensions drawn, the others sliced
    assert out["slices_after"] == [0, 3]
    assert out["slice_moved"] == [2, 4], "choosing device 6 moves the slice to its block"
    assert out["selected_cells"] == 1
    assert "Device 6 holds 1 block(s): [2:4, 0:6, 4:6, 0:3]" in out["info_acts"]
    # w = P('model', None) on a 2x4 mesh: device 1's rows 2:4 are also on device 5
    assert "Device 1 holds 1 block(s): [2:4, 0:5]; copies of them on 1 other device(s): 5" in out["info_w"]
    assert out["borders"] == {"1": CHOSEN_BORDER, "5": REPLICA_BORDER}
    assert out["slice_after_dims"] == [[2, 4], [4, 6]], "redrawing other dimensions keeps device 6's block in the slice"
    assert out["selected_after_dims"] == 1
    assert out["device_text"] == ["#1f2328"], "device labels are dark on their pastel colours in both themes"


def test_the_hlo_explorer_shows_a_scopes_operations_in_every_stage(ip, shown):
    ip.run_cell(
        "def mlp(params, x):\n"
        "    with jax.named_scope('encoder'):\n"
        "        with jax.named_scope('attn'):\n"
        "            h = jnp.tanh(x @ params['w1'])\n"
        "        h = jax.nn.relu(h @ params['w2'])\n"
        "    with jax.named_scope('head'):\n"
        "        return (h ** 2).sum()\n"
        "params_m = {'w1': jnp.ones((8, 16)), 'w2': jnp.ones((16, 4))}"
    )
    ip.run_cell("%jax_hlo jax.grad(mlp)(params_m, jnp.ones((2, 8))) --explore -o hlo_rep")
    from jaxmagic.ipython.explorers.hlo import HloExplorer

    report = ip.user_ns["hlo_rep"]
    explorer = HloExplorer(report)
    labels = [label for label, _ in explorer.scopes.options]
    assert [label.split("  (")[0] for label in labels][:3] == ["encoder", "\u00b7\u00b7 attn", "head"]
    explorer.scopes.value = "encoder/attn"
    jaxpr, stablehlo, hlo = (column.value for column in explorer.columns)
    assert "tanh" in jaxpr and "dot_general" in jaxpr
    assert ":4" in jaxpr, "each operation names the user's line that made it"
    assert "stablehlo.tanh" in stablehlo and "attn" in stablehlo
    assert "in " in hlo, "an optimized-HLO operation names the kernel it runs in"
    assert "flops" in explorer.header.value
    assert report.scope_ops and all(op.inner == "" or op.inner.split("/")[0] in ("encoder", "head")
                                    for op in report.scope_ops)  # fmt: skip


def test_the_live_explorer_sorts_filters_and_names_holders_and_lines(ip, shown):
    # the shape of jax#1145's "memory keeps growing": activations kept in a list across steps
    ip.run_cell("kept_acts = []\nimport tracemalloc\ntracemalloc.start(25)  # the lines that made them")
    try:
        result = ip.run_cell(
            "%%jax_live --explore -o live_rep\n"
            "kept_acts.extend([jnp.ones((64, 64)) * i for i in range(5)])\n"
            "big_table = jnp.zeros((256, 256), jnp.float32)"
        )
    finally:
        ip.run_cell("tracemalloc.stop()")
    assert result.success
    line, _view = _explorer_outputs(shown)
    assert "live-array groups" in line["text/plain"]
    from jaxmagic.ipython.explorers.live import LiveExplorer

    explorer = LiveExplorer(ip.user_ns["live_rep"])
    rows = [row for row, _ in explorer.list.options]
    assert rows[0].startswith("float32[256,256]  x1  256 KiB") and "big_table" in rows[0], rows
    explorer.sort.value = "count"
    assert explorer.list.options[0][0].startswith("float32[64,64]  x5")
    shown_text = _text(explorer.details.value)
    assert "kept_acts[0..4]" in shown_text
    assert "line 2" in shown_text and "jnp.ones((64, 64))" in shown_text
    explorer.filter.value = "big_"
    assert [row.split("  ")[0] for row, _ in explorer.list.options] == ["float32[256,256]"]
    explorer.filter.value = "int8"
    assert explorer.list.options == () and explorer.details.value == ""


def test_the_hlo_reports_scope_ops_are_what_asdict_gives(ip):
    import dataclasses

    ip.run_cell("def f_two(x):\n    with jax.named_scope('one'):\n        return jnp.sin(x) + 1")
    ip.run_cell("%jax_hlo f_two(jnp.ones(3)) -o hlo_two")
    report = ip.user_ns["hlo_two"]
    assert report.scope_ops == [] and report.to_dict()["scope_ops"] == [], "recorded only under --explore"
    from jaxmagic.probes import run_hlo_call

    report = run_hlo_call(ip.user_ns["f_two"], (ip.user_ns["jnp"].ones(3),), {}, every_scope=True)[0]
    data = report.to_dict()
    assert data["scope_ops"] == [dataclasses.asdict(op) for op in report.scope_ops]
    assert {op["stage"] for op in data["scope_ops"]} == {"jaxpr", "stablehlo", "hlo"}
    json.dumps(data)


INTERMEDIATES_SCENARIO = """
import json
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P, AxisType
import jaxmagic.probes as probes
from jaxmagic.ipython.explorers.sharding import (
    ShardingExplorer, input_layouts, intermediate_layouts, sharding_sources, spec_entries, type_shape)
mesh = jax.make_mesh((2, 4), ('data', 'model'), axis_types=(AxisType.Explicit,) * 2)
x = jax.device_put(jnp.ones((8, 8, 4)), NamedSharding(mesh, P('data', None, 'model')))
def f(a):
    h = jnp.sin(a)
    return h.sum(axis=1)
report, error = probes.run_sharding_call(jax.jit(f), (x,), {}, call_text="f(x)", intermediates=True)
ex = ShardingExplorer(sharding_sources(report, input_layouts((x,), {}), intermediate_layouts(report, (x,), {})))
ex.array.value = len(ex.array.options) - 1
ex.select(5)
print(json.dumps({"arrays": [label for label, _ in ex.array.options], "info": ex.info.value,
                  "specs": [spec_entries("P()"), spec_entries("P(('a', 'b'), None)"), spec_entries("PartitionSpec")],
                  "types": [type_shape("bfloat16[]"), type_shape("float32[3@x,4]"), type_shape("f32[n,4]")]}))
"""


@pytest.mark.kernel  # a fresh Python process
def test_the_sharding_explorer_switches_to_the_intermediates_the_compiler_chose():
    out = json.loads(_python(INTERMEDIATES_SCENARIO, devices=8).strip().splitlines()[-1])
    assert out["arrays"] == [
        "input: args[0] float32[8@data,8,4@model]",
        "output: result float32[8@data,4@model]",
        "intermediate: sin (equation 0) float32[8@data,8,4@model]",
        "intermediate: reduce_sum (equation 1) float32[8@data,4@model]",
    ]
    assert "Device 5 holds 1 block(s): [4:8, 1:2]" in out["info"]
    assert out["specs"] == [[], [["a", "b"], None], None]
    assert out["types"] == [[[], "bfloat16"], [[3, 4], "float32"], None]


def test_an_explorer_keeps_no_array_alive(ip, shown):
    ip.run_cell("import weakref, gc\nx_kept = jnp.ones(8) * 3\nref_kept = weakref.ref(x_kept)")
    ip.run_cell("%jax_sharding x_kept --explore")
    ip.run_cell("%jax_live --explore")
    assert len(shown) == 4  # two explorers, each with its line
    ip.run_cell("del x_kept\ngc.collect()")
    assert ip.user_ns["ref_kept"]() is None, "the explorers hold plain data only"
