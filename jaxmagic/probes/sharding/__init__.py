"""Sharding probe: where every block of an array lives, and whether its copies agree.

Usage without IPython::

    report = jaxmagic.probes.sharding(x)           # a jax.Array, or a pytree of them
    layout = report.arrays[0]
    layout.typeof        # "float32[8@data,4@model]"
    layout.spec          # "P('data', 'model')"
    layout.blocks        # each block: its index ranges and the devices holding it
    layout.replica_check # "consistent", "differ", "not needed", ...

    report = jaxmagic.probes.sharding_of_call(f, (x,), intermediates=True)
    report.call.inputs, report.call.outputs   # the shardings jit compiled f with
    report.call.intermediates                  # what the compiler chose inside f

The report is data only (strings and numbers): the drawing is made from it by
``jaxmagic.probes._support.sharding_layout``. Reading the layout touches no array data;
only the replica check reads the copies of blocks held by more than one local
device, to compare them bit for bit (chapter section 8.3: a ``shard_map`` with
``check_vma=False`` returns a "replicated" value whose copies differ).
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Callable
from typing import Any

from jaxmagic._jax import compat, jittable
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.report import Report, SourceLine, Status
from jaxmagic.report.source import is_user_file, source_line
from jaxmagic.report.wording import message_of

# Blocks up to this many elements show their values when copies differ.
PREVIEW_ELEMENTS = 16
# At most this many intermediates are listed for one call.
MAX_INTERMEDIATES = 200


@dataclasses.dataclass
class DeviceInfo:
    """A device that holds a block of the array."""

    id: int
    platform: str  # "cpu", "gpu", "tpu"
    device_kind: str  # e.g. "cpu", "TPU v5 lite"
    process: int  # jax process index owning the device
    addressable: bool  # this process can read its data
    mesh_position: list[int] = dataclasses.field(default_factory=list)  # [] without a mesh

    @property
    def name(self) -> str:
        return f"{self.platform.upper()} {self.id}"


@dataclasses.dataclass
class MeshInfo:
    axis_names: list[str]
    axis_sizes: list[int]
    axis_types: list[str]  # "Explicit", "Auto", "Manual"
    device_ids: list[int]  # in mesh order (row-major over the axes)

    @property
    def description(self) -> str:
        axes = ", ".join(f"{n}={s}" for n, s in zip(self.axis_names, self.axis_sizes))
        kinds = sorted(set(self.axis_types))
        return f"{axes} ({'/'.join(kinds)} axes)" if kinds else axes


@dataclasses.dataclass
class CopyGroup:
    """Devices whose copies of one block are identical, and what that copy holds."""

    devices: list[int]
    preview: str


@dataclasses.dataclass
class Block:
    """One block of the array: its index ranges and the devices that hold a copy."""

    index: list[list[int]]  # [start, stop) for each dimension
    holders: list[int]  # device ids, ascending
    copies_differ: bool = False
    copy_groups: list[CopyGroup] = dataclasses.field(default_factory=list)  # filled when copies differ

    @property
    def shape(self) -> list[int]:
        return [stop - start for start, stop in self.index]

    @property
    def index_text(self) -> str:
        """``[0:4, 2:4]`` (``[]`` for a scalar)."""
        return "[" + ", ".join(f"{a}:{b}" for a, b in self.index) + "]"


@dataclasses.dataclass
class ArrayLayout:
    """How one array is laid out over devices. Holds no data."""

    path: str  # "" for the value itself, else the leaf's key path, e.g. "['w']"
    shape: list[int]
    dtype: str
    typeof: str  # jax.typeof, e.g. "float32[8@data,4@model]"
    sharding_type: str  # "NamedSharding", "SingleDeviceSharding", ...
    spec: str = ""  # "P('data', 'model')" for a NamedSharding
    dim_axes: list[list[str]] = dataclasses.field(default_factory=list)  # mesh axes splitting each dimension
    memory_kind: str = ""
    mesh: MeshInfo | None = None
    devices: list[DeviceInfo] = dataclasses.field(default_factory=list)
    blocks: list[Block] = dataclasses.field(default_factory=list)
    itemsize: int = 0
    has_data: bool = True  # False for a ShapeDtypeStruct (a layout without values)
    fully_addressable: bool = True
    # "consistent", "differ", "not needed", "skipped", "other processes" (copies only across processes),
    # "no data (a ShapeDtypeStruct)", "not possible: ..."
    replica_check: str = "not needed"
    copies_compared: int = 0
    note: str = ""

    @property
    def label(self) -> str:
        return self.path or "value"

    @property
    def processes(self) -> list[int]:
        return sorted({d.process for d in self.devices})

    @property
    def addressable_devices(self) -> list[int]:
        return [d.id for d in self.devices if d.addressable]

    @property
    def blocks_differing(self) -> list[Block]:
        return [b for b in self.blocks if b.copies_differ]

    def device(self, device_id: int) -> DeviceInfo:
        return next(d for d in self.devices if d.id == device_id)

    def bytes_per_device(self) -> dict[int, int]:
        held = {d.id: 0 for d in self.devices}
        for block in self.blocks:
            for device_id in block.holders:
                held[device_id] = held.get(device_id, 0) + math.prod(block.shape) * self.itemsize
        return held

    @property
    def total_bytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def replicated_dims_summary(self) -> str:
        """Which mesh axes hold copies (the axes that split no dimension)."""
        if self.mesh is None:
            return ""
        used = {axis for axes in self.dim_axes for axis in axes}
        return ", ".join(a for a in self.mesh.axis_names if a not in used)


@dataclasses.dataclass
class LeafSharding:
    """One input or output of a compiled call."""

    path: str  # "x", "params['w']", "result[0]"
    typeof: str
    spec: str  # the sharding jit compiled it with
    given: str = ""  # inputs: the argument's own sharding ("" when not a jax.Array)
    matches: bool | None = None  # inputs: compiled == given (False: JAX moves the data on every call)


@dataclasses.dataclass
class IntermediateSharding:
    """A value computed inside the call, and the sharding the compiler chose for it."""

    index: int  # equation number in the call's jaxpr
    op: str  # "sin", "reduce_sum", "jit[norm]", "inspect_array_sharding"
    typeof: str  # its type at trace time (shows explicit shardings)
    spec: str  # what the compiler chose ("" if it did not say)
    line: SourceLine | None = None
    yours: bool = False  # reported by your own jax.debug.inspect_array_sharding call


@dataclasses.dataclass
class ConstraintCheck:
    """One ``with_sharding_constraint`` in the call: what was asked, what came out, and why they differ."""

    requested: str  # "P('data',)"
    typeof: str  # "float32[17,4]"
    line: SourceLine | None = None
    uneven: list[str] = dataclasses.field(default_factory=list)  # "dimension 0 (17) over 'data' (8 devices)"
    came_out: str = ""  # the compiled sharding of the value, where it could be observed ("" if not)
    observed_as: str = ""  # "the result", "result[1]": where came_out was read
    copies: int = 0  # devices holding a full copy, when it came out replicated

    @property
    def honoured(self) -> bool | None:
        """True/False when the outcome was observed; None when jaxmagic could not tell."""
        if not self.came_out:
            return None
        return _same_spec(self.came_out, self.requested)

    @property
    def text(self) -> str:
        where = f" at {self.line.label or self.line.filename}, line {self.line.lineno}" if self.line else ""
        asked = f"with_sharding_constraint asked for {self.requested} on a {self.typeof} value{where}"
        if self.honoured is None:
            return (
                asked
                + (f"; {'; '.join(self.uneven)} does not divide evenly" if self.uneven else "")
                + (", and jaxmagic could not observe what the compiler made of it (it is not an output)")
            )
        copies = f" ({self.copies} full copies)" if self.copies > 1 else ""
        text = f"{asked}, but {self.observed_as} came out {self.came_out}{copies}"
        if self.uneven:
            text += f": {'; '.join(self.uneven)} does not divide evenly"
        return text

    @property
    def fix(self) -> str:
        if self.uneven:
            return (
                "Make the sharded dimension a multiple of the device count: pad it (jnp.pad to the next multiple, "
                "and mask the padding in reductions), drop the remainder (x[: n - n % devices]), or shard another "
                "dimension that divides evenly."
            )
        return (
            "The compiler chose another layout for this value: constrain the value that is returned (or give "
            "jax.jit out_shardings), and check that the mesh axes named in the spec are Auto axes."
        )


def _same_spec(a: str, b: str) -> bool:
    def norm(text: str) -> str:
        text = text.replace(" ", "").replace(",)", ")")
        while text.endswith(",None)"):
            text = text[: -len(",None)")] + ")"
        return text.replace("P(None)", "P()")

    return norm(a) == norm(b)


@dataclasses.dataclass
class CallShardings:
    function: str
    was_jitted: bool  # the function was already a jax.jit (else the probe jitted it)
    inputs: list[LeafSharding] = dataclasses.field(default_factory=list)
    outputs: list[LeafSharding] = dataclasses.field(default_factory=list)
    intermediates_asked: bool = False
    intermediates: list[IntermediateSharding] = dataclasses.field(default_factory=list)
    intermediates_dropped: int = 0  # beyond MAX_INTERMEDIATES
    intermediates_failure: str = ""
    constraints: list[ConstraintCheck] = dataclasses.field(default_factory=list)

    @property
    def resharded_inputs(self) -> list[LeafSharding]:
        return [leaf for leaf in self.inputs if leaf.matches is False]

    @property
    def unhonoured_constraints(self) -> list[ConstraintCheck]:
        return [c for c in self.constraints if c.honoured is False]


@dataclasses.dataclass
class ShardingReport(Report):
    """What ``%jax_sharding`` found for one expression or call."""

    kind = "jax_sharding"

    expression: str = ""
    arrays: list[ArrayLayout] = dataclasses.field(default_factory=list)
    other_leaves: list[list[str]] = dataclasses.field(default_factory=list)  # [path, what it is]
    dims: list[int] | None = None  # the dimensions to draw for rank > 2 (--dims)
    call: CallShardings | None = None
    failure: str = ""  # the call raised: "ValueError: ..."
    replicas_checked: bool = True

    @property
    def status(self) -> Status:
        if any(a.replica_check == "differ" for a in self.arrays):
            return Status.PROBLEM
        if self.call is not None and self.call.unhonoured_constraints:
            return Status.PROBLEM
        if self.failure:
            return Status.ERROR
        return Status.OK

    @property
    def layout(self) -> ArrayLayout | None:
        """The single array's layout (None when the value held no array or several)."""
        return self.arrays[0] if len(self.arrays) == 1 else None

    @property
    def summary(self) -> str:
        what = self.expression or "value"
        if self.failure and not self.arrays:
            return f"`{what}` failed: {self.failure}"
        differing = [a for a in self.arrays if a.replica_check == "differ"]
        if differing:
            return _differ_sentence(differing[0], what, self.call is not None)
        if self.call is not None and self.call.unhonoured_constraints:
            first = self.call.unhonoured_constraints[0]
            more = len(self.call.unhonoured_constraints) - 1
            return f"`{what}`: {first.text}." + (f" {more} more constraint(s) not honoured." if more else "")
        if self.failure:
            return f"`{what}` raised {self.failure}"
        if not self.arrays:
            kinds = ", ".join(sorted({kind for _, kind in self.other_leaves})) or "nothing"
            return f"`{what}` holds no JAX array ({kinds})."
        if len(self.arrays) == 1:
            return f"`{what}`: {_one_line(self.arrays[0])}"
        devices = sorted({d.id for a in self.arrays for d in a.devices})
        label = "outputs" if self.call else "arrays"
        return f"`{what}`: {len(self.arrays)} {label} over {len(devices)} device(s)."

    def document(self):
        from jaxmagic.probes._support.sharding_layout import sharding_document

        return sharding_document(self)


