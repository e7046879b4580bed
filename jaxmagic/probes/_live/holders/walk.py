"""The holder search's walk: one breadth-first pass from the roots over the references a person could name.

List and tuple elements, dict values, attributes, ``__slots__``, and the
chosen edges (closure cells, default arguments, classes and modules, methods,
sets, a typed key's data), and a library's pytree flattened at once (its leaves
one step below it, ``library_pytrees``); it only reads, never calls user code, and is
bounded by depth and ``BUDGET``. ``search`` turns what it reaches into holders.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import itertools
import operator
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from jaxmagic.probes._live.holders.library_pytrees import is_library_pytree, leaves_with_paths
from jaxmagic.usercode.source import is_user_file

# Edges the walk may follow besides container items, attributes and slots.
CLOSURES = "closures"  # a function's closure cells ("closed over by", "closure variable")
DEFAULTS = "defaults"  # a function's default arguments
CLASSES = "classes"  # attributes of user-defined classes and modules
METHODS = "methods"  # bound methods' functions, functools.partial's function and arguments
SETS = "sets"  # elements of sets and frozensets
KEY_DATA = "key data"  # the uint32 array inside a typed PRNG key array
LIVE_EDGES = frozenset({CLOSURES, SETS, KEY_DATA})
LEAK_EDGES = frozenset({CLOSURES, DEFAULTS, CLASSES, METHODS, KEY_DATA})

BUDGET = 5_000_000  # values looked at

# The relation of a leaf of a library pytree to it: an ordinary step (``.mu['w1']``), whose
# container is the library's structure, not one of the user's.
IN_LIBRARY_PYTREE = "leaf of"

# Objects of these packages are infrastructure: never the place a user stored something.
_SKIPPED_PACKAGES = frozenset(
    {
        "numpy",
        "IPython",
        "ipykernel",
        "traitlets",
        "zmq",
        "tornado",
        "asyncio",
        "jupyter_client",
        "logging",
        "threading",
        "concurrent",
        "comm",
        "ipywidgets",
        "jaxmagic",
        "_pytest",
        "pytest",
        "nbclient",
        "prompt_toolkit",
        "jedi",
        "parso",
    }
)
_LEAF_TYPES = (
    str,
    bytes,
    bytearray,
    int,
    float,
    complex,
    bool,
    type(None),
    range,
    slice,
    memoryview,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
)
_SEQUENCES = (list, tuple, collections.deque)
_BUILTIN_CONTAINERS = frozenset({list, tuple, dict, collections.deque})


def walk(
    roots: Iterable[tuple[str, Any, str]],
    *,
    on_items: Callable[..., None],
    on_hit: Callable[..., None],
    target_ids: dict[int, Any] | None = None,
    is_target: Callable[[Any], bool] | None = None,
    max_depth: int = 3,
    edges: frozenset[str] = LIVE_EDGES,
    max_items: int | None = None,
    restart_names: bool = False,
    budget: int = BUDGET,
) -> tuple[int, bool, RootHits]:
    """Breadth-first from ``roots`` ((label, object, kind) triples) to the targets.

    A target is an object whose id is a key of ``target_ids`` (its value, the
    target's key, is passed on), or for which ``is_target`` is true (key True).
    Targets are not searched further. Hits below a root are reported as they
    are found, shortest paths first: ``on_items(indices, ids, keys, kind,
    label, note, depth)`` for the elements of one list or tuple ``label``, and
    ``on_hit(target_id, key, kind, path, depth, container)`` for any other (``container``:
    the path of the dict, object or function that holds it).

    ``max_depth`` is how many steps below a root are followed, ``edges`` which
    references besides items and attributes (``CLOSURES``, ``DEFAULTS``, ...),
    ``max_items`` how many items of one container are looked at.
    ``restart_names``: a closure variable or default argument starts a path of
    its own (``box[0] (closed over by g)``) instead of extending its function's
    (``g (closure variable box)[0]``).

    Returns (values looked at, whether the budget ran out, the roots that are
    targets as ``RootHits``).
    """
    with collector_paused():
        return _walk(roots, on_items, on_hit, target_ids, is_target, max_depth, edges, max_items, restart_names, budget)


class RootHits(NamedTuple):
    """The roots that are targets, as four lists in root order.

    Columns rather than a tuple per hit: a namespace of a million names bound to arrays
    is a million hits, and four lists filled by C loops cost a fraction of a million tuples.
    """

    ids: list[int]
    keys: list[Any]  # the targets' keys (``target_ids`` values, or True)
    kinds: list[str]
    labels: list[str]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The garbage collector paused (and restored as it was) while a search runs.

    A search allocates a few objects per value it reaches and keeps them until it
    returns; with the collector on, every 2,000 allocations start a collection and some
    of them traverse the whole heap, so the search's cost would grow faster than the
    number of names it reaches. The search makes no reference cycles of its own, and
    the probes collect (``gc.collect()``) before they look.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _walk(
    roots: Iterable[tuple[str, Any, str]],
    on_items: Callable[..., None],
    on_hit: Callable[..., None],
    target_ids: dict[int, Any] | None,
    is_target: Callable[[Any], bool] | None,
    max_depth: int,
    edges: frozenset[str],
    max_items: int | None,
    restart_names: bool,
    budget: int,
) -> tuple[int, bool, RootHits]:
    walker = _Walker(on_items, on_hit, target_ids, is_target, edges, max_items, restart_names)
    root_hits, frontier = walker.roots(roots, max_depth > 0)
    keep_alive: list[object] = []  # ids stay unique only while the objects live
    truncated = False
    depth = 0
    while frontier and depth < max_depth:
        depth += 1
        following: list[tuple[str, str, Any, str]] = []
        go_deeper = depth < max_depth
        for label, note, container, kind in frontier:
            if id(container) in walker.visited:
                continue
            walker.visited.add(id(container))
            keep_alive.append(container)
            if type(container) is list or type(container) is tuple:
                walker.sequence(label, note, container, kind, depth, following if go_deeper else None)
            else:
                walker.children(label, note, container, kind, depth, following if go_deeper else None)
            if walker.count > budget:
                truncated = True
                following = []
                break
        frontier = following
    del keep_alive
    return walker.count, truncated, root_hits


class _Walker:
    """One walk's state and its visits: the roots, a list or tuple, any other container's children."""

    def __init__(
        self,
        on_items: Callable[..., None],
        on_hit: Callable[..., None],
        target_ids: dict[int, Any] | None,
        is_target: Callable[[Any], bool] | None,
        edges: frozenset[str],
        max_items: int | None,
        restart_names: bool,
    ) -> None:
        self.on_items, self.on_hit = on_items, on_hit
        self.by_id = target_ids is not None
        self.key_get = target_ids.get if target_ids is not None else functools.partial(_test_target, is_target)
        self.edges, self.max_items, self.restart_names = edges, max_items, restart_names
        self.visited: set[int] = set()
        self.slots: dict[type, list[str]] = {}  # caches of this walk, per type: they hold no class after it
        self.kinds: dict[type, int] = {}
        self.descendable = functools.partial(_descendable, edges=edges, kinds=self.kinds)
        self.count = 0  # values looked at

    def roots(
        self, roots: Iterable[tuple[str, Any, str]], descend: bool
    ) -> tuple[RootHits, list[tuple[str, str, Any, str]]]:
        """The roots that are targets, and the frontier of those to descend into: (label, note, object, kind)."""
        # The roots as columns, looked up by C loops (map, compress): a namespace may hold a
        # million names, most of them neither targets nor containers.
        roots = roots if type(roots) is list else list(roots)
        values = list(map(operator.itemgetter(1), roots))
        ids = list(map(id, values))
        keys = list(map(self.key_get, ids if self.by_id else values))
        del values
        self.count += len(ids)
        hit = list(map(operator.is_not, keys, itertools.repeat(None)))
        root_hits = RootHits(
            list(itertools.compress(ids, hit)),
            list(itertools.compress(keys, hit)),
            list(itertools.compress(map(operator.itemgetter(2), roots), hit)),
            list(itertools.compress(map(operator.itemgetter(0), roots), hit)),
        )
        frontier = []
        if descend:
            for label, value, kind in itertools.compress(roots, map(operator.not_, hit)):
                if self.descendable(value):
                    frontier.append((label, "", value, kind))
        return root_hits, frontier

    def sequence(
        self,
        label: str,
        note: str,
        container: list[Any] | tuple[Any, ...],
        kind: str,
        depth: int,
        following: list[tuple[str, str, Any, str]] | None,
    ) -> None:
        """A list or tuple: the common case, kept tight. The lookups run as C loops (map), and no text is
        made for elements that are not hits. ``following`` (None at the last depth) gets the elements to
        descend into."""
        max_items = self.max_items
        items = container if max_items is None or len(container) <= max_items else container[:max_items]
        ids = list(map(id, items))
        keys = list(map(self.key_get, ids if self.by_id else items))
        self.count += len(ids)
        if None not in keys:  # every element is a target: a list of arrays
            if keys:
                self.on_items(range(len(ids)), ids, keys, kind, label, note, depth)
            return
        indices = [i for i, k in enumerate(keys) if k is not None]
        if indices:
            self.on_items(indices, [ids[i] for i in indices], [keys[i] for i in indices], kind, label, note, depth)
        if following is not None:
            descendable = self.descendable
            for position, (child, key) in enumerate(zip(items, keys)):
                if key is None and descendable(child):
                    following.append((f"{label}[{position}]", note, child, kind))

    def children(
        self,
        label: str,
        note: str,
        container: object,
        kind: str,
        depth: int,
        following: list[tuple[str, str, Any, str]] | None,
    ) -> None:
        """A dict, object, function, set or library pytree: each child the edges allow."""
        key_get, by_id, named = self.key_get, self.by_id, self.named
        for step, index, child, relation in _children(container, self.edges, self.max_items, self.slots, self.kinds):
            self.count += 1
            key = key_get(id(child)) if by_id else key_get(child)
            if key is None:
                if following is not None and self.descendable(child):
                    following.append((*named(label, note, step, relation), child, kind))
            elif index is not None:
                self.on_items([index], [id(child)], [key], kind, label, note, depth)
            else:
                child_label, child_note = named(label, note, step, relation)
                holder = "" if relation is IN_LIBRARY_PYTREE else label + note
                self.on_hit(id(child), key, kind, child_label + child_note, depth, holder)

    def named(self, label: str, note: str, step: str, relation: str) -> tuple[str, str]:
        """(label, note) of a child reached by ``step``: a closure variable or a default names itself."""
        if not relation or relation is IN_LIBRARY_PYTREE:
            return label + step, note
        if self.restart_names:
            return step, f" ({relation} {label}{note})"
        what = "closure variable" if relation == "closed over by" else "default argument"
        return f"{label} ({what} {step})", note


def _test_target(is_target: Callable[[Any], bool] | None, value: Any) -> Any:
    if is_target is None:  # neither target_ids nor is_target given: nothing is a target
        return None
    try:
        return True if is_target(value) else None
    except Exception:
        return None


# What a type's objects are to the walk (cached per type for one walk).
_LEAF, _NONEMPTY, _FUNCTION, _MODULE, _CLASS, _ALWAYS, _KEY, _OBJECT, _PYTREE = range(9)


def _descendable(value: Any, edges: frozenset[str], kinds: dict[type, int]) -> bool:
    """Whether ``value`` may hold a target that a person would name through it."""
    cls = type(value)
    kind = kinds.get(cls)
    if kind is None:
        kind = kinds[cls] = _type_kind(cls, edges, value)
    if kind is _LEAF:
        return False
    if kind is _NONEMPTY:
        return bool(value)
    if kind is _OBJECT:
        return _own_dict(value) is not None
    if kind is _ALWAYS or kind is _PYTREE:
        return True
    if kind is _FUNCTION:
        return (
            (CLOSURES in edges and bool(value.__closure__))
            or DEFAULTS in edges
            or "__wrapped__" in (_own_dict(value) or ())
        )
    if kind is _MODULE:
        return not is_library_module(value)
    if kind is _CLASS:
        return _defined_by_user(value)
    return _key_data(value) is not None  # _KEY: the live array is the key data inside it


def _type_kind(cls: type, edges: frozenset[str], sample: Any) -> int:
    if issubclass(cls, _LEAF_TYPES):
        return _LEAF
    if cls in _BUILTIN_CONTAINERS:
        return _NONEMPTY
    if (getattr(cls, "__module__", "") or "").split(".")[0] not in _SKIPPED_PACKAGES and is_library_pytree(cls, sample):
        return _PYTREE  # an Optax state, a Flax or Equinox module: flattened as JAX does, see library_pytrees
    if issubclass(cls, (list, tuple, dict, collections.deque)):
        return _NONEMPTY
    if issubclass(cls, (set, frozenset)):
        return _NONEMPTY if SETS in edges else _LEAF
    if issubclass(cls, types.FunctionType):
        return _FUNCTION
    if issubclass(cls, types.ModuleType):
        return _MODULE if CLASSES in edges else _LEAF
    if issubclass(cls, type):
        return _CLASS if CLASSES in edges else _LEAF
    if issubclass(cls, (types.MethodType, functools.partial)):
        return _ALWAYS if METHODS in edges else _LEAF
    if (getattr(cls, "__module__", "") or "").split(".")[0] in _SKIPPED_PACKAGES:
        return _LEAF  # NumPy arrays hold no JAX arrays; the shell's own objects are not user data
    if KEY_DATA in edges and cls.__name__ == "PRNGKeyArray":
        return _KEY
    if _is_array_type(cls):
        return _LEAF  # an array of some library (a JAX array not among the targets: deleted)
    return _ALWAYS if _slot_names(cls) else _OBJECT


def _children(
    obj: Any, edges: frozenset[str], max_items: int | None, slots: dict[type, list[str]], kinds: dict[type, int]
) -> Iterator[tuple[str, int | None, Any, str]]:
    """``(step, int index or None, child, relation)`` for each reference ``obj`` holds that a person
    could name. ``relation`` is "" for an ordinary step (``[0]``, ``.attr``), ``IN_LIBRARY_PYTREE``
    for a leaf of a library's pytree (``.inner_opt_state[0].mu['w1']``, one step however deep) and a
    phrase such as "closed over by" when the child is a variable of a function (``step`` is then its name)."""
    if kinds.get(type(obj)) is _PYTREE:
        leaves = leaves_with_paths(obj, max_items)
        if leaves is not None:
            for step, value in leaves:
                yield step, None, value, IN_LIBRARY_PYTREE
            return
    if isinstance(obj, dict):
        for key, value in itertools.islice(list(obj.items()), max_items):
            yield _key_text(key), None, value, ""
        return
    if isinstance(obj, _SEQUENCES):
        fields = getattr(type(obj), "_fields", None) if isinstance(obj, tuple) else None
        for i, value in enumerate(itertools.islice(list(obj), max_items)):
            if fields and i < len(fields):  # a NamedTuple (optax states, ...)
                yield f".{fields[i]}", None, value, ""
            else:
                yield f"[{i}]", i, value, ""
        return
    if isinstance(obj, (set, frozenset)):
        if SETS in edges:
            for value in itertools.islice(list(obj), max_items):
                yield "{...}", None, value, ""
        return
    if isinstance(obj, types.FunctionType):
        yield from _function_children(obj, edges)
        return
    if isinstance(obj, types.MethodType):
        yield ".__func__", None, obj.__func__, ""
        return
    if isinstance(obj, functools.partial):
        yield ".func", None, obj.func, ""
        for i, value in enumerate(obj.args):
            yield f".args[{i}]", None, value, ""
        for key, value in (obj.keywords or {}).items():
            yield f".keywords[{key!r}]", None, value, ""
        return
    namespace = _own_dict(obj)
    if isinstance(obj, (types.ModuleType, type)):
        for key, value in list((namespace or {}).items()):
            if not (isinstance(key, str) and key.startswith("__")):
                yield f".{key}", None, value, ""
        return
    data = _key_data(obj) if KEY_DATA in edges else None
    if data is not None:
        yield " (key data)", None, data, ""
        return
    if namespace is not None and "__wrapped__" in namespace:
        # A wrapper made by functools.wraps, such as jax.jit(f): a reference from jax.jit(f)'s
        # closure is one from f's closure; the rest of the wrapper's state is JAX's.
        wrapped = namespace["__wrapped__"]
        if isinstance(wrapped, types.FunctionType):
            yield from _function_children(wrapped, edges)
        else:
            yield "", None, wrapped, ""
        return
    if namespace is not None:
        for key, value in itertools.islice(list(namespace.items()), max_items):
            yield f".{key}", None, value, ""
    names = slots.get(type(obj))
    if names is None:
        names = slots[type(obj)] = _slot_names(type(obj))
    for name in names:
        try:
            value = _slot_value(obj, name)
        except Exception:
            continue
        yield f".{name}", None, value, ""


def _function_children(fn: types.FunctionType, edges: frozenset[str]) -> Iterator[tuple[str, int | None, Any, str]]:
    code = fn.__code__
    if CLOSURES in edges:
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            yield name, None, value, "closed over by"
    if DEFAULTS in edges:
        positional = code.co_varnames[: code.co_argcount]
        defaults = fn.__defaults__ or ()
        for name, value in zip(positional[len(positional) - len(defaults) :], defaults):
            yield name, None, value, "default argument of"
        for name, value in (fn.__kwdefaults__ or {}).items():
            yield name, None, value, "default argument of"
    namespace = _own_dict(fn)
    if namespace and "__wrapped__" in namespace:
        yield "", None, namespace["__wrapped__"], ""


def _key_text(key: Any) -> str:
    if isinstance(key, (str, int, float, bool, type(None))):
        return f"[{key!r}]"
    if isinstance(key, tuple) and all(isinstance(k, (str, int, float, bool, type(None))) for k in key):
        return f"[{key!r}]"
    return f"[<{type(key).__name__}>]"  # never the repr of a user's object: that would run its code


def _key_data(value: Any) -> object:
    """The uint32 array inside a typed PRNG key array (``jax.random.key``), else None."""
    if type(value).__name__ != "PRNGKeyArray":
        return None
    namespace = _own_dict(value)
    if namespace is not None and "_base_array" in namespace:
        return namespace["_base_array"]
    try:
        return _slot_value(value, "_base_array")
    except Exception:
        return None


def _is_array_type(cls: type) -> bool:
    """Arrays hold numbers, not references: a class with ``shape`` and ``dtype`` of its own."""
    names = set()
    for klass in cls.__mro__[:-1]:
        names.update(klass.__dict__.keys() & {"shape", "dtype"})
    return len(names) == 2


def is_library_module(value: Any) -> bool:
    if not isinstance(value, types.ModuleType):
        return False
    return not is_user_file(getattr(value, "__file__", None) or "")


def _defined_by_user(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    if module == "__main__":
        return True
    mod = sys.modules.get(module)
    return mod is not None and is_user_file(getattr(mod, "__file__", None) or "")


def _own_dict(obj: Any) -> dict[str, Any] | types.MappingProxyType[str, Any] | None:
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except Exception:
        return None
    return namespace if isinstance(namespace, (dict, types.MappingProxyType)) else None


def _slot_names(cls: type) -> list[str]:
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        names += [s for s in slots if s not in ("__dict__", "__weakref__")]
    return names


def _slot_value(obj: Any, name: str) -> Any:
    for klass in type(obj).__mro__:
        descriptor = klass.__dict__.get(name)
        if isinstance(descriptor, types.MemberDescriptorType):
            return descriptor.__get__(obj, type(obj))
    raise AttributeError(name)
