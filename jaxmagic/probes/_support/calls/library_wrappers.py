"""Which ``jax.jit`` a library's jit wrapper runs, and with which arguments: every probe that traces, lowers or
compiles the user's call asks here first.

``nnx.jit(step)`` and ``eqx.filter_jit(step)`` are not ``jax.jit``: each repacks the user's arguments (graph
states for NNX; arrays apart from every other leaf for Equinox, which passes a module's functions as static
arguments) and calls a ``jax.jit`` of its own function with them. ``jax.jit`` around the wrapper fails where the
wrapper works (a module holding functions is no hashable static argument, a Flax ``Param`` cannot be mutated
from another trace), and the wrapper's own ``trace`` is not ``jax.jit``'s (``nnx.jit``'s returns its own
record). So a probe opens the wrapper: the library's ``jax.jit``, with the arguments the wrapper gives it, read
as the wrapper's own ``trace``/``lower`` would make them, nothing run.

Nothing here imports a library: the wrappers are recognized by their class's module and read as they are.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import jax
import numpy as np

from jaxmagic._jax import jit_internals, jittable
from jaxmagic.probes._support.calls import call_names

if TYPE_CHECKING:
    from jax.stages import Wrapped

# What a library wrapper's call runs: (the jax.jit-ed function, the args and kwargs the wrapper gives it).
LibraryProgram: TypeAlias = tuple[Any, tuple[object, ...], dict[str, object]]


def jitted_program(
    fn: Any, args: Sequence[object], kwargs: Mapping[str, object]
) -> tuple[Wrapped, tuple[object, ...], dict[str, object]]:
    """The ``jax.jit`` the call ``fn(*args, **kwargs)`` runs and its arguments: a library wrapper opened, a
    ``jax.jit`` as it is, anything else jitted (``jittable.jit``). Raises what opening a wrapper raised."""
    opened = library_program(fn, tuple(args), dict(kwargs))
    if opened is not None:
        fn, args, kwargs = opened
    return (fn if jit_internals.is_jitted(fn) else jittable.jit(fn)), tuple(args), dict(kwargs)


def user_argument_names(
    fn: Any,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    opened: tuple[Any, Sequence[object], Mapping[str, object]],
) -> list[str]:
    """Per argument of an opened wrapper's ``jax.jit`` (its traced leaves, in JAX's order), the user's name for
    the same array - ``m.layers[0].weight`` where the library's is ``dynamic_nodonate['first'][0]``; "" for one
    that is not among the user's arrays (``call_names``: the library passes the user's arrays on, not copies)."""
    call = call_names.user_call_of(fn, tuple(args), dict(kwargs))
    if call is None:
        return []
    _, _, traced = _static_and_traced(*opened)
    return [call.name_of(leaf) for leaf in jax.tree.leaves(traced)]


def names_at_call(jitted: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> list[str]:
    """While a library's jit wrapper is calling ``jitted`` with its repacking of the user's arguments (a
    ``jit_programs.ArgumentNamer``): the user's names for what ``jitted`` traces, read from the wrapper's entry
    frame on the stack (``call_names.user_call``); [] for the user's own ``jax.jit``, whose names are theirs."""
    call = call_names.user_call()
    if call is None:
        return []
    _, _, traced = _static_and_traced(jitted, args, kwargs)
    return [call.name_of(leaf) for leaf in jax.tree.leaves(traced)]


def donates_arrays(fn: Any, args: Sequence[object], kwargs: Mapping[str, object]) -> bool:
    """Whether the call ``fn(*args, **kwargs)`` donates an array - its ``jax.jit``'s ``donate_argnums`` /
    ``donate_argnames``, or a library wrapper's (opened: ``eqx.filter_jit``'s jit always names its first
    argument, empty unless ``donate=`` asks). A probe that runs the call more than once, or must leave the
    user's arrays alive, runs it on copies then."""
    try:
        jitted, given, given_kw = library_program(fn, tuple(args), dict(kwargs)) or (fn, tuple(args), dict(kwargs))
    except Exception:
        return False
    info = jit_internals.jit_options(jitted)
    if info is None:
        return False
    positions = set(getattr(info, "donate_argnums", ()) or ())
    names = set(getattr(info, "donate_argnames", ()) or ())
    donated = [a for i, a in enumerate(given) if i in positions] + [v for k, v in given_kw.items() if k in names]
    return any(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(donated))


_Tree = TypeVar("_Tree")


def copies_of_arrays(tree: _Tree) -> _Tree:
    """``tree`` with every JAX array copied: a run that donates them deletes the copies, not the user's."""
    return jax.tree.map(lambda leaf: leaf.copy() if isinstance(leaf, jax.Array) else leaf, tree)


