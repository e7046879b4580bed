"""Create jaxmagic's cache-key context the moment JAX has been imported.

``%%jax_leaks``, ``%%jax_keys``, ``%%jax_print`` and ``%%jax_doctor`` trace the
cell afresh under a ``jax.make_user_context`` of jaxmagic's own
(``_jax/retrace.py``). Creating that context adds an entry to every cache key,
so everything compiled before it traces and compiles once more. Made when JAX
has just been imported, it costs the user nothing: no function of theirs is
cached yet. ``%load_ext`` itself never imports JAX, so it waits for the user's
import instead of doing it: a finder first in ``sys.meta_path`` sees the import
of ``jax`` begin and makes the loader create the context when the package has
run - before the rest of the importing cell defines and compiles anything (a
context made after that cell made every function it compiled compile again in
the next cell, and ``%%jax_compiles`` saw a cause nobody wrote). Should that
fail (another finder serves ``jax``, an import error), the context is made after
the first cell that imported JAX. ``_jax/retrace.py`` imports JAX at its top, as every
``_jax`` module does: it is imported only once ``jax`` is in ``sys.modules``.

Whatever else of jaxmagic must run as soon as JAX is there, and would import it if run
before, waits here too (``when_jax_imported``: the engine's stack-dump listener), as
treescope sets up its JAX support only once ``jax`` has been imported.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from IPython.core.interactiveshell import ExecutionResult, InteractiveShell

_EVENT = "post_run_cell"
_waiting: list[Callable[[], None]] = []  # run after the context once JAX is imported (when_jax_imported)


def install(ipython: InteractiveShell) -> None:
    if "jax" in sys.modules:
        _create_context()
        return
    if not any(isinstance(finder, _ContextAfterJaxImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ContextAfterJaxImport())
    if _after_cell not in ipython.events.callbacks[_EVENT]:
        ipython.events.register(_EVENT, _after_cell)


def when_jax_imported(ipython: InteractiveShell, run: Callable[[], None]) -> None:
    """Call ``run`` once the user's ``import jax`` has run (now if it has); it never fails their import."""
    if "jax" in sys.modules:
        _quietly(run)
        return
    _waiting.append(run)
    install(ipython)


def uninstall(ipython: InteractiveShell) -> None:
    _waiting.clear()
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _ContextAfterJaxImport)]
    if _after_cell in ipython.events.callbacks[_EVENT]:
        ipython.events.unregister(_EVENT, _after_cell)


class _ContextAfterJaxImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: at the import of ``jax`` it asks the finders after it for the package's
    spec and has its loader create jaxmagic's context once the package has run. Removes itself."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "jax":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            run(module)
            del loader.exec_module  # this loader object is the package's alone; put its method back
            _after_jax_import()

        loader.exec_module = exec_module
        return spec


def _after_cell(result: ExecutionResult) -> None:
    if "jax" not in sys.modules:
        return
    from IPython import get_ipython  # deferred: runs after each cell only once JAX is imported

    shell = get_ipython()
    _after_jax_import()
    if shell is not None:
        uninstall(shell)


def _create_context() -> None:
    from jaxmagic._jax import retrace  # deferred: imports JAX; %load_ext runs this module before the user has

    retrace.create_context()


def _after_jax_import() -> None:
    _quietly(_create_context)
    while _waiting:
        _quietly(_waiting.pop(0))


def _quietly(run: Callable[[], None]) -> None:
    try:
        run()
    except Exception:  # a broken JAX install: the magics say so when used; never fail the user's import here
        pass
