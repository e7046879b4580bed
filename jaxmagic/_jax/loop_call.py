"""The arguments of a ``lax.scan`` / ``lax.fori_loop`` / ``lax.while_loop`` on the stack: its body, its initial
carry and the abstract input of one step.

JAX's loop frames (``jax/_src/lax/control_flow/loops.py``) keep what they were given: ``scan`` its body as
``f``, the initial carry flattened as ``init_flat`` (a flat tree whose ``unflatten()`` gives it back) and one
step's abstract ``xs`` as ``x_avals``; ``fori_loop`` its body as ``body_fun`` and the carry as ``init_val``;
``while_loop`` ``body_fun`` and the flattened carry as ``init_val_flat``. A fix for a value carried by a bare
loop (keep it out of the carry: a Python value the body closes over) is tried on them. These are JAX's
private frame locals, so they are read here only; ``tests/test_jax_structure.py`` checks they are there.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from types import FrameType
from typing import Any

import jax
import numpy as np

from jaxmagic.usercode.source import code_kind


@dataclasses.dataclass
class LoopCall:
    """One loop's call: ``step_body(carry, step)`` gives the new carry; ``carry_position`` is the body's
    parameter that receives the carry (0 for scan and while_loop, 1 for fori_loop's ``body(i, c)``)."""

    step_body: Callable[[Any, Any], Any]
    init: Any
    step: Any  # the abstract input of one step (scan: one slice of xs; fori_loop: the index), None for while
    carry_position: int


def loop_call(frames: list[tuple[FrameType, int]], kind: str, function: str) -> LoopCall | None:
    """The innermost ``kind`` loop ("scan", "fori_loop", "while_loop") among ``frames`` whose body is the user's
    ``function`` (its name), or None. The caller must not keep it past its trial."""
    found = None
    for frame, _ in frames:
        code = frame.f_code
        if code.co_name != kind or code_kind(code.co_filename) != "jax":
            continue
        try:
            found = _read(kind, frame.f_locals, function) or found
        except Exception:
            continue
    return found


def _read(kind: str, scope: dict[str, Any], function: str) -> LoopCall | None:
    body = scope.get("f" if kind == "scan" else "body_fun")
    inner = body.func if isinstance(body, functools.partial) else body
    if body is None or getattr(inner, "__name__", "") != function:
        return None
    if kind == "scan":
        init, xs = scope["init_flat"].unflatten(), scope["x_avals"].unflatten()
        return LoopCall(lambda carry, x: body(carry, x)[0], init, xs, 0)
    if kind == "fori_loop":
        index = jax.ShapeDtypeStruct((), np.dtype(scope.get("dtype") or np.int32))
        return LoopCall(lambda carry, i: body(i, carry), scope["init_val"], index, 1)
    if kind == "while_loop":
        return LoopCall(lambda carry, _: body(carry), scope["init_val_flat"].unflatten(), None, 0)
    return None


@dataclasses.dataclass
class BranchCall:
    """One ``lax.cond`` / ``lax.switch`` call: its branches and the operands it passes to each."""

    branches: tuple[Callable[..., object], ...]
    operands: tuple[object, ...]
    called_at: tuple[str, int] | None = None  # (file, line) of the frame that called ``cond``/``switch``


def branch_call(frames: list[tuple[FrameType, int]], kind: str, function: str) -> BranchCall | None:
    """The innermost ``kind`` call ("cond", "switch") among ``frames`` one of whose branches is the user's
    ``function`` (its name), or None. JAX's frames keep what they were given: ``cond`` its ``true_fun``,
    ``false_fun`` and ``operands``, ``switch`` its ``branches`` and ``operands``. The caller must not keep
    it past its trial."""
    found = None
    for frame, _ in frames:
        code = frame.f_code
        if code.co_name != kind or code_kind(code.co_filename) != "jax":
            continue
        scope = frame.f_locals
        branches = (scope.get("true_fun"), scope.get("false_fun")) if kind == "cond" else scope.get("branches")
        operands = scope.get("operands")
        if not isinstance(branches, (tuple, list)) or not isinstance(operands, tuple):
            continue
        names = {getattr(b.func if isinstance(b, functools.partial) else b, "__name__", "") for b in branches}
        if function in names and all(callable(b) for b in branches):
            caller = frame.f_back
            while caller is not None and code_kind(caller.f_code.co_filename) == "jax":
                caller = caller.f_back  # JAX's api_boundary wrapper
            called_at = (caller.f_code.co_filename, caller.f_lineno) if caller is not None else None
            found = BranchCall(tuple(branches), operands, called_at)
    return found
