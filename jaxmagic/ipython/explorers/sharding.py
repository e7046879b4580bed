"""``%jax_sharding EXPR --explore``: choose the two dimensions drawn, slice the others, click a device.

Built from the report's layouts (``ArrayLayout``: blocks with their index ranges and holders, the
same data the static drawing uses) plus, for a call, the layouts of the call's input arrays,
read while the kernel still has them (no array data is read). Clicking a device highlights the
blocks it holds and names the devices holding copies of them (its replicas); the array chooser
switches between the call's inputs, outputs and ``--intermediates`` values (laid over the inputs'
mesh from the spec the compiler chose), or the value's leaves.
"""

from __future__ import annotations

import ast
import html
import re
from typing import TYPE_CHECKING

import ipywidgets as widgets

from jaxmagic.ipython.explorers.shown import EXPLORER_TEXT, LABEL, frame, show_explorer, wrapping_row
from jaxmagic.probes._sharding import layout_of
from jaxmagic.probes._sharding.sharding_layout import device_colours, dims_by_splits, id_list
from jaxmagic.render.html import CODE, MUTED, breakable_html

if TYPE_CHECKING:
    from jaxmagic.probes._sharding.report import ArrayLayout, Block, ShardingReport

WHAT = "the layouts (the dimensions drawn, slices, each device's blocks and replicas)"
MAX_DEVICE_BUTTONS = 256  # past this many devices a dropdown chooses the device
# Device colours are pastel in both themes: their labels are dark in both (the static drawing's #1f2328).
ON_PASTEL = "#1f2328"
# The outlines of the chosen device and its replicas: the theme's strongest text colour, seen on light and dark.
STRONG = "var(--jp-content-font-color0, #000)"
CHOSEN_BORDER = f"3px solid {STRONG}"
REPLICA_BORDER = f"2px dashed {STRONG}"
# A block of another device while one is chosen: outlined, not filled, its label muted (never faded below
# a readable contrast, as an opacity would).
OTHER_BLOCK = f"background:transparent;border:1px dashed rgba(128,128,128,.6);{MUTED}"


def input_layouts(args: tuple[object, ...], kwargs: dict[str, object]) -> list[ArrayLayout]:
    """The layouts of a call's input arrays (plain data, as the report's); no array data is read."""
    import jax  # deferred: ipython/ imports no JAX at its top (%load_ext)

    layouts = []
    leaves, _ = jax.tree_util.tree_flatten_with_path((tuple(args), dict(kwargs)))
    for key_path, leaf in leaves:
        if isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer):
            path = _argument_path(jax.tree_util.keystr(key_path))
            layouts.append(layout_of(leaf, path=path, check_replicas=False))
    return layouts


def intermediate_layouts(
    report: ShardingReport, args: tuple[object, ...], kwargs: dict[str, object]
) -> list[ArrayLayout]:
    """The blocks of each ``--intermediates`` value, from the spec the compiler chose and its type, laid over
    the mesh of the call's inputs (a ``ShapeDtypeStruct`` with that sharding: no data). A value whose spec
    or type does not read as a ``NamedSharding`` over that mesh is left out (the report lists it)."""
    import jax  # deferred: ipython/ imports no JAX at its top (%load_ext)

    call = report.call
    meshes = [
        leaf.sharding.mesh
        for leaf in jax.tree_util.tree_leaves((tuple(args), dict(kwargs)))
        if isinstance(getattr(leaf, "sharding", None), jax.sharding.NamedSharding)
    ]
    if not meshes or call is None or not call.intermediates:
        return []
    mesh = meshes[0]
    layouts = []
    for value in call.intermediates:
        spec, shape_dtype = spec_entries(value.spec), type_shape(value.typeof)
        if spec is None or shape_dtype is None:
            continue
        try:
            sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
            struct = jax.ShapeDtypeStruct(shape_dtype[0], shape_dtype[1], sharding=sharding)
            path = f"{value.op} (equation {value.index})"
            layouts.append(layout_of(struct, path=path, check_replicas=False))
        except Exception:  # another mesh, an axis of another size: the report's table still lists it
            continue
    return layouts


def spec_entries(text: str) -> tuple[object, ...] | None:
    """``P('data', None, ('a', 'b'))`` -> ``('data', None, ('a', 'b'))``; None when it is not that form."""
    text = text.strip()
    if not (text.startswith("P(") and text.endswith(")")):
        return None
    inner = text[2:-1].strip()
    if not inner:
        return ()
    try:
        entries = ast.literal_eval(f"({inner},)")
    except (ValueError, SyntaxError):
        return None
    return entries if isinstance(entries, tuple) else None