def traced_arguments_only(
    fn: Any, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[Callable[..., object], tuple[object, ...], dict[str, object]]:
    """A library wrapper's call as a function of what it traces, for a transformation of the call
    (``checkify``, ``vmap``): its ``jax.jit`` with the static arguments bound, and the other arguments; the
    call as it is for anything but a wrapper. Call the function under ``library_tracing`` of the ``jax.jit``
    (its ``__jit__`` attribute)."""
    opened = library_program(fn, tuple(args), dict(kwargs))
    if opened is None:
        return fn, tuple(args), dict(kwargs)
    jitted, given, given_kw = opened
    static, static_names, (dynamic, dynamic_kw) = _static_and_traced(*opened)

    def traced_only(*traced: object, **traced_kw: object) -> object:
        positional, supplied = list(traced), []
        for i, value in enumerate(given):
            supplied.append(value if i in static else positional.pop(0))
        return jitted(*supplied, **{**{k: given_kw[k] for k in static_names if k in given_kw}, **traced_kw})

    traced_only.__name__ = traced_only.__qualname__ = getattr(fn, "__name__", None) or "call"
    traced_only.__jit__ = jitted  # type: ignore[attr-defined]
    return traced_only, dynamic, dynamic_kw


def _static_and_traced(
    jitted: Any, given: Sequence[object], given_kw: Mapping[str, object]
) -> tuple[set[int], set[str], tuple[tuple[object, ...], dict[str, object]]]:
    """The static argument positions and names of ``jitted``, and the arguments it traces."""
    info = jit_internals.jit_options(jitted)
    static = set(getattr(info, "static_argnums", ()) or ())
    static_names = set(getattr(info, "static_argnames", ()) or ())
    traced = (
        tuple(a for i, a in enumerate(given) if i not in static),
        {k: v for k, v in given_kw.items() if k not in static_names},
    )
    return static, static_names, traced


def library_tracing(jitted: Any) -> contextlib.AbstractContextManager[object]:
    """What a library's ``jax.jit`` needs around it to be traced outside its wrapper's call: ``nnx.jit``'s
    function merges the graph under its wrapper's update context (its ``ctxtag``); nothing for the rest."""
    return function_tracing(getattr(jitted, "__wrapped__", None))


def function_tracing(function: Any) -> contextlib.AbstractContextManager[object]:
    """``library_tracing`` for the library's function itself (the one ``jax.jit`` was given)."""
    graph = sys.modules.get("flax.nnx.graph")
    tag = getattr(function, "ctxtag", None)
    if graph is not None and tag is not None and hasattr(graph, "update_context"):
        return graph.update_context(tag)
    return contextlib.nullcontext()


def is_library_jit(fn: Any) -> bool:
    """Whether ``fn`` is a library's jit wrapper this module can open (``nnx.jit``'s, ``eqx.filter_jit``'s)."""
    return _opener(fn) is not None


def library_program(fn: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> LibraryProgram | None:
    """The ``jax.jit``-ed function a library wrapper's call ``fn(*args, **kwargs)`` runs, with the arguments
    the wrapper gives it - the library's own repacking, as its ``trace``/``lower`` do it, nothing run; None
    for anything else."""
    opener = _opener(fn)
    return opener(fn, tuple(args), dict(kwargs)) if opener is not None else None


def _opener(fn: Any) -> Callable[[Any, tuple[object, ...], dict[str, object]], LibraryProgram] | None:
    module = type(fn).__module__ or ""
    if module.startswith("flax.nnx.") and hasattr(fn, "jitted_fn") and hasattr(fn, "_get_pure_args_kwargs"):
        return _nnx_program
    if module == "equinox._jit" and hasattr(fn, "_cached") and hasattr(fn, "_signature"):
        return _eqx_program
    return None


def _nnx_program(fn: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> LibraryProgram:
    """``nnx.jit``: its wrapper splits the graph nodes into states under its update context
    (``JitWrapped.trace`` does the same) and calls ``jitted_fn`` with them."""
    graph = sys.modules["flax.nnx.graph"]
    with graph.update_context(fn):
        pure_args, pure_kwargs = fn._get_pure_args_kwargs(args, kwargs)
    return fn.jitted_fn, tuple(pure_args), dict(pure_kwargs)


def _eqx_program(fn: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> LibraryProgram:
    """``eqx.filter_jit``: its ``_call`` partitions the arguments into (donated, not donated, static) and calls
    ``_cached`` with them; the same partition, read from its own ``_preprocess``."""
    jit_module = sys.modules["equinox._jit"]
    info = (fn._signature, fn._dynamic_fun, fn._static_fun, fn.donate_first, fn.donate_rest)
    # eqx traces arrays and keeps every other leaf static: a shape (a call rebuilt without running it) stands
    # in as an empty NumPy array while it partitions, and takes its place again among the traced parts
    shapes: dict[int, Any] = {}

    def stand_in(leaf: Any) -> Any:
        if isinstance(leaf, jax.ShapeDtypeStruct):
            marker = np.empty((0,), leaf.dtype)
            shapes[id(marker)] = leaf
            return marker
        return leaf

    args, kwargs = jax.tree.map(stand_in, (args, kwargs))
    dynamic_donate, dynamic_nodonate, static = jit_module._preprocess(info, args, kwargs, return_static=True)
    dynamic = jax.tree.map(lambda leaf: shapes.get(id(leaf), leaf), (dynamic_donate, dynamic_nodonate))
    return fn._cached, (*dynamic, static), {}
