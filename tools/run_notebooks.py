"""Execute the demo notebooks headless and print a table of the results.

    .venv/bin/python tools/run_notebooks.py [NOTEBOOK ...]

Each notebook runs in a fresh kernel of the project's environment (the
"jaxmagic" kernel spec that tools/venv.sh installs into .venv), with widget
state stored, and is written executed under build/notebooks/. Exit status 1 if
any notebook failed.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "demo_notebooks"
BUILD_DIR = ROOT / "build" / "notebooks"
KERNEL_NAME = "jaxmagic"
CELL_TIMEOUT_S = 600


@dataclasses.dataclass
class NotebookRun:
    path: Path
    output_path: Path
    code_cells: int
    seconds: float
    error: str = ""  # first lines of the failing cell's error, "" when all cells passed

    @property
    def passed(self) -> bool:
        return not self.error


def demo_notebooks() -> list[Path]:
    return sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))


def execute_notebook(path: Path, build_dir: Path = BUILD_DIR) -> NotebookRun:
    """Run every cell of ``path`` in a fresh kernel; save the executed copy."""
    nb = nbformat.read(path, as_version=4)
    env_before = os.environ.get("PYDEVD_DISABLE_FILE_VALIDATION")
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # silences a debugger warning on stderr
    client = NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        # The kernel's start-up warning about TCP transport is noise on a local run.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    start = time.perf_counter()
    error = ""
    try:
        client.execute()
    except CellExecutionError as failure:
        error = str(failure).strip()
    finally:
        if env_before is None:
            os.environ.pop("PYDEVD_DISABLE_FILE_VALIDATION", None)
    seconds = time.perf_counter() - start
    build_dir.mkdir(parents=True, exist_ok=True)
    output_path = build_dir / path.name
    nbformat.write(nb, output_path)
    code_cells = sum(1 for cell in nb.cells if cell.cell_type == "code")
    return NotebookRun(path, output_path, code_cells, seconds, error)


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or demo_notebooks()
    if not paths:
        print("no demo notebooks found under demo_notebooks/")
        return 1
    runs = []
    for path in paths:
        print(f"running {path.name} ...", flush=True)
        runs.append(execute_notebook(path))
    width = max(len(r.path.name) for r in runs)
    print(f"\n{'notebook'.ljust(width)}  cells  result  seconds")
    for run in runs:
        print(
            f"{run.path.name.ljust(width)}  {run.code_cells:5d}  {'pass' if run.passed else 'FAIL':6s}  {run.seconds:7.1f}"
        )
    for run in runs:
        if not run.passed:
            print(f"\n--- {run.path.name} failed ---\n{run.error[-3000:]}")
    print(f"\nexecuted notebooks written to {BUILD_DIR.relative_to(ROOT)}/")
    passed = sum(r.passed for r in runs)
    print(f"{passed} passed, {len(runs) - passed} failed")
    return 0 if passed == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
