"""The host values (NumPy arrays, Python scalars) a line of the user's passed, read from its frame.

The transfer guard's message gives a copied value's type (``f32[8,5]``), not its name:
the arguments on the line that made the copy are looked up in the frame - without
running user code - and typed as the guard writes them, so a copy can name its argument.
"""

from __future__ import annotations

import ast
import inspect

from jaxmagic.probes._support.host_arguments import host_type
from jaxmagic.report.source import source_line


def line_text(frame) -> str:
    return source_line(frame.f_code.co_filename, frame.f_lineno, "").code


def host_arguments(frame, code: str) -> list[tuple[str, str]]:
    """The arguments of the calls on one line that are host values (NumPy arrays, Python scalars) in
    ``frame``'s variables, as (expression, type). Names, attributes and subscripts with constant
    keys are looked up without running user code; literals are typed as written."""
    try:
        tree = ast.parse(code.strip().rstrip(":") or "0")
    except SyntaxError:
        try:
            tree = ast.parse("(" + code.strip() + ")")
        except SyntaxError:
            return []
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            value = _value_of(arg, frame)
            if value is _NOTHING:
                continue
            typed = host_type(value)
            if typed:
                found.append((ast.unparse(arg), typed))
    return found


_NOTHING = object()


def _value_of(node, frame):
    """The value of a name (``batch``), attribute (``data.x``) or constant subscript (``d['x']``) in
    ``frame``, read without running user code; a literal number as written; else ``_NOTHING``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name):
        for table in (frame.f_locals, frame.f_globals):
            try:
                if node.id in table:
                    return table[node.id]
            except Exception:
                return _NOTHING
        return _NOTHING
    if isinstance(node, ast.Attribute):
        base = _value_of(node.value, frame)
        if base is _NOTHING:
            return _NOTHING
        try:
            return inspect.getattr_static(base, node.attr)
        except AttributeError:
            return _NOTHING
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _value_of(node.value, frame)
        if isinstance(base, dict):
            return base.get(node.slice.value, _NOTHING)
        if isinstance(base, (list, tuple)) and isinstance(node.slice.value, int):
            try:
                return base[node.slice.value]
            except IndexError:
                return _NOTHING
    return _NOTHING


def argument_of(arguments: list[tuple[str, str]], value: str) -> tuple[str, list[str]]:
    """(the argument whose type is the transfer's, the arguments of that type when several have it);
    ("", []) when none has, or the transfer's type is not known."""
    if not value:
        return "", []
    matching = list(dict.fromkeys(expression for expression, typed in arguments if typed == value))
    if len(matching) == 1:
        return matching[0], []
    return "", matching
