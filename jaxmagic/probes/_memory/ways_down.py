"""Ways down from a program's peak, each tried by compiling - never by running the user's program.

Every candidate is applied to the traced program or to the call, compiled with XLA's dumps on, and its
peak read as the original's was (``program.program_memory``); a candidate that does not lower the peak is
kept as tried and not offered. The candidates, from what the buffers at the peak show:

* **donation** - an argument an output of the same shape and dtype can be written over: the traced
  program compiled with ``donate_argnums`` (the user's Python is not traced again);
* **the batch gradient** - per-example gradients (``vmap(grad(f))``) whose output fills the peak: the
  gradient of the mean over the batch, ``grad(mean(vmap(f)))``, compiled (``f`` traced again);
* **jax.checkpoint** - activations saved for the backward pass fill the peak: the user's function that
  made them, rebound to ``jax.checkpoint`` of itself (also with a policy that keeps matrix products) in a
  copy of its module's globals, and the call compiled again (traced again; nothing of the user's changes);
* **chunks of a vmap** - a ``jax.vmap`` (the jitted function's outermost transformation) whose temporaries
  fill the peak: ``jax.lax.map(g, xs, batch_size=N)`` runs it a chunk of examples at a time, compiled
  for N an eighth, then a sixty-fourth of the examples (``g`` traced again);
* **a smaller input** - the peak exceeds what the device can give: the argument axis whose size the
  largest buffer carries, halved until the program fits (traced again at each size).
"""

from __future__ import annotations

import ast
import inspect
import math
import types
import warnings
from typing import Any

import jax
import jax.numpy as jnp

from jaxmagic._jax import jaxpr_parts, jit_internals
from jaxmagic._jax.transform_chain import per_example_gradient, vmapped
from jaxmagic.probes._memory.program import CompiledCall, program_memory
from jaxmagic.probes._memory.records import (
    OUTPUT,
    SAVED_FOR_BACKWARD,
    TEMPORARY,
    WORTH_OFFERING,
    Capacity,
    ProgramMemory,
    WayDown,
)
from jaxmagic.probes._memory.row_blocks import RowSplit, block_program, row_splits
from jaxmagic.report.source import is_user_file
from jaxmagic.report.wording import error_line, format_bytes

FITS_SHARE = 0.9  # a peak "fits" when it takes at most this share of what the device can give
ROW_TRIES = 3  # block sizes tried for the results a block of rows at a time
SAVED_SHARE = 0.2  # activations saved for the backward pass worth a checkpoint: this share of the peak


def ways_down(call: CompiledCall, program: ProgramMemory, capacity: Capacity | None) -> list[WayDown]:
    """Every candidate that applies, tried; ``program.ways_down`` keeps them (offered: ``program.offered``)."""
    found: list[WayDown] = []
    for attempt in (_donation, _batch_gradient, _checkpoint, _chunked_vmap):
        try:
            found += attempt(call, program)
        except Exception as error:  # a candidate we cannot build is one fewer, never a failed report
            found.append(WayDown(attempt.__name__.strip("_"), "", "", program.peak_bytes, problem=error_line(error)))
    available = capacity.available if capacity is not None else None
    if program.compile_error is not None or (available is not None and program.peak_bytes > available * FITS_SHARE):
        try:
            found += _row_blocks(call, program, available)
        except Exception as error:
            found.append(WayDown("rows", "", "", program.peak_bytes, problem=error_line(error)))
    for way in found:
        if way.refused:  # the compiler refused the trial: proven not to fit
            way.fits = False
        elif way.peak_after is not None and available is not None:
            way.fits = way.peak_after <= available * FITS_SHARE
    return found


# -- donation --------------------------------------------------------------------------------------


