"""What a callable made by JAX's transformations is made of: ``jax.jit(jax.vmap(jax.grad(f), in_axes=...))``
read back into its transformations and ``f``, from the wrappers JAX builds (``__wrapped__`` and the
closure cells of ``vmap_f``, ``grad_f``, ``value_and_grad_f`` in JAX's own files). Private structure:
``tests/test_jax_structure.py`` checks it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from jaxmagic._jax import jit_internals
from jaxmagic.usercode.source import code_kind


@dataclasses.dataclass
class PerExampleGradient:
    """``jax.vmap(jax.grad(f, argnums), in_axes)``: one gradient per example."""

    function: Any  # f, the per-example loss
    in_axes: Any
    argnums: Any
    has_aux: bool


def _cells(fn: object) -> dict[str, Any]:
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None)  # a function's: a callable with a __code__ is one
    if code is None or not closure:
        return {}
    values = {}
    for name, cell in zip(code.co_freevars, closure):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    return values


def _jax_wrappers(fn: object, depth: int = 12) -> Iterator[tuple[str, dict[str, Any]]]:
    """(code name, closure cells) of each wrapper JAX made around ``fn``, outermost first, then the
    function inside them all as ("", {"fun": f})."""
    current = getattr(fn, "__wrapped__", fn) if jit_internals.is_jitted(fn) else fn
    for _ in range(depth):
        code = getattr(current, "__code__", None)
        if code is None or code_kind(code.co_filename) != "jax":
            yield "", {"fun": current}
            return
        cells = _cells(current)
        yield code.co_name, cells
        inner = cells.get("fun") or getattr(current, "__wrapped__", None)  # the closure: `wraps` points past it
        if inner is None or inner is current:
            return
        current = inner


def per_example_gradient(fn: object) -> PerExampleGradient | None:
    """``f``, ``in_axes`` and the gradient's ``argnums`` when ``fn`` is (a jit of) ``vmap(grad(f))``."""
    in_axes = None
    seen_vmap = False
    for name, cells in _jax_wrappers(fn):
        if name == "vmap_f" and not seen_vmap:
            seen_vmap, in_axes = True, cells.get("in_axes", 0)
        elif name in ("grad_f", "grad_f_aux") and seen_vmap:
            wrappers = _jax_wrappers(cells.get("value_and_grad_f"))
            inner: dict[str, Any] = next((c for n, c in wrappers if n == "value_and_grad_f"), {})
            function = inner.get("fun")
            if function is None:
                return None
            return PerExampleGradient(function, in_axes, inner.get("argnums", 0), name == "grad_f_aux")
        elif name == "":
            return None
    return None


@dataclasses.dataclass
class Vmapped:
    """``jax.vmap(g, in_axes, out_axes)``, the outermost transformation of a (jitted) callable."""

    function: Any  # g: what the vmap maps (itself maybe a transformation: grad(f))
    in_axes: Any
    out_axes: Any


def vmapped(fn: object) -> Vmapped | None:
    """``g`` and the axes when ``fn`` is (a jit of) ``jax.vmap(g, ...)``; None otherwise."""
    wrappers = iter(_jax_wrappers(fn))
    for name, cells in wrappers:
        if name == "vmap_f":
            inner = cells.get("fun")
            if inner is None:
                return None
            return Vmapped(inner, cells.get("in_axes", 0), cells.get("out_axes", 0))
        if name != "reraise_with_filtered_traceback":
            return None
    return None
