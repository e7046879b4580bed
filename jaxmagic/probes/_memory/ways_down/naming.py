"""The names a way down's code uses: the user's parameters, the arguments as the call passed them."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Sequence

import jax

from jaxmagic.probes._memory.program import CompiledCall


def argument_texts(call: str, count: int) -> list[str]:
    """The source of each positional argument of a call's text, when it has ``count`` of them."""
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return []
    if not isinstance(node, ast.Call) or node.keywords or len(node.args) != count:
        return []
    return [ast.unparse(a) for a in node.args]


def flat_names(call: CompiledCall) -> list[str]:
    """Each flat input's name as the user's call passes it (``pts``, ``params['w']``)."""
    parameters = parameter_names(call.jitted)
    leaves = jax.tree_util.tree_flatten_with_path((call.args, call.kwargs))[0]
    return [path_name(path, parameters) for path, _ in leaves]


def leading(leaf: object) -> int | None:
    shape = getattr(leaf, "shape", None)
    return int(shape[0]) if shape else None


def parameter_names(fn: Callable[..., object]) -> list[str]:
    inner = fn
    for _ in range(6):  # through jit and functools.wraps to the user's own function
        nxt = getattr(inner, "__wrapped__", None)
        if nxt is None:
            break
        inner = nxt
    try:
        return [
            p.name
            for p in inspect.signature(inner).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return []


def parameter(parameters: list[str], index: int) -> str:
    return parameters[index] if index < len(parameters) else f"argument {index}"


def path_name(path: Sequence[object], parameters: list[str]) -> str:
    if not path:
        return "argument"
    first, rest = path[0], path[1:]
    if getattr(first, "idx", None) == 0 and len(rest) >= 1:  # (args, kwargs)[0][i]: a positional argument
        position = rest[0]
        index = getattr(position, "idx", None)
        head = parameter(parameters, index) if isinstance(index, int) else "argument"
        return head + jax.tree_util.keystr(tuple(rest[1:]))
    if len(rest) >= 1:  # a keyword argument
        key = getattr(rest[0], "key", "keyword")
        return str(key) + jax.tree_util.keystr(tuple(rest[1:]))
    return "argument"
