"""Shared fixtures (an in-process IPython shell with jaxmagic loaded) and the lanes of the suite.

Every test is marked by what it needs, so `make test-fast` can leave out what is slow to start:
``browser`` (JupyterLab in Chromium), ``kernel`` (a notebook kernel or a fresh Python process),
``cluster`` (ipyparallel engines), ``slow`` (half a second or more: tests/slow_tests.txt, measured).
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
# `make test` runs the suite on two workers (pytest-xdist, ``-n``): each file is one unit of work
# (``pytest_xdist_make_scheduler`` below), so a file's tests run in order on one worker and its module fixtures
# start once; files that share something outside the process - a JupyterLab and Chromium each, ipyparallel's
# profile, the build/ and dist/ folders - are one unit, run on one worker one after another. The longest units go
# first after the heap-bound files, in the order the collection sorts them, so the browser tests' ~5 minutes run
# beside the rest of the suite rather than after it. (xdist's own ``--dist loadgroup`` cannot do this with
# pytest 9: it renames ``item._nodeid``, which pytest 9 no longer reads, so every test became its own unit.)
_SHARED_UNITS = {
    "test_browser.py": "browser",
    "test_browser_explorers.py": "browser",
    "test_browser_notebooks.py": "browser",
    "test_gather.py": "cluster",
    "test_gather_errors.py": "cluster",
    "test_gather_scale.py": "cluster",
    "test_docs.py": "build",
    "test_readme.py": "build",
    "test_wheel.py": "build",
}
_LONGEST_UNITS_FIRST = ("browser", "cluster", "build")


def pytest_configure(config):
    for name, what in [
        ("browser", "drives JupyterLab in headless Chromium"),
        ("kernel", "runs a notebook kernel or a fresh Python process"),
        ("cluster", "starts ipyparallel engines"),
        ("slow", "takes half a second or more (tests/slow_tests.txt)"),
        ("accelerator", "needs a TPU or GPU: skipped where JAX has none (tools/accelerator/ runs them)"),
    ]:
        config.addinivalue_line("markers", f"{name}: {what}")


def _slow_ids() -> set[str]:
    lines = _SLOW_LIST.read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
def pytest_collection_modifyitems(config, items):
    slow = _slow_ids()
    for item in items:
        file_name = item.path.name
        if file_name in _FILE_MARKS:
            item.add_marker(_FILE_MARKS[file_name])
        if item.nodeid.removeprefix("tests/") in slow:
            item.add_marker("slow")
    # the heap-bound files first (each worker's heap is small then), the longest units next, the rest in their order
    heap_bound = {name: (0, rank) for rank, name in enumerate(_HEAP_BOUND_FIRST)}
    longest = {unit: (1, rank) for rank, unit in enumerate(_LONGEST_UNITS_FIRST)}
    items.sort(key=lambda item: heap_bound.get(item.path.name) or longest.get(unit_of(item.nodeid)) or (2, 0))
    _note_gone_slow_ids(config, [item.nodeid for item in items])


def unit_of(node_id: str) -> str:
    """The unit of work a test belongs to under pytest-xdist: its file, or the unit its file shares."""
    file_name = node_id.split("::")[0].rsplit("/", 1)[-1]
    return _SHARED_UNITS.get(file_name, file_name)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Every distributed run hands out whole units (``unit_of``), in collection order: the longest first."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # not by count of tests: the collection put the longest first
    return UnitScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Under pytest-xdist the controller collects nothing itself: a worker's collection says which are gone (its
    ids are what is left after ``-m``/``-k``: with either, nothing can be told)."""
    if not (node.config.option.markexpr or node.config.option.keyword):
        _note_gone_slow_ids(node.config, list(ids))


def _note_gone_slow_ids(config, node_ids: list[str]) -> None:
    """When the whole suite was collected, keep the ids tests/slow_tests.txt lists that it no longer holds."""
    slow, collected = _slow_ids(), {nodeid.removeprefix("tests/") for nodeid in node_ids}
    if {node.split("::")[0] for node in slow} <= {nodeid.split("::")[0] for nodeid in collected}:
        config.stash[_GONE_SLOW_IDS] = sorted(slow - collected)


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
