"""The sharding probe's report: array layouts, a call's shardings and constraints, and their wording."""

from __future__ import annotations

import dataclasses
import math

from jaxmagic.probes._sharding.sharding_layout import sharding_document
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, act, failed, note
from jaxmagic.report.document import Block as DocumentBlock
from jaxmagic.report.document import Document, Paragraph, Section, SourceLines, Table, fits_headline
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import format_bytes

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
    # inputs: the compiled program's entry parameter for it; None when the program never reads it (JAX
    # pruned it: no parameter, no sharding, nothing transferred)
    parameter: int | None = None
    read: bool = True


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
class Collective:
    """One collective XLA inserted into the compiled program: where it came from, what it moves, and why."""

    kind: str  # "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"
    instruction: str  # "%all-gather.1" in the optimized HLO
    axes: list[str]  # mesh axes it runs over ([] when it could not be told: see ``groups``)
    groups: str  # the device groups as XLA wrote them, mapped to device ids: "{0,2,4,6} {1,3,5,7}"
    group_size: int  # devices taking part in each exchange
    shape_before: str  # per-device shape of its operand(s): "f32[4,16]"
    shape_after: str  # per-device shape of its result: "f32[16,16]"
    bytes_per_device: int  # what each device receives (ring estimate from the shapes and the group size)
    values: list[str]  # the inputs its operand is computed from ("w"), as the function names them
    op_name: str  # JAX's name path from the instruction's metadata: "jit(f)/layer/dot_general"
    scope: str  # the user's named_scope path: "layer"
    for_line: bool  # True when the line is its consumer's (the collective itself carries no line)
    inserted: bool  # XLA's partitioner made it; False: the program's own lax collective (psum in shard_map)
    cause_kind: str  # "input", "output", "constraint", "gradient", "intermediate", "written" or "" (could not tell)
    cause: str  # the sentence saying which sharding made it necessary
    provenance: Provenance = dataclasses.field(default_factory=Provenance)  # made_at: the user's line
    chosen_around: list[str] = dataclasses.field(default_factory=list)  # --intermediates: "dot_general -> P('data',)"

    @property
    def line(self) -> SourceLine | None:
        return self.provenance.made_at

    @property
    def short_cause(self) -> str:
        """The cause in a few words, for the headline ("" where the table's sentence is needed)."""
        if self.cause_kind == "constraint":
            return self.cause.split(":")[0]
        if self.cause_kind == "gradient":
            return "the gradient summed over the batch's shards: data parallelism needs it"
        if self.cause_kind == "written":
            return self.cause
        return ""

    @property
    def text(self) -> str:
        """ "all-gather of `w` (4 KiB/device) over 'model' at In [3], line 7 `y = x @ w`"."""
        named = (
            [f"`{v}`" for v in self.values[:3]]
            if len(self.values) <= 3
            else [
                *(f"`{v}`" for v in self.values[:2]),
                f"{len(self.values) - 2} more inputs",
            ]
        )
        of = f" of {', '.join(named)}" if named else ""
        over = f" over {', '.join(repr(a) for a in self.axes)}" if self.axes else f" in groups {self.groups}"
        where = ""
        if self.line is not None:
            lead = "for" if self.for_line else "at"
            where = (
                f" {lead} {self.line.label or self.line.filename}, line {self.line.lineno} `{self.line.code.strip()}`"
            )
        elif self.cause_kind == "output":
            where = " for the result"
        scope = f" in scope `{self.scope}`" if self.scope else ""
        return f"{self.kind}{of} ({format_bytes(self.bytes_per_device)}/device){over}{where}{scope}"


