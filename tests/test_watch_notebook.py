"""A notebook run watched gives the outputs it gives unwatched, but for the watch's findings.

The same small notebook - a training loop whose loss turns NaN, a recompiling
helper, a list of metrics growing across cells, prints, a cell that raises - is
run twice by nbclient in a fresh kernel, once with ``%jax_watch`` switched on
in its first cell. Every output that is not the watch's own must be the same,
in the same order (the NaN values, the printed numbers, the error). The watch's
own outputs are its findings: they must name the cells that caused them.
"""

from __future__ import annotations

import nbformat
from nbclient import NotebookClient

CELLS = [
    "import jax, jax.numpy as jnp, numpy as np",
    "@jax.jit\ndef step(w, x):\n    return w - 0.1 * jnp.log(x) * w\n"
    "def norm(v):\n    return jax.jit(lambda u: u / u.sum())(v)\nmetrics = []",
    "w = jnp.ones(3)\nfor i in range(40):\n    w = step(w, 2.0 - i / 10)\nprint(np.asarray(w))",
    "print([float(norm(jnp.ones(n)).sum()) for n in range(1, 5)])",
    "metrics += [jnp.mean(w) for _ in range(3)]\nlen(metrics)",
    "metrics += [jnp.mean(w) for _ in range(3)]\nlen(metrics)",
    "metrics += [jnp.mean(w) for _ in range(3)]\nlen(metrics)",
    "jnp.arange(4.0) * 2",
    "raise ValueError('the user error, unchanged')",
]


def _run(watched: bool):
    cells = ([nbformat.v4.new_code_cell("%load_ext jaxmagic\n%jax_watch -o wlog")] if watched else []) + [
        nbformat.v4.new_code_cell(source) for source in CELLS
    ]
    if not watched:
        cells.insert(0, nbformat.v4.new_code_cell("%load_ext jaxmagic"))
    notebook = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(notebook, timeout=300, kernel_name="python3", allow_errors=True).execute()
    return notebook.cells[1:]


def _is_watch_output(output) -> bool:
    text = output.get("data", {}).get("text/plain", "") if output.get("output_type") == "display_data" else ""
    return text.startswith("%jax_watch")


def _comparable(output) -> dict:
    kept = {k: output[k] for k in ("output_type", "name", "text", "ename", "evalue") if k in output}
    if "data" in output:
        kept["data"] = output["data"].get("text/plain")
    return kept


def test_watched_notebook_outputs_equal_the_unwatched_ones_but_for_the_findings():
    plain, watched = _run(watched=False), _run(watched=True)
    found = {}
    for number, (a, b) in enumerate(zip(plain, watched)):
        own = [o for o in b.outputs if _is_watch_output(o)]
        if own:
            found[number] = own[0]["data"]["text/plain"]
        assert [_comparable(o) for o in a.outputs] == [_comparable(o) for o in b.outputs if not _is_watch_output(o)]
    # The findings are under the cells that caused them: the NaN loop, the recompiling helper, the
    # third cell in a row that grew the metrics list - and nowhere else.
    assert sorted(found) == [2, 3, 6], found
    assert "NaN" in found[2] and "`step`" in found[2]
    assert "compiled" in found[3]
    assert "grew in 3 cells in a row" in found[6]
    assert watched[-1].outputs[-1]["evalue"] == "the user error, unchanged"
