"""Drawing a sharding report: which device holds which block, as Grid blocks.

The probe (``jaxmagic.probes.sharding``) records each array's blocks (index
ranges and holders) as data; this module decides how to show them:

* rank 0 is one cell, rank 1 one row of blocks (wrapped when there are many),
  rank 2 rows x columns; for rank > 2 two dimensions are drawn (``--dims``, or
  by default the split ones) and the other split dimensions become facets, one
  small grid per combination of their blocks (treescope's arrayviz does N-D the
  same way);
* a colour per device (a block held by several devices takes the colour of the
  first), the holders as the label ("CPU 0,2"), the block's index ranges along
  the edges and in the tooltip;
* blocks held only by other processes are drawn hatched with their process
  index; blocks whose copies differ are drawn with a red border.
"""

from __future__ import annotations

import colorsys
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jaxmagic.render.text import block_lines
from jaxmagic.report.document import (
    Block,
    Document,
    Evidence,
    Facts,
    Grid,
    GridCell,
    Paragraph,
    Section,
    SourceLines,
    Table,
)
from jaxmagic.report.wording import format_bytes

if TYPE_CHECKING:  # the report module imports this one
    from jaxmagic.probes._sharding.report import ArrayLayout, DeviceInfo, ShardingReport
    from jaxmagic.probes._sharding.report import Block as LayoutBlock

# Light colours, far apart in hue, so dark labels stay readable on all of them.
PALETTE = [
    "#a6cee3",
    "#fdbf6f",
    "#b2df8a",
    "#fb9a99",
    "#cab2d6",
    "#ffff99",
    "#8dd3c7",
    "#fccde5",
    "#bebada",
    "#80b1d3",
    "#ccebc5",
    "#ffed6f",
    "#d9d9d9",
    "#f4cae4",
    "#e6f5c9",
    "#fdcdac",
]
MAX_FACETS = 16  # facets drawn for one array; the rest are counted
MAX_ARRAYS_DRAWN = 8  # arrays of a pytree (or outputs of a call) drawn; all are tabled
WRAP_1D_AFTER = 16  # a 1-D array with more blocks than this wraps into rows of 8
MAX_DEVICE_ROWS = 16  # longer per-device tables are collapsed


def device_colours(device_ids: list[int]) -> dict[int, str]:
    """A colour per device, in the given (mesh) order: the palette, then evenly spread hues."""
    colours = {}
    for n, device_id in enumerate(device_ids):
        if len(device_ids) <= len(PALETTE):
            colours[device_id] = PALETTE[n]
        else:  # golden-angle hues, alternating lightness so neighbours differ
            hue = (n * 0.618033988749895) % 1.0
            light = 0.83 if n % 2 == 0 else 0.74
            r, g, b = colorsys.hls_to_rgb(hue, light, 0.6)
            colours[device_id] = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
    return colours


def id_list(ids: list[int]) -> str:
    """``0,2`` for a few ids; runs of three or more compressed for longer lists: ``0-7,16-23``."""
    ids = sorted(ids)
    if len(ids) <= 4:
        return ",".join(map(str, ids))
    parts = []
    for _, pairs in itertools.groupby(enumerate(ids), key=lambda pair: pair[1] - pair[0]):
        run = [i for _, i in pairs]
        parts.append(f"{run[0]}-{run[-1]}" if len(run) >= 3 else ",".join(map(str, run)))
    return ",".join(parts)


def holders_label(layout: ArrayLayout, holders: list[int]) -> str:
    """ "CPU 0,2": the platform and the ids of the devices holding a block."""
    platforms = sorted({layout.device(h).platform.upper() for h in holders})
    return f"{'/'.join(platforms)} {id_list(holders)}"


def drawn_dims(layout: ArrayLayout, dims: list[int] | None = None) -> tuple[int | None, int | None]:
    """The (row, column) dimensions to draw; None where the picture has no such axis.

    Rank 0: (None, None); rank 1: (None, 0); rank 2: (0, 1). For rank > 2 the
    requested ``dims`` if they fit, else the last two split dimensions, else a
    split dimension with the last other one, else the last two.
    """
    rank = len(layout.shape)
    if rank == 0:
        return None, None
    if rank == 1:
        return None, 0
    if dims and len(dims) == 2 and max(dims) < rank and dims[0] != dims[1]:
        return dims[0], dims[1]
    if rank == 2:
        return 0, 1
    return dims_by_splits(_chunks_per_dim(layout))


