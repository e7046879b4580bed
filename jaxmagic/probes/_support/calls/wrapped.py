"""A library's callable between jit and the user's function: which user function it holds, and the user's arguments.

Two shapes, one mechanism (a jitted callable whose code lives in a library file and which holds a callable
of the user's):

* the library jits for the user: ``eqx.filter_jit(step)``, ``nnx.jit(step)``. The library's own function
  is what jit traces (its name copied from the user's, its code in the library's file), and what jit is
  given as arguments is the library's repacking of the user's: array leaves apart, every other leaf or the
  module's static attributes passed as static arguments or pytree metadata. The user's function is held
  by the jitted callable (``functools.wraps``' ``__wrapped__``, a closure, an attribute) or passed to it
  among its static arguments; the user's own arguments are those of the library's entry point, the frame
  the user's line called (its ``*args, **kwargs``).
* the user jits a library's callable that runs their code: ``jax.jit(hk.transform(f).apply)``,
  ``jax.jit(model.apply)`` of a Flax Linen module. The arguments are the user's; only the function is
  named after the library's callable and defined in the library's file.

Nothing here imports a library: the objects are read as they are (attributes, closures, frames).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from jaxmagic.probes._support.calls.bound_arguments import by_parameter
from jaxmagic.usercode.code_owner import jax_dirs

MAX_SEARCHED = 2_000  # objects looked at when searching a callable or static arguments for the user's function


@dataclasses.dataclass
class HeldFunction:
    """The user's callable a library's jitted callable holds, and how it was found."""

    function: Any  # the user's function, or a callable object whose class's __call__ is the user's
    code: types.CodeType  # where the user's code is defined
    name: str  # "step", "MLP.__call__"
    library: str  # the top-level package whose code holds it: "equinox", "flax", "haiku"
    method: bool = False  # a library object's method holding the user's code: named and defined as the method


@functools.lru_cache(maxsize=1_024)
def library_of(filename: str) -> str:
    """The top-level imported package a library file belongs to ("equinox"); "" when none is found."""
    path = os.path.abspath(filename)
    for name, module in list(sys.modules.items()):
        if "." in name or module is None:
            continue
        file = getattr(module, "__file__", None)
        if file and os.path.basename(file) == "__init__.py" and path.startswith(os.path.dirname(file) + os.sep):
            return name
    return ""


def jitted_by_its_caller(fun: object, called_from_user: bool) -> bool:
    """True for a library's function the user jitted themselves: the jitted callable was called from the user's
    line and the function is not one of the library's own jitted functions (those are defined at its modules'
    top level) but a closure a factory made or a method bound to an object (``jax.jit(tx.update)`` of an optax
    ``tx = optax.adam(lr)``, ``jax.jit(functools.partial(...))``): only its holder can jit it, so a recompile of
    it is the user's (a new ``tx`` per learning rate is a new function each time), not an eager operation's."""
    if not called_from_user:
        return False
    while isinstance(fun, functools.partial):
        fun = fun.func
    if inspect.ismethod(fun):
        return True
    code = own_code(fun)
    if code is None or code.co_filename.startswith(jax_dirs()):
        return False  # JAX's own functions (jnp, lax, random) are compiled per shape, as eager operations are
    return "<locals>" in getattr(fun, "__qualname__", "")


def own_code(fun: object) -> types.CodeType | None:
    """The code a callable runs first: a function's, or its class's ``__call__`` for a callable object."""
    code = getattr(fun, "__code__", None)
    if isinstance(code, types.CodeType):
        return code
    call = next((vars(cls)["__call__"] for cls in type(fun).__mro__ if "__call__" in vars(cls)), None)
    code = getattr(call, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def user_code(fun: object, is_user: Callable[[str], bool]) -> types.CodeType | None:
    """The user's code of a callable, through ``functools.partial`` and ``__wrapped__``; None if not the user's.

    A callable object counts when its class's ``__call__`` is the user's (a Linen or Haiku module).
    """
    for _ in range(8):
        if isinstance(fun, functools.partial):
            fun = fun.func
            continue
        if isinstance(fun, type):
            return None  # a class is not the function run
        code = getattr(fun, "__code__", None)
        if isinstance(code, types.CodeType):
            if is_user(code.co_filename):
                return code
        elif callable(fun) and is_user(_class_file(type(fun))):
            call = next((vars(cls)["__call__"] for cls in type(fun).__mro__ if "__call__" in vars(cls)), None)
            inner = call
            for _ in range(4):  # a library decorating the user's __call__ keeps it as __wrapped__
                inner_code = getattr(inner, "__code__", None)
                if isinstance(inner_code, types.CodeType) and is_user(inner_code.co_filename):
                    return inner_code
                inner = getattr(inner, "__wrapped__", None)
                if inner is None:
                    break
            return None
        inner = getattr(fun, "__wrapped__", None)
        if inner is None or inner is fun:
            return None
        fun = inner
    return None


def _class_file(cls: type) -> str:
    try:
        return inspect.getfile(cls)
    except (TypeError, OSError):
        return ""


def display_name(fun: object, code: types.CodeType) -> str:
    """The user's function as they wrote it: ``step``, or ``MLP.__call__`` for a callable object."""
    if isinstance(getattr(fun, "__code__", None), types.CodeType) or isinstance(fun, functools.partial):
        return code.co_name
    return f"{type(fun).__name__}.{code.co_name}"


