"""A jitted call's shardings: its inputs and outputs as compiled, the intermediates, and its sharding constraints."""

from __future__ import annotations

import ast
import contextlib
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from jaxmagic._jax import jaxpr_parts, jit_internals, recorded_sources
from jaxmagic._jax.jaxpr_interpreter import Interpreter, Level
from jaxmagic._jax.program_inputs import input_shardings_flat, program_inputs
from jaxmagic._jax.types import ClosedJaxpr, Equation, Jaxpr, Value
from jaxmagic.probes._sharding.layouts import axes_of
from jaxmagic.probes._sharding.report import (
    MAX_INTERMEDIATES,
    ArrayLayout,
    ConstraintCheck,
    IntermediateSharding,
    LeafSharding,
)
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import is_user_file, source_line

if TYPE_CHECKING:
    from jax.extend.core import JaxprEqn
    from jax.stages import Compiled, Traced, Wrapped


def _argument_names(
    call_text: str, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[list[str], dict[str, str]]:
    """Source text of each argument of ``f(x, y, k=z)``: ["x", "y"], {"k": "z"}."""
    names = [f"args[{i}]" for i in range(len(args))]
    kw_names = {k: k for k in kwargs}
    try:
        node = ast.parse(call_text, mode="eval").body
    except SyntaxError:
        return names, kw_names
    if isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args):
        if len(node.args) == len(args):
            names = [ast.unparse(a) for a in node.args]
    return names, kw_names


def inputs_as_compiled(
    jitted: Wrapped,
    compiled: Compiled,
    traced: Traced,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    call_text: str,
) -> list[LeafSharding]:
    """One row per flat input of the call, in the order of ``compiled.input_shardings``' leaves, each with
    its entry parameter in the compiled program (``_jax.program_inputs``: the one mapping every reader of
    the program's parameters uses); an input JAX pruned says so instead of taking the next one's place."""
    arg_names, kw_names = _argument_names(call_text, args, kwargs)
    info = jit_internals.jit_options(jitted)
    static = {i % len(args) for i in getattr(info, "static_argnums", ()) or ()} if args else set()
    in_args, in_kwargs = compiled.input_shardings
    info_args, info_kwargs = traced.args_info
    dynamic = [i for i in range(len(args)) if i not in static]
    if len(dynamic) != len(in_args):  # a jit wrapper we do not understand: name by position
        dynamic = list(range(len(in_args)))
    leaves: list[LeafSharding] = []
    for position, shardings, infos in zip(dynamic, in_args, info_args):
        name = arg_names[position] if position < len(arg_names) else f"args[{position}]"
        leaves += _leaf_rows(name, shardings, infos, args[position] if position < len(args) else None)
    for key in sorted(in_kwargs):
        leaves += _leaf_rows(kw_names.get(key, key), in_kwargs[key], info_kwargs.get(key), kwargs.get(key))
    parameters = program_inputs(compiled)
    if len(leaves) == parameters.inputs:
        for flat_input, leaf in enumerate(leaves):
            leaf.parameter = parameters.parameter_of(flat_input)
            leaf.read = leaf.parameter is not None
    return leaves


def _leaf_rows(name: str, shardings: Any, infos: Any, values: Any) -> list[LeafSharding]:  # pytrees
    """One row per leaf of one argument, walked by the argument's own structure (``infos``, its
    ``args_info``): a None *argument* has no leaf, a None *sharding* at a leaf is an input JAX pruned."""
    is_info = lambda i: jit_internals.has_abstract_value(i) or hasattr(i, "shape")  # noqa: E731
    info_leaves, structure = jax.tree_util.tree_flatten_with_path(infos, is_leaf=is_info)
    try:
        sharding_leaves = structure.flatten_up_to(shardings)  # type: ignore[attr-defined]  # jaxlib has it; the stubs do not
    except (ValueError, TypeError):  # a structure we do not know: the shardings' own leaves, pruned ones dropped
        flat = jax.tree_util.tree_flatten_with_path(shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding))
        info_by_path = {jax.tree_util.keystr(path): info for path, info in info_leaves}
        info_leaves = [(path, info_by_path.get(jax.tree_util.keystr(path))) for path, _ in flat[0]]
        sharding_leaves = [sharding for _, sharding in flat[0]]
    value_leaves = jax.tree_util.tree_leaves(values) if values is not None else []
    rows = []
    for n, ((key_path, info), sharding) in enumerate(zip(info_leaves, sharding_leaves)):
        aval = jit_internals.abstract_value(info)
        value = value_leaves[n] if len(value_leaves) == len(info_leaves) else None
        row = LeafSharding(
            path=name + jax.tree_util.keystr(key_path),
            typeof=str(aval) if aval is not None else "",
            spec=_spec_text(sharding) if sharding is not None else "",
            read=sharding is not None,
        )
        if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
            row.given = _spec_text(value.sharding)
            if sharding is not None:
                try:
                    row.matches = bool(value.sharding.is_equivalent_to(sharding, value.ndim))
                except Exception:
                    row.matches = None
        rows.append(row)
    return rows


