"""Donation: the arguments an output of the same shape and dtype can be written over, donated.

The traced program is compiled with those arguments donated (the user's Python is not traced again). It frees at
most the donated arguments, never a temporary: under ``WORTH_OFFERING`` of the peak it is not compiled, and a
trial's peak is never taken below the peak less what it frees. A program a library's jit made (``nnx.jit``,
``eqx.filter_jit``) is donated through that wrapper's own spelling (``_memory/library_transforms``).
"""

from __future__ import annotations

import math
import types
import warnings
from collections.abc import Sequence

import jax

from jaxmagic._jax import jaxpr_parts, jit_internals
from jaxmagic.probes._memory.library_transforms import LibraryJit, library_jit
from jaxmagic.probes._memory.program import CompiledCall, program_memory
from jaxmagic.probes._memory.records import DONATE, WORTH_OFFERING, ProgramMemory, WayDown
from jaxmagic.probes._memory.ways_down.naming import parameter, parameter_names
from jaxmagic.probes._support.calls.after_call import FREE, KEPT, AfterCall, argument_after_call
from jaxmagic.report.wording import format_bytes
from jaxmagic.usercode.source import is_user_file


def donated(call: CompiledCall, program: ProgramMemory) -> list[WayDown]:
    positional_info, _ = call.traced.args_info
    parameters = parameter_names(call.jitted)
    wrapper = library_jit(call.jitted, call.args)
    candidates, flat_of, every = _candidates(call, positional_info)
    if not candidates:
        return []
    free, kept = _needed_after(call, program, wrapper, candidates, parameters)
    # donate what the caller no longer needs; when it needs them all, the trial still says what donating frees
    donate = free if free else candidates
    flat = [i for position in donate for i in flat_of[position]]
    if wrapper is not None and wrapper.library == "equinox":
        flat = every  # eqx.filter_jit donates every array it is given, or none (donate="all")
    names = ", ".join(f"`{parameter(parameters, i)}`" for i in donate)
    argnums = f"({', '.join(map(str, donate))},)" if len(donate) == 1 else f"({', '.join(map(str, donate))})"
    avals = call.traced.jaxpr.in_avals
    # Donation lets an output reuse an argument's memory: it frees at most the donated arguments, never a
    # temporary. A peak lower than that bound is a misreading of the trial, never a claim.
    freed = sum(math.prod(avals[i].shape) * avals[i].dtype.itemsize for i in flat)
    title = _title(call, wrapper, names, argnums, program)
    if freed < WORTH_OFFERING * program.peak_bytes:
        why = f"not compiled: donation frees at most the donated {format_bytes(freed)} of the {format_bytes(program.peak_bytes)} peak"
        return [WayDown(DONATE, title, "", program.peak_bytes, problem=why)]
    program_fn = jaxpr_parts.jaxpr_function(call.traced.jaxpr)
    flat_specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    # JAX warns "Some donated buffers were not usable" of our trial, not of the user's code: not shown
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tried, _ = program_memory(jax.jit(program_fn, donate_argnums=tuple(flat)), flat_specs)
    tried.peak_bytes = max(tried.peak_bytes, program.peak_bytes - freed)
    left_out = _left_out(list(kept.values()))
    way = WayDown(
        DONATE,
        title,
        _code(call, wrapper, [parameter(parameters, i) for i in donate], argnums),
        program.peak_bytes,
        tried.peak_bytes if not tried.problem else None,
        how=f"compiled the traced program of `{program.function}` with those arguments donated"
        + (f" (left out: {left_out})" if free and kept else ""),
        problem=tried.problem,
        refused=tried.compile_error is not None,
        platform=tried.platform,
        withheld=""
        if free
        else f"{left_out}; donate only if you no longer need " + ("them" if len(kept) > 1 else "it"),
    )
    if way.lowers and way.code:
        less = format_bytes(program.peak_bytes - (way.peak_after or 0))
        nodes = wrapper is not None and wrapper.library == "flax.nnx"
        if nodes and all(not hasattr(call.args[i], "shape") for i in donate):  # graph nodes, not arrays
            way.code += f"  # nnx.jit puts the new state back into {names.replace('`', '')} ({less} less)"
        else:
            deleted = (
                "every array argument is" if wrapper is not None and wrapper.library == "equinox" else f"{names} are"
            )
            way.code += f"  # {deleted} deleted by the call: rebind them to its results ({less} less)"
    return [way]


