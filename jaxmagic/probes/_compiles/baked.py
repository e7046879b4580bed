"""The Python values a jitted function carries with it: its closure's variables, a ``functools.partial``'s
bound arguments and the plain globals it reads. jit traces them as constants of the program, so a function built anew around another value
(``make_step(lr)`` returning ``jax.jit(lambda p, g: p - lr * g)``, ``jax.jit(functools.partial(update, lr=lr))``)
compiles once per value (optax#577: the learning rate embedded in the HLO; optax#197: a closure per optimizer).

Strings only: no value is kept, so a report holds nothing alive.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

MAX_VALUES = 32  # values read from one function (closure cells and partial arguments, nested included)
_TEXT_CHARS = 40
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


@dataclasses.dataclass(frozen=True)
class BakedValue:
    """One value a function carries: its text when it compares by value (a Python number, a string)."""

    text: str  # "0.001"; "<ndarray object>" for what is not compared
    type_name: str  # "float"
    by_value: bool  # a plain Python value (or a tuple of them): two builds with the same text bake the same
    held_by: str = ""  # "closed over by `<lambda>`", "bound by functools.partial to `update`"


def baked_values(fun: Any, is_user: Callable[[str], bool]) -> dict[str, BakedValue] | None:
    """The values ``fun`` carries into its trace (closure cells, partial arguments, plain globals it reads),
    by the name the user wrote (``lr``, ``loss.scale`` for a
    value of a function it closes over); None when ``fun`` is no function or partial of the user's, whose
    closure could be read."""
    found: dict[str, BakedValue] = {}
    readable = _visit(fun, "", 0, found, is_user)
    return found if readable else None


def _visit(fun: Any, prefix: str, depth: int, found: dict[str, BakedValue], is_user: Callable[[str], bool]) -> bool:
    readable = False
    for _ in range(8):  # through partials and functools.wraps chains (jax.grad(f) keeps f as __wrapped__)
        if isinstance(fun, functools.partial):
            readable = True
            names = _parameter_names(fun.func)
            held_by = f"bound by functools.partial to `{getattr(fun.func, '__name__', type(fun.func).__name__)}`"
            for i, value in enumerate(fun.args):
                _add(found, prefix + (names[i] if i < len(names) else f"args[{i}]"), value, held_by)
            for name, value in (fun.keywords or {}).items():
                _add(found, prefix + name, value, held_by)
            fun = fun.func
            continue
        inner = getattr(fun, "__wrapped__", None)
        if inner is None or inner is fun:
            break
        fun = inner
    code = getattr(fun, "__code__", None)
    if not isinstance(code, types.CodeType) or not is_user(code.co_filename):
        return readable
    for name, cell in zip(code.co_freevars, getattr(fun, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
        if isinstance(value, (types.FunctionType, functools.partial)):
            if depth < 1:  # a helper it closes over may carry the value (loss = make_loss(scale))
                _visit(value, f"{prefix}{name}.", depth + 1, found, is_user)
            continue
        if callable(value) or isinstance(value, types.ModuleType):
            continue  # a class, a module, a jitted function: not a value of the program
        _add(found, prefix + name, value, f"closed over by `{code.co_name}`")
    # A global it reads is baked the same way: a lambda made in a notebook's loop reads the loop's variable
    # as a global (`for lr in lrs: jax.jit(lambda p, g: p - lr * g)`), not through a closure
    module = getattr(fun, "__globals__", None) or {}
    for name in code.co_names:
        if not name.startswith("__") and name in module and name not in found and _plain(module[name]):
            _add(found, prefix + name, module[name], f"a global read by `{code.co_name}`")
    return True


def _add(found: dict[str, BakedValue], name: str, value: Any, held_by: str) -> None:
    if len(found) >= MAX_VALUES or callable(value):
        return
    by_value = _plain(value)
    text = _text(value) if by_value else f"<{type(value).__name__} object>"
    found[name] = BakedValue(text, type(value).__name__, by_value, held_by)


def _plain(value: Any, depth: int = 0) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "shape", None) == ():
        return True  # a NumPy scalar (np.float32(0.1)): a host value, read without touching a device
    if isinstance(value, tuple) and depth < 2 and len(value) <= 8:
        return all(_plain(item, depth + 1) for item in value)
    return False


def _text(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 3] + "..."


def _parameter_names(fun: Any) -> list[str]:
    try:
        return list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        return []


def baked_changes(
    before: dict[str, BakedValue] | None, now: dict[str, BakedValue] | None
) -> list[tuple[str, str, str]]:
    """(name, before, now) of the plain values that differ between two builds of a function."""
    if not before or not now:
        return []
    return [
        (name, before[name].text, value.text)
        for name, value in now.items()
        if name in before and value.by_value and before[name].by_value and value.text != before[name].text
    ]
