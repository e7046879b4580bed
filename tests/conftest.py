"""Shared fixtures (an in-process IPython shell with jaxmagic loaded) and the lanes of the suite.

Every test is marked by what it needs, so `make test-fast` can leave out what is slow to start:
``browser`` (JupyterLab in Chromium), ``kernel`` (a notebook kernel or a fresh Python process),
``cluster`` (ipyparallel engines), ``slow`` (a second or more: tests/slow_tests.txt, measured).
``accelerator`` tests need a TPU or GPU and are skipped where JAX has none (CI): they run in the
accelerator lane on a lent machine (tools/accelerator/); what they parse is recorded there and replayed
here by tests that are not so marked (tests/fixtures/accelerator/).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "demo_notebooks"))  # section9_script, the chapter's training script


# The lanes by file: what a whole test file needs.
_FILE_MARKS = {
    "test_browser.py": "browser",
    "test_browser_explorers.py": "browser",
    "test_browser_notebooks.py": "browser",  # the executed demo notebooks in JupyterLab
    "test_readme.py": "kernel",  # the README's commands: a fresh Python process, a build
    "test_notebooks.py": "kernel",
    "test_watch_notebook.py": "kernel",
    "test_live_view.py": "kernel",
    "test_debug_kernel.py": "kernel",  # a real kernel answering the debugger's input requests
    "test_section9_script.py": "kernel",
    "test_sharding.py": "kernel",  # its scenarios run in fresh processes with 64 fake devices
    "test_collectives.py": "kernel",  # its scenarios run in a fresh process with 8 fake devices
    "test_docs.py": "kernel",  # builds the docs in a fresh process (its Chromium test is marked browser too)
    "test_wheel.py": "kernel",  # builds the wheel and runs it in a fresh environment
    "test_gather.py": "cluster",
    "test_soak.py": "slow",
    "test_types.py": "slow",  # mypy over the package
    "test_magics_fuzz.py": "slow",
}
_SLOW_LIST = Path(__file__).with_name("slow_tests.txt")
# Files whose tests cost in proportion to the process's heap, run first while it is small. JAX's leak checker
# explains a leaked tracer with gc.get_referrers over every object (core._why_alive: 176 calls for one nnx.jit
# leak, 0.13 s each at 1.1M objects), and the holder search and gc.collect() walk it too: the slowest of these
# took 4.8 s alone, 18 s after five other files, 145 s in the whole suite's order.
_HEAP_BOUND_FIRST = (
    "test_libraries_holders.py",
    "test_leaks_probe.py",
    "test_live_probe.py",
    "test_live_kept_alone.py",
    "test_doctor_probe.py",
    "test_paths_agree.py",
    "test_transform_stack.py",
    "test_soak.py",
)
_GONE_SLOW_IDS = pytest.StashKey[list]()


def pytest_configure(config):
    for name, what in [
        ("browser", "drives JupyterLab in headless Chromium"),
        ("kernel", "runs a notebook kernel or a fresh Python process"),
        ("cluster", "starts ipyparallel engines"),
        ("slow", "takes a second or more (tests/slow_tests.txt)"),
        ("accelerator", "needs a TPU or GPU: skipped where JAX has none (tools/accelerator/ runs them)"),
    ]:
        config.addinivalue_line("markers", f"{name}: {what}")


def _slow_ids() -> set[str]:
    lines = _SLOW_LIST.read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
def pytest_collection_modifyitems(config, items):
    slow = _slow_ids()
    seen = set()
    for item in items:
        file_name = item.path.name
        if file_name in _FILE_MARKS:
            item.add_marker(_FILE_MARKS[file_name])
        node = item.nodeid.removeprefix("tests/")
        if node in slow:
            item.add_marker("slow")
            seen.add(node)
    first = {name: rank for rank, name in enumerate(_HEAP_BOUND_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: the rest keep their order
    collected_files = {item.path.name for item in items}
    listed_files = {node.split("::")[0] for node in slow}
    if listed_files <= collected_files:  # the whole suite was collected: say which listed tests are gone
        config.stash[_GONE_SLOW_IDS] = sorted(slow - seen)


def pytest_runtest_setup(item):
    if item.get_closest_marker("accelerator") is not None:
        import jax  # deferred: only an accelerator test starts a backend to ask which one

        if jax.default_backend() == "cpu":
            pytest.skip("needs a TPU or GPU; JAX here has only the CPU")


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
    gone = terminalreporter.config.stash.get(_GONE_SLOW_IDS, [])
    if gone:
        terminalreporter.write_sep("-", "tests/slow_tests.txt names tests that no longer exist")
        for node in gone:
            terminalreporter.write_line(node)
    if lines:
        terminalreporter.write_sep("-", "demo notebook runs checked")
        for line in sorted(set(lines)):
            terminalreporter.write_line(line)
