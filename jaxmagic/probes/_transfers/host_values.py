"""The host values (NumPy arrays, Python scalars) a line of the user's passed, read from its frame.

The transfer guard's message gives a copied value's type (``f32[8,5]``), not its name:
the arguments on the line that made the copy are looked up in the frame - without
running user code - and typed as the guard writes them, so a copy can name its argument.
"""

from __future__ import annotations

import ast
from types import FrameType

from jaxmagic.probes._support.calls.host_arguments import host_type
from jaxmagic.probes._support.calls.line_values import NOTHING, parsed_line, value_of
from jaxmagic.usercode.source import source_line


def line_text(frame: FrameType) -> str:
    return source_line(frame.f_code.co_filename, frame.f_lineno, "").code


def host_arguments(frame: FrameType, code: str) -> list[tuple[str, str]]:
    """The arguments of the calls on one line that are host values (NumPy arrays, Python scalars) in
    ``frame``'s variables, as (expression, type). Names, attributes and subscripts with constant
    keys are looked up without running user code; literals are typed as written."""
    tree = parsed_line(code)
    if tree is None:
        return []
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            value = value_of(arg, frame)
            if value is NOTHING:
                continue
            typed = host_type(value)
            if typed:
                found.append((ast.unparse(arg), typed))
    return found


def argument_of(arguments: list[tuple[str, str]], value: str) -> tuple[str, list[str]]:
    """(the argument whose type is the transfer's, the arguments of that type when several have it);
    ("", []) when none has, or the transfer's type is not known."""
    if not value:
        return "", []
    matching = list(dict.fromkeys(expression for expression, typed in arguments if typed == value))
    if len(matching) == 1:
        return matching[0], []
    return "", matching