def dims_by_splits(chunks: Sequence[Sequence[tuple[int, ...]]]) -> tuple[int, int]:
    """For rank >= 2, given each dimension's distinct blocks: the last two split dimensions, else a split
    dimension with the last other one, else the last two (the static drawing and the explorer agree)."""
    rank = len(chunks)
    split = [d for d in range(rank) if len(chunks[d]) > 1]
    if len(split) >= 2:
        return split[-2], split[-1]
    if len(split) == 1:
        other = max(d for d in range(rank) if d != split[0])
        return min(split[0], other), max(split[0], other)
    return rank - 2, rank - 1


def _chunks_per_dim(layout: ArrayLayout) -> list[list[tuple[int, ...]]]:
    return [sorted({tuple(b.index[d]) for b in layout.blocks}) for d in range(len(layout.shape))]


def layout_grids(layout: ArrayLayout, dims: list[int] | None = None, name: str = "") -> tuple[list[Grid], list[str]]:
    """The drawing of one array: one Grid per facet, and notes about what was left out.

    ``name`` is used in facet captions (``name[0:2, :, :]``); default: the leaf's path, else "x".
    """
    row_dim, col_dim = drawn_dims(layout, dims)
    rank = len(layout.shape)
    chunks = _chunks_per_dim(layout)
    facet_dims = [d for d in range(rank) if d not in (row_dim, col_dim)]
    colours = device_colours([d.id for d in layout.devices])
    facets: dict[tuple[tuple[int, ...], ...], list[LayoutBlock]] = {}
    for block in layout.blocks:
        facets.setdefault(tuple(tuple(block.index[d]) for d in facet_dims), []).append(block)
    notes = []
    keys = sorted(facets)
    split_facet_dims = [d for d in facet_dims if len(chunks[d]) > 1]
    if len(keys) > MAX_FACETS:
        notes.append(
            f"{len(keys)} facets (one per block of dimension(s) "
            f"{', '.join(map(str, split_facet_dims))}); the first {MAX_FACETS} are drawn. "
            f"Choose the drawn dimensions with --dims I,J."
        )
        keys = keys[:MAX_FACETS]
    grids = []
    for key in keys:
        caption = _facet_caption(layout.path or name or "x", layout, key, facet_dims) if split_facet_dims else ""
        grids.append(_facet_grid(layout, facets[key], row_dim, col_dim, chunks, colours, caption))
    return grids, notes


def _facet_caption(name: str, layout: ArrayLayout, key: tuple[tuple[int, ...], ...], facet_dims: list[int]) -> str:
    parts = []
    for d in range(len(layout.shape)):
        if d in facet_dims:
            start, stop = key[facet_dims.index(d)]
            parts.append(f"{start}:{stop}")
        else:
            parts.append(":")
    return f"{name}[{', '.join(parts)}]"


