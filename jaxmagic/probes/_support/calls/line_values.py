"""Values a line of the user's code passed, read from its frame without running any of its code.

A report names a value by the expression the user wrote (``self.Ainv``, ``batch['x']``): the
line is parsed, and names, attributes (``inspect.getattr_static``: no property runs) and
subscripts with constant keys of dicts, lists and tuples are looked up in the frame.
"""

from __future__ import annotations

import ast
import inspect
from types import FrameType


def parsed_line(code: str) -> ast.AST | None:
    """One line of code as a syntax tree (a ``for``/``if`` header or a line inside brackets too); None if not Python."""
    try:
        return ast.parse(code.strip().rstrip(":") or "0")
    except SyntaxError:
        try:
            return ast.parse("(" + code.strip() + ")")
        except SyntaxError:
            return None


NOTHING = object()


def value_of(node: ast.expr, frame: FrameType) -> object:
    """The value of a name (``batch``), attribute (``data.x``) or constant subscript (``d['x']``) in
    ``frame``, read without running user code; a literal number as written; else ``NOTHING``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name):
        for table in (frame.f_locals, frame.f_globals):
            try:
                if node.id in table:
                    return table[node.id]
            except Exception:
                return NOTHING
        return NOTHING
    if isinstance(node, ast.Attribute):
        base = value_of(node.value, frame)
        if base is NOTHING:
            return NOTHING
        try:
            return inspect.getattr_static(base, node.attr)
        except AttributeError:
            return NOTHING
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = value_of(node.value, frame)
        if isinstance(base, dict):
            return base.get(node.slice.value, NOTHING)
        if isinstance(base, (list, tuple)) and isinstance(node.slice.value, int):
            try:
                return base[node.slice.value]
            except IndexError:
                return NOTHING
    return NOTHING
