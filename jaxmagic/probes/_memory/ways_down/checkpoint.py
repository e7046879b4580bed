"""Checkpointing: activations saved for the backward pass fill the peak; the layer that made them recomputes them.

Three layers, one kind of way (``CHECKPOINT``), each tried by compiling the call traced again:

* **a scan's body** (the residuals a scan over layers stacks, ``scan_bodies``);
* **a function** the user's module names globally: rebound to ``jax.checkpoint`` of itself (also with a policy
  that keeps matrix products) in a copy of its module's globals when the user jitted a function of that
  module - the user's module is left as it is; when the jitted function is JAX's (``jax.jit(jax.grad(loss))``)
  or a library's (``nnx.jit``), no copy reaches it: the module's own global is rebound while the call is traced;
* **a library module's method** (Linen ``Block.__call__``, an NNX or Equinox module's): decorated with the
  library's own remat (``library_transforms.remat_for_class``: ``nn.remat``, ``nnx.remat``,
  ``eqx.filter_checkpoint``), which handles the module's state where ``jax.checkpoint`` cannot take ``self``:
  the class's attribute is replaced while the call is traced.

What is rebound in place is put back however the trace ends (another thread running the user's code meanwhile
would run the checkpointed layer: the same values, recomputed); the trace runs
  under a cache key of jaxmagic's own (``_jax/retrace.fresh_traces``), so no trace made meanwhile (a scan
  body's, an inner jit's: keyed by the same functions) is met by the user's later calls, and none of the
  user's cached traces stands in for the trial's.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import jax

from jaxmagic._jax import jit_internals
from jaxmagic._jax.retrace import fresh_traces
from jaxmagic.probes._memory.library_transforms import LibraryRemat, library_jit, remat_for_class
from jaxmagic.probes._memory.program import CompiledCall, program_memory
from jaxmagic.probes._memory.records import CHECKPOINT, SAVED_FOR_BACKWARD, PeakBuffer, ProgramMemory, WayDown
from jaxmagic.probes._memory.ways_down.fresh import fresh_jit
from jaxmagic.probes._memory.ways_down.scan_bodies import scan_body_checkpoint
from jaxmagic.report.wording import format_bytes

SAVED_SHARE = 0.2  # activations saved for the backward pass worth a checkpoint: this share of the peak
DOTS = "jax.checkpoint_policies.dots_with_no_batch_dims_saveable"


def checkpointed(call: CompiledCall, program: ProgramMemory) -> list[WayDown]:
    saved = [b for b in program.buffers if b.role == SAVED_FOR_BACKWARD and b.made_at is not None]
    if not saved or sum(b.bytes for b in saved) < SAVED_SHARE * program.peak_bytes:
        return []
    stacked = [b for b in saved if b.stacked and b.scan_at is not None]
    # a scan's body is checkpointed as a whole; a method the body calls (a library module's layer scanned
    # over: ``nnx.scan`` of ``Block.__call__``) is also a layer the library's remat can decorate
    layers = [b for b in saved if b not in stacked or "." in (b.made_at.function if b.made_at else "")]
    ways: list[WayDown] = []
    if sum(b.bytes for b in stacked) >= SAVED_SHARE * program.peak_bytes:
        ways += scan_body_checkpoint(call, program, stacked)
    if sum(b.bytes for b in layers) >= SAVED_SHARE * program.peak_bytes:
        ways += _layer_checkpoint(call, program, layers)
    return ways


def _layer_checkpoint(call: CompiledCall, program: ProgramMemory, saved: list[PeakBuffer]) -> list[WayDown]:
    """Checkpoint the function (or method) whose activations fill most of the peak."""
    by_function: dict[tuple[str, str], int] = {}
    for buffer in saved:
        assert buffer.made_at is not None
        key = (buffer.made_at.filename, buffer.made_at.function)
        by_function[key] = by_function.get(key, 0) + buffer.bytes
    (filename, name), kept = max(by_function.items(), key=lambda item: item[1])
    recomputed = f"its {format_bytes(kept)} of activations recomputed in the backward pass, not kept"
    if "." in name:  # a method: ``Block.__call__``
        return _method_remat(call, program, filename, name, recomputed)
    return _function_checkpoint(call, program, filename, name, recomputed)


# -- a function the module names globally --------------------------------------------------------------


def _function_checkpoint(
    call: CompiledCall, program: ProgramMemory, filename: str, name: str, recomputed: str
) -> list[WayDown]:
    """The function rebound to ``jax.checkpoint`` of itself: in a copy of the module's globals when the user
    jitted a function of that module; else (``jax.jit(jax.grad(loss))``, a library's jit) in the module
    itself while the call is traced again, under a cache key of jaxmagic's own."""
    title = f"jax.checkpoint around `{name}`"
    wrapped_by_jit = getattr(call.jitted, "__wrapped__", None)
    entry = wrapped_by_jit if isinstance(wrapped_by_jit, types.FunctionType) else None
    plain = entry is not None and library_jit(call.jitted, call.args) is None
    namespace = entry.__globals__ if entry is not None and plain else _namespace_of(call, filename, name)
    layer = namespace.get(name) if namespace is not None else None
    if namespace is None or not isinstance(layer, types.FunctionType) or not _is_function_of(layer, filename):
        why = f"`{name}` is not a function your module names globally (a closure or a local function)"
        return [WayDown(CHECKPOINT, title, f"{name} = jax.checkpoint({name})", program.peak_bytes, problem=why)]
    ways = []
    for policy, text in ((None, ""), (jax.checkpoint_policies.dots_with_no_batch_dims_saveable, DOTS)):
        wrapped = jax.checkpoint(layer, policy=policy) if policy is not None else jax.checkpoint(layer)
        how = f"compiled `{program.function}` with `{name}` checkpointed: {recomputed}"
        if entry is not None and plain:
            info = jit_internals.jit_options(call.jitted)
            jitted = jax.jit(
                _with_global(entry, name, wrapped), static_argnums=tuple(getattr(info, "static_argnums", ()) or ())
            )
            tried, _ = program_memory(jitted, call.args, call.kwargs)
        else:
            tried, first_use = _traced_with(call, namespace, name, wrapped, f"{filename}:{name}:{text}")
            how += _FIRST_USE if first_use else ""
        code = f"{name} = jax.checkpoint({name}{f', policy={text}' if text else ''})"
        ways.append(_way(program, tried, title + (" keeping matrix products" if text else ""), code, how))
    return ways


_FIRST_USE = "; the cache key it was traced under was made now, so your jitted functions compile once more"


def _traced_with(call: CompiledCall, owner: Any, name: str, value: Any, token: str) -> tuple[ProgramMemory, bool]:
    """The call traced again and compiled with ``owner``'s ``name`` (a module's global, a class's method)
    bound to ``value`` meanwhile; whether jaxmagic's cache key was made for it (``fresh_traces``)."""
    with fresh_traces(f"jaxmagic-memory-checkpoint:{token}") as retrace, _rebound(owner, name, value):
        tried, _ = program_memory(fresh_jit(call), call.args, call.kwargs)
    return tried, retrace.first_use


def _namespace_of(call: CompiledCall, filename: str, name: str) -> dict[str, Any] | None:
    """The module namespace (the jitted function's, one loaded from ``filename``, ``__main__``) whose global
    ``name`` is a function defined in ``filename``."""
    entry = _users_entry(call)
    for namespace in (getattr(entry, "__globals__", None), *_modules_of(filename)):
        if isinstance(namespace, dict) and _is_function_of(namespace.get(name), filename):
            return namespace
    return None


def _users_entry(call: CompiledCall) -> Any:
    """The user's function the jitted call runs: ``jax.jit``'s own, or the one a library's jit holds."""
    wrapper = library_jit(call.jitted, call.args)
    return wrapper.held.function if wrapper is not None else getattr(call.jitted, "__wrapped__", None)


def _is_function_of(value: Any, filename: str) -> bool:
    code = getattr(value, "__code__", None)
    return isinstance(value, types.FunctionType) and code is not None and code.co_filename == filename


def _with_global(entry: types.FunctionType, name: str, value: Any) -> types.FunctionType:
    """A copy of ``entry`` whose module globals say ``name = value`` - and so do the copies of the module's
    other functions it reaches through them; the user's own module is left as it is."""
    original = entry.__globals__
    copied: dict[str, Any] = dict(original)
    copied[name] = value
    for key, item in original.items():
        if key != name and isinstance(item, types.FunctionType) and item.__globals__ is original:
            copied[key] = _function_copy(item, copied)
    return _function_copy(entry, copied)


def _function_copy(function: types.FunctionType, globals_: dict[str, object]) -> types.FunctionType:
    copy = types.FunctionType(
        function.__code__, globals_, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__dict__.update(function.__dict__)
    copy.__qualname__ = function.__qualname__
    return copy


# -- a library module's method ---------------------------------------------------------------------------


def _method_remat(
    call: CompiledCall, program: ProgramMemory, filename: str, qualname: str, recomputed: str
) -> list[WayDown]:
    owner, method = qualname.rsplit(".", 1)
    title = f"the remat of `{qualname}`"
    found = _class_of(call, filename, qualname)
    if isinstance(found, str):
        return [WayDown(CHECKPOINT, title, "", program.peak_bytes, problem=found)]
    remat = remat_for_class(found)
    if remat is None:
        why = f"`{owner}` is no module of a library known here, and jax.checkpoint cannot take its `self`"
        return [WayDown(CHECKPOINT, title, "", program.peak_bytes, problem=why)]
    if isinstance(remat, str):
        return [WayDown(CHECKPOINT, title, "", program.peak_bytes, problem=remat)]
    make = remat.make()
    if make is None:
        why = f"{remat.library} is not loaded"
        return [WayDown(CHECKPOINT, title, "", program.peak_bytes, problem=why)]
    ways = []
    for policy, text in ((None, ""), (jax.checkpoint_policies.dots_with_no_batch_dims_saveable, DOTS)):
        decorator = _decorator(remat, text)
        original = found.__dict__[method]
        replacement = make(original, policy=policy) if policy is not None else make(original)
        tried, first_use = _traced_with(call, found, method, replacement, f"{filename}:{qualname}:{text}")
        how = f"compiled `{program.function}` with `{qualname}` decorated with {decorator}: {recomputed}"
        how += _FIRST_USE if first_use else ""
        note = f", {remat.note}" if remat.note else ""
        ways.append(
            _way(
                program,
                tried,
                f"{decorator} on `{qualname}`" + (" keeping matrix products" if text else ""),
                f"{decorator}  # above `def {method}` in `class {owner}`{note}",
                how,
            )
        )
    return ways


def _decorator(remat: LibraryRemat, policy: str) -> str:
    if not policy:
        return remat.decorator
    if remat.library == "flax.linen":  # nn.remat takes the module or method first: no decorator factory
        return f"@functools.partial(nn.remat, policy={policy})"
    return f"{remat.decorator}(policy={policy})"


def _class_of(call: CompiledCall, filename: str, qualname: str) -> type | str:
    """The class whose method ``qualname`` (defined in ``filename``) is, from the namespaces the user's code
    runs in: the jitted function's module, a module loaded from ``filename``, ``__main__``. A str says why not."""
    parts = qualname.split(".")
    if any(p.startswith("<") for p in parts):
        return f"`{qualname}` is defined inside a function: its class cannot be reached to decorate it"
    namespaces = []
    entry = _users_entry(call)
    for candidate in (getattr(entry, "__globals__", None), *_modules_of(filename)):
        if isinstance(candidate, dict):
            namespaces.append(candidate)
    for namespace in namespaces:
        value: Any = namespace.get(parts[0])
        for part in parts[1:-1]:
            value = getattr(value, part, None)
        method = getattr(value, "__dict__", {}).get(parts[-1]) if isinstance(value, type) else None
        if isinstance(value, type) and _defined_in(method, filename):
            return value
    return f"no module of yours names the class of `{qualname}` globally"


def _modules_of(filename: str) -> list[dict[str, Any]]:
    found = [vars(m) for m in list(sys.modules.values()) if getattr(m, "__file__", None) == filename]
    main = sys.modules.get("__main__")
    return found + ([vars(main)] if main is not None else [])


def _defined_in(method: Any, filename: str) -> bool:
    """Whether ``method`` (through the wrappers a library put around it) is code of ``filename``."""
    for _ in range(8):
        code = getattr(method, "__code__", None)
        if code is not None and code.co_filename == filename:
            return True
        method = getattr(method, "__wrapped__", None)
        if method is None:
            return False
    return False


@contextlib.contextmanager
def _rebound(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``name`` bound to ``value`` within the block - a module's global (``owner`` its namespace) or a class's
    attribute - and the original put back however the block ends."""
    if isinstance(owner, dict):
        original = owner[name]
        owner[name] = value
        try:
            yield
        finally:
            owner[name] = original
        return
    original = owner.__dict__[name]
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _way(program: ProgramMemory, tried: ProgramMemory, title: str, code: str, how: str) -> WayDown:
    return WayDown(
        CHECKPOINT,
        title,
        code,
        program.peak_bytes,
        tried.peak_bytes if not tried.problem else None,
        how=how,
        problem=tried.problem,
        refused=tried.compile_error is not None,
        platform=tried.platform,
        traced_again=True,
    )