def _facet_grid(
    layout: ArrayLayout,
    blocks: list[LayoutBlock],
    row_dim: int | None,
    col_dim: int | None,
    chunks: list[list[tuple[int, ...]]],
    colours: dict[int, str],
    caption: str,
) -> Grid:
    # A picture split along one axis only is a row of blocks, whatever the rank:
    # draw it as one, so that many blocks can wrap instead of running off the page.
    if row_dim is not None and col_dim is not None:
        if len(chunks[row_dim]) == 1 and len(chunks[col_dim]) > WRAP_1D_AFTER:
            row_dim = None
        elif len(chunks[col_dim]) == 1 and len(chunks[row_dim]) > WRAP_1D_AFTER:
            row_dim, col_dim = None, row_dim
    row_chunks: Sequence[tuple[int, ...] | None] = chunks[row_dim] if row_dim is not None else [None]
    col_chunks: Sequence[tuple[int, ...] | None] = chunks[col_dim] if col_dim is not None else [None]
    wrap = row_dim is None and len(col_chunks) > WRAP_1D_AFTER
    cells = []
    for block in blocks:
        r = row_chunks.index(tuple(block.index[row_dim])) if row_dim is not None else 0
        c = col_chunks.index(tuple(block.index[col_dim])) if col_dim is not None else 0
        if wrap:
            r, c = divmod(c, 8)
        cells.append(_cell(layout, block, r, c, row_dim, col_dim, colours, with_ranges=wrap))
    if wrap:
        cols = 8
        rows = math.ceil(len(col_chunks) / cols)
        where = f"blocks of dimension {col_dim}" if len(layout.shape) > 1 else "blocks"
        return Grid(
            rows,
            cols,
            cells,
            caption=(caption + ": " if caption else "")
            + f"{len(col_chunks)} {where}, 8 per row, with their index ranges",
        )
    grid = Grid(len(row_chunks), len(col_chunks), cells, caption=caption)
    if col_dim is not None:  # then col_chunks is chunks[col_dim], (start, stop) pairs
        grid.col_labels = [f"{a}:{b}" for a, b in chunks[col_dim]]
        grid.col_sizes = [b - a for a, b in chunks[col_dim]]
    if row_dim is not None:
        grid.row_labels = [f"{a}:{b}" for a, b in chunks[row_dim]]
        grid.row_sizes = [b - a for a, b in chunks[row_dim]]
    return grid


def _cell(
    layout: ArrayLayout,
    block: LayoutBlock,
    r: int,
    c: int,
    row_dim: int | None,
    col_dim: int | None,
    colours: dict[int, str],
    with_ranges: bool = False,
) -> GridCell:
    local = [h for h in block.holders if layout.device(h).addressable]
    label = holders_label(layout, block.holders)
    style = detail = ""
    if not local:
        processes = sorted({layout.device(h).process for h in block.holders})
        detail = f"process {','.join(map(str, processes))}"
        style = "muted"
    elif block.copies_differ:
        style, detail = "alert", "copies differ"
    elif len(local) < len(block.holders):
        remote = sorted({layout.device(h).process for h in block.holders if not layout.device(h).addressable})
        detail = f"also on process {','.join(map(str, remote))}"
    elif with_ranges:  # no edge labels to read the ranges from
        drawn = [d for d in (row_dim, col_dim) if d is not None]
        detail = "[" + ", ".join(f"{block.index[d][0]}:{block.index[d][1]}" for d in drawn) + "]"
    return GridCell(
        r,
        c,
        label,
        detail=detail,
        colour=colours.get(block.holders[0], ""),
        tooltip=_tooltip(layout, block),
        style=style,
    )


def _tooltip(layout: ArrayLayout, block: LayoutBlock) -> str:
    name = layout.path or "x"
    shape = "x".join(map(str, block.shape)) or "scalar"
    lines = [
        f"{name}{block.index_text}: {shape} {layout.dtype}, {format_bytes(math.prod(block.shape) * layout.itemsize)}"
    ]
    holders = [layout.device(h) for h in block.holders]
    lines.append(
        f"held by {len(holders)} device(s): "
        + ", ".join(d.name + ("" if d.addressable else f" (process {d.process})") for d in holders)
    )
    if block.copies_differ:
        lines.append("copies differ: " + "; ".join(f"{id_list(g.devices)} -> {g.preview}" for g in block.copy_groups))
    return "\n".join(lines)


# -- the whole report ----------------------------------------------------------------


