"""Each demo notebook and its paired percent-format source hold the same cells (no kernel, fast).

The ``.py`` beside each ``demo_notebooks/NN_*.ipynb`` is where notebooks are edited; ``make
notebooks`` (tools/sync_notebooks.py, ``jupytext --sync``) brings the other file up to date.
These tests fail while a pair differs, while a committed notebook holds outputs, or if a sync
would renumber cell ids.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from jupytext.cli import jupytext as jupytext_cli

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "demo_notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
SOURCES = sorted(NOTEBOOK_DIR.glob("[0-9]*.py"))
FIX = "run `make notebooks` to sync the pair"


def cells(notebook) -> list[tuple[str, str, list[str]]]:
    return [(cell.cell_type, cell.source, list(cell.metadata.get("tags", []))) for cell in notebook.cells]


def test_every_notebook_has_its_source_and_back():
    assert NOTEBOOKS, "demo_notebooks/ holds no numbered notebooks"
    assert [p.stem for p in NOTEBOOKS] == [p.stem for p in SOURCES], FIX


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_and_source_hold_the_same_cells(path):
    source = path.with_suffix(".py")
    from_ipynb = cells(jupytext.read(path))
    from_py = cells(jupytext.read(source, fmt="py:percent"))
    for i, (a, b) in enumerate(zip(from_ipynb, from_py)):
        assert a == b, f"cell {i} differs between {path.name} and {source.name}: {FIX}"
    assert len(from_ipynb) == len(from_py), f"{path.name} and {source.name} differ in cell count: {FIX}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_has_no_outputs_and_unique_ids(path):
    nb = nbformat.read(path, as_version=4)
    with_outputs = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not with_outputs, f"cells {with_outputs} of {path.name} carry outputs: {FIX} (it clears them)"
    ids = [cell.get("id") for cell in nb.cells]
    assert all(ids) and len(set(ids)) == len(ids), f"{path.name}: missing or repeated cell ids"


def _pair_in(tmp_path: Path, name: str) -> tuple[Path, Path]:
    shutil.copy(NOTEBOOK_DIR / "jupytext.toml", tmp_path)
    shutil.copy(NOTEBOOK_DIR / f"{name}.ipynb", tmp_path)
    shutil.copy(NOTEBOOK_DIR / f"{name}.py", tmp_path)
    return tmp_path / f"{name}.ipynb", tmp_path / f"{name}.py"


def test_sync_of_an_unchanged_pair_changes_nothing(tmp_path):
    for path in NOTEBOOKS:
        ipynb, py = _pair_in(tmp_path, path.stem)
        before = ipynb.read_bytes(), py.read_bytes()
        jupytext_cli(["--sync", "--quiet", str(ipynb)])
        assert (ipynb.read_bytes(), py.read_bytes()) == before, f"jupytext --sync rewrote the pair {path.stem}"


def test_editing_the_source_keeps_the_ids_of_the_cells(tmp_path):
    ipynb, py = _pair_in(tmp_path, NOTEBOOKS[-1].stem)
    ids_before = [cell.id for cell in nbformat.read(ipynb, as_version=4).cells]
    text = py.read_text()
    first_code = text.index("\n# %%\n") + len("\n# %%\n")
    py.write_text(text[:first_code] + "EDITED = True\n" + text[first_code:])
    later = time.time() + 5  # the source is the newer file, so --sync reads it
    os.utime(py, (later, later))
    jupytext_cli(["--sync", "--quiet", str(py)])
    after = nbformat.read(ipynb, as_version=4).cells
    assert [cell.id for cell in after] == ids_before
    assert sum("EDITED = True" in cell.source for cell in after) == 1
