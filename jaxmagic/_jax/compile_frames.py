"""What JAX's own frames hold while it lowers and compiles a program (private frame layout, read only here).

At a backend compilation the stack still holds ``pjit._pjit_call_impl_python``, whose ``jaxpr`` local is
the traced program being compiled; while lowering, ``mlir.lower_jaxpr_to_module`` holds the argument
names, their types and which donated arguments found no output to reuse (the ones JAX's "Some donated
buffers were not usable" warning lists without naming). ``tests/test_jax_structure.py`` checks both.
"""

from __future__ import annotations

import dataclasses
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jax._src.core import AbstractValue

    from jaxmagic._jax.types import Program

_PROGRAM_FRAME = ("pjit.py", "_pjit_call_impl_python")
_LOWERING_FRAME = ("mlir.py", "lower_jaxpr_to_module")


def _find_frame(frame: FrameType | None, where: tuple[str, str], depth: int = 60) -> FrameType | None:
    filename, function = where
    for _ in range(depth):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == function and code.co_filename.endswith(filename):
            return frame
        frame = frame.f_back
    return None


def program_compiling(frame: FrameType | None) -> Program | None:
    """The traced program (``ClosedJaxpr``) jit is compiling, from the stack at the compilation; None when
    it is not there (an ahead-of-time ``.lower().compile()``, a program compiled under a transformation)."""
    found = _find_frame(frame, _PROGRAM_FRAME)
    try:
        return found.f_locals.get("jaxpr") if found is not None else None
    finally:
        del found


@dataclasses.dataclass
class DonatedArgument:
    """One donated argument of the program being lowered."""

    name: str  # the argument's path as JAX names it: "x", "state['opt'][0]"; "" when JAX gave none
    type: str  # "float32[4,4]"
    usable: bool  # False: no output of the same type was left for it (JAX warns about it)


@dataclasses.dataclass
class Lowering:
    """What the lowering of one program says about donation."""

    module: str  # "jit_step": the program's module name
    donated: list[DonatedArgument]
    output_types: list[str]
    platforms: list[str]
    platforms_with_donation: list[str]


def lowering_in_progress(frame: FrameType | None) -> Lowering | None:
    """Read ``lower_jaxpr_to_module``'s frame while it warns about unusable donations; None if absent."""
    found = _find_frame(frame, _LOWERING_FRAME, depth=8)
    if found is None:
        return None
    try:
        local = found.f_locals
        in_avals = list(local.get("in_avals") or [])
        still_donated = list(local.get("donated_args") or [])  # after aliasing: True only for the unusable ones
        names = list(local.get("arg_names") or [""] * len(in_avals))
        platforms = [str(p) for p in local.get("platforms") or ()]
        with_donation = [str(p) for p in local.get("platforms_with_donation") or ()]
        # JAX 0.12 passes out_avals; 0.10 a ClosedJaxpr, whose out_avals they are
        out_avals = list(local.get("out_avals") or getattr(local.get("jaxpr"), "out_avals", None) or [])
        module = str(local.get("module_name") or "")
    finally:
        del found
    donated = [
        DonatedArgument(name=str(name or ""), type=_type_text(aval), usable=False)
        for name, aval, unusable in zip(names, in_avals, still_donated)
        if unusable
    ]
    return Lowering(module, donated, [_type_text(a) for a in out_avals], platforms, with_donation)


def _type_text(aval: AbstractValue) -> str:
    try:
        return aval.str_short(short_dtypes=False)
    except Exception:
        return str(aval)