def sharding_document(report: ShardingReport) -> Document:
    title = "%jax_sharding"
    sections = []
    arrays = report.arrays
    if len(arrays) == 1:
        name = "Result" if report.call is not None else "Layout"
        sections.append(
            Section(
                name,
                _array_blocks(
                    arrays[0], report.dims, with_facts=True, name=report.expression if report.call is None else "result"
                ),
            )
        )
    elif arrays:
        sections.append(Section("Arrays", [_arrays_table(arrays)]))
        drawn: list[Block] = []
        for layout in arrays[:MAX_ARRAYS_DRAWN]:
            drawn.append(
                Paragraph(f"`{layout.label}`: `{layout.typeof}`" + (f", `{layout.spec}`" if layout.spec else ""))
            )
            drawn += _array_blocks(layout, report.dims, with_facts=False)
        if len(arrays) > MAX_ARRAYS_DRAWN:
            drawn.append(Paragraph(f"{len(arrays) - MAX_ARRAYS_DRAWN} more arrays are in the table above, not drawn."))
        sections.append(Section("Layouts", drawn))
    if report.other_leaves:
        sections.append(Section("Not on a device", [Table(["leaf", "what it is"], report.other_leaves)]))
    replicas = _replica_section(report)
    if replicas:
        sections.insert(0 if any(a.replica_check == "differ" for a in arrays) else len(sections), replicas)
    if report.call is not None:
        sections += _call_sections(report)
    if report.failure:
        sections.insert(
            0,
            Section(
                "The call failed",
                [
                    Paragraph(
                        f"`{report.expression}` raised `{report.failure}`; the error is shown below the report."
                        + (
                            " The shardings it was compiled with are listed all the same."
                            if report.call and report.call.inputs
                            else ""
                        )
                    )
                ],
            ),
        )
    if arrays:
        sections.append(_devices_section(arrays))
    return Document(
        title, report.status, report.summary, sections, fix=sharding_fix(report), nothing_to_do=report.unexplained()
    )


def _array_blocks(layout: ArrayLayout, dims: list[int] | None, with_facts: bool, name: str = "") -> list[Block]:
    blocks: list[Block] = []
    if with_facts:
        blocks.append(Facts(_facts(layout)))
    grids, notes = layout_grids(layout, dims, name=name)
    row_dim, col_dim = drawn_dims(layout, dims)
    if len(layout.shape) > 2:
        blocks.append(Paragraph(_drawn_dims_text(layout, row_dim, col_dim)))
    blocks += grids
    blocks += [Paragraph(note) for note in notes]
    if not layout.fully_addressable:
        others = sorted({d.process for d in layout.devices if not d.addressable})
        blocks.append(
            Paragraph(
                f"Not fully addressable: this is process {_this_process(layout)}; hatched blocks (~ in plain text) "
                f"are held by process(es) {', '.join(map(str, others))} only, and their data cannot be read from here."
            )
        )
    return blocks


def _this_process(layout: ArrayLayout) -> str:
    mine = sorted({d.process for d in layout.devices if d.addressable})
    return ",".join(map(str, mine)) or "?"


def _drawn_dims_text(layout: ArrayLayout, row_dim: int | None, col_dim: int | None) -> str:
    assert row_dim is not None and col_dim is not None  # rank > 2: both are drawn

    def describe(d: int) -> str:
        axes = layout.dim_axes[d] if d < len(layout.dim_axes) else []
        how = f"split over {', '.join(repr(a) for a in axes)}" if axes else "not split"
        return f"dimension {d} (size {layout.shape[d]}, {how})"

    text = f"Rows: {describe(row_dim)}; columns: {describe(col_dim)}."
    others = [d for d in range(len(layout.shape)) if d not in (row_dim, col_dim)]
    split = [d for d in others if len({tuple(b.index[d]) for b in layout.blocks}) > 1]
    if split:
        text += f" One grid per block of {', '.join(describe(d) for d in split)}."
    elif others:
        text += (
            f" Dimension {others[0]} is not split, so every block spans it whole."
            if len(others) == 1
            else f" Dimensions {', '.join(map(str, others))} are not split, so every block spans them whole."
        )
    return text + " Choose others with --dims I,J."


