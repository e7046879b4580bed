"""Shared fixtures: an in-process IPython shell with jaxmagic loaded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "demo_notebooks"))  # section9_script, the chapter's training script


@pytest.fixture(scope="session")
def ip():
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    shell.run_line_magic("load_ext", "jaxmagic")
    shell.run_cell("import jax, jax.numpy as jnp\nfrom jax.experimental import checkify")
    return shell


def run(ip, cell: str):
    """Run a cell; return IPython's ExecutionResult."""
    return ip.run_cell(cell)


def pytest_terminal_summary(terminalreporter):
    """Say, per demo notebook, whether its test executed it or checked ``make demo``'s stamped run."""
    lines = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        for name, value in getattr(report, "user_properties", ())
        if name == "notebook_run"
    ]
    if lines:
        terminalreporter.write_sep("-", "demo notebook runs checked")
        for line in sorted(set(lines)):
            terminalreporter.write_line(line)
