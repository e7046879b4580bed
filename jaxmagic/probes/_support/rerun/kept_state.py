"""The user's objects as they were before jaxmagic ran the user's code again.

A probe that re-evaluates a call (tracing a failing call to find a NaN's producer, tracing a fix to try
it) runs the user's functions once more. Functional JAX code writes into nothing, but a library that
keeps state in objects does: ``nnx.jit`` writes its outputs back into every Module, Optimizer and
Variable the call reached. Under a probe's trace that write leaves tracers in the user's Module, or
fails half-way - Flax raises ``TraceContextError`` after it has cleared the Module, which then has no
attributes at all (seen with an ``nnx.Optimizer.update`` train step under ``%%jax_nans``).

``kept(roots)`` records the attributes (``__dict__`` and ``__slots__``) of the objects reachable from
the call - its arguments, the function's closure, the globals its code names (following the user's
own functions), a ``functools.partial``'s parts, a bound method's object, a wrapper's wrapped function
- and puts back every object whose attributes changed. It is shallow per object (a dict copy) and
bounded, so it costs well under a millisecond for a model of a few hundred objects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import types
from collections.abc import Iterable, Iterator

import jax
import numpy as np

from jaxmagic.usercode.source import is_user_file

_MAX_OBJECTS = 20_000
# attributes through which a library's wrapper of a function reaches the function it wraps
_WRAPPED = ("__wrapped__", "__func__", "__self__", "fun", "f", "fn", "func")
_SKIPPED = (str, bytes, int, float, complex, bool, type(None), type, types.ModuleType, np.ndarray, np.generic)


@dataclasses.dataclass
class _Attributes:
    holder: object
    mapping: dict[str, object] | None  # a copy of its __dict__
    slots: dict[str, object]  # slot name -> value, for the slots that were set


@dataclasses.dataclass
class KeptState:
    """What ``kept`` put back: the type names of the objects the re-evaluation had written into."""

    restored: list[str] = dataclasses.field(default_factory=list)

    @property
    def note(self) -> str:
        if not self.restored:
            return ""
        names = ", ".join(sorted(set(self.restored))[:4])
        return (
            f"Running your code again wrote into your objects ({names}: a library's jit wrapper writes its "
            "outputs back); they were put back as they were."
        )


@contextlib.contextmanager
def kept(*roots: object) -> Iterator[KeptState]:
    """Put back, on exit, the attributes of every object reachable from ``roots`` that changed."""
    state = KeptState()
    try:
        recorded = _recorded(roots)
    except Exception:  # an object whose attributes cannot be read: keep nothing rather than fail the probe
        recorded = []
    try:
        yield state
    finally:
        for attributes in recorded:
            if _changed(attributes):
                _put_back(attributes)
                state.restored.append(type(attributes.holder).__name__)


def _slot_names(cls: type) -> list[str]:
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [s for s in slots if s not in ("__dict__", "__weakref__")]
    return names


def _attributes_of(holder: object) -> _Attributes | None:
    try:
        mapping = object.__getattribute__(holder, "__dict__")
    except AttributeError:
        mapping = None
    if mapping is not None and not isinstance(mapping, dict):
        mapping = None  # a mappingproxy (a class) or something else: not ours to put back
    slots = {}
    for name in _slot_names(type(holder)):
        try:
            slots[name] = object.__getattribute__(holder, name)
        except AttributeError:
            continue
    if mapping is None and not slots:
        return None
    return _Attributes(holder, dict(mapping) if mapping is not None else None, slots)


def _changed(attributes: _Attributes) -> bool:
    holder = attributes.holder
    if attributes.mapping is not None:
        now = object.__getattribute__(holder, "__dict__")
        if now.keys() != attributes.mapping.keys() or any(now[k] is not v for k, v in attributes.mapping.items()):
            return True
    for name, value in attributes.slots.items():
        try:
            if object.__getattribute__(holder, name) is not value:
                return True
        except AttributeError:
            return True
    return False


def _put_back(attributes: _Attributes) -> None:
    holder = attributes.holder
    if attributes.mapping is not None:
        now = object.__getattribute__(holder, "__dict__")
        now.clear()
        now.update(attributes.mapping)
    for name, value in attributes.slots.items():
        object.__setattr__(holder, name, value)


def _recorded(roots: Iterable[object]) -> list[_Attributes]:
    seen: set[int] = set()
    recorded: list[_Attributes] = []
    pending = list(roots)
    while pending and len(seen) < _MAX_OBJECTS:
        value = pending.pop()
        if isinstance(value, (*_SKIPPED, jax.Array)) or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, (list, tuple, set, frozenset)):
            pending += list(value)
        elif isinstance(value, dict):
            pending += list(value.values())
        elif isinstance(value, types.FunctionType):
            pending += _reached_by_function(value)
        elif isinstance(value, functools.partial):
            pending += [value.func, *value.args, *value.keywords.values()]
        elif isinstance(value, types.MethodType):
            pending += [value.__func__, value.__self__]
        else:
            attributes = _attributes_of(value)
            if attributes is None:
                continue
            recorded.append(attributes)
            pending += list((attributes.mapping or {}).values()) + list(attributes.slots.values())
            pending += [getattr(value, name, None) for name in _WRAPPED if callable(value)]
    return recorded


def _reached_by_function(function: types.FunctionType) -> list[object]:
    """A function's closure and defaults; for the user's own functions also the globals its code names."""
    reached: list[object] = [cell.cell_contents for cell in (function.__closure__ or ()) if _filled(cell)]
    reached += list(function.__defaults__ or ()) + list((function.__kwdefaults__ or {}).values())
    reached += [getattr(function, name, None) for name in ("__wrapped__",)]
    code = function.__code__
    if is_user_file(code.co_filename):
        module_globals = function.__globals__
        reached += [module_globals[name] for name in _names_used(code) if name in module_globals]
    return reached


def _filled(cell: types.CellType) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # an empty cell: the variable is not bound yet
        return False
    return True


def _names_used(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # a nested function or lambda reads globals too
            names |= _names_used(const)
    return names