def _facts(layout: ArrayLayout) -> list[tuple[str, str]]:
    facts = [("jax.typeof", layout.typeof)]
    if layout.spec:
        facts.append(("PartitionSpec", layout.spec))
    facts.append(
        (
            "sharding",
            layout.sharding_type + (f" ({layout.memory_kind})" if layout.memory_kind not in ("", "device") else ""),
        )
    )
    if layout.mesh is not None:
        facts.append(("mesh", layout.mesh.description))
    kinds = sorted({d.device_kind for d in layout.devices})
    facts.append(
        (
            "devices",
            f"{len(layout.devices)} ({', '.join(kinds)})"
            + (f", processes {', '.join(map(str, layout.processes))}" if len(layout.processes) > 1 else ""),
        )
    )
    shapes = sorted({tuple(b.shape) for b in layout.blocks})
    if layout.shape:
        facts.append(("shard shape", " / ".join(str(tuple(s)) for s in shapes) + f" of {tuple(layout.shape)}"))
    else:
        facts.append(("shard shape", "() - a scalar: every holder has the whole value"))
    per_device = sorted(set(layout.bytes_per_device().values()))
    total = format_bytes(layout.total_bytes)
    if len(per_device) == 1:
        facts.append(("bytes per device", f"{format_bytes(per_device[0])} on each device (whole array {total})"))
    else:
        facts.append(
            (
                "bytes per device",
                f"{format_bytes(per_device[0])} to {format_bytes(per_device[-1])} (whole array {total})",
            )
        )
    copies = max(len(b.holders) for b in layout.blocks) if layout.blocks else 0
    if copies > 1:
        over = layout.replicated_dims_summary
        facts.append(
            ("copies", f"each block on {copies} devices" + (f" (replicated over mesh axis {over})" if over else ""))
        )
    facts.append(("replica check", _replica_words(layout)))
    return facts


def _replica_words(layout: ArrayLayout) -> str:
    check = layout.replica_check
    if check == "consistent":
        return f"all copies identical ({layout.copies_compared} local copies compared bit for bit)"
    if check == "differ":
        return f"COPIES DIFFER in {len(layout.blocks_differing)} block(s)"
    if check == "not needed":
        return "not needed (no block has two local copies)"
    if check == "skipped":
        return "skipped (--no-check)"
    if check == "other processes":
        return "not possible here: the copies of each block are on different processes"
    return check


REPLICA_FIX = (
    "Combine the per-device values with a collective inside the shard_map (`lax.psum`, `lax.pmean`, "
    "`lax.all_gather`) before returning them as replicated, or return them split (out_specs `P('axis')`) and "
    "combine outside. Keep `check_vma=True` (the default), which rejects this at trace time."
)


def sharding_fix(report: ShardingReport) -> str:
    """What to do about what the report found first, as its summary leads with it: copies that differ, a
    constraint not honoured, arguments copied at every call; "" when it found none of these."""
    if any(a.replica_check == "differ" for a in report.arrays):
        return REPLICA_FIX
    call = report.call
    if call is not None and call.unhonoured_constraints:
        return call.unhonoured_constraints[0].fix
    if call is not None and call.resharded_inputs:
        moved = call.resharded_inputs
        them, have = ("them", "have") if len(moved) > 1 else ("it", "has")
        return (
            f"Place {them} once, before the calls, with `jax.device_put(x, sharding)` and the sharding the call "
            f"was compiled for (the table below), or compile for the layout {them} {have}."
        )
    return ""


def _replica_section(report: ShardingReport) -> Section | None:
    differing = [a for a in report.arrays if a.replica_check == "differ"]
    if not differing:
        return None
    rows = []
    several = len(report.arrays) > 1
    for layout in differing:
        for block in layout.blocks_differing:
            for group in block.copy_groups:
                rows.append(
                    ([f"`{layout.label}`"] if several else [])
                    + [
                        block.index_text if layout.shape else "(scalar)",
                        holders_label(layout, group.devices),
                        group.preview,
                    ]
                )
    blocks: list[Block] = [
        Paragraph(
            "These blocks are held by several devices, so every copy should be the same, but the copies "
            "differ. A value declared replicated (a `P()` or `None` in out_specs) that each device "
            "computed on its own data - typically `shard_map` with `check_vma=False` and a missing "
            "collective - comes back as device 0's copy, silently."
        ),
        Table((["array"] if several else []) + ["block", "devices", "their copy"], rows),
    ]
    if any(not a.fully_addressable for a in differing):
        blocks.append(Paragraph("Only the copies on this process's devices were compared."))
    return Section("Copies that differ", blocks)


