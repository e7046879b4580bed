"""The package tree says what it holds: a name is one thing, and ``probes/_support`` holds only its declared themes."""

from __future__ import annotations

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


# What ``probes/_support`` may hold: the themes every probe may need, whatever its domain (docs/DESIGN.md, the layer
# table). A module of one domain lives in the probe whose question it answers, however many probes use it (the
# NaN search in ``_nans``, the holder search in ``_live``); probes import each other for it.
SUPPORT_THEMES = {
    "report_base.py": "the base of every probe's report",
    "arguments.py": "a probe's bad option (ProbeArgumentError)",
    "progress.py": "a long measurement's progress",
    "explained.py": "an error a report explained already",
    "attribution.py": "where a value was made: one answer for every finding",
    "calls": "the user's call: its arguments by name, through a library's wrapper, from the host, its call site",
    "rerun": "running the user's code again: the failing call, its kept state, the user's Python watched",
    "fixes": "a fix of the user's line and its trial by tracing (%jax_explain, %%jax_leaks, %%jax_compiles)",
}


def test_support_holds_only_its_declared_themes():
    held = sorted(
        path.name for path in (PROBES / "_support").iterdir() if path.name not in ("__init__.py", "__pycache__")
    )
    assert [name for name in held if name not in SUPPORT_THEMES] == [], "a module of one domain lives in its probe"
    assert [name for name in SUPPORT_THEMES if name not in held] == [], "a theme declared and gone: strike it"