def outputs_as_compiled(traced: Traced, compiled: Compiled) -> list[LeafSharding]:
    rows = []
    shardings = jax.tree_util.tree_flatten_with_path(
        compiled.output_shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding)
    )[0]
    avals = list(traced.jaxpr.out_avals)
    for n, (key_path, sharding) in enumerate(shardings):
        aval = avals[n] if n < len(avals) else None
        rows.append(
            LeafSharding(
                path="result" + jax.tree_util.keystr(key_path),
                typeof=str(aval) if aval is not None else "",
                spec=_spec_text(sharding),
            )
        )
    return rows


def _spec_text(sharding: object) -> str:
    """``P('d',)`` for a NamedSharding; else plain words for one device or full replication."""
    spec = getattr(sharding, "spec", None)
    if spec is not None:
        return str(spec)
    devices = list(getattr(sharding, "device_set", ()) or ())
    if len(devices) == 1:
        return f"single device {devices[0].platform.upper()} {devices[0].id}"
    if getattr(sharding, "is_fully_replicated", False):
        return f"replicated on {len(devices)} devices"
    return str(sharding)


def intermediate_shardings(traced: Traced, compiled: Compiled) -> tuple[list[IntermediateSharding], int]:
    """Compile an instrumented copy of the call that asks the compiler for every
    intermediate's sharding (``jax.debug.inspect_array_sharding`` after each
    top-level operation), with the same input and output shardings.

    The copy is lowered from abstract values and compiled, never run; the
    callbacks fire during compilation. The user's own ``inspect_array_sharding``
    calls are recorded too (their callbacks are not called again).
    """
    closed = traced.jaxpr
    rows, dropped = _intermediate_rows(closed.jaxpr)
    row_of: dict[int, list[IntermediateSharding]] = {}
    for row in rows:
        row_of.setdefault(row.index, []).append(row)
    reported: dict[tuple[int, int], str] = {}

    def record(key: tuple[int, int], sharding: Any) -> None:
        reported[key] = _spec_text(sharding)

    # Only the inputs the program reads, each with its own compiled sharding (a pruned one has None)
    parameters = program_inputs(compiled)
    kept, pruned = parameters.kept, parameters.unread
    all_shardings = input_shardings_flat(compiled)  # None at a pruned input
    in_shardings = [all_shardings[i] for i in kept]
    out_shardings = jax.tree_util.tree_leaves(
        compiled.output_shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding)
    )
    abstract_args = [
        jax.ShapeDtypeStruct(closed.in_avals[i].shape, closed.in_avals[i].dtype, sharding=s)
        for i, s in zip(kept, in_shardings)
    ]
    instrumented = _inspecting_copy(closed, kept, pruned, set(row_of), record)
    jax.jit(instrumented, in_shardings=tuple(in_shardings), out_shardings=list(out_shardings)).lower(
        *abstract_args
    ).compile()
    for row in rows:
        outputs = [r for r in row_of[row.index]]
        row.spec = reported.get((row.index, outputs.index(row)), "")
    return rows, dropped


def _intermediate_rows(jaxpr: Jaxpr) -> tuple[list[IntermediateSharding], int]:
    """A row (its spec still "") for each array a top-level operation makes, up to ``MAX_INTERMEDIATES``,
    and one for each of the user's own ``inspect_array_sharding`` calls; with how many were dropped."""
    inspect_sharding_p = jaxpr_parts.inspect_sharding_primitive()
    rows: list[IntermediateSharding] = []
    dropped = 0
    for i, eqn in enumerate(jaxpr.eqns):
        line = _eqn_line(eqn)
        if eqn.primitive is inspect_sharding_p:
            aval = eqn.invars[0].aval
            rows.append(IntermediateSharding(i, "inspect_array_sharding", str(aval), "", line, yours=True))
            continue
        for var in eqn.outvars:
            if not hasattr(var.aval, "shape"):
                continue
            if len(rows) >= MAX_INTERMEDIATES:
                dropped += 1
                continue
            rows.append(IntermediateSharding(i, _op_name(eqn), str(var.aval), "", line))
    return rows, dropped


def _inspecting_copy(
    closed: ClosedJaxpr,
    kept: Sequence[int],
    pruned: Iterable[int],
    inspected: set[int],
    record: Callable[[tuple[int, int], Any], None],
) -> Callable[..., list[Value]]:
    """The call's program as a Python function over its kept inputs that re-binds every top-level
    equation and, after each one in ``inspected``, asks for each output's sharding:
    ``record((equation, output), sharding)`` (the user's own inspect calls record as output 0)."""
    jaxpr, consts = closed.jaxpr, closed.consts

    def instrumented(*flat_args: Any) -> list[Value]:
        given = dict(zip(kept, flat_args))
        args = [given.get(i, _NOT_GIVEN) for i in range(len(jaxpr.invars))]
        return _Inspecting(set(pruned), inspected, record).evaluate(jaxpr, consts, args)

    return instrumented


