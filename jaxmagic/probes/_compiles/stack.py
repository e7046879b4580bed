"""Reading the stack at a compilation: jit's ``cache_miss`` frame says what compiled and with which static arguments.

Strings, hashes and ids only: no argument value is kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import types
import weakref
from collections.abc import Callable
from typing import Any, TypeAlias

from jaxmagic._jax import jaxpr_parts, jit_internals
from jaxmagic.probes._compiles.baked import BakedValue, baked_values
from jaxmagic.probes._compiles.metadata import DEFAULT_REPR, MetaValue, fields_text, identity_check, pytree_metadata
from jaxmagic.probes._support.calls.wrapped import HeldFunction, find_held_function, jitted_by_its_caller
from jaxmagic.probes._support.fixes.traced_trial import abstract_arguments, abstract_arrays
from jaxmagic.usercode.source import defining_code

# (the call's args, its kwargs, parameter name -> position), array leaves abstract: to trace the function again
TrialArguments: TypeAlias = tuple[tuple[object, ...], dict[str, object], dict[str, int]]
# (a weakref to a functools.partial's function, its bound args, its bound keywords), array leaves abstract
TrialPartial: TypeAlias = tuple[weakref.ref[Callable[..., object]], tuple[object, ...], dict[str, object]]


@dataclasses.dataclass
class CallInfo:
    """What the stack says about one compilation; strings only."""

    kind: str = "user"
    defined_file: str = ""
    defined_line: int = 0
    parameter_names: list[str] = dataclasses.field(default_factory=list)
    static_argnames: list[str] = dataclasses.field(default_factory=list)
    static_values: dict[str, StaticValue] = dataclasses.field(default_factory=dict)
    call_site: tuple[str, int, str] | None = None
    wrapper: str = ""  # what jax.jit was given around the user's function: "functools.partial", ...
    metadata: dict[str, MetaValue] = dataclasses.field(default_factory=dict)  # static fields of pytree arguments
    started_site: tuple[str, int, str] | None = None  # the outermost user frame: the cell line that started it
    # the transformation that made the compiled program from a jitted function, run outside jit, as a
    # pattern for the function's name ("vmap({})", "grad({}) backward pass"); "" for jit's own call
    transformed: str = ""
    function: Any = None  # weakref to the Python function jit traced (compared with the last; never reported)
    # A library's callable between jit and the user's function (wrapped.py): the user's function's name
    # ("step", "SVI.update"); and the library ("equinox") when it called jit itself (eqx.filter_jit, nnx.jit)
    function_name: str = ""
    library: str = ""
    # The user's arguments leaf by leaf (user_arguments.LeafValue by path), when a library repacked them
    leaves: dict[str, Any] = dataclasses.field(default_factory=dict)
    # JAX's name for each leaf of the library's repacking -> the user's path (``call_names``): what JAX's
    # cache-miss explanation names ``dynamic_nodonate['rest'][13]`` is the user's ``xb``
    user_paths: dict[str, str] = dataclasses.field(default_factory=dict)
    # The Python values the traced function carries (closure, functools.partial arguments), by name; None
    # when they could not be read (baked.py)
    baked: dict[str, BakedValue] | None = None
    # The call as a static-argument fix can be tried on (``fixes/traced_trial``): (args, kwargs) with every
    # traced argument an abstract value (shape and dtype) and the static ones as given; only when a
    # static argument is a number (the fix "pass it traced" is offered for those). Dropped after the block.
    program: Any = None  # program_prints.ProgramPrint of the program compiled, in a multi-process job
    trial_arguments: TrialArguments | None = None  # (args, kwargs, parameter name -> position)
    # A functools.partial jit was given, for the baked-value trial (baked_trial.py): (weakref to its function,
    # its bound args, its bound keywords), arrays among them abstract. Dropped after the block.
    trial_partial: TrialPartial | None = None
    # The user's function a library's jit wrapper holds (weakref), to try a fix on with ``trial_arguments``
    # read at the wrapper's entry (the user's own arguments, arrays abstract). Dropped after the block.
    trial_function: Any = None


# JAX's rules for its jit primitive under each transformation (pjit.py): a program compiled below one
# of them, by ``_pjit_call_impl``, is the jitted function transformed and run outside jit.
TRANSFORMATION_RULES = {
    "_pjit_batcher": "vmap({})",
    "_pjit_jvp": "grad({})",
    "_pjit_linearize": "grad({})",
    "_pjit_partial_eval": "grad({})",
    "_pjit_transpose_fancy": "grad({}) backward pass",
    "_pjit_transpose": "grad({}) backward pass",
}


def read_transformed_program(local_vars: dict[str, Any], info: CallInfo, is_user: Callable[[str], bool]) -> None:
    """The jitted function whose transformed program ``_pjit_call_impl`` compiles (its ``jaxpr``)."""
    source = jaxpr_parts.program_source(local_vars.get("jaxpr"))
    if source is None:
        info.kind = "library"
        return
    _, info.defined_file, info.defined_line = source
    info.kind = "user" if is_user(info.defined_file) else "library"


def read_jit_frame(
    local_vars: dict[str, Any],
    info: CallInfo,
    is_user: Callable[[str], bool],
    for_trial: bool = True,
    called_from_user: bool = False,
) -> tuple[HeldFunction, list[Any]] | None:
    """Read jit's ``cache_miss`` frame into ``info``. For a library's callable holding the user's function
    (wrapped.py), returns it with the static arguments jit was given, to read the user's arguments by.
    ``for_trial``: keep the call's abstract arguments when a static argument is a number (``trial_arguments``).
    ``called_from_user``: the jitted callable was called from the user's code (no library frame between)."""
    fun = local_vars.get("fun")
    jit_info = local_vars.get("jit_info")
    args = local_vars.get("args", ()) or ()
    kwargs = local_vars.get("kwargs", {}) or {}
    if jit_internals.is_eager_operation(fun):
        info.kind = "eager"
        return None
    with contextlib.suppress(TypeError):
        info.function = weakref.ref(fun)
    code, info.wrapper = defining_code(fun, is_user)
    static_argnums = tuple(getattr(jit_info, "static_argnums", ()) or ())
    held = find_held_function(fun, tuple(args), static_argnums, is_user)
    if held is not None:
        code, info.function_name, info.wrapper = held.code, held.name, ""
    if code is not None:
        info.defined_file, info.defined_line = code.co_filename, code.co_firstlineno
        user = is_user(code.co_filename) or held is not None or jitted_by_its_caller(fun, called_from_user)
        info.kind = "user" if user else "library"
    if info.kind == "user" and held is None:
        info.baked = baked_values(fun, is_user)
    found = (held, [args[i] for i in static_argnums if i < len(args)]) if held is not None else None
    if jit_info is None:
        return found
    signature = getattr(jit_info, "fun_signature", None)
    params = list(signature.parameters) if signature is not None else []
    info.parameter_names = params
    names = []
    for index in getattr(jit_info, "static_argnums", ()) or ():
        name = params[index] if index < len(params) else f"#{index}"
        names.append(name)
        if index < len(args):
            info.static_values[name] = static_value(args[index])
    for name in getattr(jit_info, "static_argnames", ()) or ():
        if name not in names:
            names.append(name)
        if name in kwargs:
            info.static_values[name] = static_value(kwargs[name])
    info.static_argnames = names
    if info.kind == "user":
        static_indices = set(getattr(jit_info, "static_argnums", ()) or ())
        for index, value in enumerate(args):
            if index not in static_indices:
                name = params[index] if index < len(params) else f"argument {index}"
                info.metadata.update(pytree_metadata(name, value))
        for name, value in kwargs.items():
            if name not in names:
                info.metadata.update(pytree_metadata(name, value))
    # a static number, a number in a pytree's static field or one baked in: its fix ("pass it as an array")
    # is tried after the block
    number_types = ("int", "float", "bool")
    numbers = (
        any(value.kind == "number" for value in info.static_values.values())
        or any(value.type_name in number_types for value in info.metadata.values())
        or any(value.type_name in number_types for value in (info.baked or {}).values())
    )
    if for_trial and held is None and numbers:
        positions = set(getattr(jit_info, "static_argnums", ()) or ())
        with contextlib.suppress(Exception):  # an argument jaxmagic cannot make abstract: the fix stays untried
            abstract_args, abstract_kwargs = abstract_arguments(tuple(args), dict(kwargs), positions, set(names))
            at = {name: index for index, name in enumerate(params[: len(args)])}
            at.update({name: index for index, name in zip(getattr(jit_info, "static_argnums", ()) or (), names)})
            info.trial_arguments = (abstract_args, abstract_kwargs, at)
        if isinstance(fun, functools.partial) and info.trial_arguments is not None:
            with contextlib.suppress(Exception):
                info.trial_partial = (weakref.ref(fun.func), *abstract_arrays(fun.args, fun.keywords or {}))
    return found


