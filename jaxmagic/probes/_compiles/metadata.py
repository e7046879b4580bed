"""The static fields of the pytrees passed to a jitted function: their metadata, field by field.

A pytree node's metadata (a ``register_dataclass`` meta field, an Equinox static field, a Flax
``struct.field(pytree_node=False)``) is part of jit's cache key and is compared with ``==``. A
new ``jax.jit`` wrapper, a lambda or an object without ``__eq__``/``__hash__`` kept there is a
new key at every construction, however alike it looks: the Equinox thread "Why is this function
recompiling?" (``self.forward = jax.jit(fk_fn)`` in a Module built again). JAX's explanation
says only "the pytree node metadata does not match" and prints the same text twice.

Strings, hashes and ids only are kept, read while the compilation happens: no value is held.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import types
from collections.abc import Callable
from typing import Any

import jax

MAX_NODES = 400  # pytree nodes looked at per argument
MAX_FIELDS = 64  # static fields kept per argument


@dataclasses.dataclass(frozen=True)
class MetaValue:
    """One static field of one pytree node of an argument, as text, hash and identity."""

    path: str  # "layer.act", "model.layers[1].forward"
    owner: str  # the node's class: "Layer"
    field: str  # "act"; "" when the metadata could not be matched to an attribute
    type_name: str  # "PjitFunction", "function", "int"
    text: str  # a short repr without addresses
    look: int  # hash of the whole repr without addresses
    code: str  # for a function (or a jit wrapper, a partial of one): "file:line name" of its code
    ident: int
    by_identity: bool  # compared by identity: functions, jit wrappers, objects without __eq__
    check: str = ""  # what was tried on the value: "checked: a copy of it compares unequal to it"


def _address_free(text: str) -> str:
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


DEFAULT_REPR = re.compile(r"<[\w.<>]+ object>")  # a local class: "<f.<locals>.Cfg object>"


def fields_text(value: Any, type_name: str) -> str:
    """``Cfg(lr=0.1)`` from an object's attributes (a class with __eq__/__hash__ over its fields and no
    __repr__); "" when it has none, many, or long ones. Attributes are read from ``__dict__`` only."""
    fields = getattr(value, "__dict__", None)
    if not isinstance(fields, dict) or not fields or len(fields) > 6:
        return ""
    parts = []
    for name, field in list(fields.items()):
        try:
            shown = _address_free(repr(field))
        except Exception:
            return ""
        parts.append(f"{name}={shown}")
    text = f"{type_name}({', '.join(parts)})"
    return text if len(text) <= 60 and "\n" not in text else ""


def _code_of(value: Any) -> str:
    seen = 0
    while seen < 6:
        seen += 1
        if isinstance(value, functools.partial):
            value = value.func
            continue
        wrapped = getattr(value, "__wrapped__", None)
        if wrapped is not None and wrapped is not value:
            value = wrapped
            continue
        break
    code = getattr(value, "__code__", None)
    if isinstance(code, types.CodeType):
        return f"{code.co_filename}:{code.co_firstlineno} {code.co_qualname}"
    if callable(value) and getattr(value, "__qualname__", None):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return ""


def _by_identity(value: Any) -> bool:
    if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)):
        return True
    cls = type(value)
    return getattr(cls, "__eq__", None) is object.__eq__


def identity_check(value: Any, by_identity: bool) -> str:
    """Try, on the value itself, that an equal-looking copy is a different cache key."""
    if not by_identity:
        return ""
    try:
        if isinstance(value, types.FunctionType):  # the same code made into a function again, as a loop does
            twin = types.FunctionType(
                value.__code__, value.__globals__, value.__name__, value.__defaults__, value.__closure__
            )
        else:
            twin = copy.copy(value)
    except Exception:
        return ""
    if twin is value:
        return ""  # functions copy to themselves: nothing to compare
    try:
        equal = bool(twin == value)
    except Exception:
        return ""
    if equal:
        return ""
    how = (
        "the same code made into a new function"
        if isinstance(value, types.FunctionType)
        else "a copy of it (copy.copy)"
    )
    return f"checked: {how} compares unequal to it, so a {type(value).__name__} built anew is a new cache key"


def _meta_items(aux: Any, depth: int = 0) -> list[Any]:
    """The values inside a node's metadata (tuples and lists opened, two levels deep)."""
    if isinstance(aux, (tuple, list)) and depth < 2:
        out = []
        for item in list(aux)[:MAX_FIELDS]:
            out += _meta_items(item, depth + 1)
        return out
    return [aux]