def _one_line(layout: ArrayLayout) -> str:
    n = len(layout.devices)
    if layout.spec:
        placement = f"{layout.spec} over {n} device(s)"
    else:
        placement = f"{layout.sharding_type} on {n} device(s)"
    distinct = len(layout.blocks)
    copies = sum(len(b.holders) for b in layout.blocks)
    if distinct == 1 and copies > 1:
        shape = "fully replicated"
    elif copies > distinct:
        shape = f"{distinct} blocks, each on {copies // distinct} devices"
    else:
        shape = f"{distinct} block(s)"
    return f"{layout.typeof}, {placement}: {shape}."


def _differ_sentence(layout: ArrayLayout, what: str, is_call: bool) -> str:
    """ "The result of `f(x)` is replicated (P()) but its copies differ: CPU 0 has 6.0, CPU 1 has 22.0."."""
    subject = f"The result of `{what}`" if is_call else f"`{what}`"
    if layout.path and layout.path not in ("result",):
        subject = f"`{layout.path}` of " + (f"the result of `{what}`" if is_call else f"`{what}`")
    block = layout.blocks_differing[0]
    declared = f" (`{layout.spec}`)" if layout.spec else ""
    names = [", ".join(layout.device(i).name for i in g.devices) for g in block.copy_groups]
    if len(block.copy_groups) <= 8 and all(len(g.preview) <= 24 for g in block.copy_groups):
        copies = ", ".join(f"{n} has {g.preview}" for n, g in zip(names, block.copy_groups))
    else:
        copies = " | ".join(names)
    more = len(layout.blocks_differing) - 1
    tail = f" (and {more} more block(s))" if more else ""
    return f"{subject} is replicated{declared} but its copies differ: {copies}{tail}."