def _candidates(
    call: CompiledCall, positional_info: Sequence[object]
) -> tuple[list[int], dict[int, list[int]], list[int]]:
    """The positions of arguments an output of the same shape and dtype can be written over (none donated
    already), each position's flat inputs, and every flat input of a dynamic argument."""
    info = jit_internals.jit_options(call.jitted)
    static = set(getattr(info, "static_argnums", ()) or ())
    outputs = {(tuple(a.shape), str(a.dtype)) for a in call.traced.jaxpr.out_avals}
    dynamic = [i for i in range(len(call.args)) if i not in static]
    candidates: list[int] = []
    flat_of: dict[int, list[int]] = {}
    every: list[int] = []
    start = 0
    for position, arg_info in zip(dynamic, positional_info):
        leaves = jax.tree.leaves(arg_info)
        flat_of[position] = list(range(start, start + len(leaves)))
        start += len(leaves)
        every += flat_of[position]
        if leaves and not any(leaf.donated for leaf in leaves):
            if any((tuple(leaf.shape), str(leaf.dtype)) in outputs for leaf in leaves):
                candidates.append(position)
    return candidates, flat_of, every


def _needed_after(
    call: CompiledCall, program: ProgramMemory, wrapper: LibraryJit | None, candidates: list[int], parameters: list[str]
) -> tuple[list[int], dict[int, AfterCall]]:
    """(the candidates the caller no longer needs after the call, {position: why the caller may still need
    it}) - read from the call's line (``_support/calls/after_call``): a donated array is deleted by the call.
    ``nnx.jit`` puts a graph node's new state back into the caller's object (``model`` stays usable);
    ``eqx.filter_jit(donate="all")`` donates every array argument, so every one the line passes must be free."""
    line = program.called_at.code if program.called_at is not None else program.call
    callee = program.function
    if wrapper is not None and wrapper.library == "equinox":
        passed = [argument_after_call(line, callee, i) for i in range(_count(line, callee))]
        kept = {i: after for i, after in enumerate(passed) if after.verdict != FREE}
        if not passed:
            kept = {0: argument_after_call(line, callee, 0)}
        return ([] if kept else list(candidates)), kept
    free: list[int] = []
    kept_by: dict[int, AfterCall] = {}
    for position in candidates:
        if wrapper is not None and wrapper.library == "flax.nnx" and not hasattr(call.args[position], "shape"):
            free.append(position)  # nnx.jit writes the graph node's new state back into the caller's object
            continue
        after = argument_after_call(line, callee, position, parameter(parameters, position))
        if after.verdict == FREE:
            free.append(position)
        else:
            kept_by[position] = after
    return free, kept_by


def _left_out(kept: list[AfterCall]) -> str:
    """Why the caller may still need these arguments, the names the line leaves bound said once:
    "`params`, `grads` may be used after the call (the line rebinds neither)"."""
    named = [after.written for after in kept if after.verdict == KEPT]
    said = [after.why for after in kept if after.verdict != KEPT]
    if len(named) == 1:
        said.insert(0, next(after.why for after in kept if after.verdict == KEPT))
    elif named:
        rebinds = "neither" if len(named) == 2 else "none of them"
        said.insert(0, f"{', '.join(f'`{n}`' for n in named)} may be used after the call (the line rebinds {rebinds})")
    return "; ".join(said)


def _count(line: str, callee: str) -> int:
    """How many arguments the line's call of ``callee`` passes (0 when it cannot be read)."""
    count = 0
    while argument_after_call(line, callee, count).written:
        count += 1
    return count


def _title(call: CompiledCall, wrapper: LibraryJit | None, names: str, argnums: str, program: ProgramMemory) -> str:
    if wrapper is None:
        where = "" if _users_function(call) else f" on the jax.jit that makes `{program.function}`"
        return f"donate {names} (donate_argnums={argnums}{where})"
    if wrapper.library == "equinox":
        return f'donate every array argument of `{wrapper.held.name}` ({wrapper.wrapper}(..., donate="all"))'
    plain = [n.strip("`") for n in names.split(", ")]
    return f"donate {names} ({wrapper.wrapper}(..., donate_argnames={wrapper.argnames(plain)}))"


def _code(call: CompiledCall, wrapper: LibraryJit | None, names: list[str], argnums: str) -> str:
    """What to write: the user's jit with the arguments donated; "" when the user wrote no jit we can name."""
    if wrapper is not None:
        return wrapper.donate_code(names, every=True)
    wrapped = _users_function(call)
    return f"jax.jit({wrapped.__name__}, donate_argnums={argnums})" if wrapped is not None else ""


def _users_function(call: CompiledCall) -> types.FunctionType | None:
    """The user's plain function a ``jax.jit`` holds (not one of JAX's transformations around it)."""
    wrapped = getattr(call.jitted, "__wrapped__", None)
    if isinstance(wrapped, types.FunctionType) and is_user_file(wrapped.__code__.co_filename):
        return wrapped
    return None
