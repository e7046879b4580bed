"""Reading the bisected function's source: the lines that iterate an argument, read a name, draw new values."""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any

from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import is_user_file, source_line

_NONDETERMINISTIC = ("random", "time", "perf_counter", "monotonic", "datetime", "now", "urandom", "uuid")


def _source_tree(fn: Callable[..., Any]) -> tuple[ast.AST | None, str, int]:
    try:
        lines, start = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError, AttributeError):
        return None, "", 0
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None, "", 0
    return tree, filename, start - 1


def _line(filename: str, lineno: int, fn: Callable[..., Any]) -> SourceLine | None:
    if not is_user_file(filename):
        return None
    return source_line(filename, lineno, getattr(fn, "__name__", ""))


def _names_of(node: ast.expr) -> str:
    """``d`` for ``d``, ``d.values()``'s receiver; ``params['x']`` -> ``params``."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def iterating_lines(fn: Callable[..., Any], names: list[str]) -> list[SourceLine]:
    """Lines of ``fn``'s source that iterate one of ``names`` in its own order: ``.values()``, ``.items()``,
    ``.keys()``, ``for k in d``, ``list(d)``, ``iter(d)``, ``zip(d, ...)``, ``*d``."""
    tree, filename, offset = _source_tree(fn)
    if tree is None or not names:
        return []
    wanted = set(names)
    hits: list[int] = []

    def iterable(node: ast.expr) -> bool:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("values", "items", "keys")
        ):
            return _names_of(node.func.value) in wanted
        return isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)) and _names_of(node) in wanted

    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("values", "items", "keys")
        ):
            if _names_of(node.func.value) in wanted:
                hits.append(node.lineno)
        elif isinstance(node, (ast.For, ast.comprehension)) and iterable(node.iter):
            hits.append(getattr(node, "lineno", None) or node.iter.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("list", "tuple", "iter", "zip", "enumerate", "next")
            and any(iterable(arg) for arg in node.args)
        ):
            hits.append(node.lineno)
        elif isinstance(node, ast.Starred) and iterable(node.value):
            hits.append(node.lineno)
    lines = [_line(filename, offset + n, fn) for n in sorted(set(hits))]
    return [line for line in lines if line is not None]


def loop_holds(fn: Callable[..., Any], loop_line: int, body_line: int) -> bool:
    """True when a ``for`` statement on ``loop_line`` has ``body_line`` in its body (file line numbers)."""
    tree, _filename, offset = _source_tree(fn)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and node.lineno + offset == loop_line:
            return node.lineno + offset <= body_line <= (node.end_lineno or node.lineno) + offset
        if (
            isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp))
            and node.lineno + offset == loop_line
        ):
            return node.lineno + offset <= body_line <= (node.end_lineno or node.lineno) + offset
    return False


def _from_jax(fn: Callable[..., Any], name: str) -> bool:
    """True when ``name`` in ``fn`` is JAX's (``from jax import random``): deterministic given its key."""
    value = (getattr(fn, "__globals__", {}) or {}).get(name)
    closure = dict(
        zip(getattr(getattr(fn, "__code__", None), "co_freevars", ()), getattr(fn, "__closure__", None) or ())
    )
    if value is None and name in closure:
        try:
            value = closure[name].cell_contents
        except ValueError:
            value = None
    module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "") or ""
    return module.split(".")[0] in ("jax", "jaxlib")


def nondeterministic_lines(fn: Callable[..., Any]) -> list[SourceLine]:
    """Lines of ``fn``'s source that call something giving new values at each call (``np.random.*``,
    ``random.*``, ``time.time()``, ``datetime.now()``) or change state outside the function
    (``global``/``nonlocal`` names assigned, ``.append`` on a name that is not local)."""
    tree, filename, offset = _source_tree(fn)
    if tree is None:
        return []
    hits: list[int] = []
    function = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))), None
    )
    local_names = set()
    if function is not None and not isinstance(function, ast.Lambda):
        local_names = {a.arg for a in function.args.args + function.args.kwonlyargs}
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                local_names.add(node.id)
    outer = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            outer.update(node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            text = ast.unparse(node.func)
            parts = text.split(".")
            if parts[0] in ("jax", "jnp", "lax") or _from_jax(fn, parts[0]):
                continue
            if any(part in _NONDETERMINISTIC for part in parts):
                hits.append(node.lineno)
            elif isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "extend", "pop", "update"):
                owner = _names_of(node.func.value)
                if owner and owner not in local_names:
                    hits.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in outer for t in targets):
                hits.append(node.lineno)
    lines = [_line(filename, offset + n, fn) for n in sorted(set(hits))]
    return [line for line in lines if line is not None]


def reading_lines(fn: Callable[..., Any], name: str) -> list[SourceLine]:
    """Lines of ``fn``'s source that read the name ``name``."""
    tree, filename, offset = _source_tree(fn)
    if tree is None:
        return []
    hits = sorted(
        {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)}
    )
    lines = [_line(filename, offset + n, fn) for n in hits]
    return [line for line in lines if line is not None]


def outer_names_on(fn: Callable[..., Any], lineno: int) -> list[str]:
    """Names read on ``lineno`` of ``fn`` that are its globals or closed-over variables."""
    code = getattr(fn, "__code__", None)
    tree, _filename, offset = _source_tree(fn)
    if code is None or tree is None:
        return []
    outer = set(code.co_names) | set(code.co_freevars)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.lineno + offset == lineno
            and node.id in outer
            and node.id not in found
            and not callable((getattr(fn, "__globals__", {}) or {}).get(node.id))
            and not _is_module((getattr(fn, "__globals__", {}) or {}).get(node.id))
        ):
            found.append(node.id)
    return found


def names_on(fn: Callable[..., Any], lineno: int) -> list[str]:
    """Names read on ``lineno`` of ``fn`` (file line number)."""
    tree, _filename, offset = _source_tree(fn)
    if tree is None:
        return []
    return [
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.lineno + offset == lineno
    ]


def _is_module(value: object) -> bool:

    return isinstance(value, types.ModuleType)
