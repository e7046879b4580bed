"""The arguments of a ``lax.scan`` on the stack: its body, its initial carry and the shapes of one step's ``xs``.

JAX's ``scan`` frame (``jax/_src/lax/control_flow/loops.py``) keeps the function it was given as ``f``, the
initial carry flattened as ``init_flat`` (a flat tree whose ``unflatten()`` gives it back) and one step's
abstract ``xs`` as ``x_avals``. A fix for a value carried by a bare scan (keep it out of the carry: a Python
value the body closes over) is tried on them. These are JAX's private frame locals, so they are read here
only; ``tests/test_jax_structure.py`` checks they are there.
"""

from __future__ import annotations

import functools
from types import FrameType
from typing import Any


def scan_call(frames: list[tuple[FrameType, int]], function: str) -> tuple[Any, Any, Any] | None:
    """``(body, init, x_avals)`` of the innermost ``lax.scan`` among ``frames`` whose body is the user's
    ``function`` (its name), or None. The caller must not keep them past its trial."""
    found = None
    for frame, _ in frames:
        code = frame.f_code
        if code.co_name != "scan" or "/jax/" not in code.co_filename.replace("\\", "/"):
            continue
        try:
            body, init_flat, x_avals = (frame.f_locals.get(k) for k in ("f", "init_flat", "x_avals"))
            inner = body.func if isinstance(body, functools.partial) else body
            if getattr(inner, "__name__", "") != function or init_flat is None or x_avals is None:
                continue
            found = (body, init_flat.unflatten(), x_avals.unflatten())
        except Exception:
            continue
    return found
