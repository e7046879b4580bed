"""Library structures the holder walk meets, walked the way JAX flattens them and named as the user types them.

An Optax state (``opt_state.inner_opt_state[0].mu['w1']``), a Flax NNX module
(``model.linear.kernel.value``), an Equinox module (``model.layers[0].weight``), a
``FrozenDict`` of Flax linen parameters or a ``TrainState`` is a pytree whose node
types a library registered with JAX. Walked attribute by attribute such a structure
shows the library's private fields (``_dict``, ``_pytree__state``) and is deeper than
the walk's few steps; flattened with ``jax.tree_util.tree_flatten_with_path`` its
leaves come at once, each with the path ``keystr`` writes - the path a user types -
and the whole structure counts as one step of the walk.

Only types a library defines (or a user class derived from one: ``class MLP(nnx.Module)``)
are flattened, so the flattening runs the library's code, never the user's (a class
the user registered with a flatten function of their own is walked as before); and
nothing of a library is imported here: the types met are the user's program's.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import jax

from jaxmagic.usercode.source import is_user_file

# Packages whose classes are no library pytrees: Python's own and the shell's.
_NOT_LIBRARIES = frozenset({"builtins", "__main__", "abc", "typing", "collections", "dataclasses", "enum"})


def is_library_pytree(cls: type, sample: Any) -> bool:
    """Whether objects of ``cls`` are pytree nodes of a library: ``cls`` or a base class is defined in an
    installed package (not the user's files, not Python's own), and JAX flattens ``sample`` into children."""
    if not _defined_in_library(cls):
        return False
    try:
        _, treedef = jax.tree_util.tree_flatten(sample, is_leaf=lambda x: x is not sample)
    except Exception:
        return False
    return not jax.tree_util.treedef_is_leaf(treedef)


def _defined_in_library(cls: type) -> bool:
    for klass in cls.__mro__[:-1]:
        module = getattr(klass, "__module__", "") or ""
        top = module.split(".")[0]
        if top in _NOT_LIBRARIES or top in sys.stdlib_module_names:
            continue
        loaded = sys.modules.get(module)
        filename = getattr(loaded, "__file__", None) or ""
        if filename and not is_user_file(filename):
            return True
    return False


def leaves_with_paths(obj: Any, max_items: int | None) -> Iterator[tuple[str, Any]] | None:
    """``(path, value)`` for each leaf of the library pytree ``obj`` (``.inner_opt_state[0].mu['w1']``),
    then for each public attribute the flattening leaves out (a module's static fields, which may
    hold anything the user stored: ``.last_hidden``). None when JAX cannot flatten it, or names a
    leaf only by its position among the leaves."""
    try:
        leaves = jax.tree_util.tree_flatten_with_path(obj)[0]
        children = jax.tree_util.tree_flatten(obj, is_leaf=lambda x: x is not obj)[0]
    except Exception:
        return None
    if any(isinstance(key, jax.tree_util.FlattenedIndexKey) for path, _ in leaves for key in path):
        # registered without keys (a NumPyro distribution): ``[<flat index 0>]`` names nothing a user
        # types, so it is walked attribute by attribute (``d.loc``), its keyed parts flattened when met
        return None
    if max_items is not None:
        leaves = leaves[:max_items]
    return _paths(obj, leaves, children)


def _paths(obj: Any, leaves: list[tuple[tuple[object, ...], Any]], children: list[object]) -> Iterator[tuple[str, Any]]:
    for path, leaf in leaves:
        yield jax.tree_util.keystr(path), leaf
    covered = set(map(id, children))
    covered.update(id(leaf) for _, leaf in leaves)
    for name, value in _public_attributes(obj):
        if id(value) not in covered:
            yield f".{name}", value


def _public_attributes(obj: Any) -> list[tuple[str, Any]]:
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except Exception:
        return []
    if not isinstance(namespace, (dict, types.MappingProxyType)):
        return []
    return [(k, v) for k, v in list(namespace.items()) if isinstance(k, str) and not k.startswith("_")]