@dataclasses.dataclass(frozen=True)
class StaticValue:
    """What the report keeps of one static argument's value: text, hash, identity - never the value."""

    text: str  # a whole short repr, or "<type> object" when the repr is long or shows an address
    hashed: int | None
    ident: int
    type_name: str
    by_identity: bool  # its hash and == are (or contain) object identity: functions, plain objects
    kind: str  # "number", "function", "functions" (a tuple of them), "object", "value"
    look: int = 0  # hash of the whole repr without addresses: equal-looking objects share it
    check: str = ""  # tried on the value: "checked: a copy of it compares unequal to it, ..."


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_REPR_CHARS = 60


def static_value(value: Any) -> StaticValue:
    """The printed value (whole, or type only) and hash of a static argument; the value itself is not kept."""
    type_name = type(value).__name__
    try:
        text = repr(value)
    except Exception:
        text = ""
    text = _ADDRESS.sub("", text)  # the same kind of object built again prints the same
    if DEFAULT_REPR.fullmatch(text):  # object's own repr says nothing of the value: its fields do
        text = fields_text(value, type_name) or text
    look = hash(text)
    if not text or len(text) > _REPR_CHARS or "\n" in text:
        text = f"<{type_name} object>"
    try:
        hashed = hash(value)
    except Exception:
        hashed = None
    by_identity = _hashed_by_identity(value)
    kind = _static_kind(value, by_identity)
    check = identity_check(value, kind in ("function", "object"))
    return StaticValue(text, hashed, id(value), type_name, by_identity, kind, look, check)


def _hashed_by_identity(value: Any, depth: int = 0) -> bool:
    if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)):
        return True
    if isinstance(value, (tuple, frozenset)) and depth < 3:
        return any(_hashed_by_identity(item, depth + 1) for item in list(value)[:64])
    cls = type(value)
    return getattr(cls, "__hash__", None) is object.__hash__ and getattr(cls, "__eq__", None) is object.__eq__


def _static_kind(value: Any, by_identity: bool) -> str:
    if isinstance(value, (bool, int, float, complex)):
        return "number"
    if not by_identity:
        return "value"
    if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)):
        return "function"
    if isinstance(value, (tuple, frozenset)):
        return "functions"
    return "object"