def find_held_function(
    fun: object,
    args: tuple[object, ...],
    static_argnums: Iterable[object] | None,
    is_user: Callable[[str], bool],
) -> HeldFunction | None:
    """The user's callable that ``fun`` (a jitted callable whose code is in a library file) holds, or None.

    Looked for in ``fun`` itself (``__wrapped__``, its closure, ``__self__``, its attributes) and then in
    the static arguments jit was given (where a library passes the user's function to its own jitted
    function). A chain of JAX's own transformations (``jax.grad(f)``) is not a library's wrapper.
    """
    outer = own_code(fun)
    if outer is None or is_user(outer.co_filename):
        return None
    jax_code = outer.co_filename.startswith(jax_dirs())
    bound = getattr(fun, "__self__", None)
    method = isinstance(fun, types.MethodType) and not isinstance(bound, types.ModuleType)
    found = _search_callable(fun, is_user, follow_self=not method)
    if found is None and method:
        # A library object's method (``svi.update``, a Linen module's ``apply``) whose instance holds the
        # user's code (a model, a guide; the module's own ``__call__``): the user jitted that method.
        found = _search_callable(bound, is_user, skip_root=False)
        if found is not None:
            code = _innermost_code(fun)
            if code is None or is_user(code.co_filename):
                return None
            name = f"{type(bound).__name__}.{getattr(fun, '__name__', code.co_name)}"
            return HeldFunction(found[0], code, name, library_of(code.co_filename) or "a library", method=True)
    if found is None:
        statics = [args[i] for i in (static_argnums or ()) if isinstance(i, int) and i < len(args)]
        found = _search_values(statics, is_user)
    if found is None:
        return None
    function, code, via_library = found
    library_file = via_library or ("" if jax_code else outer.co_filename)
    if not library_file:
        return None  # only JAX's own transformations around the user's function (grad, vmap, partial)
    library = library_of(library_file) or "a library"
    return HeldFunction(function, code, display_name(function, code), library)


def held_by_wrapper(holder: object, is_user: Callable[[str], bool]) -> HeldFunction | None:
    """The user's callable a library's wrapper object holds - the ``self`` of the frame the user's line
    called (``eqx.filter_jit``'s ``_JitWrapper``, ``nnx.jit``'s ``JitWrapped``, a partial binding one to
    an instance) - or None when it holds none."""
    found = _search_callable(holder, is_user, skip_root=False)
    if found is None:
        return None
    function, code, library_file = found
    for _ in range(8):  # the function itself, not the wrapper found to hold it through ``__wrapped__``
        if getattr(function, "__code__", None) is code or getattr(function, "__wrapped__", None) is None:
            break
        function = function.__wrapped__
    owner = own_code(holder)
    library = library_of(library_file or (owner.co_filename if owner is not None else "")) or "a library"
    return HeldFunction(function, code, display_name(function, code), library)


