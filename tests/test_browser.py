"""Reports as a person meets them, in a real JupyterLab in headless Chromium.

One notebook with a cell per registered magic (the examples of
test_magics_contract.py, plus a few that find something) is run in JupyterLab
through its own commands, saved, and opened again without running - the case
where ipywidgets views read "Error displaying widget: model not found". Then:
JupyterLab's dark theme, a 900 px window with the file browser open, the same
notebook untrusted (its HTML sanitized), and nbconvert's HTML export opened
with every network request blocked, light and dark. Every page must show every
report's headline, log no console error and make no request off the machine.

Screenshots go to build/browser/; with JAXMAGIC_UPDATE_SCREENSHOTS=1 the
light and dark pictures in docs/img/ are refreshed from the same run.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from jupyterlab_session import JS_TEXT_CONTRAST, Watched, browser, lab_server, require_chromium
from test_magics_contract import EXAMPLES, SETUP, registered_magics

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "build" / "browser"
DOCS_IMG = ROOT / "docs" / "img"
NOTEBOOK = "reports.ipynb"
RUN_TIMEOUT_MS = 240_000
VIEWPORT = {"width": 1280, "height": 1000}

# Reports that find something (the contract examples mostly find nothing); none raises,
# so "Run All" goes through every cell.
FINDING_CELLS = {
    "jax_check": "%jax_check f_evil(jnp.ones(3))",
    "jax_doctor": "%%jax_doctor\n"
    "def f_nan(x):\n    return jnp.log(x)\n"
    "for width in (3, 4):  # two shapes: a recompilation; log(-1): a NaN\n"
    "    jax.jit(f_nan)(-jnp.ones(width))",
    "jax_compiles": "%%jax_compiles\n"
    "def layer_with_a_long_name(params, activations, scale=1.0):\n"
    "    return jnp.tanh(activations @ params['w_hidden_projection'] + params['b_hidden_projection']) * scale\n"
    "for n in (8, 16, 32):\n"
    "    jax.jit(layer_with_a_long_name)({'w_hidden_projection': jnp.ones((n, 4)),"
    " 'b_hidden_projection': jnp.ones(4)}, jnp.ones((2, n)))",
    # notebook 05's wide tables (issue 53): every compilation of several functions, and a profile's kernels
    "jax_compiles_all": "%%jax_compiles --all\n"
    "def double_it(x):\n    return x * 2\n"
    "jax.jit(double_it)(jnp.float32(1.0))\njax.jit(double_it)(1.0)\n"
    "for _ in range(3):\n    jax.jit(lambda v: v - 1)(jnp.ones((8, 64)))",
    "jax_profile": "%%jax_profile\n"
    "@jax.jit\ndef deep_layers(ws, x):\n    for w in ws:\n        with jax.named_scope('layers'):\n"
    "            x = jnp.tanh(x @ w)\n    return x.sum()\n"
    "for _ in range(5):\n    deep_layers([jnp.ones((32, 32))] * 8, jnp.ones((8, 32))).block_until_ready()",
}


def notebook_cells() -> list[tuple[str, str]]:
    """(magic, source) of every report cell: one per registered magic, then the finding ones."""
    cells = [(magic, EXAMPLES[magic].ok.format(out=f"report_{magic}")) for magic in registered_magics()]
    return cells + list(FINDING_CELLS.items())


def build_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "jaxmagic", "display_name": "Python (jaxmagic)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext jaxmagic"), nbformat.v4.new_code_cell(SETUP.strip())]
    nb.cells += [nbformat.v4.new_code_cell(source) for _, source in notebook_cells()]
    return nb


def test_the_browser_notebook_has_a_cell_for_every_magic():
    covered = {magic for magic, _ in notebook_cells()}
    assert covered >= set(registered_magics())


# -- JavaScript run in the page ---------------------------------------------------

PANEL = "window.jupyterapp && window.jupyterapp.shell.currentWidget"
JS_READY = f"""() => {{
  const w = {PANEL};
  return !!(w && w.context && w.context.isReady && w.content && w.content.widgets && w.content.widgets.length > 0
    && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel
    && w.sessionContext.session.kernel.connectionStatus === 'connected');
}}"""
JS_RUN_DONE = f"""() => {{
  const w = {PANEL};
  const code = w.content.widgets.filter(c => c.model.type === 'code');
  const failed = code.find(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
  if (failed) return 'error: ' + JSON.stringify(failed.model.outputs.toJSON()).slice(0, 3000);
  return code.every(c => c.model.executionCount) && w.sessionContext.session.kernel.status === 'idle';
}}"""
JS_HELPERS = """
const luminance = (css) => {
  const m = css.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
  const [r, g, b] = m[1].split(',').map(Number).slice(0, 3).map(v => {
    v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
};
const opaque = (css) => css && css !== 'transparent' && !/rgba\\([^)]*,\\s*0\\)$/.test(css);
const backgroundOf = (el) => {  // the colour actually painted behind el
  for (let e = el; e; e = e.parentElement) {
    const bg = getComputedStyle(e).backgroundColor; if (opaque(bg)) return bg;
  }
  return 'rgb(255, 255, 255)';
};
const contrast = (a, b) => { const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05); };
"""
JS_REPORTS = (
    """() => {"""
    + JS_HELPERS
    + JS_TEXT_CONTRAST
    + """
  const lab = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const root = lab ? lab.node : document.body;  // JupyterLab: the open notebook's tab only
  const reports = [...root.querySelectorAll('.jaxmagic')];
  const text = root.innerText;
  return {
    page_text_flags: ['model not found', 'Loading widget', 'Error displaying widget']
      .filter(flag => text.includes(flag)),
    reports: reports.map(r => {
      const head = r.querySelector('.jm-headline'), title = r.querySelector('.jm-title'),
            badge = r.querySelector('.jm-badge'), rect = r.getBoundingClientRect();
      const area = r.closest('.jp-OutputArea-output, .jp-RenderedHTMLCommon') || r.parentElement;
      const cells = [...r.querySelectorAll('td, .jm-td')];
      const bg = backgroundOf(r), fg = getComputedStyle(head).color;
      return {
        headline: head ? head.innerText.trim() : '',
        headline_height: head ? head.getBoundingClientRect().height : 0,
        visible: rect.width > 0 && rect.height > 0 && getComputedStyle(r).visibility !== 'hidden',
        background: bg, background_luminance: luminance(bg), text_contrast: contrast(fg, bg),
        badge_background: badge ? getComputedStyle(badge).backgroundColor : '',
        badge_contrast: badge ? contrast(getComputedStyle(badge).color, getComputedStyle(badge).backgroundColor) : 99,
        title_font: title ? getComputedStyle(title).fontFamily : '',
        title_badge_gap: title && badge ? badge.getBoundingClientRect().left - title.getBoundingClientRect().right : 0,
        cell_align: [...new Set(cells.map(c => getComputedStyle(c).textAlign))],
        overflow_px: Math.max(r.scrollWidth - r.clientWidth,
                              rect.right - area.getBoundingClientRect().right, 0),
        sections: r.querySelectorAll('details.jm-section').length,
        // tables too wide to wrap scroll sideways inside the report: how many do, here
        scrolled_tables: [...r.querySelectorAll('.jm-table, .jm-facts')]
          .filter(t => t.checkVisibility() && t.scrollWidth > t.clientWidth + 1)
          .map(t => [t.scrollWidth, t.clientWidth, t.innerText.slice(0, 40)]),
        title: title ? title.innerText : '',
        // issue 61: the muted labels of code frames ("In [12], line 2, in block") were 4.43:1 on the code tint
        muted_contrast: Math.min(99, ...[...r.querySelectorAll('[style*="opacity"]')]
          .filter(e => e.checkVisibility() && e.innerText.trim()).map(e => textContrast(e, r))),
        // a FOUND or FAILED report says what to do under its headline, outside every fold, and it is seen
        fix_in_sight: !badge || !['FOUND', 'FAILED'].includes(badge.innerText.trim()) ||
          [...r.querySelectorAll('.jm-fix')].some(f => !f.closest('details') && f.checkVisibility()
                                                     && f.innerText.trim().length > 10),
      };
    }),
  };
}"""
)


@dataclasses.dataclass
class Lab:
    server: object
    chromium: object
    saved: Path  # the notebook as JupyterLab saved it after running every cell
    run_watch: Watched


def _open_page(lab_or_chromium, url: str, viewport=VIEWPORT):
    context = lab_or_chromium.new_context(viewport=viewport, device_scale_factor=1)
    page = context.new_page()
    watch = Watched()
    watch.attach(page)
    page.goto(url)
    return context, page, watch


def _wait_ready(page) -> None:
    page.wait_for_function(JS_READY, timeout=90_000)


def _wait_for_reports(page, expected: int) -> None:
    """Until the open notebook (or the page) shows ``expected`` reports: outputs render as they load."""
    page.wait_for_function(
        "n => ((window.jupyterapp && window.jupyterapp.shell.currentWidget) ? "
        "window.jupyterapp.shell.currentWidget.node : document.body).querySelectorAll('.jaxmagic').length >= n",
        arg=expected,
        timeout=60_000,
    )


def _command(page, command: str, args: dict | None = None) -> None:
    page.evaluate("([c, a]) => window.jupyterapp.commands.execute(c, a)", [command, args or {}])


def _shot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture(scope="module")
def lab():
    require_chromium()
    with lab_server() as server, browser() as chromium:
        nbformat.write(build_notebook(), server.root / NOTEBOOK)
        context, page, watch = _open_page(chromium, server.lab_url(NOTEBOOK))
        try:
            _wait_ready(page)
            _command(page, "notebook:run-all-cells")
            page.wait_for_function(JS_RUN_DONE, timeout=RUN_TIMEOUT_MS, polling=500)
            done = page.evaluate(JS_RUN_DONE)
            assert done is True, done
            page.wait_for_timeout(500)  # the last outputs paint
            _shot(page, "1_run_light")
            _command(page, "docmanager:save")
            page.wait_for_function(f"() => !({PANEL}).context.model.dirty", timeout=30_000)
            _command(page, "kernelmenu:shutdown")
        finally:
            context.close()
        yield Lab(server, chromium, server.root / NOTEBOOK, watch)


def _check_every_report(found: dict, expected: int) -> None:
    assert found["page_text_flags"] == [], f"the page shows {found['page_text_flags']}"
    reports = found["reports"]
    assert len(reports) == expected, f"{len(reports)} reports on the page, {expected} expected"
    for report in reports:
        assert report["visible"] and report["headline"] and report["headline_height"] > 0, report
        assert report["text_contrast"] >= 4.5, f"headline hard to read: {report}"
        assert report["badge_contrast"] >= 4.5, f"badge hard to read: {report}"
        assert report["muted_contrast"] >= 4.5, f"muted text hard to read: {report}"
        assert report["fix_in_sight"], f"a report that found something shows no fix outside its folds: {report}"


def _check_clean(watch: Watched, where: str) -> None:
    assert watch.external_requests == [], f"{where}: requests off the machine: {watch.external_requests}"
    assert watch.console_errors == [], f"{where}: console errors: {watch.console_errors}"


def test_run_in_jupyterlab_shows_every_report(lab):
    saved = nbformat.read(lab.saved, as_version=4)
    assert "widgets" not in saved.metadata, "nothing in the saved notebook depends on a widget model"
    _check_clean(lab.run_watch, "running the notebook")


def test_reopened_light_dark_and_narrow(lab):
    expected = len(notebook_cells())
    context, page, watch = _open_page(lab.chromium, lab.server.lab_url(NOTEBOOK))
    try:
        _wait_ready(page)
        _wait_for_reports(page, expected)
        page.wait_for_timeout(300)
        light = page.evaluate(JS_REPORTS)
        _check_every_report(light, expected)
        assert all(r["background_luminance"] > 0.8 for r in light["reports"]), "light theme: light reports"
        assert all(set(r["cell_align"]) <= {"left", "right"} for r in light["reports"]), "cells keep their alignment"
        assert all(r["overflow_px"] <= 1 for r in light["reports"]), [r["overflow_px"] for r in light["reports"]]
        _shot(page, "2_reopened_light")
        _report_shots(page, "light")

        _command(page, "apputils:change-theme", {"theme": "JupyterLab Dark"})
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
        page.wait_for_timeout(800)  # the theme's stylesheet applies
        dark = page.evaluate(JS_REPORTS)
        _check_every_report(dark, expected)
        assert all(r["background_luminance"] < 0.1 for r in dark["reports"]), "the report background follows the theme"
        _shot(page, "3_reopened_dark")
        _report_shots(page, "dark")
        _command(page, "apputils:change-theme", {"theme": "JupyterLab Light"})
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'true'", timeout=30_000)

        page.set_viewport_size({"width": 900, "height": 1000})
        _command(page, "filebrowser:activate")
        page.wait_for_timeout(800)
        narrow = page.evaluate(JS_REPORTS)
        _report_shots(page, "narrow", width=900)
        _check_every_report(narrow, expected)
        too_wide = [(r["headline"][:60], r["overflow_px"]) for r in narrow["reports"] if r["overflow_px"] > 1]
        assert too_wide == [], f"reports wider than the notebook at 900 px: {too_wide}"
        # The doctor's findings table and its paragraph wrap (the case); a table
        # of long unbreakable names may scroll inside its report, never past the notebook.
        doctor = [r for r in narrow["reports"] if r["title"] == "%%jax_doctor"]
        print(
            "tables scrolling sideways at 900 px:",
            [(r["title"], r["scrolled_tables"]) for r in narrow["reports"] if r["scrolled_tables"]],
        )
        assert doctor and all(r["scrolled_tables"] == [] for r in doctor), doctor
        # Every table open by default fits: only code listings may scroll sideways.
        scrolled = [(r["title"], r["scrolled_tables"]) for r in narrow["reports"] if r["scrolled_tables"]]
        assert scrolled == [], f"tables scrolling sideways at 900 px: {scrolled}"
        _shot(page, "4_narrow_900px")
        # ... and every table a reader can open, in the dark theme too (issue 53: %%jax_compiles' and
        # %%jax_profile's tables scrolled by 11-76 px once opened)
        _command(page, "apputils:change-theme", {"theme": "JupyterLab Dark"})
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
        page.evaluate("() => document.querySelectorAll('.jaxmagic details').forEach(d => d.open = true)")
        page.wait_for_timeout(800)
        opened = page.evaluate(JS_REPORTS)
        _check_every_report(opened, expected)
        scrolled = [(r["title"], r["scrolled_tables"]) for r in opened["reports"] if r["scrolled_tables"]]
        assert scrolled == [], f"tables scrolling sideways at 900 px, folds open, dark: {scrolled}"
        too_wide = [(r["headline"][:60], r["overflow_px"]) for r in opened["reports"] if r["overflow_px"] > 1]
        assert too_wide == [], f"reports wider than the notebook at 900 px, folds open: {too_wide}"
        _shot(page, "5_narrow_900px_dark_open")
    finally:
        context.close()
    _check_clean(watch, "the reopened notebook")


def test_untrusted_notebook_keeps_its_styles(lab):
    nb = nbformat.read(lab.saved, as_version=4)
    nb.metadata["jaxmagic_test"] = "a copy someone sent: not signed here, so JupyterLab sanitizes its HTML"
    nbformat.write(nb, lab.server.root / "untrusted.ipynb")
    context, page, watch = _open_page(lab.chromium, lab.server.lab_url("untrusted.ipynb"))
    try:
        _wait_ready(page)
        _wait_for_reports(page, len(notebook_cells()))
        path, trusted = page.evaluate(
            f"() => [({PANEL}).context.path, ({PANEL}).content.widgets"
            ".filter(c => c.model.type === 'code' && c.model.outputs.length).map(c => c.model.trusted)]"
        )
        assert path == "untrusted.ipynb" and trusted and not any(trusted), "the copy should open untrusted"
        found = page.evaluate(JS_REPORTS)
        _check_every_report(found, len(notebook_cells()))
        for report in found["reports"]:
            assert "monospace" in report["title_font"].lower() or "mono" in report["title_font"].lower(), report
            assert report["title_badge_gap"] >= 4, f"title and badge run together: {report}"
            assert report["badge_background"] not in ("", "rgba(0, 0, 0, 0)"), f"no badge colour: {report}"
            assert set(report["cell_align"]) <= {"left", "right"}, f"table cells lost their alignment: {report}"
        _shot(page, "5_untrusted")
    finally:
        context.close()
    _check_clean(watch, "the untrusted notebook")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_exported_html_offline(lab, theme, tmp_path):
    out = tmp_path / f"exported_{theme}"
    done = subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "html", f"--HTMLExporter.theme={theme}", str(lab.saved),
         "--output-dir", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    html_file = out / (lab.saved.stem + ".html")
    context = lab.chromium.new_context(viewport=VIEWPORT)
    blocked: list[str] = []

    def block_network(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", block_network)
    page = context.new_page()
    try:
        page.goto(html_file.as_uri())
        _wait_for_reports(page, len(notebook_cells()))
        found = page.evaluate(JS_REPORTS)
        _check_every_report(found, len(notebook_cells()))
        for report in found["reports"]:
            assert set(report["cell_align"]) <= {"left", "right"}, f"exported cells lost their alignment: {report}"
            if theme == "dark":
                assert report["background_luminance"] < 0.1, report
        _shot(page, f"6_exported_{theme}")
    finally:
        context.close()
    reports_html = [
        output["data"]["text/html"]
        for cell in nbformat.read(lab.saved, as_version=4).cells
        for output in cell.get("outputs", [])
        if "text/html" in output.get("data", {})
    ]
    loads = re.compile(r"<(script|link|img|iframe|style)\b|<[^>]*\s(src|href)=|url\(|@import")
    assert not [m.group() for html in reports_html for m in loads.finditer(html)], "a report loads a resource"


def _report_shots(page, theme: str, width: int = VIEWPORT["width"]) -> None:
    """One picture per report cell as JupyterLab shows it, in build/browser/<theme>/.

    With JAXMAGIC_UPDATE_SCREENSHOTS=1 the finding cells' pictures are also
    written to docs/img/lab_<magic>_<theme>.png, the light and dark views of docs/guides/reports.md.
    """
    folder = SHOTS / theme
    folder.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": width, "height": 4000})  # a tall report fits whole
    page.wait_for_timeout(300)
    cells = page.locator(".jp-Notebook .jp-Cell").filter(has=page.locator(".jaxmagic"))
    names = [magic for magic, _ in notebook_cells()]
    names[-len(FINDING_CELLS) :] = [f"{magic}_found" for magic in FINDING_CELLS]
    assert cells.count() == len(names)
    for index, name in enumerate(names):
        path = folder / f"{index:02d}_{name}.png"
        cells.nth(index).screenshot(path=str(path))
        if os.environ.get("JAXMAGIC_UPDATE_SCREENSHOTS") and name.endswith("_found") and theme != "narrow":
            (DOCS_IMG / f"lab_{name.removesuffix('_found')}_{theme}.png").write_bytes(path.read_bytes())
    page.set_viewport_size({"width": width, "height": VIEWPORT["height"]})


LIVE_NOTEBOOK = "live.ipynb"
LIVE_CELL = (
    "%%jax_compiles\n"
    "def shrink(x):\n    return x.sum()\n"
    "for n in range(1, 13):\n"
    "    jax.jit(shrink)(jnp.ones(n))  # a new shape each step: a recompilation each step\n"
    "    time.sleep(0.5)"
)
JS_LIVE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const cards = [...w.node.querySelectorAll('.jaxmagic')];
  return cards.map(c => [c.querySelector('.jm-badge').innerText.trim(), c.querySelector('.jm-headline').innerText]);
}"""


def test_a_live_view_updates_while_the_cell_runs_and_the_saved_notebook_keeps_only_the_report(lab):
    """Look at a live view while it updates, then at the notebook saved and opened again."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jaxmagic\nimport time\nimport jax, jax.numpy as jnp"),
        nbformat.v4.new_code_cell(LIVE_CELL),
    ]
    nb.metadata["kernelspec"] = {"name": "jaxmagic", "display_name": "Python (jaxmagic)", "language": "python"}
    nbformat.write(nb, lab.server.root / LIVE_NOTEBOOK)
    context, page, watch = _open_page(lab.chromium, lab.server.lab_url(LIVE_NOTEBOOK))
    try:
        _wait_ready(page)
        # Not awaited: the command's promise resolves only when every cell has run.
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        page.wait_for_function(
            "() => [...window.jupyterapp.shell.currentWidget.node.querySelectorAll('.jm-badge')]"
            ".some(b => b.innerText.trim() === 'RUNNING')",
            timeout=60_000,
        )
        seen = []
        for k in range(6):
            seen.append(page.evaluate(JS_LIVE))
            if k in (0, 3):
                _shot(page, f"5_live_view_{k}")
            page.wait_for_timeout(700)
        page.wait_for_function(JS_RUN_DONE, timeout=RUN_TIMEOUT_MS, polling=500)
        page.wait_for_timeout(300)
        final = page.evaluate(JS_LIVE)
        _shot(page, "5_live_view_final")
        running = [cards for cards in seen if cards and cards[0][0] == "RUNNING"]
        assert all(len(cards) == 1 for cards in seen), f"one card while the cell runs: {seen}"
        assert len({cards[0][1] for cards in running}) >= 2, f"the live view did not change: {running}"
        assert any("compiled" in cards[0][1] or "finding" in cards[0][1] for cards in running), running
        assert len(final) == 1 and final[0][0] == "FOUND", f"the report replaces the live view: {final}"
        _command(page, "docmanager:save")
        page.wait_for_function(f"() => !({PANEL}).context.model.dirty", timeout=30_000)
        _command(page, "kernelmenu:shutdown")
    finally:
        context.close()
    saved = nbformat.read(lab.server.root / LIVE_NOTEBOOK, as_version=4)
    outputs = saved.cells[1].outputs
    assert len(outputs) == 1 and "RUNNING" not in outputs[0]["data"]["text/plain"], outputs
    context, page, watch = _open_page(lab.chromium, lab.server.lab_url(LIVE_NOTEBOOK))
    try:
        _wait_ready(page)
        _wait_for_reports(page, 1)
        reopened = page.evaluate(JS_LIVE)
        assert reopened == final, (reopened, final)
        _shot(page, "5_live_view_reopened")
    finally:
        context.close()
    _check_clean(watch, "the live-view notebook")


DEBUG_NOTEBOOK = "debugger.ipynb"
DEBUG_CELLS = [
    "%load_ext jaxmagic\nimport jax, jax.numpy as jnp",
    "def body(c, x):\n    y = jnp.log(c - x)\n    return c, y\n\n"
    "@jax.jit\ndef run(c0, xs):\n    return jax.lax.scan(body, c0, xs)\n\nxs = jnp.arange(1000.0) / 900.0",
    "with jax.debug_nans(True):\n    run(1.0, xs)",  # fails at step 901: the cell that %jax_debug starts from
    "%jax_debug",
]
JS_STDIN = "() => !!window.jupyterapp.shell.currentWidget.node.querySelector('.jp-Stdin-input')"
JS_CELL_TEXT = "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].node.innerText"
OPEN_NOTEBOOK_JS = "window.jupyterapp.shell.currentWidget"


def _answer(page, text: str) -> None:
    """Type one debugger command into the kernel's input box, as a user does."""
    page.wait_for_function(JS_STDIN, timeout=60_000)
    box = page.locator(".jp-Stdin-input").last
    box.fill(text)
    box.press("Enter")
    page.wait_for_timeout(400)


def test_the_debugger_stops_at_the_failing_line_and_reads_commands_typed_in_the_notebook(lab):
    """%jax_debug after a NaN in a jitted scan: IPython's debugger opens in the body, at iteration 901,
    through the kernel's input box; typed commands answer with the concrete values; `c` ends it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in DEBUG_CELLS]
    nb.metadata["kernelspec"] = {"name": "jaxmagic", "display_name": "Python (jaxmagic)", "language": "python"}
    nbformat.write(nb, lab.server.root / DEBUG_NOTEBOOK)
    context, page, watch = _open_page(lab.chromium, lab.server.lab_url(DEBUG_NOTEBOOK))
    try:
        _wait_ready(page)
        for index in range(len(DEBUG_CELLS)):  # one by one: "Run All" stops at the failing cell
            page.evaluate(f"() => {{ {OPEN_NOTEBOOK_JS}.content.activeCellIndex = {index}; }}")
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-cell'); }")
            if index < len(DEBUG_CELLS) - 1:
                page.wait_for_function(
                    f"() => {OPEN_NOTEBOOK_JS}.content.widgets[{index}].model.executionCount !== null "
                    f"&& {OPEN_NOTEBOOK_JS}.sessionContext.session.kernel.status === 'idle'",
                    timeout=RUN_TIMEOUT_MS,
                )
        page.wait_for_function(JS_STDIN, timeout=RUN_TIMEOUT_MS)
        _shot(page, "7_debugger_opened")
        opened = page.evaluate(JS_CELL_TEXT, 3)
        assert "y = jnp.log(c - x)" in opened and "901" in opened, opened[-2000:]
        _answer(page, "p float(c - x)")
        page.wait_for_function(f"() => ({JS_CELL_TEXT})(3).includes('-0.001')", timeout=30_000)
        _answer(page, "u")
        _shot(page, "7_debugger_answered")
        _answer(page, "c")
        page.wait_for_function(
            f"() => {OPEN_NOTEBOOK_JS}.sessionContext.session.kernel.status === 'idle' && !({JS_STDIN})()",
            timeout=60_000,
        )
        text = page.evaluate(JS_CELL_TEXT, 3)
        assert "jax.lax.scan(body, c0, xs)" in text, text[-2000:]  # `u` went up to the user's frame that ran the scan
        _shot(page, "7_debugger_done")
    finally:
        context.close()
    _check_clean(watch, "the debugger notebook")


BREAKPOINT_NOTEBOOK = "breakpoint.ipynb"
BREAKPOINT_CELLS = [
    "%load_ext jaxmagic\nimport jax, jax.numpy as jnp",
    "%%jax_debug\n@jax.jit\ndef halts(x):\n    jax.debug.breakpoint()\n    return x + 1\nhalts(jnp.ones(2))",
]


def test_while_the_breakpoint_waits_the_live_card_says_so_and_how_to_go_on(lab):
    """Issue 53: at a %%jax_debug breakpoint the cell waits for the user; its live card said "RUNNING 1.0 s" and
    stood still. It says it waits, where, and that `c` continues; the report replaces it when the cell ends."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in BREAKPOINT_CELLS]
    nb.metadata["kernelspec"] = {"name": "jaxmagic", "display_name": "Python (jaxmagic)", "language": "python"}
    nbformat.write(nb, lab.server.root / BREAKPOINT_NOTEBOOK)
    context, page, watch = _open_page(lab.chromium, lab.server.lab_url(BREAKPOINT_NOTEBOOK))
    try:
        _wait_ready(page)
        for index in range(len(BREAKPOINT_CELLS)):
            page.evaluate(f"() => {{ {OPEN_NOTEBOOK_JS}.content.activeCellIndex = {index}; }}")
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-cell'); }")
            if index < len(BREAKPOINT_CELLS) - 1:
                page.wait_for_function(
                    f"() => {OPEN_NOTEBOOK_JS}.content.widgets[{index}].model.executionCount !== null "
                    f"&& {OPEN_NOTEBOOK_JS}.sessionContext.session.kernel.status === 'idle'",
                    timeout=RUN_TIMEOUT_MS,
                )
        page.wait_for_function(JS_STDIN, timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(
            f"() => ({JS_CELL_TEXT})(1).includes('Waiting for you at the breakpoint')", timeout=30_000
        )
        waiting = page.evaluate(JS_CELL_TEXT, 1)
        assert "RUNNING" in waiting and "c continues" in waiting and "line 4" in waiting, waiting[-1500:]
        _shot(page, "8_breakpoint_waiting")
        _answer(page, "c")
        page.wait_for_function(
            f"() => {OPEN_NOTEBOOK_JS}.sessionContext.session.kernel.status === 'idle' && !({JS_STDIN})()",
            timeout=60_000,
        )
        page.wait_for_timeout(500)
        done = page.evaluate(JS_CELL_TEXT, 1)
        assert "RUNNING" not in done and "Waiting for you" not in done, done[-1500:]
        _shot(page, "8_breakpoint_done")
    finally:
        context.close()
    _check_clean(watch, "the breakpoint notebook")