@dataclasses.dataclass
class CollectiveFix:
    """A change tried by compiling the call again (never running it): how many collectives remain."""

    change: str  # "shard `w` as P(None, None)"
    code: str  # what to write: "jax.device_put(w, NamedSharding(mesh, P(None, None)))"
    collectives_before: int
    collectives_after: int
    kinds_after: dict[str, int] = dataclasses.field(default_factory=dict)
    bytes_before: int = 0  # bytes per device all collectives move, as compiled / with the change
    bytes_after: int = 0
    cost: str = ""  # what it costs: "each device then holds all of `w` (32 KiB instead of 16 KiB)"
    failure: str = ""  # the trial compile failed: the error line
    asked_by: str = ""  # a constraint's trial: "the with_sharding_constraint (P(None, 'data')) at line 9 asks ..."

    @property
    def helps(self) -> bool:
        return (
            not self.failure
            and self.collectives_after < self.collectives_before
            and self.bytes_after < self.bytes_before
        )

    @property
    def text(self) -> str:
        if self.failure:
            return f"{self.change}: tried, but compiling it failed ({self.failure})"
        tried = (
            f"tried by compiling the call again: {self.collectives_after} collective(s) instead of "
            f"{self.collectives_before}, moving {format_bytes(self.bytes_after)} per device instead of "
            f"{format_bytes(self.bytes_before)}"
        )
        return f"{self.change[:1].upper()}{self.change[1:]} ({tried}){f'; {self.cost}' if self.cost else ''}."


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
    collectives_asked: bool = False
    collectives: list[Collective] = dataclasses.field(default_factory=list)
    collectives_failure: str = ""  # the compiled program could not be read: why
    collective_fixes: list[CollectiveFix] = dataclasses.field(default_factory=list)
    ran_on_copies: bool = False  # the call donates arrays: it ran on copies of them, the user's kept

    @property
    def collectives_headline(self) -> str:
        """ "2 collectives XLA inserted: all-gather of `w` (...) at ...; all-reduce ..."."""
        # what nobody wrote first, the heaviest first
        found = sorted(self.collectives, key=lambda c: (not c.inserted, -c.bytes_per_device))
        if not found:
            return "XLA inserted no collective: no device waits for another in this call."
        inserted = sum(1 for c in found if c.inserted)
        written = len(found) - inserted
        counted = " and ".join(
            part
            for part in (
                f"{inserted} collective{'s' if inserted != 1 else ''} XLA inserted" if inserted else "",
                f"{written}{'' if inserted else ' collective' + ('s' if written != 1 else '')} your program wrote"
                if written
                else "",
            )
            if part
        )
        texts = [c.text + (f" ({c.short_cause})" if n == 0 and c.short_cause else "") for n, c in enumerate(found)]
        two = f"{counted}: {'; '.join(texts[:2])}" + (f"; and {len(found) - 2} more" if len(found) > 2 else "") + "."
        if len(found) == 1 or fits_headline(two):
            return two
        return f"{counted}: {texts[0]}; and {len(found) - 1} more (below)."

    @property
    def collective_fix(self) -> CollectiveFix | None:
        """The tried change that leaves the least to move (None when none helped)."""
        helping = [f for f in self.collective_fixes if f.helps]
        return min(helping, key=lambda f: (f.bytes_after, f.collectives_after)) if helping else None

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

    def concerns(self) -> list[Concern]:
        found = [act(f"the copies of {a.label} differ") for a in self.arrays if a.replica_check == "differ"]
        if self.call is not None:
            found += [act(c.text) for c in self.call.unhonoured_constraints]
            if not self.failure:  # a call that failed moved nothing
                found += [act(_moved_text(leaf)) for leaf in self.call.resharded_inputs]
            # inserted collectives are worth knowing, not a bug: a data-parallel step needs its all-reduce
            found += [note(c.text + (f": {c.cause}" if c.cause else "")) for c in self.call.collectives]
        return found + ([failed(self.failure)] if self.failure else [])

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
        if self.call is not None and self.call.collectives_asked and not self.call.resharded_inputs:
            if self.call.collectives_failure:
                return f"`{what}`: could not list its collectives, because {self.call.collectives_failure}."
            return f"`{what}`: {self.call.collectives_headline}"
        if self.call is not None and self.call.resharded_inputs:
            moved = self.call.resharded_inputs
            others = f" (and {len(moved) - 1} more argument(s))" if len(moved) > 1 else ""
            return f"`{what}`: {_moved_text(moved[0])}{others}."
        if not self.arrays:
            kinds = ", ".join(sorted({kind for _, kind in self.other_leaves})) or "nothing"
            return f"`{what}` holds no JAX array ({kinds})."
        if len(self.arrays) == 1:
            return f"`{what}`: {_one_line(self.arrays[0])}"
        devices = sorted({d.id for a in self.arrays for d in a.devices})
        label = "outputs" if self.call else "arrays"
        return f"`{what}`: {len(self.arrays)} {label} over {len(devices)} device(s)."

    def document(self) -> Document:
        document = sharding_document(self)
        if self.call is not None and self.call.ran_on_copies:
            document.sections.append(
                Section(
                    "The call",
                    [
                        Paragraph(
                            "It donates arrays (donate_argnums, or a library's donate=): it ran on copies of them, "
                            "so yours were not deleted; the layouts are the ones your own call gets."
                        )
                    ],
                )
            )
        if self.call is not None and self.call.collectives_asked:
            document.sections.insert(0, collectives_section(self.call))
            fix = self.call.collective_fix
            if fix is not None and not document.fix:
                document.fix = f"{fix.text} Write: `{fix.code}`"
        return document


def collectives_section(call: CallShardings) -> Section:
    """The listing: one row per collective, its cause, and the fixes tried."""
    if call.collectives_failure:
        return Section(
            "Collectives", [Paragraph(f"Could not list the collectives, because {call.collectives_failure}.")]
        )
    if not call.collectives:
        return Section("Collectives", [Paragraph(call.collectives_headline)])
    rows = []
    for number, c in enumerate(call.collectives, 1):
        line = f"line {c.line.lineno}" + (" (consumer)" if c.for_line else "") if c.line else "-"
        axes = ", ".join(repr(a) for a in c.axes) or c.groups
        rows.append(
            [
                str(number),
                c.kind,
                ", ".join(c.values) or "-",
                line,
                c.scope or "-",
                axes,
                format_bytes(c.bytes_per_device),
                f"{c.shape_before} -> {c.shape_after}",
            ]
        )
    columns = ["#", "kind", "of", "line", "scope", "over", "per device", "shape per device"]
    # why each one is there: a sentence, under the table - as a column it was squeezed to a few letters at 900 px
    blocks: list[DocumentBlock] = [Table(columns, rows)]
    blocks += [
        Paragraph(f"Why {number} ({c.kind} of {', '.join(c.values) or '-'}): {c.cause or 'could not tell'}")
        for number, c in enumerate(call.collectives, 1)
    ]
    lines = []
    for c in call.collectives:
        if c.line is not None and c.line not in lines:
            lines.append(c.line)
    if lines:
        blocks.append(SourceLines(lines, caption="The lines they came from:"))
    chosen = [f"{c.instruction}: {'; '.join(c.chosen_around)}" for c in call.collectives if c.chosen_around]
    if chosen:
        blocks.append(Paragraph("Shardings the compiler chose on that line (--intermediates): " + " | ".join(chosen)))
    if call.collective_fixes:
        blocks.append(Paragraph("Tried: " + " ".join(f.text for f in call.collective_fixes)))
    return Section("Collectives", blocks)


def _moved_text(leaf: LeafSharding) -> str:
    """ "`params['w']` arrives as single device CPU 0 but was compiled as P(): JAX copies it there at every call"."""
    return f"`{leaf.path}` arrives as {leaf.given} but was compiled as {leaf.spec}: JAX copies it there at every call"


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