def _attributes(obj: Any) -> list[tuple[str, object]]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f.name, getattr(obj, f.name, None)) for f in dataclasses.fields(obj)]
    try:
        return list(vars(obj).items())
    except TypeError:
        return []


def pytree_metadata(name: str, value: Any) -> dict[str, MetaValue]:
    """The static fields of the user-defined pytree nodes in ``value`` (an argument called ``name``)."""
    found: dict[str, MetaValue] = {}
    stack = [(name, value)]
    nodes = 0
    while stack and nodes < MAX_NODES and len(found) < MAX_FIELDS:
        path, obj = stack.pop()
        nodes += 1
        try:
            treedef: Any = jax.tree_util.tree_structure(obj, is_leaf=_below(obj))
            kind, aux = treedef.node_data() or (None, None)
        except Exception:
            continue
        if kind is None:
            continue
        children = []
        try:
            children = jax.tree_util.tree_leaves(obj, is_leaf=_below(obj))
        except Exception:
            pass
        attributes = _attributes(obj) if kind not in (tuple, list, dict, type(None)) else []
        if attributes and aux is not None:
            for item in _meta_items(aux):
                if item is None or isinstance(item, (str, bool)) and not attributes:
                    continue
                field = next((n for n, v in attributes if v is item), "")
                if not field:
                    continue  # field names, counts: not a static value of the user's
                _add(found, f"{path}.{field}", kind.__name__, field, item)
        if isinstance(obj, dict):
            try:
                ordered = sorted(obj)  # the order jax.tree_util flattens a dict in
            except TypeError:
                ordered = []
            names = [f"{path}[{k!r}]" for k in ordered] if len(ordered) == len(children) else []
        elif isinstance(obj, (list, tuple)) and len(obj) == len(children):
            names = [f"{path}[{i}]" for i in range(len(children))]
        else:
            by_id = {id(v): n for n, v in attributes}
            names = [f"{path}.{by_id[id(c)]}" if id(c) in by_id else f"{path}/{i}" for i, c in enumerate(children)]
        stack += [(names[i] if i < len(names) else f"{path}/{i}", c) for i, c in enumerate(children)][::-1]
    return found


def _below(node: Any) -> Callable[[object], bool]:
    """The ``is_leaf`` that opens ``node`` one level only: everything under it is a leaf."""
    return lambda x: x is not node


def _add(found: dict[str, MetaValue], path: str, owner: str, field: str, item: Any) -> None:
    try:
        text = _address_free(repr(item))
    except Exception:
        text = f"<{type(item).__name__} object>"
    if DEFAULT_REPR.fullmatch(text):  # the object's own repr says nothing of the value: its fields do
        text = fields_text(item, type(item).__name__) or text
    look = hash(text)
    shown = text if len(text) <= 60 and "\n" not in text else f"<{type(item).__name__} object>"
    by_identity = _by_identity(item)
    found[path] = MetaValue(
        path,
        owner,
        field,
        type(item).__name__,
        shown,
        look,
        _code_of(item),
        id(item),
        by_identity,
        identity_check(item, by_identity),
    )


@dataclasses.dataclass
class MetaChange:
    path: str
    owner: str
    field: str
    type_name: str
    before: str
    now: str
    same_code: str  # "file:line name" when both are the same function's code
    check: str = ""
    identity: bool = False  # a new object, alike (same text, or a function of the same code), compared by identity


def metadata_changes(before: dict[str, MetaValue] | None, now: dict[str, MetaValue]) -> list[MetaChange]:
    """The static fields that differ from the last compilation: a new object that looks the same (or is a
    function with the same code), or a value that changed."""
    if not before:
        return []
    out = []
    for path, value in now.items():
        old = before.get(path)
        if old is None or old.ident == value.ident and old.look == value.look:
            continue
        if old.type_name != value.type_name:
            out.append(MetaChange(path, value.owner, value.field, value.type_name, old.text, value.text, ""))
            continue
        if (
            value.by_identity
            and old.ident != value.ident
            and (old.look == value.look or (value.code and value.code == old.code))
        ):
            out.append(
                MetaChange(
                    path,
                    value.owner,
                    value.field,
                    value.type_name,
                    old.text,
                    value.text,
                    value.code if value.code == old.code else "",
                    value.check,
                    identity=True,
                )
            )
        elif old.look != value.look:
            out.append(MetaChange(path, value.owner, value.field, value.type_name, old.text, value.text, ""))
    return out
