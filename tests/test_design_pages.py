"""The design pages name the code as it is: every backticked module path or ``module.name`` resolves.

``docs/DESIGN.md`` and ``docs/design/*.md`` point into the package by path (``_nans/search/given.py``,
``ipython/magic/``), by dotted name (``usercode.source.code_kind``, ``_compiles/causes.classify``) and by a
class's member (``MagicRunner.run_call_magic``). A span is checked when it starts with a name the package
has - a folder, a module, or a class of it - or with a folder of the repository (``tests/``, ``tools/``); it
must then resolve: the module by the tail of its dotted name (the pages' short forms, ``_nans/fixes/rules.py``
below ``probes/``, are tails), each name after it defined there (a function, a class, an assignment, an
import, a submodule), a class's member in its body or its bases' bodies. Read from the source, nothing
imported. A name that moved or was renamed fails here, naming the page and the span.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jaxmagic"
PAGES = [ROOT / "docs" / "DESIGN.md", *sorted((ROOT / "docs" / "design").glob("*.md"))]
REPOSITORY_FOLDERS = ("tests", "tools", "benchmarks", "docs", "demo_notebooks")

_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
_REFERENCE = re.compile(r"[A-Za-z_][\w]*(?:\.[\w]+|/[\w.-]+)*/?")
# Spans of the pages shaped like our names that name the user's or JAX's objects: a user's Flax module's method,
# a user's pytree path, JAX's profiler session and a traced program's debug info.
NOT_OURS = {"Block.__call__", "model.key", "session.profile_data", "jaxpr.debug_info.func_src_info"}


@functools.cache
def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__.py``)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _bound_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body binds: defs, classes, assignments (annotated too), imports."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            names.update(_bound_names(node.body))
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    names.update(_bound_names(handler.body))
    return names


@functools.cache
def _classes() -> dict[str, list[ast.ClassDef]]:
    """Every class of the package (top level of its module) by name."""
    found: dict[str, list[ast.ClassDef]] = {}
    for path in _modules().values():
        for node in _tree(path).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(node)
    return found


@functools.cache
def _repository_file_named(name: str) -> bool:
    return any(next((ROOT / folder).rglob(name), None) is not None for folder in REPOSITORY_FOLDERS)


def _class_has(name: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
    for node in _classes().get(name, []):
        body = _bound_names(node.body)
        # a member set in a method (``self.board = ...``) is the class's too
        assigned = {
            target.attr
            for item in ast.walk(node)
            if isinstance(item, (ast.Assign, ast.AnnAssign))
            for target in (item.targets if isinstance(item, ast.Assign) else [item.target])
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
        }
        if member in body or member in assigned:
            return True
        bases = [ast.unparse(base).split(".")[-1].split("[")[0] for base in node.bases]
        if any(base not in seen and _class_has(base, member, seen | {name}) for base in bases):
            return True
    return False


def _resolves_in(module: str, rest: list[str]) -> bool:
    """``rest`` (names after the module) is defined in ``module``: a name of its body, then a class member."""
    if not rest:
        return True
    names = _bound_names(_tree(_modules()[module]).body)
    defined = names.get(rest[0])
    if defined is None:
        return False
    if len(rest) == 1:
        return True
    return isinstance(defined, ast.ClassDef) and len(rest) == 2 and _class_has(defined.name, rest[1])


def _module_parts(reference: str) -> tuple[list[str], bool]:
    """The reference's names (``_nans/fixes/rules.py.RULES`` -> ``_nans fixes rules RULES``); whether it is a path."""
    is_path = "/" in reference
    reference = reference.replace(".py.", "/").removesuffix(".py").rstrip("/")
    return [part for part in re.split(r"[./]", reference) if part], is_path


