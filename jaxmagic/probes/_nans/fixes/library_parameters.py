"""A library callable's parameters, read from its signature: what a NaN's fix or cause names (a layer's
``eps``, Optax's ``where=``, the default of the ``eps`` a library adds to a denominator). The callable is
found in the modules the user's program already imported: nothing is imported here."""

from __future__ import annotations

import inspect
import sys


def library_object(library: str, stop_at_class: bool) -> object | None:
    """The object a public dotted name (``optax.softmax_cross_entropy``, ``haiku.LayerNorm.__call__``)
    names, read from the modules already imported (nothing is imported); with ``stop_at_class``, the class
    of a method. None when not found."""
    parts = library.split(".")
    for end in range(len(parts) - 1, 0, -1):
        value: object = sys.modules.get(".".join(parts[:end]))
        if value is None:
            continue
        for name in parts[end:]:
            if stop_at_class and isinstance(value, type):
                break
            value = getattr(value, name, None)
        return value
    return None


def parameters_of(value: object) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(value).parameters) if callable(value) else {}
    except (TypeError, ValueError):
        return {}


def parameter_default(library: str, name: str) -> object | None:
    """The default of parameter ``name`` of the library callable ``library`` (``optax.scale_by_adam``'s
    ``eps``: 1e-08), or of the class whose method it is; None when it has no such parameter or default."""
    for stop_at_class in (False, True):
        parameter = parameters_of(library_object(library, stop_at_class)).get(name)
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            return parameter.default
    return None
