"""Where a module may import inside a function: only where deferring protects start-up (docs/DESIGN.md).

Two lines are drawn. JAX is imported by the user, never by jaxmagic: no module imports ``jax`` or
``jaxlib`` at its top (``%load_ext`` must not start JAX; ``%jax_watch`` imports its probes before
the user's first cell and tells a cell that used JAX by ``"jax" in sys.modules``), so every JAX
import sits in the function that needs it. Everything else is imported at the top of the module,
except in the modules ``%load_ext`` loads (which import the probes and heavy libraries on first
use) and for an optional dependency (ipyparallel, or a library the user debugs through: flax,
equinox, ...), imported only when the user's program has; such an import says why on its line:
``# deferred: <why>``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jaxmagic"

# Packages jaxmagic works without: importing one is always deferred (and guarded).
OPTIONAL = {"ipyparallel", "flax", "equinox", "optax", "numpyro", "haiku", "chex"}

LOADED_AT_LOAD_EXT = """
import sys
from IPython.testing.globalipapp import start_ipython
start_ipython().run_line_magic("load_ext", "jaxmagic")
print("\\n".join(sorted(sys.modules)))
"""

# Layers whose modules may defer imports though %load_ext loads only some of them: what a magic shows
# (renderers, live view) loads when it is first shown, so ``%load_ext`` stays fast (issue 44).
LOAD_PATH_LAYERS = ("jaxmagic.ipython", "jaxmagic.render", "jaxmagic.report")


def _modules_loaded_at_load_ext() -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", LOADED_AT_LOAD_EXT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return {m for m in result.stdout.split() if m == "jaxmagic" or m.startswith("jaxmagic.")}


def test_load_ext_imports_only_what_registering_the_magics_needs():
    """``%load_ext jaxmagic`` <= 30 ms after ``import jax`` (issue 44): no probe, no renderer, no rich;
    they are imported when a magic first runs or a report is first shown."""
    result = subprocess.run(
        [sys.executable, "-c", LOADED_AT_LOAD_EXT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = set(result.stdout.split())
    assert "jaxmagic.ipython.magics" in loaded
    for heavy in ("rich", "jax", "jaxmagic.probes", "jaxmagic.render", "jaxmagic.report.document"):
        assert heavy not in loaded, f"%load_ext imported {heavy}"
    assert not {m for m in loaded if m.startswith("jaxmagic.ipython.") and m.endswith(("live_view", "show_report"))}


PARSERS_AT_LOAD_EXT = """
from IPython.testing.globalipapp import start_ipython
from IPython.core import oinspect
ip = start_ipython()
ip.run_line_magic("load_ext", "jaxmagic")
from jaxmagic.ipython.magics import JaxMagics
magics = [getattr(JaxMagics, name) for kind in JaxMagics.magics.values() for name in kind]
print(sum(magic._parser is not None for magic in magics), len(magics))
print(oinspect.getdoc(ip.find_cell_magic("jax_nans")).splitlines()[2])
"""


def test_load_ext_builds_no_argument_parser_and_the_help_is_still_the_parsers():
    """Building the 24 magics' argparse parsers and their help was half of ``%load_ext`` (issue 56): they are
    built when a magic first needs its own (``ipython/lazy_arguments.py``); ``%jax_nans?`` still prints it."""
    result = subprocess.run(
        [sys.executable, "-c", PARSERS_AT_LOAD_EXT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    counts, usage = result.stdout.splitlines()[-2:]
    built, magics = map(int, counts.split())
    assert built == 0 and magics >= 20
    assert usage.strip() == "%jax_nans [--infs] [--inside] [-o NAME]"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _function_level_imports(path: Path):
    """(line number, top-level package imported, source line) of each import inside a def."""
    source = path.read_text()
    lines = source.splitlines()
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                packages = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                packages = [node.module.split(".")[0]]
            else:
                continue
            text = " ".join(lines[node.lineno - 1 : (node.end_lineno or node.lineno)])
            # A comment on the line above, or above a run of imports, speaks for each of them.
            above = node.lineno - 2
            while above >= 0 and lines[above].strip().startswith(("#", "from ", "import ")):
                text = f"{text}  {lines[above].strip()}"
                above -= 1
            yield node.lineno, packages, text


def _module_level_imports(path: Path):
    """(line number, top-level packages) of each import run when the module is imported."""
    tree = ast.parse(path.read_text())

    def walk(statements):
        for node in statements:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue  # read by the type checker only
            if isinstance(node, ast.Import):
                yield node.lineno, [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield node.lineno, [node.module.split(".")[0]]
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                    yield from walk(block)
                for handler in getattr(node, "handlers", []):
                    yield from walk(handler.body)

    yield from walk(tree.body)


def test_no_module_imports_jax_at_its_top():
    offenders = [
        f"{path.relative_to(ROOT)}:{lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for lineno, packages in _module_level_imports(path)
        if {"jax", "jaxlib"} & set(packages)
    ]
    assert offenders == []
    code = "import sys, jaxmagic, jaxmagic.probes; sys.exit(1 if 'jax' in sys.modules else 0)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, "importing jaxmagic.probes imported JAX" + result.stderr[-2000:]


def test_function_level_imports_only_where_deferring_protects_start_up():
    at_load_ext = _modules_loaded_at_load_ext()
    assert "jaxmagic.ipython.magics" in at_load_ext and "jaxmagic.probes" not in at_load_ext
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        protects_start_up = _module_name(path) in at_load_ext or _module_name(path).startswith(LOAD_PATH_LAYERS)
        for lineno, packages, text in _function_level_imports(path):
            if set(packages) <= {"jax", "jaxlib"}:
                continue  # JAX is always imported where it is used (see the module's docstring)
            where = f"{path.relative_to(ROOT)}:{lineno}"
            optional = any(package in OPTIONAL for package in packages)
            if not (protects_start_up or optional):
                offenders.append(f"{where}: import at the top of the module ({text.strip()})")
            elif "# deferred:" not in text:
                offenders.append(f"{where}: a deferred import says why with '# deferred: ...' ({text.strip()})")
    assert offenders == [], "\n".join(offenders)


def test_optional_packages_are_not_dependencies():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {spec.split(">")[0].split("=")[0].split("[")[0].strip().replace("dm-haiku", "haiku") for spec in declared}
    assert names.isdisjoint(OPTIONAL)