def _donation(call: CompiledCall, program: ProgramMemory) -> list[WayDown]:
    info = jit_internals.jit_options(call.jitted)
    static = set(getattr(info, "static_argnums", ()) or ())
    positional_info, _ = call.traced.args_info
    outputs = {(tuple(a.shape), str(a.dtype)) for a in call.traced.jaxpr.out_avals}
    parameters = _parameter_names(call.jitted)
    dynamic = [i for i in range(len(call.args)) if i not in static]
    donate, flat, start = [], [], 0
    for position, arg_info in zip(dynamic, positional_info):
        leaves = jax.tree.leaves(arg_info)
        indices = list(range(start, start + len(leaves)))
        start += len(leaves)
        if leaves and not any(leaf.donated for leaf in leaves):
            if any((tuple(leaf.shape), str(leaf.dtype)) in outputs for leaf in leaves):
                donate.append(position)
                flat += indices
    if not donate:
        return []
    names = ", ".join(f"`{_parameter(parameters, i)}`" for i in donate)
    argnums = f"({', '.join(map(str, donate))},)" if len(donate) == 1 else f"({', '.join(map(str, donate))})"
    avals = call.traced.jaxpr.in_avals
    # Donation lets an output reuse an argument's memory: it frees at most the donated arguments, never a
    # temporary. A peak lower than that bound is a misreading of the trial, never a claim.
    freed = sum(math.prod(avals[i].shape) * avals[i].dtype.itemsize for i in flat)
    title = f"donate {names} (donate_argnums={argnums})"
    if freed < WORTH_OFFERING * program.peak_bytes:
        why = f"not compiled: donation frees at most the donated {format_bytes(freed)} of the {format_bytes(program.peak_bytes)} peak"
        return [WayDown("donate", title, "", program.peak_bytes, problem=why)]
    program_fn = jaxpr_parts.jaxpr_function(call.traced.jaxpr)
    flat_specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    # JAX warns "Some donated buffers were not usable" of our trial, not of the user's code: not shown
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tried, _ = program_memory(jax.jit(program_fn, donate_argnums=tuple(flat)), flat_specs)
    tried.peak_bytes = max(tried.peak_bytes, program.peak_bytes - freed)
    wrapped = getattr(call.jitted, "__wrapped__", None)
    plain = isinstance(wrapped, types.FunctionType) and is_user_file(wrapped.__code__.co_filename)
    code = (
        f"jax.jit({wrapped.__name__}, donate_argnums={argnums})"
        if isinstance(wrapped, types.FunctionType) and plain
        else ""
    )
    where = "" if plain else f" on the jax.jit that makes `{program.function}`"
    way = WayDown(
        "donate",
        f"{title[:-1]}{where})",
        code,
        program.peak_bytes,
        tried.peak_bytes if not tried.problem else None,
        how=f"compiled the traced program of `{program.function}` with those arguments donated",
        problem=tried.problem,
        refused=tried.compile_error is not None,
        platform=tried.platform,
    )
    if way.lowers and way.code:
        way.code += (
            f"  # {names} are deleted by the call: rebind them to its results "
            f"({format_bytes(program.peak_bytes - (way.peak_after or 0))} less)"
        )
    return [way]


# -- per-example gradients -> the batch gradient ----------------------------------------------------


def _batch_gradient(call: CompiledCall, program: ProgramMemory) -> list[WayDown]:
    chain = per_example_gradient(call.jitted)
    if chain is None or not any(b.role == OUTPUT for b in program.buffers[:1]):
        return []
    f, in_axes, argnums = chain.function, chain.in_axes, chain.argnums

    def batch_gradient(*args):
        def mean_loss(*inner):
            return jnp.mean(jax.vmap(f, in_axes=in_axes)(*inner))

        return jax.grad(mean_loss, argnums=argnums)(*args)

    tried, _ = program_memory(jax.jit(batch_gradient), call.args, call.kwargs)
    parameters = ", ".join(_parameter_names(f)) or "*args"
    name = getattr(f, "__name__", "f")
    code = (
        f"jax.jit(jax.grad(lambda {parameters}: jnp.mean(jax.vmap({name}, in_axes={in_axes!r})({parameters})))"
        + (f", argnums={argnums!r}" if argnums != 0 else "")
        + ")"
    )
    return [
        WayDown(
            "batch_gradient",
            "the gradient of the mean, if the per-example gradients are averaged next",
            code,
            program.peak_bytes,
            tried.peak_bytes if not tried.problem else None,
            how=f"compiled grad(mean(vmap({name}))) for the same arguments",
            problem=tried.problem,
            refused=tried.compile_error is not None,
            platform=tried.platform,
            traced_again=True,
        )
    ]