def type_shape(text: str) -> tuple[tuple[int, ...], str] | None:
    """``float32[8@data,4]`` -> ``((8, 4), 'float32')``; None for another form."""
    match = re.fullmatch(r"(\w+)\[([^\]]*)\]", text.strip())
    if match is None:
        return None
    dims = [d.split("@")[0].strip() for d in match.group(2).split(",") if d.strip()]
    if not all(d.isdigit() for d in dims):
        return None
    return tuple(int(d) for d in dims), match.group(1)


def _argument_path(keystr: str) -> str:
    """``[0][0]['w']`` (positional 0, key 'w') -> ``args[0]['w']``; ``[1]['lr']`` -> ``lr``."""
    if keystr.startswith("[0]["):
        end = keystr.index("]", 4)
        return f"args[{keystr[4:end]}]{keystr[end + 1 :]}"
    if keystr.startswith("[1]['"):
        end = keystr.index("']", 5)
        return keystr[5:end] + keystr[end + 2 :]
    return keystr


def chunks_per_dim(layout: ArrayLayout) -> list[list[tuple[int, int]]]:
    """The distinct [start, stop) ranges of each dimension, in order."""
    rank = len(layout.shape)
    return [sorted({(b.index[d][0], b.index[d][1]) for b in layout.blocks}) for d in range(rank)]


def default_dims(layout: ArrayLayout) -> tuple[int | None, int | None]:
    """The (row, column) dimensions drawn first: the last two split ones (as the static drawing does)."""
    rank = len(layout.shape)
    if rank == 0:
        return None, None
    if rank == 1:
        return None, 0
    return dims_by_splits(chunks_per_dim(layout))


def blocks_held(layout: ArrayLayout, device: int) -> list[Block]:
    return [b for b in layout.blocks if device in b.holders]


def replicas_of(layout: ArrayLayout, device: int) -> list[int]:
    """The other devices holding a copy of a block ``device`` holds."""
    return sorted({h for b in blocks_held(layout, device) for h in b.holders if h != device})


def index_text(index: list[list[int]]) -> str:
    """``[0:4, 2:4]``; a scalar's one block is the whole value."""
    if not index:
        return "the whole value (a scalar)"
    return "[" + ", ".join(f"{a}:{b}" for a, b in index) + "]"


def grid_html(
    layout: ArrayLayout,
    row_dim: int | None,
    col_dim: int | None,
    slices: dict[int, tuple[int, int]],
    selected: int | None = None,
) -> str:
    """The drawn slice: one cell per block of the two drawn dimensions, coloured by its first holder.

    ``slices`` gives, for every other dimension, the block range shown. With a device selected, its
    blocks are outlined and the others faded.
    """
    colours = device_colours([d.id for d in layout.devices])
    chunks = chunks_per_dim(layout)
    rows = chunks[row_dim] if row_dim is not None else [None]
    cols = chunks[col_dim] if col_dim is not None else [None]
    by_index = {tuple(tuple(r) for r in b.index): b for b in layout.blocks}
    rank = len(layout.shape)
    head = "".join(f'<th style="{LABEL};padding:0 4px">{a}:{b}</th>' for a, b in (c for c in cols if c is not None))
    parts = ['<table class="jm-explorer-grid" style="border-collapse:separate;border-spacing:3px">']
    if col_dim is not None:
        parts.append(
            f'<tr><th style="{LABEL};white-space:nowrap">dim {row_dim} &darr; dim {col_dim} &rarr;</th>{head}</tr>'
        )
    for row in rows:
        label = f"{row[0]}:{row[1]}" if row is not None else ""
        cells = [f'<th style="{LABEL};padding:0 4px">{label}</th>']
        for col in cols:
            index = []
            for d in range(rank):
                if d == row_dim and row is not None:
                    index.append(row)
                elif d == col_dim and col is not None:
                    index.append(col)
                else:
                    index.append(slices.get(d, chunks[d][0]))
            block = by_index.get(tuple(index))
            cells.append(_cell_html(layout, block, colours, selected))
        parts.append(f"<tr>{''.join(cells)}</tr>")
    parts.append("</table>")
    return "".join(parts)


