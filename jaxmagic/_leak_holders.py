"""Where is a leaked tracer held? Names a person recognises, found from their namespace.

JAX's leak checker describes who holds a leaked tracer by object ids, as seen
from the garbage collector: ``<list 4665787840>[0]``, then ``<list 4665787840>
is referred to by <dict 4663>['leaked']`` and so on up to IPython's shell
object. A person wants ``leaked[0]``. We search the other way round:
breadth-first from the user's variables (a notebook's namespace), through
containers, attributes, closures, default arguments and ``jax.jit`` wrappers,
so the first path that reaches an object is the shortest name for it:
``leaked[0]``, ``cache.store['h']``, ``m_leak.last_hidden``, ``Model.last``,
``box[0] (closed over by g)``, ``memo[0] (default argument of f)``.

The search only reads: it looks at ``__dict__``/``__slots__``/closure cells
directly and never calls a property, ``__getattr__`` or any user code, so it
cannot have side effects. It does not descend into arrays, library modules,
library classes or IPython's own objects, and it is bounded (depth and object
count), so it stays fast on big namespaces. Unlike a search for live arrays it
never needs IPython's output cache or a traceback's frames: a tracer a user
can reach later is one stored in their own variables.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import sys
import types
from typing import Any, Callable, Iterator

from jaxmagic._frames import is_user_file

MAX_DEPTH = 8
MAX_OBJECTS = 200_000
MAX_ITEMS = 10_000  # of one container; beyond that we do not look

# IPython's own names in a notebook namespace: its output cache (Out, _, __, _3 ...)
# and input history hold references the user did not make (DESIGN.md).
_IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}
# Objects of these packages are infrastructure: never the place a user stored something.
_SKIPPED_PACKAGES = ("IPython", "ipykernel", "traitlets", "zmq", "tornado", "asyncio", "jupyter_client",
                     "logging", "threading", "concurrent", "comm", "ipywidgets", "jaxmagic", "_pytest",
                     "pytest", "nbclient", "prompt_toolkit", "jedi", "parso")
_ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None), range, memoryview)


@dataclasses.dataclass(frozen=True)
class Held:
    """One place where a target object is held."""

    path: str        # "cache.store['h']", "box[0] (closed over by g)"
    depth: int       # steps from the namespace


def user_roots(namespace: dict[str, Any]) -> dict[str, Any]:
    """The variables of a namespace a person made: no ``_``-names, no IPython history or helpers."""
    return {name: value for name, value in list(namespace.items())
            if not name.startswith("_") and name not in _IPYTHON_NAMES and not _is_library_module(value)}


def find_held(roots: dict[str, Any], is_target: Callable[[Any], bool], *, max_depth: int = MAX_DEPTH,
              max_objects: int = MAX_OBJECTS) -> dict[int, list[Held]]:
    """``{id(target): [Held, ...]}`` for every target object reachable from ``roots``.

    Paths are shortest first (breadth-first search); each target gets at most
    three. Targets themselves are not searched further.
    """
    found: dict[int, list[Held]] = {}
    seen: set[int] = set()
    keep_alive = []  # ids stay unique only while the objects live
    queue: collections.deque[tuple[Any, str, str, int]] = collections.deque()
    for name, value in roots.items():
        queue.append((value, name, "", 0))
    visited = 0
    while queue and visited < max_objects:
        obj, path, note, depth = queue.popleft()
        try:
            target = is_target(obj)
        except Exception:
            target = False
        if target:
            places = found.setdefault(id(obj), [])
            if len(places) < 3 and all(p.path != path + note for p in places):
                places.append(Held(path + note, depth))
            keep_alive.append(obj)
            continue
        if id(obj) in seen or depth >= max_depth or isinstance(obj, _ATOMS) or _skipped(obj):
            continue
        seen.add(id(obj))
        keep_alive.append(obj)
        visited += 1
        for step, child, restart in _children(obj):
            if isinstance(child, _ATOMS):
                continue
            if restart:  # a closure variable or a default: its own name starts a new path
                queue.append((child, step, f" ({restart} {path}{note})", depth + 1))
            else:
                queue.append((child, path + step, note, depth + 1))
    del keep_alive
    return found


def _is_library_module(value: Any) -> bool:
    if not isinstance(value, types.ModuleType):
        return False
    return not is_user_file(getattr(value, "__file__", None) or "")


def _skipped(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        return _is_library_module(obj)
    if isinstance(obj, type):
        return not _defined_by_user(obj)
    module = getattr(type(obj), "__module__", "") or ""
    if module.split(".")[0] in _SKIPPED_PACKAGES:
        return True
    # Arrays hold numbers, not references to tracers; do not walk their attributes.
    return type(obj).__name__ in ("ndarray", "ArrayImpl", "generic") or module.startswith("numpy")


def _defined_by_user(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    if module == "__main__":
        return True
    mod = sys.modules.get(module)
    return mod is not None and is_user_file(getattr(mod, "__file__", None) or "")


def _key_text(key: Any) -> str:
    if isinstance(key, (str, int, float, bool, type(None))):
        return f"[{key!r}]"
    if isinstance(key, tuple) and all(isinstance(k, (str, int, float, bool, type(None))) for k in key):
        return f"[{key!r}]"
    return f"[<{type(key).__name__}>]"


def _children(obj: Any) -> Iterator[tuple[str, Any, str]]:
    """(step, child, restart) for each reference ``obj`` holds that a person could name.

    ``restart`` is "" for an ordinary step (``[0]``, ``.attr``) and a phrase such
    as "closed over by" when the child is a variable of a function.
    """
    if isinstance(obj, dict):
        for i, (key, value) in enumerate(list(obj.items())):
            if i >= MAX_ITEMS:
                break
            yield _key_text(key), value, ""
        return
    if isinstance(obj, (list, tuple, collections.deque)):
        fields = getattr(type(obj), "_fields", None) if isinstance(obj, tuple) else None
        for i, value in enumerate(list(obj)[:MAX_ITEMS]):
            step = f".{fields[i]}" if fields and i < len(fields) else f"[{i}]"
            yield step, value, ""
        return
    if isinstance(obj, (set, frozenset)):
        return  # tracers are unhashable: they cannot be in a set
    if isinstance(obj, types.FunctionType):
        yield from _function_children(obj)
        return
    if isinstance(obj, types.MethodType):
        yield ".__func__", obj.__func__, ""
        return
    if isinstance(obj, functools.partial):
        yield ".func", obj.func, ""
        for i, value in enumerate(obj.args):
            yield f".args[{i}]", value, ""
        for key, value in (obj.keywords or {}).items():
            yield f".keywords[{key!r}]", value, ""
        return
    if isinstance(obj, (types.ModuleType, type)):
        for key, value in list((_own_dict(obj) or {}).items()):
            if not (isinstance(key, str) and key.startswith("__")):
                yield f".{key}", value, ""
        return
    namespace = _own_dict(obj)
    if namespace is not None and "__wrapped__" in namespace:
        # A wrapper made by functools.wraps, such as jax.jit(f): a leak through
        # jax.jit(f)'s closure is a leak through f's closure; the rest of the
        # wrapper's state is JAX's.
        yield "", namespace["__wrapped__"], ""
        return
    if namespace is not None:
        for key, value in list(namespace.items())[:MAX_ITEMS]:
            yield f".{key}", value, ""
    for name in _slot_names(type(obj)):
        try:
            value = _slot_value(obj, name)
        except Exception:
            continue
        yield f".{name}", value, ""


def _function_children(fn: types.FunctionType) -> Iterator[tuple[str, Any, str]]:
    code = fn.__code__
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        yield name, value, "closed over by"
    positional = code.co_varnames[:code.co_argcount]
    defaults = fn.__defaults__ or ()
    for name, value in zip(positional[len(positional) - len(defaults):], defaults):
        yield name, value, "default argument of"
    for name, value in (fn.__kwdefaults__ or {}).items():
        yield name, value, "default argument of"
    namespace = _own_dict(fn)
    if namespace and "__wrapped__" in namespace:
        yield "", namespace["__wrapped__"], ""


def _own_dict(obj: Any) -> dict | None:
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
