"""The failing line, parsed: what kind of statement, its condition, the calls it makes, and for an
``if`` or a ``while`` the statements around it that the fixes are written from."""

from __future__ import annotations

import ast
import dataclasses
import io
import linecache
import tokenize
from collections.abc import Callable
from typing import Any, Protocol


class Traced(Protocol):
    """A name on the line bound to a tracer (``explain.report.TracedName``)."""

    name: str
    aval: str
    weak_type: bool


# (the object a dotted name on the line stands for, the name of the module it was found in); None when unknown
Resolve = Callable[[str], tuple[Any, str] | None]


@dataclasses.dataclass(frozen=True)
class LineCode:
    """The failing line, parsed: what kind of statement, its condition, the calls it makes."""

    tree: ast.Module
    source: str  # the text that was parsed (``if x > 0: pass`` for ``if x > 0:``)
    statement: str  # "assert", "if", "while", "for" or "" for any other
    # an ``if`` that only chooses a value: (what receives it - "return" or a name -, value if true, if false)
    choice: tuple[str, str, str] | None = None
    # a ``while`` whose body updates one name: (the name, its new value)
    update: tuple[str, str] | None = None
    # an ``if`` whose body only raises: the text of the exception's message ('"..."' when it has none)
    raises: str | None = None

    @property
    def test(self) -> ast.expr | None:
        """The condition of an assert/if/while statement."""
        node = self.tree.body[0]
        return node.test if isinstance(node, (ast.Assert, ast.If, ast.While)) else None

    def calls(self) -> list[tuple[str, ast.Call]]:
        """(dotted name, call) for every call on the line whose function is a dotted name, outermost first."""
        found = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                name = dotted(node.func)
                if name:
                    found.append((name, node))
        return found

    def text(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ast.unparse(node)


def read_line(code: str, filename: str = "", lineno: int = 0) -> LineCode | None:
    """The line parsed as one statement; None when it is not one on its own (part of a longer one).
    With its file and line number, an ``if`` that only chooses a value is read with its branches."""
    source = _without_comment(code.strip())
    if source.startswith("elif "):
        source = source[2:]
    if source.endswith(":"):
        source += " pass"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    statement = {ast.Assert: "assert", ast.If: "if", ast.While: "while", ast.For: "for"}.get(type(node), "")
    choice = _if_choice(filename, lineno) if statement == "if" and filename else None
    update = _while_update(filename, lineno) if statement == "while" and filename else None
    raises = _if_raises(filename, lineno) if statement == "if" and filename else None
    return LineCode(tree, source, statement, choice, update, raises)


def _if_raises(filename: str, lineno: int) -> str | None:
    """The message of the ``raise`` that is the whole body of the ``if`` at ``lineno`` (a check of the
    inputs: ``if jnp.any(x < 0): raise ValueError("negative")``); None for any other ``if``."""
    found = _statement_at(filename, lineno, ast.If)
    if found is None:
        return None
    source, node, _ = found
    if len(node.body) != 1 or not isinstance(node.body[0], ast.Raise) or node.orelse:  # type: ignore[attr-defined]
        return None
    raised = node.body[0].exc  # type: ignore[attr-defined]
    if isinstance(raised, ast.Call) and raised.args:
        return ast.get_source_segment(source, raised.args[0]) or ast.unparse(raised.args[0])
    return '"..."'


def _statement_at(filename: str, lineno: int, kind: type[ast.stmt]) -> tuple[str, ast.stmt, ast.stmt | None] | None:
    """(the file's source, the ``kind`` statement starting at ``lineno``, the statement after it)."""
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for parent in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(parent, field, None)
            if not isinstance(block, list):
                continue
            for position, node in enumerate(block):
                if isinstance(node, kind) and node.lineno == lineno:
                    return source, node, block[position + 1] if position + 1 < len(block) else None
    return None


def _if_choice(filename: str, lineno: int) -> tuple[str, str, str] | None:
    """(receiver, value if true, value if false) of the ``if`` at ``lineno`` when each branch is one
    ``return v`` (or the ``return`` right after an ``if`` without ``else``) or one ``y = v`` to the same
    name: ``if x > limit: return limit`` / ``return x`` -> ("return", "limit", "x")."""
    found = _statement_at(filename, lineno, ast.If)
    if found is None:
        return None
    source, node, after = found
    assert isinstance(node, ast.If)
    return _branches(source, node, after)


def _while_update(filename: str, lineno: int) -> tuple[str, str] | None:
    """(the name, its new value) of a ``while`` at ``lineno`` whose body is one assignment to one name:
    ``while jnp.abs(delta) > tol: delta = delta / 2`` -> ("delta", "delta / 2")."""
    found = _statement_at(filename, lineno, ast.While)
    if found is None:
        return None
    source, node, _ = found
    assert isinstance(node, ast.While)
    if node.orelse or len(node.body) != 1:
        return None
    body = node.body[0]
    if isinstance(body, ast.Assign) and len(body.targets) == 1 and isinstance(body.targets[0], ast.Name):
        value = ast.get_source_segment(source, body.value)
        return (body.targets[0].id, value) if value else None
    if isinstance(body, ast.AugAssign) and isinstance(body.target, ast.Name):
        value = ast.get_source_segment(source, body.value)
        operator = _AUGMENTED.get(type(body.op))
        if not isinstance(body.value, (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)):
            value = f"({value})"  # x *= a + b is x * (a + b)
        return (body.target.id, f"{body.target.id} {operator} {value}") if value and operator else None
    return None


_AUGMENTED = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Pow: "**"}


def _branches(source: str, node: ast.If, after: ast.stmt | None) -> tuple[str, str, str] | None:
    def text(value: ast.expr) -> str:
        written = ast.get_source_segment(source, value) or ""
        # `return x, y` is a tuple: written inside a lambda or a call it needs its parentheses
        return f"({written})" if isinstance(value, ast.Tuple) and not written.startswith("(") else written

    def one(block: list[ast.stmt]) -> tuple[str, str] | None:
        if len(block) != 1:
            return None
        statement = block[0]
        if isinstance(statement, ast.Return) and statement.value is not None:
            return "return", text(statement.value)
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            return statement.targets[0].id, text(statement.value)
        return None

    true = one(node.body)
    false = one(node.orelse) if node.orelse else (one([after]) if after is not None else None)
    if true is None or false is None or true[0] != false[0] or not true[1] or not false[1]:
        return None
    if not node.orelse and true[0] != "return":
        return None  # `if c: y = a` then `y = b`: b overwrites, not an else
    return true[0], true[1], false[1]


def _without_comment(source: str) -> str:
    """The line without its trailing ``# comment`` (a ``#`` inside a string stays)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    return source[: comment.start[1]].rstrip() if comment is not None and comment.start[0] == 1 else source


def dotted(node: ast.AST) -> str:
    """ "np.linalg.norm" for that attribute chain of names; "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def uses(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` reads one of ``names``: a name (``n``), or a path into an argument as JAX names a
    traced leaf of it (``d['num']``, ``cfg.steps``), written the same way on the line."""
    return bool(traced_parts(node, names))


def traced_parts(node: ast.AST, names: set[str]) -> list[str]:
    """The parts of ``node`` that are one of ``names`` (a name, or a path such as ``d['num']``), in order."""
    paths = {name for name in names if not name.isidentifier()}
    found: list[str] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in names:
            found.append(n.id)
        elif paths and isinstance(n, (ast.Subscript, ast.Attribute)) and ast.unparse(n) in paths:
            found.append(ast.unparse(n))
    return found