# -- probes -----------------------------------------------------------------


def sharding(
    value: Any, *, expression: str = "", dims: list[int] | None = None, check_replicas: bool = True
) -> ShardingReport:
    """Report how ``value`` (a jax.Array, a ShapeDtypeStruct with a sharding, or a
    pytree of them) is laid out over devices.

    ``dims`` picks the two dimensions drawn for arrays of rank > 2.
    ``check_replicas`` compares the copies of each replicated block (False skips
    it: then no array data is read at all).
    """
    report = ShardingReport(expression=expression, dims=list(dims) if dims else None, replicas_checked=check_replicas)
    with preserved_jax_state(()):
        report.arrays, report.other_leaves = _layouts_of_tree(value, check_replicas)
    _check_dims(report)
    return report


def sharding_of_call(
    fn: Callable, args: tuple | list = (), kwargs: dict | None = None, **options: Any
) -> ShardingReport:
    """Run ``fn(*args, **kwargs)`` (jitted) and report the shardings it was compiled with.

    ``options`` are :func:`run_call`'s. Never raises for an error of the call
    itself: the report's ``failure`` says what happened (use ``run_call`` to
    also get the exception).
    """
    return run_call(fn, args, kwargs, **options)[0]


def run_call(
    fn: Callable,
    args: tuple | list = (),
    kwargs: dict | None = None,
    *,
    call_text: str = "",
    intermediates: bool = False,
    dims: list[int] | None = None,
    check_replicas: bool = True,
) -> tuple[ShardingReport, BaseException | None]:
    """Like ``sharding_of_call``, also returning the call's exception (None if it ran).

    The magic uses this to show the report and then raise the user's own error.
    The call runs first (so its result is real, and the replica check can read
    it); its compiled shardings come from ``jit(f).lower(...).compile()``, which
    JAX serves from the compilation it just made.
    """
    import jax

    args, kwargs = tuple(args), dict(kwargs or {})
    name = getattr(fn, "__name__", None) or type(fn).__name__
    text = call_text or f"{name}(...)"
    was_jitted = hasattr(fn, "lower") and hasattr(fn, "trace")
    jitted = fn if was_jitted else jittable.jit(fn)
    report = ShardingReport(expression=text, dims=list(dims) if dims else None, replicas_checked=check_replicas)
    call = report.call = CallShardings(function=name, was_jitted=was_jitted, intermediates_asked=intermediates)
    error: BaseException | None = None
    with preserved_jax_state(()):
        try:
            result = jitted(*args, **kwargs)
            jax.block_until_ready(result)
        except Exception as failure:
            error = failure
            report.failure = _error_line(failure)
            result = None
        if result is not None:
            report.arrays, report.other_leaves = _layouts_of_tree(result, check_replicas, root="result")
        del result
        try:
            traced = jitted.trace(*args, **kwargs)
            compiled = traced.lower().compile()
        except Exception as failure:  # the call's own error, reported above
            if error is None:
                error = failure
                report.failure = _error_line(failure)
            return report, error
        call.inputs = _input_shardings(jitted, compiled, traced, args, kwargs, text)
        call.outputs = _output_shardings(traced, compiled)
        try:
            call.constraints = _constraint_checks(traced, call.outputs, report.arrays)
        except Exception:  # another jaxpr layout: no constraint checks, the rest of the report stands
            call.constraints = []
        if intermediates:
            try:
                call.intermediates, call.intermediates_dropped = _intermediates(traced, compiled)
            except Exception as failure:
                call.intermediates_failure = _error_line(failure)
        del traced, compiled
    _check_dims(report)
    return report, error


