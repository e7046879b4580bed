"""The section 9 training script has one definition (demo_notebooks/section9_script.py).

The notebooks keep the script inline for the reader; every function of the script they define
must equal the module's, whitespace aside (the module is formatted by ruff, the notebooks keep the
chapter's layout): both are compared as Python token streams without line breaks inside brackets,
indentation widths or spacing, comments compared word by word. No kernel; fast.
"""

from __future__ import annotations

import ast
import io
import subprocess
import tokenize
from pathlib import Path

import nbformat
import numpy as np
import pytest
import section9_script as s9
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = {
    "05": ROOT / "demo_notebooks" / "05_compilation_and_speed.ipynb",
    "09": ROOT / "demo_notebooks" / "09_training_drill.ipynb",
}
SCRIPT_NAMES = [fn.__name__ for fn in s9.SCRIPT]


def tokens(text: str) -> list[tuple[int, str]]:
    """``text`` as tokens, with every difference that is only whitespace removed."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.NL, tokenize.ENDMARKER):
            continue
        if tok.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE):
            out.append((tok.type, ""))
        elif tok.type == tokenize.COMMENT:
            out.append((tok.type, " ".join(tok.string.split())))
        else:
            out.append((tok.type, tok.string))
    return out


def notebook_functions(path: Path) -> dict[str, list[str]]:
    """The text of every top-level function defined in the notebook's code cells, by name."""
    found: dict[str, list[str]] = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%%"):
            continue  # a cell magic's body is the magic's input, not script text
        lines = cell.source.splitlines(keepends=True)
        tree = ast.parse(TransformerManager().transform_cell(cell.source))  # line magics -> calls, same lines
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                found.setdefault(node.name, []).append("".join(lines[first - 1 : node.end_lineno]))
    return found


def code_lines(path: Path) -> set[str]:
    cells = nbformat.read(path, as_version=4).cells
    return {line.strip() for cell in cells if cell.cell_type == "code" for line in cell.source.splitlines()}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_notebooks_script_functions_equal_the_module(name):
    functions = notebook_functions(NOTEBOOKS[name])
    shown = [n for n in SCRIPT_NAMES if n in functions]
    assert shown, f"notebook {name} shows none of the script's functions"
    for fn_name in shown:
        module_text = s9.function_source(getattr(s9, fn_name))
        for text in functions[fn_name]:
            assert tokens(text) == tokens(module_text), (
                f"notebook {name}'s `{fn_name}` differs from demo_notebooks/section9_script.py:\n{text}"
            )
    data_lines = {line.strip() for line in s9.data_source().splitlines()}
    assert data_lines <= code_lines(NOTEBOOKS[name]), f"notebook {name} does not make the data as the module does"


def test_notebook_09_shows_the_whole_script():
    assert set(SCRIPT_NAMES) <= set(notebook_functions(NOTEBOOKS["09"]))


def test_no_other_copy_of_the_script():
    # The dropout line of the forward pass, taken from the module (so this file holds no copy of it).
    needle = next(line.strip() for line in s9.function_source(s9.forward).splitlines() if "bernoulli" in line)
    hits = subprocess.run(["git", "grep", "-l", "-F", needle], cwd=ROOT, capture_output=True, text=True).stdout.split()
    allowed = {"demo_notebooks/section9_script.py"} | {
        f"demo_notebooks/{p.stem}{ext}" for p in NOTEBOOKS.values() for ext in (".ipynb", ".py")
    }
    assert set(hits) <= allowed, f"copies of the section 9 script outside its module: {sorted(set(hits) - allowed)}"


def test_versions_follow_the_chapters_order():
    assert [s9.version(i).train for i in range(4)] == [s9.train_v0, s9.train_v0, s9.train_v2, s9.train_v3]
    assert [s9.version(i).loss for i in range(4)] == [s9.loss_v0, s9.loss_v1, s9.loss_v1, s9.loss_v1]
    with pytest.raises(ValueError, match="bugs_fixed"):
        s9.version(4)


@pytest.mark.parametrize("bugs_fixed", [0, 3])
def test_source_runs_on_its_own(bugs_fixed):
    ns = s9.run(bugs_fixed, n=32, sizes=(16, 8, 2))
    assert ns["X_tr"].shape == (32, 16) and [layer["w"].shape for layer in ns["params0"]] == [(16, 8), (8, 2)]
    v = s9.version(bugs_fixed)
    step = ns[v.make_train_step.__name__](ns[v.loss.__name__])
    _, losses = ns[v.train.__name__](step, ns["params0"], ns["X_tr"], ns["Y_tr"], 2)
    assert np.isfinite(losses[0]) and np.isnan(losses[1]) == (bugs_fixed == 0)
    assert ns["accuracy"] is not s9.accuracy  # fresh functions, fresh jit caches


def test_data_matches_its_text():
    X, Y, params = s9.data(n=32, sizes=(16, 8, 2))
    ns = s9.run(0, n=32, sizes=(16, 8, 2))
    assert np.array_equal(X, ns["X_tr"]) and np.array_equal(Y, ns["Y_tr"])
    assert s9.data_source() == (
        "X_tr, Y_tr = make_data(jax.random.key(42))\nparams0 = init_params(jax.random.key(1), [16, 64, 64, 2])\n"
    )
