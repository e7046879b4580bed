"""Explorers as a person meets them: clicked in a real JupyterLab, then saved, reopened and exported.

A notebook with ``%jax_sharding x --explore`` (a 4-D array over a 2x4 mesh), ``%jax_watch
--panel`` followed by a NaN cell and a recompiling cell, ``%jax_hlo ... --explore`` and ``%jax_live
--explore`` is run in JupyterLab; a device is clicked and the drawn dimensions changed in the
sharding explorer, a finding chosen in the panel, a scope chosen in the HLO explorer, the live
groups filtered, each looked at in a screenshot (build/browser/explorer_*.png). Then the notebook is saved (JupyterLab
saves no widget state by default), opened again without running, and exported with nbconvert:
where each explorer was, the line saying to run the cell shows (ipywidgets#3773).
"""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from jupyterlab_session import Watched, browser, lab_server, require_chromium

pytestmark = pytest.mark.browser

NOTEBOOK = "explorers.ipynb"
SHOTS_PREFIX = "explorer"
FALLBACK = "run this cell to explore again"
SETUP = (
    "import os\n"
    "os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'\n"
    "%load_ext jaxmagic\n"
    "import jax, jax.numpy as jnp\n"
    "from jax.sharding import NamedSharding, PartitionSpec as P, AxisType\n"
    "mesh = jax.make_mesh((2, 4), ('data', 'model'), axis_types=(AxisType.Explicit,) * 2)\n"
    "x = jax.device_put(jnp.ones((4, 6, 8, 3)), NamedSharding(mesh, P('data', None, 'model')))"
)
CELLS = [
    SETUP,
    "%jax_sharding x --explore",
    "%jax_watch on --panel",
    # the shape of jax#1052 / a log of a negative input: a NaN made inside a jitted step
    "def step(v):\n    return jnp.log(v)\ny = jax.jit(step)(-jnp.ones(3))",
    "z = jnp.ones(2) + 1  # a clean cell adds nothing",
    # a new jit wrapper per call (jax#4572's shape): recompiles every time
    "for n in (1, 2, 3):\n    jax.jit(lambda a: a * 2)(jnp.ones(n))",
    "%jax_watch off",
    # named scopes as in jax#12883 ("which HLO ops belong to my layer"): explored scope by scope
    "def model(x):\n"
    "    with jax.named_scope('encoder'):\n"
    "        with jax.named_scope('attn'):\n"
    "            x = jnp.tanh(x @ x.T)\n"
    "    with jax.named_scope('head'):\n"
    "        return (x ** 2).sum()\n"
    "%jax_hlo jax.grad(model)(jnp.ones((4, 4))) --explore",
    "kept = [jnp.ones((32, 32)) * i for i in range(4)]\n%jax_live --explore",
]
EXPLORER_CELLS = (1, 2, 7, 8)
JS_READY = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  return !!(w && w.context && w.context.isReady && w.content && w.content.widgets && w.content.widgets.length > 0
    && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel
    && w.sessionContext.session.kernel.connectionStatus === 'connected');
}"""
JS_RUN_DONE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const code = w.content.widgets.filter(c => c.model.type === 'code');
  const failed = code.find(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
  if (failed) return 'error: ' + JSON.stringify(failed.model.outputs.toJSON()).slice(0, 3000);
  return code.every(c => c.model.executionCount) && w.sessionContext.session.kernel.status === 'idle';
}"""
JS_CELL_TEXT = "i => window.jupyterapp.shell.currentWidget.content.widgets[i].node.innerText"


def _command(page, command: str) -> None:
    page.evaluate("c => window.jupyterapp.commands.execute(c)", command)


