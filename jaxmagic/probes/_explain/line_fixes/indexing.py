"""Fitters for indexing and shapes with traced values: an array shape from a traced value, slice
bounds from one (``x[i:i + k]``) and boolean masks (``x[x > 0]``, ``x.at[mask].set(v)``)."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Sequence

from jaxmagic.probes._support.fixes.fix import Fix, static_fixes, written_fix
from jaxmagic.probes._support.fixes.line_code import LineCode, Resolve, Traced, dotted, traced_parts, uses

# -- an array shape from a traced value -------------------------------------------------------------


def fit_shape(
    fixes: list[Fix], line: LineCode, names: set[str], traced: Sequence[Traced], resolve: Resolve
) -> list[Fix]:
    # A size made from array data (``n = jnp.sum(mask)``) cannot be a setting: no weakly typed
    # Python number on the line means the size is data, and a fixed size with a mask comes first.
    if traced and not any(t.weak_type for t in traced):
        return sorted(fixes, key=lambda f: not f.use.startswith("a fixed size"))
    return fixes


# -- slice bounds from a traced value ---------------------------------------------------------------


def fit_slice(
    fixes: list[Fix], line: LineCode, names: set[str], traced: Sequence[Traced], resolve: Resolve
) -> list[Fix]:
    for node in ast.walk(line.tree):
        if not isinstance(node, ast.Subscript):
            continue
        axes = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for axis, piece in enumerate(axes):
            if isinstance(piece, ast.Slice) and uses(piece, names) and piece.step is None:
                return _slice_fixes(fixes, line, node, axis, piece, names, traced)
    return fixes


def _slice_fixes(
    fixes: list[Fix],
    line: LineCode,
    node: ast.Subscript,
    axis: int,
    piece: ast.Slice,
    names: set[str],
    traced: Sequence[Traced],
) -> list[Fix]:
    array = line.text(node.value)
    start = line.text(piece.lower) if piece.lower is not None else "0"
    size = _slice_size(line, array, axis, piece, start)
    size_traced = sorted(set(traced_parts(ast.parse(size, mode="eval"), names)))
    needs = (
        f"; {', '.join(f'`{n}`' for n in size_traced)} must then be static (the length is a shape)"
        if size_traced
        else ""
    )
    at = node.value if isinstance(node.value, ast.Attribute) and node.value.attr == "at" else None
    if at is not None:
        found = _window_update_fixes(line, node, at, axis, start, needs)
    else:
        leading = ":, " * axis
        found = [
            written_fix(
                f"lax.dynamic_slice_in_dim({array}, {start}, {size}, axis={axis})",
                "the start is data, the length is fixed" + needs,
            ),
            written_fix(f"{array}[{leading}jax.ds({start}, {size})]", "the same with indexing syntax" + needs),
        ]
    static = static_fixes(fixes)
    if not size_traced:
        return found + static
    # The length is traced: a window of data-dependent length has no static shape, so the length must be a
    # setting (static), or the full length is kept and the entries past it masked (jax-ml/jax#6853).
    if static and all(name.isidentifier() for name in size_traced):
        written = re.sub(r"static_argnames=\([^)]*\)", f"static_argnames={tuple(size_traced)!r}", static[0].use)
        static = [dataclasses.replace(static[0], use=written, when="the length is a setting, not data")]
    rank = _rank_of(array, traced)
    if at is None and piece.lower is None and piece.upper is not None and axis == 0 and rank:
        found.insert(0, _masked_prefix_fix(array, line.text(piece.upper), rank))
    return static + found


def _slice_size(line: LineCode, array: str, axis: int, piece: ast.Slice, start: str) -> str:
    """The length of the window ``piece`` takes along ``axis``, as code: ``k`` for ``x[i:i + k]``."""
    upper = piece.upper
    if upper is None:
        return f"{array}.shape[{axis}] - {start}"
    if (
        isinstance(upper, ast.BinOp)
        and isinstance(upper.op, ast.Add)
        and piece.lower is not None
        and ast.dump(upper.left) == ast.dump(piece.lower)
    ):
        return line.text(upper.right)
    return f"{line.text(upper)} - {start}" if piece.lower is not None else line.text(upper)


def _window_update_fixes(
    line: LineCode, node: ast.Subscript, at: ast.Attribute, axis: int, start: str, needs: str
) -> list[Fix]:
    """``x.at[i:i + k]...`` at a traced position: ``lax.dynamic_update_slice_in_dim``, with the update
    written in when the line sets one (``x.at[i:i + k].set(v)``)."""
    target = line.text(at.value)
    setter = next(
        (
            n
            for n in ast.walk(line.tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.value is node
            and n.func.attr == "set"
            and len(n.args) == 1
        ),
        None,
    )
    when = "write a window at a traced position; the update's length is fixed" + needs
    if setter is not None:
        update = line.text(setter.args[0])
        return [written_fix(f"lax.dynamic_update_slice_in_dim({target}, {update}, {start}, axis={axis})", when)]
    return [Fix(f"lax.dynamic_update_slice_in_dim({target}, update, {start}, axis={axis})", when)]


def _masked_prefix_fix(array: str, bound: str, rank: int) -> Fix:
    """``x[:n]`` with a traced ``n``: the full length kept and the entries from ``n`` on zeroed."""
    mask = f"jnp.arange({array}.shape[0]) < {bound}"
    mask = f"({mask})[:" + ", None" * (rank - 1) + "]" if rank > 1 else mask
    return written_fix(
        f"jnp.where({mask}, {array}, 0)",
        f"keep the full length and zero the entries from {bound} on: the shape stays static "
        "(what follows must take the full length)",
    )


def _rank_of(expression: str, traced: Sequence[Traced]) -> int:
    """The number of dimensions of a traced name on the line (``int32[10, 3]`` -> 2); 0 when not known."""
    aval = next((t.aval for t in traced if t.name == expression), "")
    match = re.search(r"\[([^\]]*)\]", aval)
    if match is None:
        return 0
    return len([d for d in match.group(1).split(",") if d.strip()])


# -- boolean masks ------------------------------------------------------------------------------

_AT_UPDATES = {
    "set": "jnp.where({mask}, {v}, {x})",
    "add": "{x} + jnp.where({mask}, {v}, 0)",
    "multiply": "jnp.where({mask}, {x} * {v}, {x})",
    "min": "jnp.where({mask}, jnp.minimum({x}, {v}), {x})",
    "max": "jnp.where({mask}, jnp.maximum({x}, {v}), {x})",
}


def fit_bool_index(
    fixes: list[Fix], line: LineCode, names: set[str], traced: Sequence[Traced], resolve: Resolve
) -> list[Fix]:
    """``x.at[mask].set(v)`` is ``jnp.where(mask, v, x)`` (the table's ``jnp.where(mask, x, 0)`` zeroes
    what such a line keeps); ``x[mask].sum()`` / ``.mean()`` keep the shape and mask the reduction."""
    for node in ast.walk(line.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) == 1):
            continue
        target = node.func.value
        if not isinstance(target, ast.Subscript):
            continue
        at = target.value
        if not (isinstance(at, ast.Attribute) and at.attr == "at" and uses(target.slice, names)):
            continue
        pattern = _AT_UPDATES.get(node.func.attr)
        if pattern is None:
            continue
        x, mask, v = line.text(at.value), line.text(target.slice), line.text(node.args[0])
        return [
            written_fix(
                pattern.format(x=x, mask=mask, v=v),
                f"the same update where `{mask}` holds, every other entry kept - the shape stays known",
            )
        ] + _with_mask(fixes, mask)
    for node in ast.walk(line.tree):
        if not (isinstance(node, ast.Subscript) and uses(node.slice, names)):
            continue
        x, mask = line.text(node.value), line.text(node.slice)
        reduce = _reduction_of(line, node)
        if reduce == "sum":
            written = written_fix(f"jnp.sum(jnp.where({mask}, {x}, 0))", "sum over the masked entries, shape kept")
        elif reduce == "mean":
            written = written_fix(
                f"jnp.sum(jnp.where({mask}, {x}, 0)) / jnp.sum({mask})",
                "mean over the masked entries, shape kept (0/0 when none is set)",
            )
        else:
            written = written_fix(
                f"jnp.where({mask}, {x}, 0)",
                "keep the shape, zero the entries outside the mask; then reduce with the mask",
            )
        return [written] + _with_mask(fixes, mask)
    return fixes


def _with_mask(fixes: list[Fix], mask: str) -> list[Fix]:
    """The table's other fixes, with the line's mask for ``mask`` (its jnp.where one is replaced)."""
    return [
        dataclasses.replace(f, use=f.use.replace("(mask,", f"({mask},"))
        for f in fixes
        if not f.use.startswith("jnp.where(mask")
    ]


def _reduction_of(line: LineCode, subscript: ast.Subscript) -> str:
    """ "sum" / "mean" when the masked subscript is reduced at once: ``x[m].sum()``, ``jnp.mean(x[m])``."""
    for node in ast.walk(line.tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.value is subscript and not node.args:
            return node.func.attr if node.func.attr in ("sum", "mean") else ""
        name = dotted(node.func)
        if name in ("jnp.sum", "jnp.mean") and node.args and node.args[0] is subscript and len(node.args) == 1:
            return name.split(".")[1]
    return ""