# -- chunks of a vmap --------------------------------------------------------------------------------


def _chunked_vmap(call: CompiledCall, program: ProgramMemory) -> list[WayDown]:
    mapping = vmapped(call.jitted)
    if mapping is None or mapping.out_axes != 0 or call.kwargs:
        return []
    axes = [mapping.in_axes] * len(call.args) if isinstance(mapping.in_axes, int) else list(mapping.in_axes)
    if len(axes) != len(call.args) or any(a not in (0, None) for a in axes) or 0 not in axes:
        return []
    temporaries = sum(b.bytes for b in program.buffers if b.role in (TEMPORARY, SAVED_FOR_BACKWARD))
    if temporaries < SAVED_SHARE * program.peak_bytes:
        return []
    examples = _leading(jax.tree.leaves(call.args[axes.index(0)])[0]) or 0
    g = mapping.function
    # what the user's call passed (`nearest_v(x, x)`), else the mapped function's parameter names
    names = _argument_texts(program.call, len(axes)) or _parameter_names(g) or [f"a{i}" for i in range(len(axes))]
    mapped = [n for n, a in zip(names, axes) if a == 0]
    ways: list[WayDown] = []
    for divisor in (8, 64):
        size = max(examples // divisor, 1)
        if ways and (size == ways[-1].peak_after or size >= examples):
            break
        tried, _ = program_memory(jax.jit(_lax_map_of(g, axes, size)), call.args)
        name = getattr(g, "__name__", "<lambda>")
        inner = ", ".join(
            f"m[{mapped.index(n)}]" if a == 0 and len(mapped) > 1 else "m" if a == 0 else n for n, a in zip(names, axes)
        )
        xs = mapped[0] if len(mapped) == 1 else f"({', '.join(mapped)})"
        code = f"jax.lax.map(lambda m: {name}({inner}), {xs}, batch_size={size})" if name.isidentifier() else ""
        ways.append(
            WayDown(
                "chunk",
                f"the vmap in chunks of {size:,} of its {examples:,} examples (jax.lax.map)",
                code,
                program.peak_bytes,
                tried.peak_bytes if not tried.problem else None,
                how=f"compiled jax.lax.map of the vmapped function with batch_size={size}",
                problem=tried.problem,
                refused=tried.compile_error is not None,
                platform=tried.platform,
                traced_again=True,
            )
        )
        if ways[-1].lowers:
            break
    return ways


def _argument_texts(call: str, count: int) -> list[str]:
    """The source of each positional argument of a call's text, when it has ``count`` of them."""
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return []
    if not isinstance(node, ast.Call) or node.keywords or len(node.args) != count:
        return []
    return [ast.unparse(a) for a in node.args]


def _lax_map_of(g, axes: list, size: int):
    """``g`` mapped over the axis-0 arguments a chunk of ``size`` at a time, the others held fixed."""

    def chunked(*args):
        mapped = tuple(a for a, axis in zip(args, axes) if axis == 0)

        def one(m):
            parts = iter(m)
            return g(*(next(parts) if axis == 0 else a for a, axis in zip(args, axes)))

        return jax.lax.map(one, mapped, batch_size=size)

    return chunked


# -- jax.checkpoint ---------------------------------------------------------------------------------


def _checkpoint(call: CompiledCall, program: ProgramMemory) -> list[WayDown]:
    saved = [b for b in program.buffers if b.role == SAVED_FOR_BACKWARD and b.made_at is not None]
    saved_bytes = sum(b.bytes for b in saved)
    if not saved or saved_bytes < SAVED_SHARE * program.peak_bytes:
        return []
    by_function: dict[tuple[str, str], int] = {}
    for buffer in saved:
        assert buffer.made_at is not None
        key = (buffer.made_at.filename, buffer.made_at.function)
        by_function[key] = by_function.get(key, 0) + buffer.bytes
    (filename, name), _ = max(by_function.items(), key=lambda item: item[1])
    title = f"jax.checkpoint around `{name}`"
    recomputed = (
        f"its {format_bytes(by_function[filename, name])} of activations recomputed in the backward pass, not kept"
    )
    entry = getattr(call.jitted, "__wrapped__", None)
    module_globals = getattr(entry, "__globals__", None)
    layer = module_globals.get(name) if module_globals is not None else None
    if not (isinstance(entry, types.FunctionType) and isinstance(layer, types.FunctionType)) or not _is_function_of(
        layer, name, filename
    ):
        why = (
            f"`{name}` is not a function your module names globally (a method or a closure)"
            if isinstance(entry, types.FunctionType)
            else f"the jitted function is not a plain function of yours ({type(entry).__name__})"
        )
        return [WayDown("checkpoint", title, f"{name} = jax.checkpoint({name})", program.peak_bytes, problem=why)]
    ways = []
    for policy, text in (
        (None, ""),
        (
            jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
            "jax.checkpoint_policies.dots_with_no_batch_dims_saveable",
        ),
    ):
        wrapped = jax.checkpoint(layer, policy=policy) if policy is not None else jax.checkpoint(layer)
        copied = _with_global(entry, name, wrapped)
        info = jit_internals.jit_options(call.jitted)
        jitted = jax.jit(copied, static_argnums=tuple(getattr(info, "static_argnums", ()) or ()))
        tried, _ = program_memory(jitted, call.args, call.kwargs)
        policy_text = f", policy={text}" if text else ""
        ways.append(
            WayDown(
                "checkpoint",
                title + (" keeping matrix products" if text else ""),
                f"{name} = jax.checkpoint({name}{policy_text})",
                program.peak_bytes,
                tried.peak_bytes if not tried.problem else None,
                how=f"compiled `{program.function}` with `{name}` checkpointed: {recomputed}",
                problem=tried.problem,
                refused=tried.compile_error is not None,
                platform=tried.platform,
                traced_again=True,
            )
        )
    return ways


def _is_function_of(value: Any, name: str, filename: str) -> bool:
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


def _function_copy(function: types.FunctionType, globals_: dict) -> types.FunctionType:
    copy = types.FunctionType(
        function.__code__, globals_, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__dict__.update(function.__dict__)
    copy.__qualname__ = function.__qualname__
    return copy


# -- blocks of rows ----------------------------------------------------------------------------------


def _row_blocks(call: CompiledCall, program: ProgramMemory, available: int | None) -> list[WayDown]:
    """The results a block of an input's rows at a time, where the traced program says that is the same
    computation (``row_blocks``): compiled at block sizes that divide the rows, smallest first that fits."""
    splits, refused = row_splits(call.traced.jaxpr)
    if not splits:
        why = refused[0] if refused else "no input's rows carry the rows of every result"
        return [WayDown("rows", "the results a block of rows at a time", "", program.peak_bytes, problem=why)]
    split = min(splits, key=lambda s: (not s.whole, len(s.uses)))
    names = _flat_names(call)
    name = names[split.input] if split.input < len(names) else f"input {split.input}"
    target = (available or program.peak_bytes) * FITS_SHARE / 2  # room for what does not shrink with the rows
    divisors = [d for d in range(2, split.rows + 1) if split.rows % d == 0 and program.peak_bytes / d <= target]
    divisors = [d for d in divisors if d >= 2][:1] or [d for d in range(2, split.rows + 1) if split.rows % d == 0][-1:]
    ways: list[WayDown] = []
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in call.traced.jaxpr.in_avals]
    count = divisors[0] if divisors else 0
    for _ in range(ROW_TRIES if count else 0):
        block = split.rows // count
        tried, _ = program_memory(jax.jit(block_program(call.traced.jaxpr, split, block)), specs)
        ways.append(_row_way(program, split, name, block, tried, call))
        if tried.problem or (
            available is not None and tried.compile_error is None and tried.peak_bytes <= available * FITS_SHARE
        ):
            break
        bigger = [d for d in range(count + 1, split.rows + 1) if split.rows % d == 0 and d >= 2 * count]
        if not bigger:
            break
        count = bigger[0]
    return ways


def _row_way(
    program: ProgramMemory, split: RowSplit, name: str, block: int, tried: ProgramMemory, call: CompiledCall
) -> WayDown:
    fn = program.function
    blocks = f"{name}.reshape({split.rows // block}, {block}{', ...' if split.rank > 1 else ''})"
    texts = _argument_texts(program.call, len(call.args)) if program.call else []
    if not texts or not all(t.isidentifier() for t in texts):  # `f(jnp.linspace(...))`: its parameters' names
        texts = _parameter_names(call.jitted)
    elif len(texts) == len(_flat_names(call)):  # one array per argument: the call's own names
        name = texts[split.input]
    uses = ", ".join(f"`{u.text}`" if u.text else f"line {u.line.start_line}" for u in split.uses if u.line is not None)
    at = f" (line {split.uses[0].line.start_line})" if split.uses and split.uses[0].line is not None else ""
    if split.whole:
        title = f"`{fn}` on {block:,} of `{name}`'s {split.rows:,} rows at a time"
        inner = ", ".join("q" if t == name else t for t in texts)
        code = f"jax.lax.map(lambda q: {fn}({inner}), {blocks})" if name in texts and set(split.out_axes) == {0} else ""
    else:
        title = f"`{fn}` on {block:,} of `{name}`'s {split.rows:,} rows at a time, against all of `{name}`"
        code = (
            f"jax.lax.map(lambda q: {fn}_rows(q, {', '.join(texts) or '...'}), {blocks})"
            f"  # {fn}_rows: `{fn}` reading the block `q` for {uses or 'those rows'}{at}"
        )
    return WayDown(
        "rows",
        title,
        code,
        program.peak_bytes,
        tried.peak_bytes if not tried.problem else None,
        how=(
            f"compiled jax.lax.map over {split.rows // block} blocks of the traced program, where it reads "
            f"`{name}` as rows ({uses or 'all its uses'}; the program's data flow says each result row needs only its own)"
        ),
        problem=tried.problem,
        refused=tried.compile_error is not None,
        platform=tried.platform,
    )


def _flat_names(call: CompiledCall) -> list[str]:
    """Each flat input's name as the user's call passes it (``pts``, ``params['w']``)."""
    parameters = _parameter_names(call.jitted)
    leaves = jax.tree_util.tree_flatten_with_path((call.args, call.kwargs))[0]
    return [_path_name(path, parameters) for path, _ in leaves]


def _leading(leaf) -> int | None:
    shape = getattr(leaf, "shape", None)
    return int(shape[0]) if shape else None


def _parameter_names(fn) -> list[str]:
    inner = fn
    for _ in range(6):  # through jit and functools.wraps to the user's own function
        nxt = getattr(inner, "__wrapped__", None)
        if nxt is None:
            break
        inner = nxt
    try:
        return [
            p.name
            for p in inspect.signature(inner).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return []


def _parameter(parameters: list[str], index: int) -> str:
    return parameters[index] if index < len(parameters) else f"argument {index}"


def _path_name(path, parameters: list[str]) -> str:
    if not path:
        return "argument"
    first, rest = path[0], path[1:]
    if getattr(first, "idx", None) == 0 and len(rest) >= 1:  # (args, kwargs)[0][i]: a positional argument
        position = rest[0]
        index = getattr(position, "idx", None)
        head = _parameter(parameters, index) if isinstance(index, int) else "argument"
        return head + jax.tree_util.keystr(tuple(rest[1:]))
    if len(rest) >= 1:  # a keyword argument
        key = getattr(rest[0], "key", "keyword")
        return str(key) + jax.tree_util.keystr(tuple(rest[1:]))
    return "argument"
