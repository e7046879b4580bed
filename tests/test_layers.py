"""The package's layers, enforced: who may import what (see docs/DESIGN.md)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import subprocess
import sys
import typing
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jaxmagic"

# Mentions of jax._src outside _jax/ that are text, not imports: file paths a traceback
# is classified by, and the name of JAX's logger in a message.
JAX_SRC_TEXT_ALLOWED = {"probes/_tracebacks.py", "probes/_prints.py"}


def _modules(under: str = "") -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py"))


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in the file names, at any depth."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_top_level_holds_only_subpackages():
    entries = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    files = {name for name in entries if (PACKAGE / name).is_file()}
    assert files == {"__init__.py"}, f"modules at the package top level: {sorted(files - {'__init__.py'})}"
    assert {"ipython", "probes", "_jax", "usercode", "report", "render"} <= entries


def test_probes_import_without_ipython():
    code = "import sys, jaxmagic.probes; sys.exit(1 if any(m.split('.')[0] == 'IPython' for m in sys.modules) else 0)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, "importing jaxmagic.probes imported IPython" + result.stderr[-2000:]


def _runtime_imported_modules(path: Path) -> set[str]:
    """``_imported_modules`` less what is imported under ``if TYPE_CHECKING:`` (for annotations: nothing runs)."""
    tree = ast.parse(path.read_text())
    typing_only = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    ]
    hidden = {id(inner) for block in typing_only for stmt in block.body for inner in ast.walk(stmt)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_ipython_layer_imports_ipython():
    # at run time: the extension's entry point names IPython's shell class in its annotations only
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in _modules()
        if path.relative_to(PACKAGE).parts[0] != "ipython"
        and any(name.split(".")[0] == "IPython" for name in _runtime_imported_modules(path))
    ]
    assert offenders == []


def test_jax_private_modules_only_under_underscore_jax():
    offenders = []
    for path in _modules():
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("_jax/"):
            continue
        if any(name.startswith("jax._src") for name in _imported_modules(path)):
            offenders.append(f"{relative} imports jax._src")
        elif "jax._src" in path.read_text() and relative not in JAX_SRC_TEXT_ALLOWED:
            offenders.append(f"{relative} mentions jax._src")
    assert offenders == []


@pytest.mark.parametrize("layer", ["render", "report", "usercode", "_jax"])
def test_lower_layers_import_no_probe_and_no_magic(layer):
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in _modules(layer)
        for name in _imported_modules(path)
        if name.startswith(("jaxmagic.probes", "jaxmagic.ipython"))
    ]
    assert offenders == []


def test_render_reads_only_the_document_model():
    allowed = ("jaxmagic.render", "jaxmagic.report")
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in _modules("render")
        for name in _imported_modules(path)
        if name.startswith("jaxmagic") and not name.startswith(allowed)
    ]
    assert offenders == []


def _jaxmagic_imports(under: str) -> list[tuple[str, str]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), name)
        for path in _modules(under)
        for name in _imported_modules(path)
        if name == "jaxmagic" or name.startswith("jaxmagic.")
    ]


def test_the_report_model_imports_only_itself():
    offenders = [
        f"{path}: {name}" for path, name in _jaxmagic_imports("report") if not name.startswith("jaxmagic.report")
    ]
    assert offenders == []


def test_user_code_inspection_imports_only_itself_and_the_model():
    """``usercode/`` (frames, tracebacks, whose a file is) reads the live program and speaks the model's terms."""
    allowed = ("jaxmagic.usercode", "jaxmagic.report")
    offenders = [f"{path}: {name}" for path, name in _jaxmagic_imports("usercode") if not name.startswith(allowed)]
    assert offenders == []


def test_the_report_model_inspects_no_live_program():
    """The model is data: no frame, traceback, installed package or running shell is read in ``report/``."""
    inspecting = ("sys", "inspect", "traceback", "linecache", "sysconfig", "importlib.metadata", "IPython")
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in _modules("report")
        for name in _imported_modules(path)
        if name in inspecting
    ]
    assert offenders == []


def test_probe_support_imports_no_probe():
    support_or_lower = (
        "jaxmagic.probes._support",
        "jaxmagic._jax",
        "jaxmagic.usercode",
        "jaxmagic.report",
        "jaxmagic.render",
    )
    offenders = [
        f"{path}: {name}"
        for path, name in _jaxmagic_imports("probes/_support")
        if not name.startswith(support_or_lower)
    ]
    assert offenders == []


def test_only_the_extension_entry_point_imports_the_ipython_layer():
    offenders = [
        f"{path}: {name}"
        for path, name in _jaxmagic_imports("")
        if name.startswith("jaxmagic.ipython") and not path.startswith("ipython/") and path != "__init__.py"
    ]
    assert offenders == []


def test_no_private_name_is_imported_across_modules():
    offenders = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxmagic"):
                offenders += [
                    f"{path.relative_to(PACKAGE)}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
    assert offenders == []


def _report_classes():
    from jaxmagic import probes
    from jaxmagic.report import Report

    return [value for value in vars(probes).values() if isinstance(value, type) and issubclass(value, Report)]


def _dataclasses_in(hint) -> list[type]:
    found = []
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        found.append(hint)
    for argument in typing.get_args(hint):
        found += _dataclasses_in(argument)
    return found


def test_report_field_types_are_importable_from_the_reports_module():
    missing = []
    for report_class in _report_classes():
        module = importlib.import_module(report_class.__module__)
        hints = typing.get_type_hints(report_class)
        for field in dataclasses.fields(report_class):
            for field_type in _dataclasses_in(hints.get(field.name)):
                if getattr(module, field_type.__name__, None) is not field_type:
                    missing.append(f"{report_class.__name__}.{field.name}: {field_type.__qualname__}")
    assert missing == []


def test_every_probe_is_listed_once_in_all():
    from jaxmagic import probes

    assert len(probes.__all__) == len(set(probes.__all__))
    assert all(hasattr(probes, name) for name in probes.__all__)
    assert {report.__name__ for report in _report_classes()} <= set(probes.__all__)


def _function_local_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, guarded by ``except ImportError``) of each import inside a function."""
    found = []

    def visit(node, in_function: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                module = child.module if isinstance(child, ast.ImportFrom) else child.names[0].name
                found.append((child.lineno, module or "", guarded))
            catches_import_error = isinstance(child, ast.Try) and any(
                "ImportError" in ast.unparse(handler.type or ast.Constant(None)) for handler in child.handlers
            )
            visit(
                child,
                in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)),
                guarded or catches_import_error,
            )

    visit(ast.parse(path.read_text()), False, False)
    return found


def test_function_local_imports_only_defer_an_import():
    """Inside a function, an import defers JAX, the probes, ``_jax`` (both import JAX) or the renderers (at
    %load_ext), IPython or rich (drawing only)."""
    offenders = []
    for path in _modules():
        relative = path.relative_to(PACKAGE).as_posix()
        at_load = relative.startswith("ipython/") or relative == "__init__.py"
        for line, module, guarded in _function_local_imports(path):
            top = module.split(".")[0]
            deferred = (
                top in ("jax", "jaxlib", "IPython", "rich")
                or guarded
                or (
                    at_load
                    and (
                        module == "jaxmagic"
                        or module.startswith(
                            ("jaxmagic.probes", "jaxmagic._jax", "jaxmagic.ipython", "jaxmagic.render")
                        )
                    )
                )
            )
            if not deferred:
                offenders.append(f"{relative}:{line}: {module}")
    assert offenders == []