_NOT_GIVEN = object()  # an input of the program the instrumented copy does not take


class _Inspecting(Interpreter):
    """The interpreter's policy of ``_inspecting_copy``: the top-level equations bound as they are, the
    shardings asked for after each one in ``inspected``."""

    def __init__(self, pruned: set[int], inspected: set[int], record: Callable[[tuple[int, int], Any], None]):
        self.pruned, self.inspected, self.record = pruned, inspected, record
        self.inspect_sharding_p = jaxpr_parts.inspect_sharding_primitive()

    def enter(self, level: Level) -> None:
        for i, var in enumerate(level.jaxpr.invars):
            if level.env[var] is not _NOT_GIVEN:
                continue
            del level.env[var]
            if i in self.pruned:  # only dead code can read an input JAX pruned: a stand-in of its type
                with contextlib.suppress(Exception):  # a type zeros cannot make (a typed key): dead code then fails
                    level.env[var] = jax.numpy.zeros(var.aval.shape, var.aval.dtype)  # type: ignore[attr-defined]  # a ShapedArray

    def outputs(self, level: Level, eqn: Equation, inputs: list[Value]) -> list[Value]:
        if eqn.primitive is self.inspect_sharding_p:
            self.inspect_sharding_p.bind(*inputs, callback=functools.partial(self.record, (level.index, 0)))
            return []
        return jaxpr_parts.bind_equation(eqn, inputs)

    def after(self, level: Level, eqn: Equation, inputs: list[Value], outputs: list[Value]) -> None:
        if eqn.primitive is self.inspect_sharding_p or level.index not in self.inspected:
            return
        for j, (var, out) in enumerate(zip(eqn.outvars, outputs)):
            if type(var).__name__ != "DropVar" and hasattr(var.aval, "shape"):
                jax.debug.inspect_array_sharding(out, callback=functools.partial(self.record, (level.index, j)))


def constraint_checks(traced: Traced, outputs: list[LeafSharding], arrays: list[ArrayLayout]) -> list[ConstraintCheck]:
    """Every ``sharding_constraint`` of the top-level program, checked against the shardings that came out."""
    closed = traced.jaxpr
    jaxpr = closed.jaxpr
    out_index = {id(v): i for i, v in enumerate(jaxpr.outvars)}
    checks = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "sharding_constraint":
            continue
        sharding = eqn.params.get("sharding")
        spec = getattr(sharding, "spec", None)
        mesh = getattr(sharding, "mesh", None)
        for var in eqn.outvars:
            aval = var.aval
            check = ConstraintCheck(_spec_text(sharding), str(aval), _eqn_line(eqn))
            shape = tuple(getattr(aval, "shape", ()))
            sizes = dict(getattr(mesh, "shape", {}) or {})
            for dim, entry in enumerate(tuple(spec or ())[: len(shape)]):
                axes = axes_of(entry)
                devices = math.prod(sizes.get(a, 1) for a in axes)
                if devices > 1 and shape[dim] % devices:
                    names = ", ".join(repr(a) for a in axes)
                    check.uneven.append(f"dimension {dim} ({shape[dim]}) over {names} ({devices} devices)")
            index = out_index.get(id(var))
            if index is not None and index < len(outputs):
                check.came_out, check.observed_as = outputs[index].spec, f"`{outputs[index].path}`"
            elif check.uneven and outputs and all(o.typeof.split("{")[0] == check.typeof for o in outputs[:1]):
                # the value is not returned as such; the result of the same shape computed from it is
                check.came_out, check.observed_as = outputs[0].spec, f"the result `{outputs[0].path}` made from it"
            if check.came_out and index is not None and index < len(arrays):
                layout = arrays[index]
                if layout.blocks and len(layout.blocks) == 1:
                    check.copies = len(layout.devices)
            elif check.came_out and arrays and len(arrays[0].blocks) == 1:
                check.copies = len(arrays[0].devices)
            checks.append(check)
    return checks


def _op_name(eqn: JaxprEqn) -> str:
    name = eqn.primitive.name
    inner = eqn.params.get("name")
    return (
        f"{name}[{inner}]"
        if inner and name in ("jit", "pjit", "closed_call", "custom_jvp_call", "custom_vjp_call")
        else name
    )


def _eqn_line(eqn: JaxprEqn) -> SourceLine | None:
    frames = recorded_sources.user_frames(getattr(eqn.source_info, "traceback", None))
    for frame in frames:  # innermost first
        if is_user_file(frame.file_name):
            return source_line(frame.file_name, frame.start_line, frame.function_name)
    return None
