"""Every demo notebook's reports as a person reads them in JupyterLab: at 900 px with the file browser open, in the
light and the dark theme, every fold open - no word of a table cell is split across lines (issue 61: "fu nct ion",
"floa t32 [8,4 ]", "f32[2048,5 12]", "shape per device" wrapped under "#"), no report is wider than the notebook,
and the muted labels of code frames read at 4.5:1 or more.

The notebooks are the executed copies ``make demo`` leaves in build/notebooks/ (CI runs it first); each is opened
trusted, as a notebook its reader ran is, and the three with the most tables once untrusted (sanitized: what a notebook someone sent shows).
Screenshots of the first reports with tables (six a theme) go to build/browser/notebooks/.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from jupyterlab_session import JS_TEXT_CONTRAST, Watched, browser, lab_server, require_chromium
from nbformat.sign import NotebookNotary

ROOT = Path(__file__).resolve().parent.parent
EXECUTED = ROOT / "build" / "notebooks"
SHOTS = ROOT / "build" / "browser" / "notebooks"
NARROW = {"width": 900, "height": 1000}
pytestmark = pytest.mark.browser


def executed_notebooks() -> list[Path]:
    return sorted(EXECUTED.glob("[0-9]*.ipynb"))


def report_count(path: Path) -> int:
    """How many reports the notebook's outputs hold (each is one ``<div class="jaxmagic"``)."""
    cells = json.loads(path.read_text())["cells"]
    return sum(
        "".join(output.get("data", {}).get("text/html", "")).count('<div class="jaxmagic"')
        for cell in cells
        for output in cell.get("outputs", [])
    )


