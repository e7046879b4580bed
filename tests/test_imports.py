"""Where a module may import inside a function: only where deferring protects start-up (docs/DESIGN.md).

Two lines are drawn. JAX is imported by the user, never by ``%load_ext`` or by turning the watch on:
``ipython/``, ``report/``, ``usercode/``, ``render/`` and the package's ``__init__`` import no ``jax`` or ``jaxlib`` at
their top, and import no probe at their top either; ``probes/`` and ``_jax/`` import JAX at their top
like any library, and are imported only once JAX is, or is about to be, used: by a magic as it runs, or
by the watch at the first cell that begins with ``jax`` in ``sys.modules`` (so ``"jax" in sys.modules``
still tells a cell that used JAX). A JAX import inside a function of ``probes/`` or ``_jax/`` is a
version guard (in a ``try`` or an ``if``) or says why on its line: ``# deferred: <why>``. Everything
else is imported at the top of the module, except in the modules ``%load_ext`` loads (which import the
probes and heavy libraries on first use) and for an optional dependency (ipyparallel, or a library the
user debugs through: flax, equinox, ...), imported only when the user's program has; such an import
says why on its line too.
"""

from __future__ import annotations

import ast
import re
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

# Turning the watch on and running a cell without JAX (or one that fails) import no JAX; the first cell that
# begins with JAX imported starts the watch, which then watches it.
WATCH_BEFORE_JAX = """
import sys
from IPython.testing.globalipapp import start_ipython
from jaxmagic.ipython import early_context, watch_hook
ip = start_ipython()
ip.run_line_magic("load_ext", "jaxmagic")
ip.run_line_magic("jax_watch", "on")
early_context.when_jax_imported(ip, lambda: print("waited for JAX:", "jax" in sys.modules))
ip.run_cell("total = sum(range(10))")
ip.run_cell("1 / 0")  # the explainer sees an error raised without JAX: not JAX's, it imports nothing
print("after a cell without JAX:", "jax" in sys.modules, "jaxmagic.probes" in sys.modules)
ip.run_cell("import jax, jax.numpy as jnp")
ip.run_cell("y = jax.jit(jnp.log)(-jnp.ones(3))")
log = watch_hook.current(ip).log
print("watched:", log.cells_watched, sorted({finding.area for finding in log.findings}))
"""

# The layers %load_ext and the watch's hook load: no JAX (and no probe) at their top.
JAX_FREE_LAYERS = ("jaxmagic.ipython", "jaxmagic.render", "jaxmagic.report", "jaxmagic.usercode")

# A reason a JAX import was deferred for that no longer holds: probes/ and _jax/ import JAX at their top.
STALE_REASON = re.compile(
    r"imports? no JAX|not import JAX|JAX only when a probe runs|JAX is imported (where|only)", re.I
)

# Layers whose modules may defer imports though %load_ext loads only some of them: what a magic shows
# (renderers, live view) loads when it is first shown, so ``%load_ext`` stays fast (issue 44).
LOAD_PATH_LAYERS = ("jaxmagic.ipython", "jaxmagic.render", "jaxmagic.report", "jaxmagic.usercode")


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


def _function_level_imports(path: Path, with_guards: bool = False):
    """(line number, top-level packages imported, source line) of each import inside a def; with
    ``with_guards``, also whether a ``try``, ``if`` or ``with`` inside the def holds it."""
    source = path.read_text()
    lines = source.splitlines()
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node, guarded in _imports_below(function.body, guarded=False):
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
            yield (node.lineno, packages, text, guarded) if with_guards else (node.lineno, packages, text)


def _imports_below(statements, guarded: bool):
    """Each import among ``statements`` and the blocks they hold (not nested defs: ``ast.walk`` visits those
    itself), with whether a ``try``/``if``/``with`` holds it."""
    for node in statements:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, guarded
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            guard = guarded or isinstance(node, (ast.Try, ast.If, ast.With))
            for field in ("body", "orelse", "finalbody"):
                yield from _imports_below(getattr(node, field, []), guard)
            for handler in getattr(node, "handlers", []):
                yield from _imports_below(handler.body, guard)
            for case in getattr(node, "cases", []):
                yield from _imports_below(case.body, guard)


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


def test_the_layers_load_ext_loads_import_no_jax_at_their_top():
    offenders = [
        f"{path.relative_to(ROOT)}:{lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if _module_name(path) == "jaxmagic" or _module_name(path).startswith(JAX_FREE_LAYERS)
        for lineno, packages in _module_level_imports(path)
        if {"jax", "jaxlib"} & set(packages)
    ]
    assert offenders == []
    code = "import sys, jaxmagic; sys.exit(1 if 'jax' in sys.modules or 'jaxmagic.probes' in sys.modules else 0)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, "importing jaxmagic imported JAX or the probes" + result.stderr[-2000:]


def test_turning_the_watch_on_imports_no_jax_and_it_starts_with_the_users():
    result = subprocess.run(
        [sys.executable, "-c", WATCH_BEFORE_JAX], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "after a cell without JAX: False False" in result.stdout, result.stdout[-2000:]
    # what waits for JAX (the engine's stack-dump listener) runs once the user's `import jax` has run
    assert "waited for JAX: True" in result.stdout.split("after a cell without JAX")[1], result.stdout[-2000:]
    assert "watched: 1 ['NaN']" in result.stdout, result.stdout[-2000:]


def _jax_imports_in_functions(path: Path):
    """(line number, whether a ``try``/``if``/``with`` in the function guards it, its text with the
    comments above) of each JAX import inside a def."""
    for lineno, packages, text, guarded in _function_level_imports(path, with_guards=True):
        if {"jax", "jaxlib"} & set(packages):
            yield lineno, guarded, text


def test_jax_imports_in_functions_are_guards_or_say_why():
    """``probes/`` and ``_jax/`` import JAX at their top: one inside a function is a version guard or
    says why it cannot be at the top; "importing jaxmagic imports no JAX" is no longer a reason."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        jax_free = _module_name(path) == "jaxmagic" or _module_name(path).startswith(JAX_FREE_LAYERS)
        for lineno, guarded, text in _jax_imports_in_functions(path):
            where = f"{path.relative_to(ROOT)}:{lineno}"
            reason = text.partition("# deferred:")[2]
            if guarded and not reason:
                continue
            if not reason.strip():
                offenders.append(f"{where}: import JAX at the top of the module ({text.strip()})")
            elif not jax_free and STALE_REASON.search(reason) and "load_ext" not in reason:
                offenders.append(f"{where}: probes/ and _jax/ import JAX at their top ({text.strip()})")
    assert offenders == [], "\n".join(offenders)


def test_function_level_imports_only_where_deferring_protects_start_up():
    at_load_ext = _modules_loaded_at_load_ext()
    assert "jaxmagic.ipython.magics" in at_load_ext and "jaxmagic.probes" not in at_load_ext
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        protects_start_up = _module_name(path) in at_load_ext or _module_name(path).startswith(LOAD_PATH_LAYERS)
        for lineno, packages, text in _function_level_imports(path):
            if set(packages) <= {"jax", "jaxlib"}:
                continue  # JAX imports have their own rule: test_jax_imports_in_functions_are_guards_or_say_why
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