def _cell_html(layout: ArrayLayout, block: Block | None, colours: dict[int, str], selected: int | None) -> str:
    size = "min-width:56px;height:34px;text-align:center;font-family:monospace;font-size:12px"
    if block is None:
        return f'<td style="{size};border:1px dashed rgba(128,128,128,.6)"></td>'
    holders = block.holders
    mine = selected is not None and selected in holders
    platform = layout.devices[0].platform.upper() if layout.devices else ""
    title = f"{index_text(block.index)} on {platform} {id_list(holders)}"
    if selected is not None and not mine:
        look = OTHER_BLOCK
    else:
        border = CHOSEN_BORDER if mine else "1px solid rgba(31,35,40,.3)"
        look = f"background:{colours.get(holders[0], '#ddd')};border:{border};color:{ON_PASTEL}"
    return (
        f'<td class="jm-block{" jm-selected" if mine else ""}" title="{html.escape(title)}" style="{look};{size}">'
        f"{html.escape(id_list(holders))}</td>"
    )


class ShardingExplorer:
    """The widgets, and what they show, for a list of (source, layout) pairs."""

    def __init__(self, sources: list[tuple[str, ArrayLayout]]):
        self.sources = sources
        self.array = widgets.Dropdown(
            options=[(array_label(source, layout), n) for n, (source, layout) in enumerate(sources)],
            description="array",
            layout=widgets.Layout(width="max-content", max_width="100%"),
        )
        self.rows = widgets.Dropdown(description="rows", layout=widgets.Layout(width="250px"))
        self.cols = widgets.Dropdown(description="columns", layout=widgets.Layout(width="250px"))
        self.slicers = wrapping_row([])
        self.devices = wrapping_row([])
        self.grid = widgets.HTML()
        self.info = widgets.HTML()
        self.selected: int | None = None
        self._slice_widgets: dict[int, widgets.Dropdown] = {}
        self._device_buttons: dict[int, widgets.Button] = {}
        self._building = False
        self.widget = widgets.VBox(
            [self.array, wrapping_row([self.rows, self.cols]), self.slicers, self.devices, self.grid, self.info],
            layout=frame(),
        )
        self.widget.add_class("jaxmagic-sharding-explorer")
        self.array.observe(lambda _c: self._choose_array(), names="value")
        self.rows.observe(lambda _c: self._dims_changed(), names="value")
        self.cols.observe(lambda _c: self._dims_changed(), names="value")
        self._choose_array()

    @property
    def layout(self) -> ArrayLayout:
        return self.sources[self.array.value][1]

    def _choose_array(self) -> None:
        layout = self.layout
        self._building = True
        rank = len(layout.shape)
        chunks = chunks_per_dim(layout)
        dim_axes = layout.dim_axes or [[] for _ in range(rank)]
        options = [
            (f"dim {d} ({layout.shape[d]}" + (f" over {','.join(dim_axes[d])})" if dim_axes[d] else ")"), d)
            for d in range(rank)
        ]
        row, col = default_dims(layout)
        self.rows.options = options
        self.cols.options = options
        self.rows.value = row if row is not None else None
        self.cols.value = col if col is not None else None
        self.rows.disabled = self.cols.disabled = rank < 3
        self._slice_widgets = {}
        self._building = False
        self._device_row(layout)
        self.selected = None
        self._dims_changed(chunks)

    def _device_row(self, layout: ArrayLayout) -> None:
        colours = device_colours([d.id for d in layout.devices])
        self._device_buttons = {}
        if len(layout.devices) > MAX_DEVICE_BUTTONS:
            chooser = widgets.Dropdown(
                options=[("no device", None)] + [(f"{d.platform.upper()} {d.id}", d.id) for d in layout.devices],
                description="device",
            )
            chooser.observe(lambda change: self.select(change["new"]), names="value")
            self.devices.children = [chooser]
            return
        buttons = []
        for device in layout.devices:
            button = widgets.Button(
                description=f"{device.platform.upper()} {device.id}",
                tooltip=f"highlight the blocks of {device.platform.upper()} {device.id} and its replicas",
                layout=widgets.Layout(width="auto"),
            )
            button.style.button_color = colours.get(device.id, "#ddd")
            button.style.text_color = ON_PASTEL  # the theme's button text (white in dark) is unreadable on pastel
            button.add_class("jm-device")
            button.on_click(lambda _b, device_id=device.id: self.select(device_id))
            self._device_buttons[device.id] = button
            buttons.append(button)
        self.devices.children = buttons

    def _dims_changed(self, chunks: list[list[tuple[int, int]]] | None = None) -> None:
        if self._building:
            return
        layout = self.layout
        chunks = chunks or chunks_per_dim(layout)
        rank = len(layout.shape)
        drawn = {self.rows.value, self.cols.value}
        sliced = []
        self._slice_widgets = {}
        for d in range(rank):
            if d in drawn or rank < 3:
                continue
            slicer = widgets.Dropdown(
                options=[(f"{a}:{b}", (a, b)) for a, b in chunks[d]],
                description=f"dim {d}",
                layout=widgets.Layout(width="160px"),
            )
            slicer.observe(self._slice_moved, names="value")
            self._slice_widgets[d] = slicer
            sliced.append(slicer)
        self.slicers.children = sliced
        self._follow_selection()
        self.draw()

    def _slice_moved(self, _change: object) -> None:
        if not self._building:
            self.draw()

    def select(self, device: int | None) -> None:
        """Highlight ``device``'s blocks and replicas; the same device again clears the selection.

        The sliced dimensions move to the device's first block, so that block is in the picture.
        """
        self.selected = None if device == self.selected else device
        self._follow_selection()
        self.draw()

    def _follow_selection(self) -> None:
        """Move every sliced dimension to the chosen device's first block, so that block is drawn - after a
        click, and after the drawn dimensions changed (new slicers start at the first block)."""
        held = blocks_held(self.layout, self.selected) if self.selected is not None else []
        if not held:
            return
        self._building = True  # one drawing after, not one per slicer moved
        try:
            for d, slicer in self._slice_widgets.items():
                slicer.value = tuple(held[0].index[d])
        finally:
            self._building = False

    def draw(self) -> None:
        layout = self.layout
        rank = len(layout.shape)
        row, col = (self.rows.value, self.cols.value) if rank >= 2 else default_dims(layout)
        if rank >= 2 and row == col:
            self.grid.value = f'<p style="{EXPLORER_TEXT}">Choose two different dimensions to draw.</p>'
            self.info.value = ""
            return
        slices = {d: w.value for d, w in self._slice_widgets.items()}
        self.grid.value = grid_html(layout, row, col, slices, self.selected)
        replicas = replicas_of(layout, self.selected) if self.selected is not None else []
        for device_id, button in self._device_buttons.items():
            button.button_style = ""
            button.layout.border = (
                CHOSEN_BORDER if device_id == self.selected else (REPLICA_BORDER if device_id in replicas else "")
            )
        self.info.value = self._info_html(layout, replicas)

    def _info_html(self, layout: ArrayLayout, replicas: list[int]) -> str:
        spec = f'<div><code style="{CODE}">{breakable_html(layout.typeof)}</code> ' + (
            f'<code style="{CODE}">{breakable_html(layout.spec)}</code></div>'
        )
        if self.selected is None:
            return f'<div style="{EXPLORER_TEXT}">{spec}<div>Click a device to highlight its blocks.</div></div>'
        held = blocks_held(layout, self.selected)
        where = ", ".join(index_text(b.index) for b in held) or "no block"
        copies = (
            f"copies of them on {len(replicas)} other device(s): {id_list(replicas)} (dashed)"
            if replicas
            else "no other device holds a copy of them"
        )
        return (
            f'<div style="{EXPLORER_TEXT}">{spec}'
            f"<div>Device {self.selected} holds {len(held)} block(s): {html.escape(where)}; {copies}.</div></div>"
        )


def array_label(source: str, layout: ArrayLayout) -> str:
    """``input: args[0] float32[8@data,4]``; a bare value is ``value: float32[...]``."""
    return " ".join(part for part in (f"{source}:", layout.path, layout.typeof) if part)


def sharding_sources(
    report: ShardingReport, inputs: list[ArrayLayout], intermediates: list[ArrayLayout] | None = None
) -> list[tuple[str, ArrayLayout]]:
    """(source, layout) pairs: a call's inputs, its outputs, then its intermediates; or the value's leaves."""
    is_call = report.call is not None
    outputs = [("output" if is_call else "value", layout) for layout in report.arrays]
    inside = [("intermediate", layout) for layout in intermediates or []]
    return [("input", layout) for layout in inputs] + outputs + inside


def show_sharding_explorer(
    report: ShardingReport,
    inputs: list[ArrayLayout],
    intermediates: list[ArrayLayout] | None = None,
    in_kernel: bool = True,
) -> widgets.Widget | None:
    sources = sharding_sources(report, inputs, intermediates)
    if not sources:
        print("jaxmagic: no array with a layout to explore.")
        return None
    return show_explorer(lambda: ShardingExplorer(sources).widget, WHAT, in_kernel=in_kernel)
