"""The user's own arguments to a library's jit wrapper, leaf by leaf, by the path the user types.

A library that jits for the user (``eqx.filter_jit``, ``nnx.jit``) hands jit its own repacking of the
arguments; what changed between two compilations is found here, in the user's objects, read at the
library's entry point: ``model.cfg`` (a new object), ``model.n_iter`` (a new number), ``x`` (a new shape).

Strings, hashes and ids only are kept: no argument value outlives the compilation.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import types
import weakref
from typing import Any

import jax

from jaxmagic.probes._compiles.metadata import pytree_metadata
from jaxmagic.probes._compiles.stack import CallInfo, StaticValue, static_value
from jaxmagic.probes._support.calls import call_names
from jaxmagic.probes._support.calls.wrapped import HeldFunction, entry_arguments
from jaxmagic.probes._support.fixes.traced_trial import abstract_arrays
from jaxmagic.report.wording import short_dtype

MAX_LEAVES = 2_000  # leaves of the user's arguments recorded per compilation
MAX_IDENTITIES = 40_000  # objects whose ids are gathered from the static arguments jit was given


def read_user_arguments(
    local_vars: dict[str, object],
    code: types.CodeType,
    held: HeldFunction,
    static_arguments: list[object],
    info: CallInfo,
    for_trial: bool = False,
) -> bool:
    """Describe the user's arguments read at the library's entry point (``local_vars`` of the frame the
    user's line called) in ``info``, in place of the library's own; False when they cannot be read.
    ``for_trial``: with a number among them, keep the call (arrays abstract) to try "pass it as an array"."""
    arguments = entry_arguments(local_vars, code, held)
    if arguments is None:
        return False
    info.parameter_names = list(arguments)
    info.static_argnames = []
    info.static_values = {}
    info.metadata = {}
    for name, value in arguments.items():
        info.metadata.update(pytree_metadata(name, value))
    info.leaves = argument_leaves(arguments, static_arguments)
    numbers = any(leaf.value is not None and leaf.value.kind == "number" for leaf in info.leaves.values()) or any(
        value.type_name in ("int", "float", "bool") for value in info.metadata.values()
    )
    if for_trial and numbers:
        _keep_for_trial(arguments, held, info)
    return True


def user_paths(user_frame: types.FrameType | None, jit_locals: dict[str, Any]) -> dict[str, str]:
    """JAX's name for each leaf a library's wrapper gave jit (``dynamic_nodonate['rest'][13]``, the paths of its
    cache-miss explanation) -> the user's path (``xb``), from jit's ``cache_miss`` locals (``call_names``)."""
    through = call_names.user_call(user_frame)
    signature = getattr(jit_locals.get("jit_info"), "fun_signature", None)
    if through is None or signature is None:
        return {}
    return through.jax_paths(
        tuple(jit_locals.get("args", ()) or ()), dict(jit_locals.get("kwargs", {}) or {}), list(signature.parameters)
    )


def _keep_for_trial(arguments: dict[str, Any], held: HeldFunction, info: CallInfo) -> None:
    """``info.trial_arguments`` / ``trial_function``: the user's call of the function the wrapper holds, its
    arrays abstract and every other value as given - what the wrapper traces and what it keeps static."""
    try:
        parameters = inspect.signature(held.function).parameters
    except (TypeError, ValueError):
        return
    positional = [
        name
        for name, p in parameters.items()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and name in arguments
    ]
    if any(p.kind is p.VAR_POSITIONAL for p in parameters.values()) or not set(arguments) <= set(parameters):
        return  # *args flattened into "args[0]" names (or a method's own instance): not rebuilt as a call
    with contextlib.suppress(Exception):  # an argument jaxmagic cannot make abstract: the fix stays untried
        args, kwargs = abstract_arrays(
            tuple(arguments[n] for n in positional), {n: v for n, v in arguments.items() if n not in positional}
        )
        info.trial_arguments = (args, kwargs, {name: index for index, name in enumerate(positional)})
        info.trial_function = weakref.ref(held.function)


@dataclasses.dataclass(frozen=True)
class LeafValue:
    """One leaf of the user's arguments at a compilation: an array's type, or another value's StaticValue."""

    array_type: str  # "f32[3]"; "" for a leaf that is not an array
    value: StaticValue | None  # for a leaf that is not an array
    held_static: bool = False  # found among the static arguments the library passed to jax.jit
    frozen: str = ""  # for an object compared by identity: what a frozen dataclass of its fields would do


def argument_leaves(arguments: dict[str, Any], static_arguments: list[object]) -> dict[str, LeafValue]:
    """Every leaf of the user's arguments by the path the user types (``model.cfg``, ``batch['x']``)."""
    held = _identities(static_arguments)
    out: dict[str, LeafValue] = {}
    for name, value in arguments.items():
        try:
            leaves = jax.tree_util.tree_flatten_with_path(value)[0]
        except Exception:
            continue
        for path, leaf in leaves:
            if len(out) >= MAX_LEAVES:
                return out
            where = name + _path_text(path)
            shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
            if isinstance(leaf, jax.Array) or (shape is not None and dtype is not None and hasattr(leaf, "ndim")):
                out[where] = LeafValue(_array_type(leaf), None)
            else:
                value = static_value(leaf)
                frozen = frozen_check(leaf) if value.kind == "object" else ""
                out[where] = LeafValue("", value, id(leaf) in held, frozen)
    return out


def _path_text(path: Any) -> str:
    parts = []
    for key in path:
        name = getattr(key, "name", None)
        if name is not None:
            parts.append(f".{name}")
        elif hasattr(key, "key"):
            parts.append(f"[{key.key!r}]")
        elif hasattr(key, "idx"):
            parts.append(f"[{key.idx}]")
        else:
            parts.append(str(key))
    return "".join(parts)


def _array_type(leaf: Any) -> str:
    dims = ",".join(str(d) for d in leaf.shape)
    weak = " weak" if getattr(leaf, "weak_type", False) else ""
    return f"{short_dtype(str(leaf.dtype))}[{dims}]{weak}"


def _identities(values: list[object]) -> set[int]:
    """The ids of everything inside (tuples, lists, dicts of) the static arguments jit was given."""
    found: set[int] = set()
    stack = list(values)
    while stack and len(found) < MAX_IDENTITIES:
        value = stack.pop()
        found.add(id(value))
        if isinstance(value, (tuple, list)):
            stack += list(value)[:4096]
        elif isinstance(value, dict):
            stack += list(value.values())[:4096]
    return found


def frozen_check(value: Any) -> str:
    """Try the frozen-dataclass fix on an object compared by identity: the same fields in a frozen dataclass,
    built twice from copies of the values, compare equal and hash alike (so equal ones share a cache key)."""
    fields = getattr(value, "__dict__", None)
    if callable(value) or not isinstance(fields, dict) or not fields:
        return ""  # a function or a jit wrapper is no record of settings
    if not all(isinstance(k, str) and k.isidentifier() and not k.startswith("__") for k in fields):
        return ""
    names = ", ".join(list(fields)[:6]) + (", ..." if len(fields) > 6 else "")
    try:
        frozen = dataclasses.make_dataclass(type(value).__name__, list(fields), frozen=True)
        first = frozen(**fields)
        second = frozen(**{k: copy.copy(v) for k, v in fields.items()})
        if first == second and hash(first) == hash(second):
            return (
                f"checked: a frozen dataclass with its fields ({names}), built twice from copies of these "
                "values, compares equal and hashes alike"
            )
    except Exception as error:
        return f"checked: a frozen dataclass of its fields ({names}) does not hash ({type(error).__name__})"
    return f"checked: a frozen dataclass of its fields ({names}) built from copies compares unequal"
