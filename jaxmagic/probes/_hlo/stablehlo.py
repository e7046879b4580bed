"""Stage 2, StableHLO: the lowered module's operations, read through the MLIR Python bindings JAX
ships (operation locations: name paths and call stacks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from jaxmagic._jax import jaxpr_parts
from jaxmagic.probes._hlo.name_paths import parse_name
from jaxmagic.probes._hlo.scopes import StageOp
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import is_user_file, source_line

if TYPE_CHECKING:
    from jax.extend.mlir import ir as mlir
    from jax.stages import Lowered

_Frames: TypeAlias = list[tuple[str, int, str]]  # (file, line, function), innermost first

_NOT_OPERATIONS = {"func.return", "stablehlo.return", "func.call", "func.func"}
_CONTROL_FLOW = {"stablehlo.while", "stablehlo.if", "stablehlo.case"}


def stablehlo_ops(lowered: Lowered) -> list[StageOp]:
    """Operations of the StableHLO module with their location names and user frames.

    Calls into private functions (``func.call @relu``) are followed, and the
    callee's operations - whose own locations are relative (``loc("max")``) -
    are named under the call's location, as XLA names them after inlining.
    """
    ir = jaxpr_parts.mlir_ir()

    module = lowered.compiler_ir("stablehlo")
    assert module is not None  # JAX gives None only for a dialect it does not know
    functions = {}
    for op in module.body.operations:
        operation = op.operation
        if operation.name == "func.func" and "sym_name" in operation.attributes:
            functions[ir.StringAttr(operation.attributes["sym_name"]).value] = operation
    main = functions.get("main") or next(iter(functions.values()), None)
    ops: list[StageOp] = []
    if main is None:
        return ops

    def walk_regions(
        operation: mlir.Operation, prefix: str, outer_frames: Callable[[], _Frames] | None, depth: int
    ) -> None:
        for region in operation.regions:
            for block in region.blocks:
                for child in block.operations:
                    visit(child.operation, prefix, outer_frames, depth)

    def visit(operation: mlir.Operation, prefix: str, outer_frames: Callable[[], _Frames] | None, depth: int) -> None:
        location = operation.location
        full = _join_name(prefix, _location_name(location))

        def frames(location: mlir.Location = location, outer: Callable[[], _Frames] | None = outer_frames) -> _Frames:
            # Read only for the operations that are shown; an op of a called function has no
            # file location of its own and takes its call's.
            return _location_frames(location) or (outer() if outer else [])

        kind = operation.name
        if kind == "func.call" and depth < 32:
            callee = ir.FlatSymbolRefAttr(operation.attributes["callee"]).value
            if callee in functions:
                walk_regions(functions[callee], full, frames, depth + 1)
            return
        if kind in _NOT_OPERATIONS:
            return
        ops.append(
            StageOp(
                "stablehlo",
                kind,
                parse_name(full),
                full,
                where=lambda: first_user_frame(
                    frames()
                ),  # frames, kind and full are this call's own: no loop rebinds them
                text=lambda: f"{kind}  {full}",
            )
        )
        if kind in _CONTROL_FLOW:
            walk_regions(operation, prefix, outer_frames, depth)

    walk_regions(main, "", None, 0)
    return ops


def _join_name(prefix: str, name: str | None) -> str:
    if not prefix:
        return name or ""
    if not name:
        return prefix
    return f"{prefix}/{name}"


def _location_name(location: mlir.Location) -> str | None:
    """The operation's name path: the outermost name of its MLIR location (None if it has none)."""
    ir = jaxpr_parts.mlir_ir()

    if isinstance(location, ir.NameLoc):
        return location.name_str
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            if isinstance(inner, ir.NameLoc):
                return inner.name_str
    return None


def _location_frames(location: mlir.Location) -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of an MLIR location's call stack, innermost first.

    JAX writes ``loc("jit(f)/encoder/dot_general"(callsite("f"("x.py":4:2) at ...)))``:
    below the operation's name, call sites whose callee is the function's
    name around its file position.
    """
    ir = jaxpr_parts.mlir_ir()

    frames: list[tuple[str, int, str]] = []

    def visit(loc: mlir.Location, function: str = "", top: bool = False) -> None:
        if isinstance(loc, ir.NameLoc):
            visit(loc.child_loc, "" if top else loc.name_str)
        elif isinstance(loc, ir.CallSiteLoc):
            visit(loc.callee, function)
            visit(loc.caller)
        elif isinstance(loc, ir.FileLineColLoc):
            frames.append((loc.filename, loc.start_line, function))
        elif isinstance(loc, ir.FusedLoc):
            for inner in loc.locations:
                visit(inner, function, top)

    visit(location, top=True)
    return frames


def first_user_frame(frames: list[tuple[str, int, str]]) -> SourceLine | None:
    for filename, lineno, function in frames:
        if is_user_file(filename):
            return source_line(filename, lineno, function)
    return None
