"""The package tree says what it holds: a name is one thing, and ``probes/_support`` holds only what probes share."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import types
from pathlib import Path

import jaxmagic.probes

PROBES = Path(jaxmagic.probes.__file__).parent


def _submodule_names() -> list[str]:
    return sorted(info.name for info in pkgutil.walk_packages(jaxmagic.probes.__path__, "jaxmagic.probes."))


def test_every_module_under_probes_is_reached_by_its_dotted_name():
    # `import jaxmagic.probes._nans as m` reads the attribute `_nans` of jaxmagic.probes: it must be the module,
    # not a probe function bound over it (the public names live on jaxmagic.probes itself).
    hidden = []
    for name in _submodule_names():
        module = importlib.import_module(name)
        parent_name, _, leaf = name.rpartition(".")
        if getattr(importlib.import_module(parent_name), leaf, None) is not module:
            hidden.append(name)
    assert hidden == []


def test_probe_modules_are_private_and_the_public_names_are_not_modules():
    public = sorted(path.name for path in PROBES.iterdir() if not path.name.startswith(("_", ".")))
    assert public == [], "a probe's module is private (_name); its public names are bound in jaxmagic.probes"
    assert not [
        name for name in jaxmagic.probes.__all__ if isinstance(getattr(jaxmagic.probes, name), types.ModuleType)
    ]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PROBES.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The jaxmagic.probes modules a file imports, ``from package import module`` read as the module."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.startswith("jaxmagic.probes.")}


def _probe_users() -> dict[str, set[str]]:
    """Each ``_support`` module -> the probes that import it, directly or through other ``_support`` modules."""
    importers: dict[str, set[str]] = {}
    for path in PROBES.rglob("*.py"):
        for name in _imports(path):
            importers.setdefault(name, set()).add(_module_name(path))
    support = "jaxmagic.probes._support"

    def users(module: str, seen: frozenset[str]) -> set[str]:
        found = set()
        for importer in importers.get(module, set()) - seen:
            if importer.startswith(support + ".") or importer == support:
                found |= users(importer, seen | {importer})
            elif importer != "jaxmagic.probes":  # the public names, not a probe
                found.add(importer.split(".")[2])  # the probe: jaxmagic.probes._nans.probe -> _nans
        return found

    return {
        _module_name(path): users(_module_name(path), frozenset({_module_name(path)}))
        for path in (PROBES / "_support").rglob("*.py")
        if path.name != "__init__.py"
    }


def test_support_holds_only_what_several_probes_use():
    # A helper with one probe using it lives in that probe's package (docs/DESIGN.md, the layer table).
    one_user = {module: sorted(users) for module, users in _probe_users().items() if len(users) < 2}
    assert one_user == {}
