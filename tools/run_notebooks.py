"""Execute the demo notebooks headless and print a table of the results.

    .venv/bin/python tools/run_notebooks.py [NOTEBOOK ...]

Each notebook runs in a fresh kernel of the project's environment (the
"jaxmagic" kernel spec that tools/venv.sh installs into .venv), with widget
state stored, and is written executed under build/notebooks/. Exit status 1 if
any notebook failed. Notebooks run side by side, one per core (at most
``PARALLEL``), the longest first: each in its own kernel, so no run sees
another's state; the table lists them in their order.

Beside each executed notebook goes a stamp, ``NN_name.stamp.json``: the hash
of every input of the run (``inputs_digest``: the notebook, every file under
jaxmagic/, the helper modules in demo_notebooks/, pyproject.toml,
constraints.txt, this file, the kernel spec, the Python version and every
installed distribution's version), the hash of the executed file and the
result. ``reusable_run`` accepts an executed notebook only if its stamp says
it passed and both hashes still hold, so tests/test_notebooks.py checks a run
of ``make demo`` instead of executing the notebook a second time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "demo_notebooks"
BUILD_DIR = ROOT / "build" / "notebooks"
KERNEL_NAME = "jaxmagic"
CELL_TIMEOUT_S = 600
PARALLEL = 2  # kernels at once: a notebook keeps about one core busy (its compiles), the machine of CI has two


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


def _input_files(path: Path) -> list[Path]:
    """Every file whose content can change what the notebook at ``path`` does when executed."""
    package = [p for p in sorted((ROOT / "jaxmagic").rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    helpers = [p for p in sorted(path.parent.glob("*.py")) if not p.name[:1].isdigit()]  # not the notebook sources
    project = [ROOT / "pyproject.toml", ROOT / "constraints.txt", Path(__file__).resolve()]
    return [path, *package, *helpers, *project]


def _environment() -> list[str]:
    """The interpreter, the kernel spec and every installed distribution, as text lines."""
    spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    # A set: the same distribution is listed twice when the project root is on sys.path (its egg-info).
    dists = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()})
    return [sys.version, platform.platform(), json.dumps(spec.argv), spec.resource_dir, *dists]


def inputs_digest(path: Path) -> str:
    """sha256 over the inputs of executing ``path``: files (by path and content) and environment."""
    digest = hashlib.sha256()
    for file in _input_files(path):
        name = file.relative_to(ROOT) if file.is_relative_to(ROOT) else file
        digest.update(f"file {name} {file.stat().st_size}\n".encode())
        digest.update(file.read_bytes())
    for line in _environment():
        digest.update(f"env {line}\n".encode())
    return digest.hexdigest()


def stamp_path(output_path: Path) -> Path:
    return output_path.with_suffix(".stamp.json")


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reusable_run(path: Path, build_dir: Path = BUILD_DIR) -> tuple[NotebookRun | None, str]:
    """The passing run of ``path`` under ``build_dir`` if its stamp proves the same inputs, and why (not)."""
    output_path = build_dir / path.name
    stamp_file = stamp_path(output_path)
    if not stamp_file.exists() or not output_path.exists():
        return None, f"no stamped run of {path.name} under {build_dir}"
    try:
        stamp = json.loads(stamp_file.read_text())
    except ValueError:
        return None, f"unreadable stamp {stamp_file.name}"
    if stamp.get("notebook") != path.name or not stamp.get("passed"):
        return None, f"the stamped run of {path.name} did not pass"
    if stamp.get("output_sha256") != _file_digest(output_path):
        return None, f"{output_path.name} is not the file its stamp describes"
    if stamp.get("inputs_sha256") != inputs_digest(path):
        return None, f"the inputs of {path.name} changed since it was executed"
    run = NotebookRun(path, output_path, stamp["code_cells"], stamp["seconds"])
    return run, f"reused {output_path.relative_to(ROOT) if output_path.is_relative_to(ROOT) else output_path}"


def execute_notebook(path: Path, build_dir: Path = BUILD_DIR) -> NotebookRun:
    """Run every cell of ``path`` in a fresh kernel; save the executed copy."""
    build_dir.mkdir(parents=True, exist_ok=True)
    output_path = build_dir / path.name
    stamp_path(output_path).unlink(missing_ok=True)  # an old stamp must never describe the new file
    inputs = inputs_digest(path)  # before the run: an edit made during it makes the stamp stale
    nb = nbformat.read(path, as_version=4)
    # JAXMAGIC_KERNEL_TRANSPORT=ipc: the lent TPU machine opens no TCP socket, not even on the loopback
    # (tools/accelerator/device.sh); the kernel then talks over unix sockets.
    transport = os.environ.get("JAXMAGIC_KERNEL_TRANSPORT", "tcp")
    # Over ipc the "ip" is the sockets' path: jupyter_client's default is relative ("kernel-ipc"), and the kernel
    # runs in the notebook's folder, so it would listen where its client never looks.
    where = {"ip": tempfile.mkdtemp(prefix="jaxmagic-kernel-") + "/kernel"} if transport == "ipc" else {}
    client = NotebookClient(
        nb,
        km=KernelManager(kernel_name=KERNEL_NAME, transport=transport, **where),
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
        # The kernel's own environment (not os.environ: notebooks run in threads side by side) silences a
        # debugger warning on stderr.
        client.execute(env={**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    except CellExecutionError as failure:
        error = str(failure).strip()
    seconds = time.perf_counter() - start
    nbformat.write(nb, output_path)
    code_cells = sum(1 for cell in nb.cells if cell.cell_type == "code")
    stamp = {
        "notebook": path.name,
        "passed": not error,
        "inputs_sha256": inputs,
        "output_sha256": _file_digest(output_path),
        "code_cells": code_cells,
        "seconds": round(seconds, 1),
    }
    partial = stamp_path(output_path).with_suffix(".tmp")
    partial.write_text(json.dumps(stamp, indent=1) + "\n")
    partial.replace(stamp_path(output_path))
    return NotebookRun(path, output_path, code_cells, seconds, error)


def _expected_seconds(path: Path) -> float:
    """How long ``path`` took when it last ran here (its stamp), else its count of code cells: the longest start
    first, so the last to finish is a short one."""
    try:
        return float(json.loads(stamp_path(BUILD_DIR / path.name).read_text())["seconds"])
    except (OSError, ValueError, KeyError):
        return sum(1 for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")


def _announced_run(path: Path) -> NotebookRun:
    sys.stdout.write(f"running {path.name} ...\n")  # one write: two threads' lines do not run together
    sys.stdout.flush()
    return execute_notebook(path)


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or demo_notebooks()
    if not paths:
        print("no demo notebooks found under demo_notebooks/")
        return 1
    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, os.cpu_count() or 1))) as pool:
        started = {
            path: pool.submit(_announced_run, path) for path in sorted(paths, key=_expected_seconds, reverse=True)
        }
        runs = [started[path].result() for path in paths]
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
