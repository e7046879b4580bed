"""Where the user last assigned a global: the top-level statement binding its name, read from the source.

An array a function closes over (``z = np.random.rand(32000)`` in one cell, ``x * z`` in a jitted function
of another) becomes a constant of the program; its allocation is recorded only while ``tracemalloc`` traces,
which it rarely did when the cell ran. The name is known (the function reads it), so the line is found in
the source: in a notebook, among the cells IPython keeps (``linecache``, labelled ``In [N]`` by the shell),
the latest executed one that binds the name at its top level (``=``, ``+=``, ``for``, ``with ... as``,
``import ... as``); in a module, its file's last top-level binding. A name bound in no source (by
``exec``, ``globals()[...]``) has no line, and none is guessed.
"""

from __future__ import annotations

import ast
import linecache
import re

from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import cell_label, is_user_file, running_shell, source_line

_CELL_NUMBER = re.compile(r"In \[(\d+)\]")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def last_assignment(name: str, module_globals: dict[str, object]) -> SourceLine | None:
    """The user's line that last bound the global ``name`` of ``module_globals`` (a notebook's namespace or
    a module's), or None when no source of the user's binds it."""
    shell = running_shell()
    if shell is not None and module_globals is getattr(shell, "user_ns", None):
        found: list[tuple[int, int, str]] = []
        for filename in list(linecache.cache):
            number = _CELL_NUMBER.fullmatch(cell_label(filename))
            if number is not None:
                found += [(int(number[1]), line, filename) for line in _bindings(filename, name)]
        if not found:
            return None
        _, line, cell = max(found)
        return source_line(cell, line, "<module>")
    module_file = module_globals.get("__file__")
    if not isinstance(module_file, str) or not is_user_file(module_file):
        return None
    lines = _bindings(module_file, name)
    return source_line(module_file, lines[-1], "<module>") if lines else None


def _bindings(filename: str, name: str) -> list[int]:
    """The lines of the top-level statements of a cell or file that bind ``name``, in order."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return []
    found: list[int] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, _SCOPES):
            continue  # a def's or class's own names are not the module's
        if name in _bound_by(node):
            found.append(node.lineno)  # type: ignore[attr-defined]
        for field in ("body", "orelse", "finalbody", "handlers"):
            pending += [child for child in getattr(node, field, []) or [] if isinstance(child, ast.AST)]
    return sorted(found)


def _bound_by(node: ast.AST) -> set[str]:
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    names: set[str] = set()
    for target in targets:
        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names
