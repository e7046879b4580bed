"""Tracers a library keeps in its own record of the user's object, named as the attribute the user wrote.

``nnx.jit`` (and Flax NNX's other transformations) runs the user's function on a copy of
each module it is given and hands the copy back as a graph definition (``GraphDef``):
its nodes in order, and per node its attributes by name. An attribute that is not an
array or a ``Variable`` - ``self.last_hidden = h`` with ``h`` a tracer - is kept in the
definition itself as a ``Static`` value, so a tracer stored that way is held by the
library's record, reached from no variable of the user's (JAX's leak checker names it
``<FTPyTree>._tree[2][1]``) until the library copies it back onto the user's module,
which the leak check stops it from doing. The record names the attribute, and its
first node the type of the module it stands for: the tracer is ``model.last_hidden``,
with ``model`` the user's variable holding a module of that type.

The record is found by its id in JAX's reference chain (one pass over the objects the
garbage collector tracks, only when the leak was found nowhere else); the definition is
read through its public fields (``nodes``, ``attributes``, ``num_attributes``,
``type``, ``value``), by shape, without importing the library.
"""

from __future__ import annotations

import gc
import itertools
import re
from collections.abc import Iterable
from typing import Any

from jaxmagic.probes._leaks.tracers.text import LeakBlock
from jaxmagic.probes._live.holders.roots import KIND_NAME
from jaxmagic.probes._live.holders.search import Held, find_held

_MAX_NODES = 100_000  # a definition larger than this is not read
_PYTHON_TYPES = frozenset({"list", "tuple", "dict", "set", "frozenset", "cell", "function", "method", "module", "type"})


def held_in_library_records(
    blocks: Iterable[LeakBlock], roots: list[tuple[str, Any, str]], called_with: Iterable[str] = ()
) -> tuple[dict[int, list[Held]], dict[int, Any]]:
    """For leaked tracers kept in a library's record of a user's object: ``({tracer id: [Held]},
    {tracer id: tracer})``, the paths as the user reaches them (``model.last_hidden``).
    ``called_with``: the names on the user's lines that made the call; of several objects of the record's
    type, those reached from one of these names are the one the library was given."""
    blocks = [b for b in blocks if b.tracer_id and b.chain]
    if not blocks or not roots:
        return {}, {}
    tracer_ids = {b.tracer_id for b in blocks}
    # A record is an object of a library's class: Python's own containers, cells and functions are not
    # looked for (when the chain holds nothing else, the heap is not searched at all).
    chain_ids = {link.child_id for b in blocks for link in b.chain if link.child_type not in _PYTHON_TYPES} - tracer_ids
    records = [r for r in _objects_with_ids(chain_ids) if _is_graph_definition(r)]
    found: dict[int, list[Held]] = {}
    tracers: dict[int, Any] = {}
    for record in records:
        statics = _static_attributes(record)
        if not statics:
            continue

        def is_tracer(value: Any) -> bool:
            if id(value) in tracer_ids:
                tracers[id(value)] = value
                return True
            return False

        inside = find_held([(_path_text(path), value, KIND_NAME) for path, value in statics], is_tracer, max_depth=4)
        if not inside:
            continue
        owners = _owner_names(record.nodes[0].type, roots, set(called_with))
        for tracer_id, places in inside.items():
            paths = [Held(owner.path + place.path, owner.depth + place.depth) for owner in owners for place in places]
            if paths:
                found.setdefault(tracer_id, sorted(paths, key=lambda h: h.depth)[:3])
    del records
    return found, {k: v for k, v in tracers.items() if k in found}


def _objects_with_ids(ids: set[int]) -> list[Any]:
    if not ids:
        return []
    everything = gc.get_objects()
    try:
        return list(itertools.compress(everything, map(ids.__contains__, map(id, everything))))
    finally:
        del everything


def _is_graph_definition(record: Any) -> bool:
    nodes = getattr(record, "nodes", None)
    attributes = getattr(record, "attributes", None)
    return (
        type(nodes) is list
        and type(attributes) is list
        and bool(nodes)
        and len(nodes) <= _MAX_NODES
        and hasattr(nodes[0], "num_attributes")
        and isinstance(getattr(nodes[0], "type", None), type)
    )


def _static_attributes(record: Any) -> list[tuple[tuple[object, ...], Any]]:
    """``[((attribute, ...), value)]``: the values kept in the definition, by their path from its first node.

    The attributes are in the order the nodes were visited, depth first: a node takes the next
    ``num_attributes`` of them; an attribute that is a node of its own (``NodeAttr``) takes the
    next node; a ``Static`` one holds its value; any other (an array's place) holds nothing here.
    """
    nodes, attributes = iter(record.nodes), iter(record.attributes)
    statics: list[tuple[tuple[object, ...], Any]] = []

    def visit(path: tuple[object, ...], depth: int) -> None:
        node = next(nodes)
        count = getattr(node, "num_attributes", None)
        if not isinstance(count, int) or depth > 64:
            return  # a Variable, a reference to a node seen before, a mutable array: no attributes here
        for _ in range(count):
            key, attribute = next(attributes)
            kind = type(attribute).__name__
            if kind == "NodeAttr":
                visit((*path, key), depth + 1)
            elif kind == "Static" and hasattr(attribute, "value"):
                statics.append(((*path, key), attribute.value))

    try:
        visit((), 0)
    except (StopIteration, TypeError, ValueError):
        return []  # not the shape described above: nothing is claimed
    return statics


def _path_text(path: tuple[object, ...]) -> str:
    return "".join(f".{key}" if isinstance(key, str) and key.isidentifier() else f"[{key!r}]" for key in path)


def _owner_names(owner_type: type, roots: list[tuple[str, Any, str]], called_with: set[str]) -> list[Held]:
    """The user's names for objects of ``owner_type`` (the module the record stands for), shortest first;
    only those reached from a name on the call's lines when some are (two modules of one class, one of them
    given to the call: the other holds nothing)."""
    places = find_held(roots, lambda value: type(value) is owner_type, max_depth=3)
    names = sorted((held for paths in places.values() for held in paths), key=lambda h: h.depth)
    given = [held for held in names if _root_name(held.path) in called_with]
    return (given or names)[:3]


def _root_name(path: str) -> str:
    """The variable a path starts from: ``student`` of ``student.last_hidden``."""
    match = re.match(r"\w+", path)
    return match[0] if match else ""
