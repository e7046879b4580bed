"""Stage 1, the jaxpr: its equations with their name paths and lines, and the traced signature."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeAlias

import jax
import numpy as np

from jaxmagic._jax import jaxpr_parts
from jaxmagic.probes._hlo.name_paths import NamePath, parse_name
from jaxmagic.probes._hlo.scopes import StageOp
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import strip_ansi
from jaxmagic.usercode.source import is_user_file, source_line

if TYPE_CHECKING:
    from jax.stages import Traced

    from jaxmagic._jax.types import Equation, Program

# what walk_eqns yields: (eqn, segments, backward, sub_jaxprs, parents)
Walked: TypeAlias = "tuple[Equation, tuple[str, ...], bool, list[Program], tuple[Equation, ...]]"


def _sub_jaxprs(eqn: Equation) -> list[Program]:
    return jaxpr_parts.sub_jaxprs(eqn)


def walk_eqns(
    jaxpr: Program, segments: tuple[str, ...] = (), backward: bool = False, parents: tuple[Equation, ...] = ()
) -> Iterator[Walked]:
    """Yield ``(eqn, segments, backward, sub_jaxprs, parents)`` for every equation, sub-jaxprs included.

    ``segments`` is the name path above the equation: the enclosing equations'
    name stacks and, for calls to jitted functions, ``jit(name)`` as JAX's
    lowering names them.
    """
    for eqn in jaxpr.eqns:
        own = parse_name(str(eqn.source_info.name_stack))
        here = segments + own.segments
        back = backward or own.backward
        subs = _sub_jaxprs(eqn)
        yield eqn, here, back, subs, parents
        if subs:
            marker: tuple[str, ...] = ()
            if eqn.primitive.name in ("pjit", "jit", "closed_call", "core_call") and eqn.params.get("name"):
                marker = (f"jit({eqn.params['name']})",)
            for sub in subs:
                yield from walk_eqns(getattr(sub, "jaxpr", sub), here + marker, back, parents + (eqn,))


def scope_names(walked: list[Walked]) -> set[str]:
    """Every user scope name on a name stack of the program (structured: Scope entries)."""
    names: set[str] = set()
    scope_type = jaxpr_parts.scope_entry_type()
    for eqn, _segments, _back, _subs, _parents in walked:
        for entry in eqn.source_info.name_stack.stack:
            if scope_type is None or isinstance(entry, scope_type):
                name = getattr(entry, "name", "")
                if name:
                    names.add(name)
    return names


def jaxpr_ops(walked: list[Walked], function: str, printer: Callable[[Equation], str] | None = None) -> list[StageOp]:
    """The operations of the walked jaxpr; ``printer`` (``jaxpr_parts.jaxpr_equation_printer``) names
    their variables as the printed jaxpr does."""
    ops = []
    for eqn, segments, backward, subs, parents in walked:
        if subs:
            continue
        prim = eqn.primitive.name
        path = NamePath(segments + (prim,), backward)
        ops.append(
            StageOp(
                "jaxpr",
                prim,
                path,
                "/".join((function,) + path.segments),
                where=functools.partial(eqn_line, eqn, parents),
                text=functools.partial(eqn_text, eqn, printer),
            )
        )
    return ops


def eqn_line(eqn: Equation, parents: tuple[Equation, ...] = ()) -> SourceLine | None:
    """The innermost line of the user's code on the equation's stack.

    An equation inside a call (the max in jax.nn.relu's custom_jvp) may have been
    traced from JAX's own code only; it then gets the line of the innermost
    enclosing equation that has one - the user's call of relu.
    """
    for candidate in (eqn,) + tuple(reversed(parents)):
        tb = candidate.source_info.traceback
        if tb is None:
            continue
        for frame in tb.frames:  # innermost first
            if is_user_file(frame.file_name):
                return source_line(frame.file_name, frame.line_num, frame.function_name)
    return None


def eqn_text(eqn: Equation, printer: Callable[[Equation], str] | None = None) -> str:
    """The equation as JAX prints it; with ``printer``, with the names ``str(jaxpr)`` gives its variables."""
    try:
        text = strip_ansi(printer(eqn) if printer is not None else str(eqn)).strip()
    except Exception:
        return eqn.primitive.name
    return text if len(text) <= 240 else text[:237] + "..."


def signature(traced: Traced, renamed: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The inputs ("name: f32[4,8]") and outputs of a trace; ``renamed``: the user's names for its arguments
    ("" keeps JAX's), for a library's jit whose arguments are its own repacking of the user's."""
    info = getattr(traced.jaxpr, "debug_info", None)
    names = list(getattr(info, "arg_names", None) or [])
    names = [new or old for old, new in itertools.zip_longest(names, renamed[: len(names)], fillvalue="")]
    avals = jax.tree_util.tree_leaves(traced.in_avals)
    inputs = [f"{names[i] if i < len(names) and names[i] else f'arg{i}'}: {aval_text(a)}" for i, a in enumerate(avals)]
    outs = jax.tree_util.tree_leaves(traced.out_info)
    outputs = [aval_text(o) for o in outs]
    return inputs, outputs


def aval_text(aval: object) -> str:
    shape = getattr(aval, "shape", ())
    dtype = getattr(aval, "dtype", "")
    short = np.dtype(dtype).name if dtype is not None and str(dtype) else str(dtype)
    short = {
        "float32": "f32",
        "float64": "f64",
        "float16": "f16",
        "bfloat16": "bf16",
        "int32": "i32",
        "int64": "i64",
        "bool": "bool",
        "uint8": "u8",
        "int8": "i8",
        "uint32": "u32",
    }.get(short, short)
    return f"{short}[{','.join(str(d) for d in shape)}]"