def _innermost_code(fun: object) -> types.CodeType | None:
    """The code of the innermost function of a ``__wrapped__`` chain (a library's decorated method)."""
    code = None
    for _ in range(8):
        own = getattr(fun, "__code__", None)
        if isinstance(own, types.CodeType):
            code = own
        inner = getattr(fun, "__wrapped__", None)
        if inner is None or inner is fun:
            break
        fun = inner
    return code


def _search_callable(
    fun: object, is_user: Callable[[str], bool], follow_self: bool = True, skip_root: bool = True
) -> tuple[Any, types.CodeType, str] | None:
    """The user's callable reachable from ``fun`` through wrappers, closures, ``__self__`` and attributes.

    Returns (callable, its user code, a library file met on the way, "" if only JAX's were).
    """
    library_file = ""
    jax = jax_dirs()
    queue: list[tuple[Any, int]] = [(fun, 0)]
    seen: set[int] = set()
    while queue and len(seen) < MAX_SEARCHED:
        value, depth = queue.pop(0)
        if id(value) in seen or value is None:
            continue
        seen.add(id(value))
        code = user_code(value, is_user)
        if code is not None and (value is not fun or not skip_root):
            return value, code, library_file
        own = own_code(value)
        if own is not None and not is_user(own.co_filename) and not own.co_filename.startswith(jax):
            library_file = library_file or own.co_filename
        if depth >= 3:
            continue
        for child in _held_by(value, follow_self or value is not fun):
            if callable(child):
                queue.append((child, depth + 1))
    return None


def _held_by(value: object, follow_self: bool = True) -> list[object]:
    """What a callable keeps: the function it wraps, its closure's values, its bound instance, its attributes."""
    held: list[object] = []
    if isinstance(value, functools.partial):
        held.append(value.func)
    wrapped = getattr(value, "__wrapped__", None)
    if wrapped is not None:
        held.append(wrapped)
    bound = getattr(value, "__self__", None)
    if follow_self and bound is not None and not isinstance(bound, types.ModuleType):
        held.append(bound)
    for cell in getattr(value, "__closure__", None) or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    try:
        attributes = vars(value)
    except TypeError:
        attributes = {}
    held += [v for k, v in list(attributes.items())[:64] if k != "__wrapped__"]
    return held


def _search_values(values: list[object], is_user: Callable[[str], bool]) -> tuple[Any, types.CodeType, str] | None:
    """The first user callable inside (tuples, lists, dicts of) static arguments."""
    stack = list(reversed(values))
    looked = 0
    while stack and looked < MAX_SEARCHED:
        value = stack.pop()
        looked += 1
        if isinstance(value, (tuple, list)):
            stack += reversed(list(value)[:256])
            continue
        if isinstance(value, dict):
            stack += reversed(list(value.values())[:256])
            continue
        if callable(value) and not isinstance(value, type):
            code = user_code(value, is_user)
            if code is not None:
                return value, code, ""
    return None


def entry_arguments(local_vars: dict[str, Any], code: types.CodeType, held: HeldFunction) -> dict[str, Any] | None:
    """The user's arguments by parameter name, read from the library's entry point (the frame the user's
    line called: its ``*args`` and ``**kwargs``); None when they cannot be told."""
    if not code.co_flags & inspect.CO_VARARGS:
        return None
    names = code.co_varnames
    position = code.co_argcount + code.co_kwonlyargcount
    args = local_vars.get(names[position], ())
    kwargs = local_vars.get(names[position + 1], {}) if code.co_flags & inspect.CO_VARKEYWORDS else {}
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return None
    holder = local_vars.get(names[0]) if code.co_argcount else None
    bound_args = getattr(holder, "args", None)
    if callable(getattr(holder, "func", None)) and isinstance(bound_args, tuple):
        # the entry is a partial binding the wrapper to an instance (a jitted method): its arguments first
        args = bound_args + args
        kwargs = {**(getattr(holder, "keywords", None) or {}), **kwargs}
    try:
        signature = inspect.signature(held.function)
    except (TypeError, ValueError):
        return None
    for given in (args, args[1:]):  # a method wrapper may pass its own instance first
        named = by_parameter(signature, given, kwargs)
        if named is not None:
            return named
    return None