def _error_line(error: BaseException) -> str:
    lines = message_of(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _check_dims(report: ShardingReport) -> None:
    if report.dims is None:
        return
    if len(report.dims) != 2 or report.dims[0] == report.dims[1]:
        raise ProbeArgumentError("dims", f"must be two different dimensions, such as 0,2; got {report.dims}")
    ranks = [len(a.shape) for a in report.arrays]
    if ranks and not any(max(report.dims) < r for r in ranks):
        raise ProbeArgumentError(
            "dims",
            f"{report.dims[0]},{report.dims[1]} does not fit arrays of rank {', '.join(map(str, sorted(set(ranks))))}",
        )


# -- layouts ----------------------------------------------------------------


def _layouts_of_tree(value: Any, check_replicas: bool, root: str = "") -> tuple[list[ArrayLayout], list[list[str]]]:
    import jax

    leaves, _ = jax.tree_util.tree_flatten_with_path(value)
    layouts, others = [], []
    for key_path, leaf in leaves:
        path = root + jax.tree_util.keystr(key_path)
        if _has_layout(leaf):
            layouts.append(layout_of(leaf, path=path, check_replicas=check_replicas))
        else:
            others.append([path or "value", _what_is(leaf)])
    return layouts, others


def _has_layout(leaf: Any) -> bool:
    import jax

    if isinstance(leaf, jax.Array):
        return not isinstance(leaf, jax.core.Tracer)
    return isinstance(leaf, jax.ShapeDtypeStruct) and leaf.sharding is not None


def _what_is(leaf: Any) -> str:
    import jax
    import numpy as np

    if isinstance(leaf, jax.core.Tracer):
        return "a tracer (inside a transformation there is no concrete layout; use jax.typeof)"
    if isinstance(leaf, np.ndarray):
        return f"a NumPy array {leaf.dtype}{list(leaf.shape)} in host memory, on no device"
    if isinstance(leaf, jax.ShapeDtypeStruct):
        return "a ShapeDtypeStruct without a sharding"
    if leaf is None:
        return "None"
    return f"a Python {type(leaf).__name__}"


def layout_of(x: Any, *, path: str = "", check_replicas: bool = True) -> ArrayLayout:
    """The layout of one jax.Array (or ShapeDtypeStruct with a sharding)."""
    import jax
    import numpy as np

    shape = tuple(int(n) for n in x.shape)
    sharding = x.sharding
    has_data = isinstance(x, jax.Array)
    try:
        typeof = str(jax.typeof(x))
    except Exception:
        typeof = f"{x.dtype}[{','.join(map(str, shape))}]"
    layout = ArrayLayout(
        path=path,
        shape=list(shape),
        dtype=str(x.dtype),
        typeof=typeof,
        sharding_type=type(sharding).__name__,
        memory_kind=str(getattr(sharding, "memory_kind", "") or ""),
        itemsize=_itemsize(x.dtype),
        has_data=has_data,
    )
    mesh = getattr(sharding, "mesh", None)
    spec = getattr(sharding, "spec", None)
    positions: dict[int, list[int]] = {}
    if mesh is not None and getattr(mesh, "devices", None) is not None and not getattr(mesh, "empty", False):
        devices = np.asarray(mesh.devices)
        layout.mesh = MeshInfo(
            axis_names=[str(a) for a in mesh.axis_names],
            axis_sizes=[int(s) for s in devices.shape],
            axis_types=[getattr(t, "name", str(t)) for t in getattr(mesh, "axis_types", ())],
            device_ids=[int(d.id) for d in devices.flat],
        )
        for position, device in np.ndenumerate(devices):
            positions[int(device.id)] = [int(i) for i in position]
    if spec is not None:
        layout.spec = str(spec)
        layout.dim_axes = [_axes_of(entry) for entry in tuple(spec)] + [[] for _ in range(len(shape) - len(spec))]
    index_map = sharding.devices_indices_map(shape)
    blocks: dict[tuple, list[int]] = {}
    device_objects = {}
    for device, index in index_map.items():
        key = tuple(_bounds(s, n) for s, n in zip(index, shape))
        blocks.setdefault(key, []).append(int(device.id))
        device_objects[int(device.id)] = device
    order = layout.mesh.device_ids if layout.mesh else sorted(device_objects)
    layout.devices = [
        DeviceInfo(
            id=i,
            platform=str(device_objects[i].platform),
            device_kind=str(device_objects[i].device_kind),
            process=int(device_objects[i].process_index),
            addressable=_is_addressable(device_objects[i]),
            mesh_position=positions.get(i, []),
        )
        for i in order
        if i in device_objects
    ]
    layout.blocks = [
        Block(index=[list(b) for b in key], holders=sorted(holders)) for key, holders in sorted(blocks.items())
    ]
    layout.fully_addressable = all(d.addressable for d in layout.devices)
    if not has_data:
        layout.replica_check = "no data (a ShapeDtypeStruct)"
    elif not any(len([h for h in b.holders if layout.device(h).addressable]) > 1 for b in layout.blocks):
        # One local copy per block: nothing to compare here, but there may be copies elsewhere.
        remote_copies = any(
            len(b.holders) > 1 and not all(layout.device(h).addressable for h in b.holders) for b in layout.blocks
        )
        layout.replica_check = "other processes" if remote_copies else "not needed"
    elif not check_replicas:
        layout.replica_check = "skipped"
    else:
        _check_replicas(x, layout)
    return layout


def _is_addressable(device) -> bool:
    import jax

    return device.process_index == jax.process_index()


def _itemsize(dtype) -> int:
    import numpy as np

    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:  # extended dtypes such as PRNG keys
        return int(getattr(dtype, "itemsize", 0) or 0)


def _axes_of(entry) -> list[str]:
    if entry is None:
        return []
    if isinstance(entry, (tuple, list)):
        return [str(a) for a in entry]
    return [str(entry)]


def _bounds(index, size: int) -> tuple[int, int]:
    if isinstance(index, slice):
        start, stop, _ = index.indices(size)
        return start, stop
    return int(index), int(index) + 1


# -- replica consistency ------------------------------------------------------


def _check_replicas(x, layout: ArrayLayout) -> None:
    """Compare, bit for bit, the local copies of every block held by several devices."""
    import jax
    import numpy as np

    by_index: dict[tuple, list] = {}
    for shard in x.addressable_shards:
        key = tuple(_bounds(s, n) for s, n in zip(shard.index, x.shape))
        by_index.setdefault(key, []).append(shard)
    compared = 0
    try:
        for block in layout.blocks:
            shards = by_index.get(tuple(tuple(r) for r in block.index), [])
            if len(shards) < 2:
                continue
            groups: list[tuple[list[int], Any]] = []  # (device ids, representative copy)
            for shard in sorted(shards, key=lambda s: s.device.id):
                data = shard.data
                if jax.dtypes.issubdtype(data.dtype, jax.dtypes.prng_key):
                    data = jax.random.key_data(data)
                copy = np.asarray(data)
                compared += 1
                for ids, representative in groups:
                    if _same_bits(copy, representative):
                        ids.append(int(shard.device.id))
                        break
                else:
                    groups.append(([int(shard.device.id)], copy))
                del data
            if len(groups) > 1:
                block.copies_differ = True
                reference = groups[0][1]
                block.copy_groups = [CopyGroup(ids, _preview(copy, reference)) for ids, copy in groups]
            del groups
    except Exception as failure:  # a dtype we cannot read on the host, say
        layout.replica_check = f"not possible: {_error_line(failure)}"
        return
    layout.copies_compared = compared
    layout.replica_check = "differ" if layout.blocks_differing else "consistent"


def _same_bits(a, b) -> bool:
    """Bit-for-bit equality (NaN payloads and -0.0 included), compared as unsigned integers."""
    import numpy as np

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize, np.uint8)
    if a.dtype.itemsize not in (1, 2, 4, 8):
        a, b = a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)
    return bool(np.array_equal(a.view(unsigned), b.view(unsigned)))