def _shot(page, name: str):
    from test_browser import SHOTS

    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{SHOTS_PREFIX}_{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def _open(chromium, server):
    context = chromium.new_context(viewport={"width": 1280, "height": 1400}, device_scale_factor=1)
    page = context.new_page()
    watch = Watched()
    watch.attach(page)
    page.goto(server.lab_url(NOTEBOOK))
    page.wait_for_function(JS_READY, timeout=90_000)
    return context, page, watch


def test_explorers_click_save_reopen_export(tmp_path):
    require_chromium()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "jaxmagic", "display_name": "Python (jaxmagic)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    with lab_server() as server, browser() as chromium:
        nbformat.write(nb, server.root / NOTEBOOK)
        context, page, watch = _open(chromium, server)
        try:
            _command(page, "notebook:run-all-cells")
            page.wait_for_function(JS_RUN_DONE, timeout=240_000, polling=500)
            assert page.evaluate(JS_RUN_DONE) is True, page.evaluate(JS_RUN_DONE)
            explorer = page.locator(".jaxmagic-sharding-explorer")
            explorer.wait_for(timeout=30_000)
            # click device 5: its block is outlined, the others faded
            explorer.locator(".jm-device", has_text="CPU 5").click()
            page.wait_for_function(
                "() => document.querySelector('.jaxmagic-sharding-explorer').innerText.includes('Device 5 holds')"
            )
            assert explorer.locator(".jm-selected").count() == 1
            info = explorer.inner_text()
            assert "Device 5 holds 1 block(s): [2:4, 0:6, 2:4, 0:3]" in info, info
            _shot(page, "sharding_device_5")
            # draw dimensions 1 and 2: dimension 0 becomes a slice chooser
            explorer.locator("select").nth(1).select_option(label="dim 1 (6)")
            page.wait_for_function(
                "() => document.querySelector('.jaxmagic-sharding-explorer').innerText.includes('dim 1 \u2193 dim 2')"
            )
            _shot(page, "sharding_dims_1_2")
            panel = page.locator(".jaxmagic-watch-panel")
            assert "2 finding(s)" in panel.inner_text(), panel.inner_text()
            panel.locator("select").select_option(index=0)
            page.wait_for_function("() => document.querySelector('.jaxmagic-watch-panel').innerText.includes('Next:')")
            assert "NaN" in panel.inner_text() and "%%jax_nans" in panel.inner_text(), panel.inner_text()
            _shot(page, "watch_panel")
            hlo = page.locator(".jaxmagic-hlo-explorer")
            option = hlo.locator("option", has_text="attn")
            hlo.locator("select").select_option(label=option.inner_text())
            page.wait_for_function(
                "() => document.querySelector('.jaxmagic-hlo-explorer .jm-stage-stablehlo').innerText.includes('attn')"
            )
            columns = [hlo.locator(f".jm-stage-{stage}").inner_text() for stage in ("jaxpr", "stablehlo", "hlo")]
            assert "tanh" in columns[0] and "stablehlo.tanh" in columns[1] and "tanh" in columns[2], columns
            hlo.scroll_into_view_if_needed()
            _shot(page, "hlo_attn")
            live = page.locator(".jaxmagic-live-explorer")
            live.locator("input").fill("32,32")
            page.wait_for_function(
                "() => document.querySelector('.jaxmagic-live-explorer select').options.length === 1"
            )
            assert "kept[0..3]" in live.inner_text(), live.inner_text()
            live.scroll_into_view_if_needed()
            _shot(page, "live_filtered")
            _command(page, "docmanager:save")
            page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
            _command(page, "kernelmenu:shutdown")
        finally:
            context.close()
        assert watch.console_errors == [], watch.console_errors

        saved = nbformat.read(server.root / NOTEBOOK, as_version=4)
        assert "widgets" not in saved.metadata
        for index in EXPLORER_CELLS:
            parts = [o["data"] for o in saved.cells[index].outputs if o.get("output_type") == "display_data"]
            views = [n for n, d in enumerate(parts) if "application/vnd.jupyter.widget-view+json" in d]
            assert len(views) == 1 and views[0] >= 1, parts
            assert FALLBACK in parts[views[0] - 1]["text/plain"], "the line just before the view says to run the cell"
            assert parts[views[0]]["text/plain"] == ""

        context, page, watch = _open(chromium, server)
        try:
            page.wait_for_function("() => document.querySelectorAll('.jaxmagic').length >= 1", timeout=60_000)
            page.wait_for_timeout(4000)  # the widget manager gives up on a model after 2 s
            _shot(page, "reopened")
            for index in EXPLORER_CELLS:
                assert FALLBACK in page.evaluate(JS_CELL_TEXT, index), page.evaluate(JS_CELL_TEXT, index)
            _shot(page, "reopened")
        finally:
            context.close()

        out = tmp_path / "export"
        done = subprocess.run(
            [sys.executable, "-m", "nbconvert", "--to", "html", str(server.root / NOTEBOOK), "--output-dir", str(out)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        exported = (out / "explorers.html").read_text()
        assert exported.count(FALLBACK) == len(EXPLORER_CELLS)
        assert "widget-view+json" not in exported and "embed-amd" not in exported
        context = chromium.new_context(viewport={"width": 1280, "height": 1400})
        page = context.new_page()
        try:
            page.goto((out / "explorers.html").as_uri())
            assert page.inner_text("body").count(FALLBACK) == len(EXPLORER_CELLS)
            _shot(page, "exported")
        finally:
            context.close()
