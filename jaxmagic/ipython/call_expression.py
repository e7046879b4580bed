"""Parse a call expression typed after a line magic, e.g. ``risky(x, i)``.

Line magics that take a call (``%jax_check``, and later ``%jax_stages``,
``%jax_hlo``) evaluate the callee and each argument in the user's namespace
here, so the messages for bad input are the same everywhere.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Collection
from typing import Any

from jaxmagic.report.wording import error_line, shown


class CallExpressionError(ValueError):
    """The text is not a call we can evaluate; the message says why, in one sentence."""


@dataclasses.dataclass
class EvaluatedCall:
    text: str
    function: Any
    args: list[Any]
    kwargs: dict[str, Any]


def parse_python(text: str, what: str = "expression") -> ast.expr:
    """The expression ``text`` as an AST; CallExpressionError (one sentence) when it is not one."""
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError as error:
        raise CallExpressionError(f"{shown(text)} is not valid Python ({error.msg})") from None
    except (RecursionError, MemoryError):  # thousands of terms or brackets: Python's parser gives up
        raise CallExpressionError(
            f"the {what} ({len(text):,} characters) is too deeply nested for Python to parse; "
            "compute the value in a cell first and pass its name"
        ) from None


def evaluate_node(expr: ast.expr, namespace: dict[str, object], what: str) -> Any:
    """The value of one parsed expression in ``namespace``; CallExpressionError naming ``what`` when it fails."""
    source = _source_of(expr)
    try:
        return eval(compile(ast.Expression(body=expr), "<jaxmagic>", "eval"), namespace)
    except (RecursionError, MemoryError):
        raise CallExpressionError(
            f"{what} {source} is too deeply nested for Python to compile; compute it in a cell first"
        ) from None
    except Exception as error:
        raise CallExpressionError(f"{what} {source} does not evaluate: {shown_error(error)}") from None


def _source_of(expr: ast.expr) -> str:
    try:
        return shown(ast.unparse(expr))
    except (RecursionError, ValueError):
        return "(an expression)"


def shown_error(error: BaseException) -> str:
    """``NameError: name 'y' is not defined``, cut to a readable length; never raises."""
    return shown(error_line(error), limit=160, quoted=False)


def evaluate_call(text: str, namespace: dict[str, object]) -> EvaluatedCall:
    """Evaluate ``f(a, b, k=c)`` in ``namespace`` without calling ``f``."""
    text = text.strip()
    if not text:
        raise CallExpressionError("expected a call expression such as f(x, y), got nothing")
    node = parse_python(text, "call")
    if not isinstance(node, ast.Call):
        raise CallExpressionError(f"{shown(text)} is not a call; write a call such as f(x, y)")
    function = evaluate_node(node.func, namespace, "the function")
    if not callable(function):
        raise CallExpressionError(f"{_source_of(node.func)} is a {type(function).__name__}, not a function")
    if inspect.isgeneratorfunction(function) or inspect.iscoroutinefunction(function):
        kind = "generator" if inspect.isgeneratorfunction(function) else "coroutine (async def)"
        raise CallExpressionError(
            f"{_source_of(node.func)} is a {kind} function: calling it runs none of its body, so JAX has "
            "nothing to trace; call a function that returns arrays"
        )
    args = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            value = evaluate_node(arg.value, namespace, "the argument")
            try:
                args.extend(value)
            except TypeError:
                raise CallExpressionError(
                    f"*{_source_of(arg.value)} needs an iterable (a list or tuple), got a {type(value).__name__}"
                ) from None
        else:
            args.append(evaluate_node(arg, namespace, "the argument"))
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None:
            value = evaluate_node(kw.value, namespace, "the argument")
            try:
                kwargs.update(value)
            except (TypeError, ValueError):
                raise CallExpressionError(
                    f"**{_source_of(kw.value)} needs a mapping (a dict), got a {type(value).__name__}"
                ) from None
            if not all(isinstance(key, str) for key in kwargs):
                raise CallExpressionError(f"**{_source_of(kw.value)} needs string keys (argument names)")
        else:
            kwargs[kw.arg] = evaluate_node(kw.value, namespace, f"the argument {kw.arg}=")
    return EvaluatedCall(text, function, args, kwargs)


def split_call_and_options(line: str, flags: Collection[str] = frozenset({"-h", "--help"})) -> tuple[str, str]:
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
    if len(words) < 2 or _is_one_expression(text):  # `xs + 1` is one expression, not a scope and `+ 1`
        return None, text.strip()
    first = words[0]
    if first[:1] in "'\"":
        try:
            scope = ast.literal_eval(first)
        except (ValueError, SyntaxError):
            raise ValueError(f"the scope {shown(first, quoted=False)} is not a valid quoted string") from None
        return str(scope), " ".join(words[1:])
    try:
        node = ast.parse(first, mode="eval").body
    except SyntaxError:
        node = None
    if isinstance(node, ast.Call):
        raise ValueError(f"expected [SCOPE] EXPR, got two expressions: {shown(first)} and {shown(' '.join(words[1:]))}")
    return first, " ".join(words[1:])


def _is_one_expression(text: str) -> bool:
    try:
        ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return False
    return True