def _preview(copy, reference) -> str:
    """The copy's values for small blocks; else how far it is from the first copy."""
    import numpy as np

    if copy.size <= PREVIEW_ELEMENTS:
        with np.printoptions(precision=6, suppress=True, threshold=PREVIEW_ELEMENTS):
            return np.array2string(copy, separator=", ") if copy.ndim else str(copy.item())
    try:
        diff = np.abs(copy.astype(np.float64) - reference.astype(np.float64))
        return (
            f"max |difference| from the first copy {float(np.nanmax(diff)):.6g}, at {int((diff > 0).sum())} element(s)"
        )
    except (TypeError, ValueError):
        return f"{int((copy != reference).sum())} element(s) differ from the first copy"


# -- compiled call --------------------------------------------------------------


def _argument_names(call_text: str, args: tuple, kwargs: dict) -> tuple[list[str], dict[str, str]]:
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


def _input_shardings(jitted, compiled, traced, args, kwargs, call_text: str) -> list[LeafSharding]:
    arg_names, kw_names = _argument_names(call_text, args, kwargs)
    info = getattr(jitted, "_jit_info", None)
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
    return leaves


def _leaf_rows(name: str, shardings, infos, values) -> list[LeafSharding]:
    import jax

    sharding_leaves = jax.tree_util.tree_flatten_with_path(
        shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding)
    )[0]
    info_leaves = jax.tree_util.tree_leaves(infos, is_leaf=lambda i: hasattr(i, "_aval") or hasattr(i, "shape"))
    value_leaves = jax.tree_util.tree_leaves(values) if values is not None else []
    rows = []
    for n, (key_path, sharding) in enumerate(sharding_leaves):
        info = info_leaves[n] if n < len(info_leaves) else None
        aval = getattr(info, "_aval", None) or info
        value = value_leaves[n] if n < len(value_leaves) and len(value_leaves) == len(sharding_leaves) else None
        row = LeafSharding(
            path=name + jax.tree_util.keystr(key_path),
            typeof=str(aval) if aval is not None else "",
            spec=_spec_text(sharding),
        )
        if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
            row.given = _spec_text(value.sharding)
            try:
                row.matches = bool(value.sharding.is_equivalent_to(sharding, value.ndim))
            except Exception:
                row.matches = None
        rows.append(row)
    return rows


