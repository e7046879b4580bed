"""Put stand-ins for ``jax.lax.scan`` and ``jax.vmap`` in place while ``%jax_debug`` re-runs a call, and
for ``jax.lax.scan`` alone while the memory probe traces a call with one scan's body checkpointed.

A call re-run op by op (``jax.disable_jit()``) runs a ``scan``'s body once per step in
Python, and a ``vmap`` still traces its function. ``%jax_debug`` makes both fast by
running them compiled up to the failing step or element (``probes/_debug/stepping.py``);
to see them it replaces the names user code calls them by: ``jax.lax.scan`` (which
``lax.fori_loop`` calls as a global of JAX's loops module) and ``jax.vmap``. JAX's own
code keeps the functions it imported, so only the user's calls meet the stand-ins.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
from jax._src.lax.control_flow import loops


class LoopFunctions(NamedTuple):
    """JAX's own ``scan`` and ``vmap``, for the stand-ins to call."""

    scan: Callable[..., Any]
    vmap: Callable[..., Any]


@contextlib.contextmanager
def loops_replaced(scan: Callable[..., Any], vmap: Callable[..., Any]) -> Iterator[LoopFunctions]:
    """Within the block, user code calling ``jax.lax.scan`` / ``lax.fori_loop`` / ``jax.vmap`` calls ``scan`` /
    ``vmap``; JAX's own are put back however the block ends."""
    originals = LoopFunctions(loops.scan, jax.vmap)
    places = [(jax.lax, "scan", scan), (loops, "scan", scan), (jax, "vmap", vmap)]
    saved = [(module, name, getattr(module, name)) for module, name, _ in places]
    try:
        for module, name, replacement in places:
            setattr(module, name, replacement)
        yield originals
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


@contextlib.contextmanager
def scan_replaced(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """Within the block, code calling ``jax.lax.scan`` (user code, and libraries calling it by that name:
    ``lax.fori_loop``, Flax's scans) calls ``make(JAX's own scan)``; JAX's own is put back however it ends."""
    stand_in = make(loops.scan)
    places = [(jax.lax, "scan"), (loops, "scan")]
    saved = [(module, name, getattr(module, name)) for module, name in places]
    try:
        for module, name in places:
            setattr(module, name, stand_in)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


class VmapParts(NamedTuple):
    function: Callable[..., Any]
    in_axes: Any
    out_axes: Any


def _cells(function: object) -> dict[str, Any]:
    code = getattr(function, "__code__", None)
    if code is None:
        return {}
    closure = getattr(function, "__closure__", None)  # a function's: a callable with a __code__ is one
    return dict(zip(code.co_freevars, (cell.cell_contents for cell in closure or ())))


def vmap_parts(function: object) -> VmapParts | None:
    """The function, ``in_axes`` and ``out_axes`` of a callable made by ``jax.vmap`` (through a ``jax.jit``
    around it), read from the closure of JAX's ``vmap_f`` (which JAX's ``api_boundary`` wrapper holds as
    ``fun``); None for any other callable."""
    current = function
    for _ in range(4):
        code = getattr(current, "__code__", None)
        if code is not None and code.co_name == "vmap_f":
            cells = _cells(current)
            if callable(cells.get("fun")) and "in_axes" in cells:
                return VmapParts(cells["fun"], cells["in_axes"], cells.get("out_axes", 0))
            return None
        held = _cells(current).get("fun")
        if code is not None and code.co_name == "reraise_with_filtered_traceback" and callable(held):
            current = held
            continue
        current = getattr(current, "__wrapped__", None)
        if current is None:
            return None
    return None
