"""Parse a call expression typed after a line magic, e.g. ``risky(x, i)``.

Line magics that take a call (``%jax_check``, and later ``%jax_stages``,
``%jax_hlo``) evaluate the callee and each argument in the user's namespace
here, so the messages for bad input are the same everywhere.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any


class CallExpressionError(ValueError):
    """The text is not a call we can evaluate; the message says why, in one sentence."""


@dataclasses.dataclass
class EvaluatedCall:
    text: str
    function: Any
    args: list[Any]
    kwargs: dict[str, Any]


def evaluate_call(text: str, namespace: dict) -> EvaluatedCall:
    """Evaluate ``f(a, b, k=c)`` in ``namespace`` without calling ``f``."""
    text = text.strip()
    if not text:
        raise CallExpressionError("expected a call expression such as f(x, y), got nothing")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        raise CallExpressionError(f"{text!r} is not valid Python ({error.msg})") from None
    node = tree.body
    if not isinstance(node, ast.Call):
        raise CallExpressionError(f"{text!r} is not a call; write the call to check, such as f(x, y)")

    def value_of(expr: ast.expr, what: str):
        source = ast.unparse(expr)
        try:
            return eval(compile(ast.Expression(body=expr), "<jaxmagic>", "eval"), namespace)
        except NameError as error:
            raise CallExpressionError(f"{what} {source!r} does not evaluate: {error}") from None
        except Exception as error:
            raise CallExpressionError(f"{what} {source!r} does not evaluate: {type(error).__name__}: {error}") from None

    function = value_of(node.func, "the function")
    if not callable(function):
        raise CallExpressionError(f"{ast.unparse(node.func)!r} is a {type(function).__name__}, not a function")
    args = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            args.extend(value_of(arg.value, "the argument"))
        else:
            args.append(value_of(arg, "the argument"))
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None:
            kwargs.update(value_of(kw.value, "the argument"))
        else:
            kwargs[kw.arg] = value_of(kw.value, f"the argument {kw.arg}=")
    return EvaluatedCall(text, function, args, kwargs)


def split_call_and_options(line: str, flags=frozenset({"-h", "--help"})) -> tuple[str, str]:
    """Separate ``risky(x, i) --errors index -o rep`` into the call and the options.

    Options may come before or after the call. A word starting with "-" is an
    option only at the top level (not inside brackets or quotes), so
    ``f(x, -1)`` stays whole. ``flags`` are the options that take no value;
    every other option takes the next word.
    """
    words = top_level_words(line)
    call_parts, option_parts = [], []
    expect_value = False
    for word in words:
        if expect_value:
            option_parts.append(word)
            expect_value = False
        elif word.startswith("-") and len(word) > 1 and (word[1].isalpha() or word[1] == "-"):
            option_parts.append(word)
            expect_value = "=" not in word and word not in flags
        else:
            call_parts.append(word)
    return " ".join(call_parts), " ".join(option_parts)


def top_level_words(line: str) -> list[str]:
    words, current, depth, quote = [], [], 0, ""
    for char in line:
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char in "([{":
            depth += 1
            current.append(char)
        elif char in ")]}":
            depth -= 1
            current.append(char)
        elif char.isspace() and depth == 0:
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        words.append("".join(current))
    return words


def split_scope_and_call(text: str) -> tuple[str | None, str]:
    """``"encoder/attn model(p, x)"`` -> ``("encoder/attn", "model(p, x)")``; a call alone -> ``(None, call)``.

    A scope is one word before the call: a bare name or path (``encoder``,
    ``encoder/attn``, even ``jit(f)/encoder``), or a quoted string for a scope
    name with spaces. The call is everything after it.
    """
    words = top_level_words(text.strip())
    if len(words) < 2:
        return None, text.strip()
    first = words[0]
    if first[:1] in "'\"":
        try:
            scope = ast.literal_eval(first)
        except (ValueError, SyntaxError):
            raise ValueError(f"the scope {first} is not a valid quoted string") from None
        return str(scope), " ".join(words[1:])
    try:
        node = ast.parse(first, mode="eval").body
    except SyntaxError:
        node = None
    if isinstance(node, ast.Call):
        raise ValueError(f"expected [SCOPE] EXPR, got two expressions: {first!r} and {' '.join(words[1:])!r}")
    return first, " ".join(words[1:])
