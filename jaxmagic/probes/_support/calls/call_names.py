"""A jitted call's arguments named as the user's call wrote them - also through a library's jit wrapper.

For ``jax.jit`` the jitted function is the user's: a leaf is its parameter and JAX's path (``batch['x']``),
or what the user's line passed there (``passed_expressions``: ``X_host``). A library that jits for the
user hands jit its own packing: ``eqx.filter_jit`` calls its jitted function with ``(dynamic_donate,
dynamic_nodonate, static)``, ``nnx.jit`` each graph node as its ``NodeStates``, so JAX's names for the
leaves - a program's ``arg_names``, the paths of its cache-miss explanation, the flat inputs - are the
library's (``dynamic_nodonate['rest'][13]``, ``rngs.states[0][1]``). Both give jit the user's own arrays
(NumPy ones too), not copies: ``UserCall`` names a leaf by the leaf of the user's arguments that is the
same object (or the NumPy array JAX's ``TypedNdArray`` views), read at the wrapper's entry - the frame
the user's line called (``wrapped.entry_arguments``) - and written with the user's expression for its
parameter: ``xb``, ``batch['x']``, ``rngs.noise.key.value``.

The one mapping every probe that names a jitted call's argument asks: the host arrays of
``%%jax_transfers``, ``%%jax_doctor`` and ``%jax_watch`` (``host_arguments``), the keys of ``%%jax_keys``
(``keys/flows``, ``keys/reuse``) and the cache-miss paths of ``%%jax_compiles`` (``compiles/collector``).
It is built when a finding is first named, never kept: it holds the user's leaves only while it is used.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
from types import FrameType
from typing import Any

import jax

from jaxmagic.probes._support.calls.bound_arguments import by_parameter
from jaxmagic.probes._support.calls.line_values import NOTHING, parsed_line, value_of
from jaxmagic.probes._support.calls.wrapped import HeldFunction, entry_arguments, held_by_wrapper
from jaxmagic.usercode.source import code_kind, innermost_user_frame, is_user_file, source_line

MAX_LEAVES = 4_000  # leaves of the user's arguments named per call
_STACK_DEPTH = 400  # frames walked from an observer out to the user's line


@dataclasses.dataclass
class UserCall:
    """The user's call of a library's jit wrapper, as names for the leaves the wrapper gives jit."""

    function: str  # the user's function the wrapper holds ("make_step")
    paths: dict[int, str]  # id(the user's leaf) -> its path by parameter ("xb", "batch['x']"), as jax.jit names it
    written: dict[int, str]  # id(the user's leaf) -> its path from what the line wrote ("X_host", "np_x[i]")
    leaves: list[object]  # the user's leaves: held while the mapping is used, so an id stays its object's

    def name_of(self, leaf: object, as_written: bool = False) -> str:
        """The user's path of a leaf the wrapper gave jit (the same object, or the NumPy array a view of JAX's
        was made from): by the user's function's parameter, as JAX names a jitted function's arguments; or,
        ``as_written``, from the expression the user's line passed where it passed a name, attribute or
        subscript (as ``host_arguments`` names a plain jitted call's). "" when it is none of the user's (a
        library's own leaf: a counter, a marker)."""
        for _ in range(4):
            name = (as_written and self.written.get(id(leaf))) or self.paths.get(id(leaf))
            if name or leaf is None:
                return name or ""
            leaf = getattr(leaf, "base", None)
        return ""

    def jax_paths(
        self, jitted_args: tuple[object, ...], jitted_kwargs: dict[str, object], parameters: list[str]
    ) -> dict[str, str]:
        """JAX's name for each leaf of the call the wrapper made (``dynamic_nodonate['rest'][13]``: the jitted
        function's parameter and the leaf's path, as its cache-miss explanation writes it) -> the user's."""
        named: dict[str, str] = {}
        given = [*zip(parameters, jitted_args), *jitted_kwargs.items()]
        for parameter, value in given:
            try:
                leaves = jax.tree_util.tree_flatten_with_path(value)[0]
            except Exception:
                continue
            for path, leaf in leaves[:MAX_LEAVES]:
                user = self.name_of(leaf)
                if user:
                    named[parameter + jax.tree_util.keystr(path)] = user
        return named


def user_call(user_frame: FrameType | None = None) -> UserCall | None:
    """The user's call of a library's jit wrapper that ``user_frame``'s line is making now (default: the
    innermost user frame outside the caller), read from the wrapper's entry frame on the current stack;
    None for a call of a jitted function of the user's own (jax.jit: JAX's names are the user's), or when
    the wrapper's arguments cannot be told from the user's."""
    here: FrameType | None = sys._getframe(1)
    if user_frame is None:
        user_frame = innermost_user_frame(here)
    entry = None
    for _ in range(_STACK_DEPTH):
        if here is None or here is user_frame:
            break
        if here.f_back is user_frame:
            entry = here
            break
        here = here.f_back
    del here
    if entry is None or user_frame is None or code_kind(entry.f_code.co_filename) != "library":
        return None
    code = entry.f_code
    holder = entry.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
    held = held_by_wrapper(holder, is_user_file) if holder is not None else None
    if held is None:
        return None
    arguments = entry_arguments(entry.f_locals, code, held)
    if arguments is None:
        return None
    return _named(held.name, arguments, _written_for(arguments, entry, holder, held, user_frame))


def user_call_of(wrapper: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> UserCall | None:
    """``user_call`` for a call whose arguments are known, not read from a frame: a magic's own line
    (``%jax_hlo step(model, x)``) calling a library's jit wrapper; None when they do not fit its signature."""
    try:
        arguments = by_parameter(inspect.signature(wrapper), tuple(args), dict(kwargs))
    except (TypeError, ValueError):
        return None
    if arguments is None:
        return None
    held = held_by_wrapper(wrapper, is_user_file)
    return _named(held.name if held is not None else getattr(wrapper, "__name__", ""), arguments, {})


def _named(function: str, arguments: dict[str, Any], written: dict[str, str]) -> UserCall:
    """The call's leaves by the user's paths: by parameter, and from what the line wrote (``written``)."""
    paths: dict[int, str] = {}
    as_written: dict[int, str] = {}
    leaves: list[object] = []
    for parameter, value in arguments.items():
        for path, leaf in _leaves(value):
            if len(leaves) >= MAX_LEAVES:
                break
            paths.setdefault(id(leaf), parameter + path)
            if parameter in written:
                as_written.setdefault(id(leaf), written[parameter] + path)
            leaves.append(leaf)
    return UserCall(function, paths, as_written, leaves)


def _leaves(value: object) -> list[tuple[str, Any]]:
    try:
        return [(jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]]
    except Exception:
        return [("", value)]


def _written_for(
    arguments: dict[str, Any], entry: FrameType, holder: object, held: HeldFunction, user_frame: FrameType
) -> dict[str, str]:
    """Parameter -> what the user's line wrote for it (a name, an attribute, a subscript), for the
    parameters the line passed such an expression: matched by the value the wrapper's entry received."""
    code = entry.f_code
    if not code.co_flags & inspect.CO_VARARGS:
        return {}
    position = code.co_argcount + code.co_kwonlyargcount
    given = entry.f_locals.get(code.co_varnames[position], ())
    expressions = passed_expressions(holder, user_frame, user_frame.f_lineno) or passed_expressions(
        held.function, user_frame, user_frame.f_lineno
    )
    if not expressions or not isinstance(given, tuple):
        return {}
    written: dict[str, str] = {}
    for parameter, value in arguments.items():
        if parameter in expressions:
            written[parameter] = expressions[parameter]
            continue
        index = next((i for i, passed in enumerate(given) if passed is value), None)
        if index is not None and index in expressions:
            written[parameter] = expressions[index]
    return written


def passed_expressions(fun: object, frame: FrameType, lineno: int) -> dict[int | str, str]:
    """``{position or keyword: expression}``: what the user's line wrote for the arguments of its call of
    ``fun`` (a name, an attribute or a subscript: ``X_host``, ``self.Ainv``, ``np_x[i]``); {} when the call
    is not told (the callee is not a name of the frame, or the line calls something else)."""
    tree = parsed_line(source_line(frame.f_code.co_filename, lineno, "").code)
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.Call):
            continue
        callee = value_of(node.func, frame)
        if callee is NOTHING or not (callee is fun or getattr(callee, "__wrapped__", None) is fun):
            continue
        named: dict[int | str, str] = {}
        for index, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break  # later positions are not known
            if isinstance(arg, _NAMEABLE):
                named[index] = ast.unparse(arg)
        for keyword in node.keywords:
            if keyword.arg and isinstance(keyword.value, _NAMEABLE):
                named[keyword.arg] = ast.unparse(keyword.value)
        return named
    return {}


_NAMEABLE = (ast.Name, ast.Attribute, ast.Subscript)
