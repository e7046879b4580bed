"""Every demo notebook runs headless in the project's kernel without a cell error,
and shows at least one jaxmagic report as static HTML, with no widget view beside it
(a saved notebook must not depend on a widget model: see jaxmagic/ipython/display.py)."""

from __future__ import annotations

import pytest
from run_notebooks import demo_notebooks, execute_notebook

NOTEBOOKS = demo_notebooks()
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_there_are_demo_notebooks():
    assert NOTEBOOKS, "demo_notebooks/ holds no numbered notebooks"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_shows_reports(path, tmp_path):
    run = execute_notebook(path, build_dir=tmp_path)
    assert run.passed, run.error[-4000:]

    import nbformat

    nb = nbformat.read(run.output_path, as_version=4)
    html_reports = [
        output["data"]["text/html"]
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "text/html" in output.get("data", {}) and 'class="jaxmagic"' in output["data"]["text/html"]
    ]
    assert html_reports, "no jaxmagic report in the notebook's HTML outputs"
    widget_views = [o for c in nb.cells for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
    assert not widget_views, "a widget view in the outputs: it would not survive saving without widget state"
