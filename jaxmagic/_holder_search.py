"""Who holds an object: the names that reach it from a namespace, a few levels deep.

``find_holders`` walks outward from *roots* (the user's variables, IPython's
output cache, the frames of the last traceback) breadth-first, into list and
tuple elements, dict values, object attributes and closure cells, and records
for each target object id the paths that reach it: ``debug_cache[3]``,
``hist['acts'][0]``, ``trainer.history[2]``, ``Out[12]``.

It costs time in proportion to the number of objects within reach (each
container is visited once, whatever the number of targets): never the
namespace size times the number of arrays. It holds references to nothing
after it returns: results are ids, strings and numbers.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import sys
import types
from typing import Any, Iterable

# Kinds of holder, in order of preference: a user-visible name explains an
# array better than IPython's cache or a traceback does.
KIND_NAME = "name"            # reached from a variable of the user's namespace
KIND_OUTPUT = "output"        # IPython's output cache: Out[n], _, __, ___
KIND_TRACEBACK = "traceback"  # the frames of the last error (sys.last_traceback)
KIND_ORDER = {KIND_NAME: 0, KIND_OUTPUT: 1, KIND_TRACEBACK: 2}

# Names IPython (and Python) put into a namespace that are not the user's variables.
_IPYTHON_NAMES = {"In", "Out", "_oh", "_ih", "_dh", "_i", "_ii", "_iii", "exit", "quit", "get_ipython",
                  "_", "__", "___"}
_OUTPUT_ALIASES = ("_", "__", "___")

_LEAF_TYPES = (str, bytes, bytearray, int, float, complex, bool, type(None), range, slice, type,
               types.ModuleType, types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodType,
               types.CodeType, types.FrameType, types.TracebackType, memoryview)


@dataclasses.dataclass
class HolderSearch:
    """What ``find_holders`` found: per target id its best holder kind; per group the paths to them."""

    best_kind: dict[int, str]                      # target id -> KIND_* of its best holder
    runs: dict[tuple[int, str, str], list[int]]    # (group, kind, container) -> [min, max, count] of int indices
    group_labels: dict[int, list[tuple[str, str]]]  # group -> [(kind, path)] of other holders, first few
    label_counts: dict[int, int] = dataclasses.field(default_factory=dict)  # group -> all such paths found
    kind_counts: dict[tuple[int, str], int] = dataclasses.field(default_factory=dict)  # (group, best kind) -> targets
    visited: int = 0                               # containers and values looked at
    truncated: bool = False                        # the budget ran out before the search was complete


def namespace_roots(namespace: dict | None) -> list[tuple[str, Any, str]]:
    """The roots to search from in a (possibly IPython) namespace: (label, object, kind).

    User variables come first; IPython's output cache (``Out[n]``, ``_``) is a
    root of its own kind, and its aliases (``_12``, ``_oh``) are skipped so an
    array in it is named once, the way the user sees it.
    """
    if not namespace:
        return []
    roots = []
    for name, value in list(namespace.items()):
        if name.startswith("__") and name.endswith("__"):
            continue
        if name in _IPYTHON_NAMES or _is_history_alias(name) or value is namespace:
            continue
        roots.append((name, value, KIND_NAME))
    out = namespace.get("Out")
    outputs = set()
    if isinstance(out, dict):
        for number, value in list(out.items()):
            roots.append((f"Out[{number}]", value, KIND_OUTPUT))
            outputs.add(id(value))
    for alias in _OUTPUT_ALIASES:
        value = namespace.get(alias)
        if value is None or isinstance(value, str):
            continue  # IPython's empty default
        # IPython stops updating _ once the user assigns it (for _ in range(10): ...): then
        # it is an ordinary variable.
        roots.append((alias, value, KIND_OUTPUT if id(value) in outputs or not isinstance(out, dict) else KIND_NAME))
    return roots


def _is_history_alias(name: str) -> bool:
    # _12 (output 12) and _i12 (input 12)
    return name.startswith("_") and (name[1:].isdigit() or (name.startswith("_i") and name[2:].isdigit()))


def traceback_roots() -> list[tuple[str, Any, str]]:
    """Local variables of the frames that kept tracebacks hold: the last error's, and the one
    IPython's traceback printer keeps after showing it (``sys.last_traceback`` may have moved on
    to a later error, e.g. a UsageError, while IPython still holds the earlier frames)."""
    tracebacks = [getattr(sys, "last_traceback", None)]
    last = getattr(sys, "last_exc", None)
    tracebacks.append(getattr(last, "__traceback__", None))
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    printer = getattr(shell, "InteractiveTB", None)
    tracebacks.append(getattr(printer, "tb", None))
    roots = []
    seen_frames: set[int] = set()
    for tb in tracebacks:
        while isinstance(tb, types.TracebackType):
            frame = tb.tb_frame
            tb = tb.tb_next
            if frame.f_code.co_name == "<module>" or id(frame) in seen_frames:
                continue  # a cell's own frame: its locals are the namespace, already searched
            seen_frames.add(id(frame))
            try:
                local_items = list(frame.f_locals.items())
            except Exception:
                continue
            for name, value in local_items:
                roots.append((f"traceback: {frame.f_code.co_name}() {name}", value, KIND_TRACEBACK))
    return roots


def find_holders(group_of: dict[int, int], roots: Iterable[tuple[str, Any, str]], *, max_depth: int = 3,
                 labels_per_group: int = 12, budget: int = 5_000_000) -> HolderSearch:
    """Search from ``roots`` for the objects whose ids are keys of ``group_of``.

    ``group_of`` maps each target id to a group number (the caller's grouping
    of arrays). Results are kept per target (the best kind of holder) and per
    group (the paths, with list indices merged into runs such as
    ``debug_cache[0..9]``). ``max_depth`` is how many steps below a root are
    followed (3 reaches ``trainer.history[0]`` and ``hist['acts'][3]``).
    ``budget`` bounds the number of values looked at.
    """
    result = HolderSearch(best_kind={}, runs={}, group_labels={})
    best_kind, runs, group_labels = result.best_kind, result.runs, result.group_labels
    group_get = group_of.get
    visited_containers: set[int] = set()
    count = 0

    kind_counts = result.kind_counts

    def mark(target: int, group: int, kind: str) -> None:
        current = best_kind.get(target)
        if current is None:
            best_kind[target] = kind
            kind_counts[(group, kind)] = kind_counts.get((group, kind), 0) + 1
        elif KIND_ORDER[kind] < KIND_ORDER[current]:
            best_kind[target] = kind
            kind_counts[(group, current)] -= 1
            kind_counts[(group, kind)] = kind_counts.get((group, kind), 0) + 1

    label_counts = result.label_counts

    def labelled(group: int, kind: str, path: str) -> None:
        label_counts[group] = label_counts.get(group, 0) + 1
        listed = group_labels.setdefault(group, [])
        if len(listed) < labels_per_group:
            listed.append((kind, path))

    def indexed_hits(indices, targets: list[int], groups: list[int], kind: str, container: str) -> None:
        # The elements of one list/tuple that are targets, in index order.
        nonlocal best_kind
        if groups.count(groups[0]) == len(groups) and best_kind.keys().isdisjoint(targets):
            # One group, none seen before (a list of like arrays): the run and the counts at once.
            group = groups[0]
            if best_kind:
                best_kind.update(zip(targets, itertools.repeat(kind)))
            else:  # the first hits: the dict itself, not a copy
                best_kind = result.best_kind = dict.fromkeys(targets, kind)
            kind_counts[(group, kind)] = kind_counts.get((group, kind), 0) + len(targets)
            run = runs.get((group, kind, container))
            if run is None:
                runs[(group, kind, container)] = [indices[0], indices[-1], len(indices)]
            else:
                run[0], run[1], run[2] = min(run[0], indices[0]), max(run[1], indices[-1]), run[2] + len(indices)
            return
        for index, target, group in zip(indices, targets, groups):
            mark(target, group, kind)
            run = runs.get((group, kind, container))
            if run is None:
                runs[(group, kind, container)] = [index, index, 1]
            else:
                run[0], run[1], run[2] = min(run[0], index), max(run[1], index), run[2] + 1

    frontier: list[tuple[str, Any, str]] = []
    root_hits: list[tuple[int, int, str, str]] = []
    for label, value, kind in roots:
        count += 1
        group = group_get(id(value))
        if group is not None:
            root_hits.append((id(value), group, kind, label))
        elif max_depth > 0 and _descendable(value):
            frontier.append((label, value, kind))

    depth = 0
    while frontier and depth < max_depth:
        depth += 1
        following: list[tuple[str, Any, str]] = []
        go_deeper = depth < max_depth
        for label, container, kind in frontier:
            if id(container) in visited_containers:
                continue
            visited_containers.add(id(container))
            if type(container) is list or type(container) is tuple:
                # The common case, kept tight: the lookups run as C loops (map), and no text is
                # made for elements that are not hits.
                ids = list(map(id, container))
                groups = list(map(group_get, ids))
                count += len(ids)
                if None not in groups:  # every element is a target: a list of arrays
                    if groups:
                        indexed_hits(range(len(ids)), ids, groups, kind, label)
                else:
                    indices = [i for i, g in enumerate(groups) if g is not None]
                    if indices:
                        indexed_hits(indices, [ids[i] for i in indices], [groups[i] for i in indices], kind, label)
                if go_deeper and None in groups:
                    for index, (child, group) in enumerate(zip(container, groups)):
                        if group is None and _descendable(child):
                            following.append((f"{label}[{index}]", child, kind))
            else:
                for key, index, child in _children(container):
                    count += 1
                    group = group_get(id(child))
                    if group is not None:
                        if index is not None:
                            indexed_hits([index], [id(child)], [group], kind, label)
                        else:
                            mark(id(child), group, kind)
                            labelled(group, kind, label + key)
                    elif go_deeper and _descendable(child):
                        following.append((label + key, child, kind))
            if count > budget:
                result.truncated = True
                following = []
                break
        frontier = following
    # Arrays bound to names directly are recorded last, so that the bulk of a big list lands in
    # an empty dict (no copy); the order does not change the result.
    for target, group, kind, label in root_hits:  # mark() and labelled(), inlined: one per name
        current = best_kind.get(target)
        if current is None or KIND_ORDER[kind] < KIND_ORDER[current]:
            best_kind[target] = kind
            if current is not None:
                kind_counts[(group, current)] -= 1
            kind_counts[(group, kind)] = kind_counts.get((group, kind), 0) + 1
        label_counts[group] = label_counts.get(group, 0) + 1
        listed = group_labels.get(group)
        if listed is None:
            group_labels[group] = [(kind, label)]
        elif len(listed) < labels_per_group:
            listed.append((kind, label))
    result.visited = count
    return result


def _descendable(value: Any) -> bool:
    if isinstance(value, _LEAF_TYPES):
        return False
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return bool(value)
    if inspect.isfunction(value):
        return bool(value.__closure__)
    module = type(value).__module__ or ""
    if module.startswith(("numpy", "IPython", "ipykernel", "jaxmagic", "traitlets", "zmq")):
        return False  # NumPy arrays hold no JAX arrays; the shell's own objects are not user data
    if _key_data(value) is not None:
        return True   # a typed PRNG key array: the live array is the key data inside it
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return False  # an array of some library (a JAX array not among the targets: deleted)
    return hasattr(value, "__dict__") or hasattr(type(value), "__slots__") or callable(
        getattr(value, "__wrapped__", None))


def _key_data(value: Any):
    """The uint32 array inside a typed PRNG key array (``jax.random.key``), else None."""
    if type(value).__name__ != "PRNGKeyArray":
        return None
    return getattr(value, "_base_array", None)


def _children(container: Any):
    """``(key text, int index or None, child)`` for one level below ``container``."""
    data = _key_data(container)
    if data is not None:
        yield " (key data)", None, data
        return
    if isinstance(container, (list, tuple)):
        fields = getattr(container, "_fields", None)
        if isinstance(container, tuple) and fields:  # a NamedTuple (optax states, ...)
            for name, child in zip(fields, container):
                yield f".{name}", None, child
            return
        for index, child in enumerate(container):
            yield f"[{index}]", index, child
        return
    if isinstance(container, dict):
        for key, child in list(container.items()):
            yield f"[{key!r}]", None, child
        return
    if isinstance(container, (set, frozenset)):
        for child in list(container):
            yield "{...}", None, child
        return
    if inspect.isfunction(container):
        for name, cell in zip(container.__code__.co_freevars, container.__closure__ or ()):
            try:
                child = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            yield f" (closure variable {name})", None, child
        return
    wrapped = getattr(container, "__wrapped__", None)
    if inspect.isfunction(wrapped) and wrapped.__closure__:  # jax.jit(f) and other wrappers
        yield from _children(wrapped)
    attributes = getattr(container, "__dict__", None)
    if isinstance(attributes, dict):
        for name, child in list(attributes.items()):
            if name != "__wrapped__":
                yield f".{name}", None, child
    for cls in type(container).__mro__:
        for name in getattr(cls, "__slots__", ()) if isinstance(getattr(cls, "__slots__", ()), (tuple, list)) else ():
            if name in ("__dict__", "__weakref__"):
                continue
            try:
                child = object.__getattribute__(container, name)
            except AttributeError:
                continue
            yield f".{name}", None, child

