"""Evaluate an expression typed after a line magic, e.g. ``params['w']`` or ``f(x)``.

``%jax_sharding`` takes either a value or a call of a jitted function; this
module says which, with the same one-sentence messages as ``_call_expr``.
"""

from __future__ import annotations

import ast
from typing import Any

from jaxmagic._jax import jit_internals
from jaxmagic.ipython.call_expression import CallExpressionError, parse_python, shown_error
from jaxmagic.report.wording import shown


def parse_expression(text: str) -> ast.expr:
    text = text.strip()
    if not text:
        raise CallExpressionError("expected an expression such as x or f(x), got nothing")
    return parse_python(text)


def evaluate_expression(text: str, namespace: dict[str, object]) -> Any:
    """The value of ``text`` in ``namespace``; CallExpressionError if it does not evaluate."""
    node = parse_expression(text)
    try:
        return eval(compile(ast.Expression(body=node), "<jaxmagic>", "eval"), namespace)
    except (RecursionError, MemoryError):
        raise CallExpressionError(f"{shown(text.strip())} is too deeply nested for Python to compile") from None
    except Exception as error:
        raise CallExpressionError(f"{shown(text.strip())} does not evaluate: {shown_error(error)}") from None


def callee_is_jitted(text: str, namespace: dict[str, object]) -> bool:
    """True when ``text`` is a call whose function is a ``jax.jit`` wrapper (has ``lower`` and ``trace``).

    Evaluates only the callee, never calls it; False when it does not evaluate.
    """
    node = parse_expression(text)
    if not isinstance(node, ast.Call):
        return False
    try:
        function = eval(compile(ast.Expression(body=node.func), "<jaxmagic>", "eval"), namespace)
    except Exception:
        return False
    return jit_internals.is_jitted(function)