# Run in the page: for every report, the words of its table cells drawn over more than one line, how far it runs
# past the notebook, and the contrast of its muted text (a label faded with opacity: blended as painted).
JS_MEASURE = (
    "() => {"
    + JS_TEXT_CONTRAST
    + """
  const splitWords = (cell) => {
    const nodes = [], walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let text = '';
    for (let n = walker.nextNode(); n; n = walker.nextNode()) { nodes.push([n, text.length]); text += n.data; }
    const at = (i) => { let k = nodes.length - 1; while (k > 0 && nodes[k][1] > i) k--; return [nodes[k][0], i - nodes[k][1]]; };
    const split = [];
    for (const m of text.matchAll(/\\S+/g)) {
      const range = document.createRange();
      const [a, ao] = at(m.index), [b, bo] = at(m.index + m[0].length - 1);
      range.setStart(a, ao); range.setEnd(b, bo + 1);
      const rects = [...range.getClientRects()].filter(r => r.width > 0.5);
      if (rects.some(r => rects.some(s => r.top >= s.bottom - 2))) split.push(m[0]);
    }
    return split;
  };
  const root = window.jupyterapp.shell.currentWidget.node;
  return [...root.querySelectorAll('.jaxmagic')].map(r => {
    const area = r.closest('.jp-OutputArea-output') || r.parentElement, rect = r.getBoundingClientRect();
    const cells = [...r.querySelectorAll('.jm-td, .jm-th, td, th')]
      .filter(c => c.checkVisibility() && c.getBoundingClientRect().height >= 2);
    const muted = [...r.querySelectorAll('[style*="opacity"]')].filter(e => e.checkVisibility() && e.innerText.trim());
    return {
      title: (r.querySelector('.jm-title') || {}).innerText || '',
      headline: ((r.querySelector('.jm-headline') || {}).innerText || '').slice(0, 80),
      split: cells.flatMap(splitWords),
      overflow_px: Math.max(rect.right - area.getBoundingClientRect().right, 0),
      muted: muted.map(e => [Math.round(textContrast(e, r) * 100) / 100, e.innerText.slice(0, 40)]),
    };
  });
}"""
)
JS_OPENED = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  return !!(w && w.context && w.context.isReady && w.content && w.content.widgets && w.content.widgets.length); }"""


@pytest.fixture(scope="module")
def lab():
    require_chromium()
    notebooks = executed_notebooks()
    if not notebooks:
        message = "no executed demo notebooks in build/notebooks/: run `make demo` first"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    with lab_server() as server, browser() as chromium:
        notary = NotebookNotary(data_dir=str(server.root.parent / "data"))
        for path in notebooks:
            shutil.copy(path, server.root / path.name)
            nb = nbformat.read(server.root / path.name, as_version=4)
            notary.sign(nb)  # trusted: as the notebook its reader ran and saved
            nbformat.write(nb, server.root / path.name)
            shutil.copy(path, server.root / f"untrusted_{path.name}")  # unsigned: sanitized
        yield server, chromium


def _open(server, chromium, name: str):
    context = chromium.new_context(viewport=NARROW, device_scale_factor=1)
    page = context.new_page()
    watch = Watched()
    watch.attach(page)
    page.goto(server.lab_url(name))
    page.wait_for_function(JS_OPENED, timeout=90_000)
    return context, page, watch


def _command(page, command: str, args: dict | None = None) -> None:
    page.evaluate("([c, a]) => window.jupyterapp.commands.execute(c, a)", [command, args or {}])


def _measure(page, expected: int) -> list[dict]:
    page.wait_for_function(
        "n => window.jupyterapp.shell.currentWidget.node.querySelectorAll('.jaxmagic').length >= n",
        arg=expected,
        timeout=90_000,
    )
    page.evaluate("() => document.querySelectorAll('.jaxmagic details').forEach(d => d.open = true)")
    page.wait_for_timeout(300)
    return page.evaluate(JS_MEASURE)


def _shoot(page, folder: Path, limit: int = 6) -> None:
    """The first report cells that hold a table, as the reader sees them (at most ``limit``: a cell's screenshot
    costs about 0.3 s, and the measure above, not the pictures, is what the test checks)."""
    folder.mkdir(parents=True, exist_ok=True)
    cells = page.locator(".jp-Notebook .jp-Cell").filter(has=page.locator(".jaxmagic .jm-table, .jaxmagic .jm-facts"))
    for index in range(min(cells.count(), limit)):
        cells.nth(index).screenshot(path=str(folder / f"{index:02d}.png"))


def _problems(found: list[dict], where: str) -> list[str]:
    problems = []
    for report in found:
        label = f"{where} {report['title']} {report['headline']!r}"
        if report["split"]:
            problems.append(f"{label}: words split across lines in table cells: {report['split'][:6]}")
        if report["overflow_px"] > 1:
            problems.append(f"{label}: {report['overflow_px']:.0f} px wider than the notebook")
        low = [m for m in report["muted"] if m[0] < 4.5]
        if low:
            problems.append(f"{label}: muted text under 4.5:1: {low[:3]}")
    return problems


@pytest.mark.parametrize("notebook", [path.name for path in executed_notebooks()] or ["none"])
def test_no_word_is_split_in_a_table_cell_of_a_demo_notebook_at_900_px(lab, notebook):
    server, chromium = lab
    expected = report_count(EXECUTED / notebook)
    context, page, watch = _open(server, chromium, notebook)
    problems = []
    try:
        _command(page, "filebrowser:activate")  # the file browser open: the notebook is narrowest
        page.wait_for_timeout(400)
        for theme in ("JupyterLab Light", "JupyterLab Dark"):
            _command(page, "apputils:change-theme", {"theme": theme})
            light = "true" if theme.endswith("Light") else "false"
            page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{light}'", timeout=30_000)
            page.wait_for_timeout(400)
            found = _measure(page, expected)
            assert len(found) >= expected, f"{notebook}: {len(found)} reports shown, {expected} saved"
            problems += _problems(found, f"{notebook} ({theme}):")
            page.set_viewport_size({"width": NARROW["width"], "height": 4000})
            _shoot(page, SHOTS / notebook.removesuffix(".ipynb") / theme.split()[-1].lower())
            page.set_viewport_size(NARROW)
        _command(page, "apputils:change-theme", {"theme": "JupyterLab Light"})
        _command(page, "kernelmenu:shutdown")
    finally:
        context.close()
    assert problems == [], "\n".join(problems)
    assert watch.external_requests == [], watch.external_requests


def most_tables(count: int = 3) -> list[str]:
    """The ``count`` executed notebooks whose reports hold the most tables (sanitizing drops the same CSS in
    every notebook: the ones with the most tables stand for the rest)."""
    tables = {path.name: path.read_text().count("jm-table") for path in executed_notebooks()}
    return sorted(sorted(tables, key=lambda name: -tables[name])[:count])


@pytest.mark.parametrize("notebook", most_tables() or ["none"])
def test_an_untrusted_demo_notebook_splits_no_word_either(lab, notebook):
    """Sanitized (a notebook someone sent), every calc() is dropped: the tables keep their narrowest width and
    scroll sideways as one block - still with no word split. Checked on the notebooks with the most tables."""
    server, chromium = lab
    context, page, _ = _open(server, chromium, f"untrusted_{notebook}")
    try:
        _command(page, "filebrowser:activate")
        page.wait_for_timeout(800)
        found = _measure(page, report_count(EXECUTED / notebook))
        problems = [p for p in _problems(found, f"untrusted {notebook}:") if "split" in p]
        _command(page, "kernelmenu:shutdown")
    finally:
        context.close()
    assert problems == [], "\n".join(problems)