def _arrays_table(arrays: list[ArrayLayout]) -> Table:
    rows = []
    for layout in arrays:
        shapes = sorted({tuple(b.shape) for b in layout.blocks})
        per_device = sorted(set(layout.bytes_per_device().values()))
        rows.append(
            [
                f"`{layout.label}`",
                layout.typeof,
                layout.spec or layout.sharding_type,
                " / ".join(str(s) for s in shapes),
                " / ".join(format_bytes(b) for b in per_device),
                _short_replica(layout),
            ]
        )
    return Table(["array", "jax.typeof", "sharding", "shard shape", "bytes per device", "copies"], rows)


def _short_replica(layout: ArrayLayout) -> str:
    return {
        "consistent": "identical",
        "differ": "DIFFER",
        "not needed": "-",
        "skipped": "not checked",
        "other processes": "on other processes",
    }.get(layout.replica_check, layout.replica_check)


def _call_sections(report: ShardingReport) -> list[Section]:
    call = report.call
    assert call is not None  # the sections of a call's report
    sections = []
    if call.constraints:
        sections.append(_constraints_section(report))
    if call.inputs or call.outputs:
        sections.append(_compiled_shardings_section(report))
    if call.intermediates_asked:
        sections.append(_inside_section(report))
    elif call.inputs:
        sections.append(_inside_hint_section())
    return sections


def _constraints_section(report: ShardingReport) -> Section:
    """The sharding constraints in the call: asked for, came out, and why not where not honoured."""
    call = report.call
    assert call is not None  # the sections of a call's report
    rows = [
        [
            c.requested,
            c.typeof,
            (c.came_out + (f" ({c.copies} full copies)" if c.copies > 1 else "")) if c.came_out else "not observed",
            "; ".join(c.uneven) + " does not divide evenly" if c.uneven else "-",
            f"{c.line.label or c.line.filename}:{c.line.lineno}" if c.line else "-",
        ]
        for c in call.constraints
    ]
    blocks: list[Block] = [Table(["asked for", "value", "came out", "why", "line"], rows)]
    for c in call.unhonoured_constraints[:2]:
        blocks.append(Paragraph(f"{c.text}. {c.fix}"))
    title = "Sharding constraints not honoured" if call.unhonoured_constraints else "Sharding constraints"
    return Section(title, blocks)


def _compiled_shardings_section(report: ShardingReport) -> Section:
    """The shardings the call was compiled with, per argument and result, beside the arguments' own."""
    call = report.call
    assert call is not None  # the sections of a call's report
    blocks: list[Block] = []
    how = "" if call.was_jitted else f" (`{call.function}` is not jitted; jaxmagic compiled `jax.jit({call.function})`)"
    blocks.append(Paragraph(f"The shardings `{report.expression}` was compiled with{how}:"))
    rows = [
        [
            "in",
            f"`{leaf.path}`",
            leaf.typeof,
            leaf.spec if leaf.read else "none: the program never reads it (JAX dropped it)",
            "" if leaf.matches is None else ("same" if leaf.matches else f"differs: {leaf.given}"),
        ]
        for leaf in call.inputs
    ]
    rows += [["out", f"`{leaf.path}`", leaf.typeof, leaf.spec, ""] for leaf in call.outputs]
    blocks.append(Table(["", "value", "type", "compiled sharding", "the argument's own"], rows))
    unread = [leaf.path for leaf in call.inputs if not leaf.read]
    if unread:
        them = "them" if len(unread) > 1 else "it"
        names = ", ".join(f"`{path}`" for path in unread)
        blocks.append(
            Paragraph(
                f"The program never reads {names}: JAX compiled it without {them} "
                f"(nothing is transferred, laid out or donated for {them})."
            )
        )
    moved = call.resharded_inputs
    if moved:
        blocks.append(
            Paragraph(
                f"{len(moved)} argument(s) arrive with a sharding other than the compiled one "
                f"({', '.join(leaf.path for leaf in moved)}): JAX moves them to the compiled layout on every call. "
                "Place them with `jax.device_put(x, sharding)` once, or pass `in_shardings` that match."
            )
        )
    return Section("Compiled shardings", blocks)


