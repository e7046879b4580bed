"""Bring every demo notebook and its paired percent-format source up to date (``make notebooks``).

    .venv/bin/python tools/sync_notebooks.py [NOTEBOOK_OR_SOURCE ...]

For each pair ``demo_notebooks/NN_*.ipynb`` / ``NN_*.py`` (the pairing is declared in
``demo_notebooks/jupytext.toml``) this runs ``jupytext --sync``: whichever file was edited
last is the source, the other one is rewritten from it. A ``.py`` without its ``.ipynb``
creates the notebook. jupytext matches cells by content, so cells that did not change
keep their ids. Then outputs and execution counts are cleared from the ``.ipynb`` (the
committed notebooks carry none; executed copies live under ``build/notebooks/``).
tests/test_notebook_sources.py fails until this has been run after an edit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from jupytext.cli import jupytext as jupytext_cli

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "demo_notebooks"


def pairs() -> list[Path]:
    """One path per demo notebook: its .ipynb when there is one, else its .py source."""
    stems = {p.stem: p for p in sorted(NOTEBOOK_DIR.glob("[0-9]*.py"))}
    stems.update({p.stem: p for p in sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))})
    return [stems[s] for s in sorted(stems)]


def clear_outputs(path: Path) -> bool:
    """Remove outputs and execution counts from the notebook at ``path``; True if it changed."""
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None):
            cell.outputs, cell.execution_count = [], None
            changed = True
    if changed:
        nbformat.write(nb, path)
    return changed


def sync(paths: list[Path]) -> None:
    for path in paths:
        jupytext_cli(["--sync", "--quiet", str(path)])
        notebook = path.with_suffix(".ipynb")
        if clear_outputs(notebook):
            print(f"cleared outputs of {notebook.relative_to(ROOT)}")
            jupytext_cli(["--sync", "--quiet", str(notebook)])  # the .py is now older: give it the new timestamp


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or pairs()
    sync(paths)
    print(f"{len(paths)} notebook(s) in sync with their sources")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
