"""The README's quickstart picture: its first two cells run in a real JupyterLab, the report photographed.

    .venv/bin/python tools/screenshot_quickstart.py

Writes docs/img/quickstart_jax_nans.png: the ``%%jax_nans`` cell of the README's quickstart as
JupyterLab shows it at 1280 px (light theme), cut under the report (JAX's traceback follows it).
Uses the browser tests' JupyterLab and Chromium (tests/jupyterlab_session.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from jupyterlab_session import browser, lab_server  # noqa: E402

# The README's quickstart, cell by cell (tests/test_docs.py checks the README shows these).
QUICKSTART = [
    "%load_ext jaxmagic\n"
    "import jax, jax.numpy as jnp\n\n"
    "@jax.jit\n"
    "def log_likelihood(scale, x):\n"
    "    return jnp.sum(jnp.log(scale * x))",
    "%%jax_nans\nlog_likelihood(2.0, jnp.array([1.0, -3.0, 2.0]))",
    "%%jax_doctor\nfor step in range(5):\n    loss = jax.jit(lambda s: jnp.log(s + 1.0))(jnp.float32(step))",
]
OUT = ROOT / "docs" / "img" / "quickstart_jax_nans.png"
PANEL = "window.jupyterapp && window.jupyterapp.shell.currentWidget"


def main() -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in QUICKSTART[:2]]
    notebook.metadata["kernelspec"] = {"name": "jaxmagic", "display_name": "Python (jaxmagic)", "language": "python"}
    with lab_server() as server, browser() as chromium:
        nbformat.write(notebook, server.root / "quickstart.ipynb")
        context = chromium.new_context(viewport={"width": 1280, "height": 1400}, device_scale_factor=1)
        page = context.new_page()
        page.goto(server.lab_url("quickstart.ipynb"))
        page.wait_for_function(
            f"() => {{ const w = {PANEL}; return !!(w && w.sessionContext && w.sessionContext.session"
            " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.connectionStatus === 'connected'"
            " && w.content.widgets.length > 0); }",
            timeout=90_000,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_selector(".jp-Notebook .jaxmagic", timeout=180_000)
        page.wait_for_timeout(1500)
        cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
        report = cell.locator(".jaxmagic").first
        top = cell.bounding_box()
        bottom = report.bounding_box()
        clip = {
            "x": top["x"],
            "y": top["y"],
            "width": top["width"],
            "height": bottom["y"] + bottom["height"] - top["y"] + 70,  # the first lines of JAX's traceback
        }
        page.screenshot(path=str(OUT), clip=clip)
        context.close()
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