def _output_shardings(traced, compiled) -> list[LeafSharding]:
    import jax

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


def _spec_text(sharding) -> str:
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


def _intermediates(traced, compiled) -> tuple[list[IntermediateSharding], int]:
    """Compile an instrumented copy of the call that asks the compiler for every
    intermediate's sharding (``jax.debug.inspect_array_sharding`` after each
    top-level operation), with the same input and output shardings.

    The copy is lowered from abstract values and compiled, never run; the
    callbacks fire during compilation. The user's own ``inspect_array_sharding``
    calls are recorded too (their callbacks are not called again).
    """
    import jax

    inspect_sharding_p = compat.inspect_sharding_primitive()

    closed = traced.jaxpr
    jaxpr, consts = closed.jaxpr, closed.consts
    reported: dict[tuple[int, int], str] = {}
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
    row_of = {}
    for row in rows:
        row_of.setdefault(row.index, []).append(row)

    def record(key, sharding):
        reported[key] = _spec_text(sharding)

    def instrumented(*flat_args):
        env: dict = {}

        def read(v):
            return v.val if compat.is_literal(v) else env[v]

        for var, const in zip(jaxpr.constvars, consts):
            env[var] = const
        for var, arg in zip(jaxpr.invars, flat_args):
            env[var] = arg
        for i, eqn in enumerate(jaxpr.eqns):
            invals = [read(v) for v in eqn.invars]
            if eqn.primitive is inspect_sharding_p:
                inspect_sharding_p.bind(*invals, callback=lambda s, key=(i, 0): record(key, s))
                continue
            bind_params = eqn.primitive.get_bind_params(eqn.params)
            subfuns, bind_params = bind_params if isinstance(bind_params, tuple) else ((), bind_params)
            with compat.user_context(eqn), eqn.ctx.manager:
                outs = eqn.primitive.bind(*subfuns, *invals, **bind_params)
            outs = outs if eqn.primitive.multiple_results else [outs]
            for j, (var, out) in enumerate(zip(eqn.outvars, outs)):
                if type(var).__name__ == "DropVar":
                    continue
                env[var] = out
                if i in row_of and hasattr(var.aval, "shape"):
                    jax.debug.inspect_array_sharding(out, callback=lambda s, key=(i, j): record(key, s))
        return [read(v) for v in jaxpr.outvars]

    in_shardings = jax.tree_util.tree_leaves(
        compiled.input_shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding)
    )
    out_shardings = jax.tree_util.tree_leaves(
        compiled.output_shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding)
    )
    abstract_args = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s) for a, s in zip(closed.in_avals, in_shardings)]
    jax.jit(instrumented, in_shardings=tuple(in_shardings), out_shardings=list(out_shardings)).lower(
        *abstract_args
    ).compile()
    for row in rows:
        outputs = [r for r in row_of[row.index]]
        row.spec = reported.get((row.index, outputs.index(row)), "")
    return rows, dropped


def _constraint_checks(traced, outputs: list[LeafSharding], arrays: list[ArrayLayout]) -> list[ConstraintCheck]:
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
                axes = _axes_of(entry)
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


def _op_name(eqn) -> str:
    name = eqn.primitive.name
    inner = eqn.params.get("name")
    return (
        f"{name}[{inner}]"
        if inner and name in ("jit", "pjit", "closed_call", "custom_jvp_call", "custom_vjp_call")
        else name
    )


def _eqn_line(eqn) -> SourceLine | None:
    frames = compat.user_frames(getattr(eqn.source_info, "traceback", None))
    for frame in frames:  # innermost first
        if is_user_file(frame.file_name):
            return source_line(frame.file_name, frame.start_line, frame.function_name)
    return None