def _inside_section(report: ShardingReport) -> Section:
    """The sharding the compiler chose for each value inside the call (``--intermediates``)."""
    call = report.call
    assert call is not None  # the sections of a call's report
    blocks: list[Block] = []
    if call.intermediates_failure:
        blocks.append(Paragraph(f"Could not inspect the intermediates: {call.intermediates_failure}"))
    if call.intermediates:
        blocks.append(
            Paragraph(
                "Each value computed at the top level of the call, with its type at trace time (explicit "
                "shardings show as `8@axis`) and the sharding the compiler chose, as "
                "`jax.debug.inspect_array_sharding` reports it at compile time (an instrumented copy of the "
                "call was compiled for this, not run)."
            )
        )
        rows = [
            [
                str(row.index),
                (row.line.label or row.line.filename) + f":{row.line.lineno}" if row.line else "",
                row.op + (" (yours)" if row.yours else ""),
                row.typeof,
                row.spec or "(not reported)",
            ]
            for row in call.intermediates
        ]
        blocks.append(Table(["#", "line", "operation", "type at trace time", "compiler chose"], rows))
        lines = list({row.line.where: row.line for row in call.intermediates if row.line}.values())
        if lines:
            blocks.append(SourceLines(lines[:12], caption="Your lines:"))
        if call.intermediates_dropped:
            blocks.append(Paragraph(f"{call.intermediates_dropped} more values not listed."))
    return Section("Inside the call", blocks)


def _inside_hint_section() -> Section:
    """Without ``--intermediates``: how to see inside the call."""
    return Section(
        "Inside the call",
        [
            Paragraph(
                "Add `--intermediates` to see the sharding the compiler chose for every value computed inside the "
                "call (jaxmagic compiles an instrumented copy with `jax.debug.inspect_array_sharding` after each "
                "operation; nothing is run)."
            )
        ],
    )


def _devices_section(arrays: list[ArrayLayout]) -> Section:
    per_device: dict[int, int] = {}
    info: dict[int, DeviceInfo] = {}  # device id -> its DeviceInfo
    blocks_of: dict[int, list[str]] = {}
    for layout in arrays:
        for device_id, size in layout.bytes_per_device().items():
            per_device[device_id] = per_device.get(device_id, 0) + size
            info.setdefault(device_id, layout.device(device_id))
        if len(arrays) == 1:
            for block in layout.blocks:
                for h in block.holders:
                    blocks_of.setdefault(h, []).append(block.index_text if layout.shape else "(scalar)")
    order = [d.id for layout in arrays for d in layout.devices]
    order = list(dict.fromkeys(order))
    multi_process = len({info[i].process for i in order}) > 1
    columns = ["device"] + (["process"] if multi_process else []) + ["mesh position"]
    columns += ["block"] if blocks_of else []
    columns += ["bytes" if len(arrays) == 1 else "bytes (all arrays)"]
    rows = []
    for device_id in order:
        d = info[device_id]
        row = [d.name + ("" if d.addressable else " (other process)")]
        row += [str(d.process)] if multi_process else []
        row += [str(tuple(d.mesh_position)) if d.mesh_position else "-"]
        row += [" ".join(blocks_of.get(device_id, []))] if blocks_of else []
        row += [format_bytes(per_device[device_id])]
        rows.append(row)
    if len(rows) <= MAX_DEVICE_ROWS:
        return Section("Devices", [Table(columns, rows)])
    # A long list stays collapsed: the drawing already shows who holds what.

    sizes = sorted(set(per_device.values()))
    summary = (
        f"{len(rows)} devices, {format_bytes(sizes[0])} each"
        if len(sizes) == 1
        else f"{len(rows)} devices, {format_bytes(sizes[0])} to {format_bytes(sizes[-1])} each"
    )
    return Section(
        "Devices",
        [
            Paragraph(summary + "."),
            Evidence(f"Per device ({len(rows)} devices)", "\n".join(block_lines(Table(columns, rows)))),
        ],
    )
