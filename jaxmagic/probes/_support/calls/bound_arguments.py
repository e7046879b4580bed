"""A call's arguments by the names the user's function gives them, ``*args`` spread as ``args[i]``."""

from __future__ import annotations

import inspect
from typing import Any


def by_parameter(
    signature: inspect.Signature, args: tuple[object, ...], kwargs: dict[str, object]
) -> dict[str, Any] | None:
    """Parameter name -> value given (``args[0]`` for an element of ``*args``, a ``**kwargs`` entry by its
    key), in the signature's order; None when the arguments do not fit the signature."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            out.update({f"{name}[{i}]": item for i, item in enumerate(value)})
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out
