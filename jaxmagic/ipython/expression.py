"""Evaluate an expression typed after a line magic, e.g. ``params['w']`` or ``f(x)``.

``%jax_sharding`` takes either a value or a call of a jitted function; this
module says which, with the same one-sentence messages as ``_call_expr``.
"""

from __future__ import annotations

import ast
from typing import Any

from jaxmagic._jax import compat
from jaxmagic.ipython.call_expression import CallExpressionError


def parse_expression(text: str) -> ast.expr:
    text = text.strip()
    if not text:
        raise CallExpressionError("expected an expression such as x or f(x), got nothing")
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError as error:
        raise CallExpressionError(f"{text!r} is not valid Python ({error.msg})") from None


def evaluate_expression(text: str, namespace: dict) -> Any:
    """The value of ``text`` in ``namespace``; CallExpressionError if it does not evaluate."""
    node = parse_expression(text)
    try:
        return eval(compile(ast.Expression(body=node), "<jaxmagic>", "eval"), namespace)
    except Exception as error:
        raise CallExpressionError(f"{text.strip()!r} does not evaluate: {type(error).__name__}: {error}") from None


def callee_is_jitted(text: str, namespace: dict) -> bool:
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
    return compat.is_jitted(function)
