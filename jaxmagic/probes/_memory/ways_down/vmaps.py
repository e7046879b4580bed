"""Ways down of a ``vmap``: per-example gradients replaced by the batch gradient, a vmap run in chunks.

* **the batch gradient** - per-example gradients (``vmap(grad(f))``) whose output fills the peak: the gradient
  of the mean over the batch, ``grad(mean(vmap(f)))``, compiled (``f`` traced again);
* **chunks of a vmap** - a ``jax.vmap`` (the jitted function's outermost transformation) whose temporaries
  fill the peak: ``jax.lax.map(g, xs, batch_size=N)`` runs it a chunk of examples at a time, compiled for N an
  eighth, then a sixty-fourth of the examples (``g`` traced again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp

from jaxmagic._jax.transform_chain import per_example_gradient, vmapped
from jaxmagic.probes._memory.program import CompiledCall, program_memory
from jaxmagic.probes._memory.records import (
    BATCH_GRADIENT,
    CHUNK,
    OUTPUT,
    SAVED_FOR_BACKWARD,
    TEMPORARY,
    ProgramMemory,
    WayDown,
)
from jaxmagic.probes._memory.ways_down.naming import argument_texts, leading, parameter_names

SAVED_SHARE = 0.2  # temporaries worth running a vmap in chunks: this share of the peak


def batch_gradient(call: CompiledCall, program: ProgramMemory) -> list[WayDown]:
    chain = per_example_gradient(call.jitted)
    if chain is None or not any(b.role == OUTPUT for b in program.buffers[:1]):
        return []
    f, in_axes, argnums = chain.function, chain.in_axes, chain.argnums

    def batch_gradient(*args: object) -> object:
        def mean_loss(*inner: object) -> jax.Array:
            return jnp.mean(jax.vmap(f, in_axes=in_axes)(*inner))

        return jax.grad(mean_loss, argnums=argnums)(*args)

    tried, _ = program_memory(jax.jit(batch_gradient), call.args, call.kwargs)
    parameters = ", ".join(parameter_names(f)) or "*args"
    name = getattr(f, "__name__", "f")
    code = (
        f"jax.jit(jax.grad(lambda {parameters}: jnp.mean(jax.vmap({name}, in_axes={in_axes!r})({parameters})))"
        + (f", argnums={argnums!r}" if argnums != 0 else "")
        + ")"
    )
    return [
        WayDown(
            BATCH_GRADIENT,
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


def chunked_vmap(call: CompiledCall, program: ProgramMemory) -> list[WayDown]:
    mapping = vmapped(call.jitted)
    if mapping is None or mapping.out_axes != 0 or call.kwargs:
        return []
    axes = [mapping.in_axes] * len(call.args) if isinstance(mapping.in_axes, int) else list(mapping.in_axes)
    if len(axes) != len(call.args) or any(a not in (0, None) for a in axes) or 0 not in axes:
        return []
    temporaries = sum(b.bytes for b in program.buffers if b.role in (TEMPORARY, SAVED_FOR_BACKWARD))
    if temporaries < SAVED_SHARE * program.peak_bytes:
        return []
    examples = leading(jax.tree.leaves(call.args[axes.index(0)])[0]) or 0
    g = mapping.function
    # what the user's call passed (`nearest_v(x, x)`), else the mapped function's parameter names
    names = argument_texts(program.call, len(axes)) or parameter_names(g) or [f"a{i}" for i in range(len(axes))]
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
                CHUNK,
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


def _lax_map_of(g: Callable[..., object], axes: list[int | None], size: int) -> Callable[..., object]:
    """``g`` mapped over the axis-0 arguments a chunk of ``size`` at a time, the others held fixed."""

    def chunked(*args: object) -> object:
        mapped = tuple(a for a, axis in zip(args, axes) if axis == 0)

        def one(m: Iterable[object]) -> object:
            parts = iter(m)
            return g(*(next(parts) if axis == 0 else a for a, axis in zip(args, axes)))

        return jax.lax.map(one, mapped, batch_size=size)

    return chunked