def problem(reference: str) -> str | None:
    """Why ``reference`` names nothing of the package or repository; None when it resolves or is no reference."""
    parts, is_path = _module_parts(reference)
    if parts[-1:] == ["__init__"]:
        parts = parts[:-1]
    if not parts or reference in NOT_OURS:
        return None
    if parts[0] in REPOSITORY_FOLDERS and is_path:
        path = ROOT / reference.split(".py")[0].rstrip("/")
        exists = (
            path.exists() or path.with_suffix(".py").exists() or (ROOT / (reference.split(".py")[0] + ".py")).exists()
        )
        return None if exists else "no such file or folder in the repository"
    modules = _modules()
    if parts[0] in _classes() and not is_path and len(parts) == 2:
        return None if _class_has(parts[0], parts[1]) else f"class {parts[0]} has no {parts[1]}"
    # a probe's package by its public name too (`compiles/causes.py` for `_compiles/causes.py`): checked, and fails
    probe_packages = {
        name.split(".")[-1]
        for name, path in modules.items()
        if re.fullmatch(r"jaxmagic\.probes\._\w+", name) and path.name == "__init__.py"
    }
    heads = {name.split(".")[-1] for name in modules} | {package.lstrip("_") for package in probe_packages}
    if parts[0] not in heads:
        if reference.endswith(".py") and not is_path and not _repository_file_named(reference):
            return "no file of the package or repository has this name"  # `merge.py` where it is merging.py
        return None  # not a name of the package: JAX's, a library's, a word
    folders = {name.split(".")[-1] for name, path in modules.items() if path.name == "__init__.py"}
    if is_path and parts[0] not in folders | {folder.lstrip("_") for folder in folders}:
        return None  # "text/plain": a module's name before a slash is no path of ours
    for length in range(len(parts), 0, -1):
        tail = ".".join(parts[:length])
        for name in modules:
            if (name == tail or name.endswith("." + tail)) and _resolves_in(name, parts[length:]):
                return None
    return "names no module, or no name defined in it"


def references(text: str) -> list[str]:
    """The module paths and dotted names of a page's code spans (a span broken over lines joined again)."""
    found = []
    for match in _SPAN.finditer(text):
        span = re.sub(r"\n\s*", "", match.group(1)).strip()
        if re.search(r"[<>*{}]|\bNN", span):
            continue  # a pattern (`probes/_<tool>.py`, `docs/magics/*.md`), not a name
        head = _REFERENCE.match(span)
        if head and ("." in head.group(0).strip(".") or "/" in head.group(0)):
            found.append(head.group(0).rstrip("."))
    return found


def test_the_design_pages_exist():
    assert (ROOT / "docs" / "DESIGN.md").exists() and len(PAGES) > 5


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_module_path_of_a_design_page_resolves(page):
    unresolved = sorted({f"`{ref}`: {why}" for ref in references(page.read_text()) if (why := problem(ref))})
    assert unresolved == [], f"{page.relative_to(ROOT)}: {len(unresolved)} name(s) of the code that are not there"


@pytest.mark.parametrize(
    ("reference", "resolves"),
    [
        ("_nans/search/given.py", True),
        ("usercode.source.code_kind", True),
        ("report.source.code_kind", False),  # moved to usercode/
        ("_compiles/causes.classify", True),
        ("ipython/magic/", True),
        ("ipython/line_magics.py", False),
        ("MagicRunner.run_call_magic", True),
        ("MagicRunner._run_call_magic", False),
        ("tests/test_layers.py", True),
        ("tests/test_nothing_here.py", False),
        ("jax.jit", True),  # JAX's: not checked
        ("text/plain", True),  # a MIME type beside render/text.py: not checked
        ("compiles/causes.py", False),  # the probe's package is _compiles/
        ("probes/__init__.py", True),
        ("tests/fixtures/accelerator/tpu-v5e-jax0.12/", True),
        ("merging.py", True),
        ("merge.py", False),
    ],
)
def test_the_checker_tells_a_moved_name(reference, resolves):
    assert (problem(reference) is None) is resolves
