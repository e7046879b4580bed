"""Per-device view of ``shard_map``: what each device printed, grouped by device.

Usage without IPython::

    with jaxmagic.probes.per_device() as report:
        y = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("d"), out_specs=P()))(x)
    report.by_device()   # {0: ["local block [0. 1. 2. 3.]"], 1: [...], ...}

Inside a ``shard_map`` each device runs the body on its own block, so a
``jax.debug.print`` there prints once per device, in no particular order, and
says nothing about which device printed (chapter section 8.3 tags each print
with ``lax.axis_index`` by hand). While the block runs, this probe does the
tagging for you: ``jax.debug.print`` called inside a fully manual ``shard_map``
also passes the device's mesh coordinates (``lax.axis_index`` of every mesh
axis) to the print callback, which records the formatted line with its device.
The printed text itself is unchanged and still goes to stdout.

How: the prints are caught where JAX binds them (``jaxmagic._jax.debug_capture``,
shared with ``%%jax_print``): a print traced inside a fully manual ``shard_map``
gets the device's coordinates as a hidden argument, and JAX's print formatter
records each line with them before printing it as JAX would. Executables
compiled during the block keep that formatter; outside a probe it behaves
exactly like JAX's. Prints in functions traced *before* the block (and so not
re-traced) are not seen: define the function in the cell or call
``jax.clear_caches()`` first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh

from jaxmagic._jax.debug_capture import HIDDEN_PREFIX, Capture, PrintSite, capturing
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._sharding.sharding_layout import device_colours
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, failed
from jaxmagic.report.document import Block, Document, Grid, GridCell, Paragraph, Section, SourceLines, Table
from jaxmagic.report.wording import error_line

_WHERE = HIDDEN_PREFIX + "where"  # hidden keyword: the device's mesh coordinates (an int array)


@dataclasses.dataclass
class DevicePrint:
    site: str  # PrintSite.key ("" for a print we did not tag)
    text: str
    position: list[int] = dataclasses.field(default_factory=list)  # mesh coordinates; [] = not per device
    device: int | None = None  # device id, when the mesh was found


@dataclasses.dataclass
class PerDeviceReport(Report):
    """What each device printed inside shard_map during a cell."""

    kind = "jax_per_device"

    sites: list[PrintSite] = dataclasses.field(default_factory=list)
    prints: list[DevicePrint] = dataclasses.field(default_factory=list)
    failure: str = ""

    def concerns(self) -> list[Concern]:
        return [failed(self.failure)] if self.failure else []

    @property
    def per_device_prints(self) -> list[DevicePrint]:
        return [p for p in self.prints if p.position]

    def by_device(self) -> dict[int | tuple[int, ...], list[str]]:
        """{device id (or mesh position tuple when the mesh is unknown): [lines, in order]}."""
        grouped: dict[int | tuple[int, ...], list[str]] = {}
        for p in sorted(self.per_device_prints, key=lambda p: (p.position, self.prints.index(p))):
            grouped.setdefault(p.device if p.device is not None else tuple(p.position), []).append(p.text)
        return grouped

    @property
    def summary(self) -> str:
        tagged = self.per_device_prints
        devices = {p.device if p.device is not None else tuple(p.position) for p in tagged}
        if self.failure:
            head = f"The cell failed ({self.failure})"
            return head + (f"; {len(tagged)} line(s) from {len(devices)} device(s) before that." if tagged else ".")
        if not self.prints:
            return (
                "No jax.debug.print output in this cell. (A function traced before the cell is not re-traced, "
                "so its prints are not tagged: define it in the cell or call jax.clear_caches().)"
            )
        if not tagged:
            return f"{len(self.prints)} line(s) printed, none inside a shard_map: nothing to split by device."
        return f"{len(tagged)} line(s) printed inside shard_map by {len(devices)} device(s), grouped by device."

    def document(self) -> Document:
        sections = []
        for site in self.sites:
            prints = [p for p in self.prints if p.site == site.key]
            if prints:
                sections.append(_site_section(site, prints))
        untagged = [p for p in self.prints if not p.site]
        if untagged:
            sections.append(_untagged_section(untagged))
        return Document("%%jax_per_device", self.status, self.summary, sections, nothing_to_do=self.unexplained())


def _site_section(site: PrintSite, prints: list[DevicePrint]) -> Section:
    """One print site: its format, its line, then what each device printed (or the lines, outside a shard_map)."""
    on_mesh = ", inside a shard_map over mesh axes " + ", ".join(f"`{a}`" for a in site.axes) if site.axes else ""
    blocks: list[Block] = [Paragraph(f"Format `{site.fmt}`" + on_mesh)]
    if site.line:
        blocks.append(SourceLines([site.line]))
    if site.axes:
        blocks += _per_device_blocks(site, prints)
    else:
        blocks.append(Paragraph("Printed outside any shard_map (once for the whole array):"))
        blocks.append(Table(["printed"], [[p.text] for p in prints]))
    where = (
        f" in {site.line.function} ({site.line.label or site.line.filename}, line {site.line.lineno})"
        if site.line
        else ""
    )
    return Section(f"jax.debug.print{where}", blocks)


def _per_device_blocks(site: PrintSite, prints: list[DevicePrint]) -> list[Block]:
    """A print inside a shard_map: a grid of the mesh with each device's last line, then every line."""
    colours = device_colours(site.device_ids) if site.device_ids else {}
    grouped: dict[tuple[int, ...], list[str]] = {}
    for p in prints:
        grouped.setdefault(tuple(p.position), []).append(p.text)
    rows_n = site.axis_sizes[0] if len(site.axis_sizes) > 1 else 1
    cols_n = (
        max(1, len(site.device_ids) // rows_n)
        if site.device_ids
        else (int(_prod(site.axis_sizes[1:])) if len(site.axis_sizes) > 1 else site.axis_sizes[0])
    )
    cells = []
    for position, texts in sorted(grouped.items()):
        flat = _flat_index(list(position), site.axis_sizes)
        r, c = divmod(flat, cols_n)
        device = site.device_ids[flat] if site.device_ids else None
        name = f"device {device}" if device is not None else f"position {position}"
        shown = texts[-1] if len(texts) == 1 else f"{texts[-1]} (+{len(texts) - 1} earlier)"
        colour = colours.get(device, "") if device is not None else ""
        cells.append(GridCell(r, c, name, detail=_short(shown), colour=colour, tooltip="\n".join(texts)))
    axes = ", ".join(f"{a}={n}" for a, n in zip(site.axes, site.axis_sizes))
    grid = Grid(rows_n, cols_n, cells, caption=f"mesh {axes}: each device's last line", wrap=rows_n == 1)
    rows = []
    for position, texts in sorted(grouped.items()):
        flat = _flat_index(list(position), site.axis_sizes)
        device_name = str(site.device_ids[flat]) if site.device_ids else "?"
        coords = ", ".join(f"{a}={i}" for a, i in zip(site.axes, position))
        rows += [[device_name, coords, text] for text in texts]
    return [grid, Table(["device", "mesh position", "printed"], rows)]


def _untagged_section(untagged: list[DevicePrint]) -> Section:
    return Section(
        "Not tagged",
        [
            Paragraph(
                f"{len(untagged)} line(s) came from functions traced before this cell, which JAX does not trace "
                "again, so they carry no device tag. Define the function in the cell (or call "
                "jax.clear_caches() first) to see them per device."
            ),
            Table(["printed"], [[p.text] for p in untagged]),
        ],
    )


def _prod(values: Iterable[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _flat_index(position: list[int], sizes: list[int]) -> int:
    flat = 0
    for i, n in zip(position, sizes):
        flat = flat * n + i
    return flat


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Recorder(Capture):
    """The probe's storage; callbacks run on XLA's threads, hence the lock."""

    def __init__(self, report: PerDeviceReport):
        self.report = report
        self.keys: set[str] = set()
        self.lock = threading.Lock()

    def register(self, site: PrintSite) -> PrintSite:
        """Note the mesh of a print inside a fully manual shard_map; reuse an equal site seen before."""
        if site.api != "print":
            return site  # only prints are tagged by device
        _locate_on_mesh(site)
        where = (site.line.filename, site.line.lineno) if site.line else None
        with self.lock:
            for known in self.report.sites:
                known_where = (known.line.filename, known.line.lineno) if known.line else None
                if (known.fmt, known_where, known.axes, known.device_ids) == (
                    site.fmt,
                    where,
                    site.axes,
                    site.device_ids,
                ):
                    return known
            self.keys.add(site.key)
            self.report.sites.append(site)
            return site

    def hidden_arguments(self, site: PrintSite) -> dict[str, Any]:
        if not site.axes:
            return {}

        return {_WHERE: jax.numpy.stack([lax.axis_index(a) for a in site.axes])}

    def on_print(self, site: PrintSite | None, text: str, hidden: dict[str, Any], is_log: bool) -> bool:

        where = hidden.get(_WHERE)
        position = [int(i) for i in np.asarray(where).reshape(-1)] if where is not None else []
        known = site if site is not None and site.key in self.keys else None
        device = None
        if known and position and known.device_ids:
            device = known.device_ids[_flat_index(position, known.axis_sizes)]
        with self.lock:
            self.report.prints.append(DevicePrint(known.key if known else "", text, position, device))
        return True  # the text still goes to stdout (or to logging), unchanged


def _locate_on_mesh(site: PrintSite) -> None:
    """Fill the site's mesh axes when it is traced inside a fully manual shard_map (all axes manual)."""
    mesh = jax.sharding.get_abstract_mesh()
    manual = tuple(getattr(mesh, "manual_axes", ()) or ())
    names = tuple(getattr(mesh, "axis_names", ()) or ())
    if manual and set(manual) == set(names):  # fully manual: the body runs once per device
        site.axes = list(names)
        site.axis_sizes = [int(s) for s in mesh.axis_sizes]
        concrete = _mesh_of_enclosing_shard_map(names)
        if concrete is not None:
            site.device_ids = [int(d.id) for d in np.asarray(concrete.devices).flat]


def _mesh_of_enclosing_shard_map(axis_names: tuple[str, ...]) -> Mesh | None:
    """The concrete Mesh of the shard_map being traced, found on the Python stack (None if not found).

    Inside the body only an abstract mesh is visible; the frames of JAX's
    shard_map implementation hold the concrete one as their ``mesh`` local.
    """
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith("shard_map.py"):
            mesh = frame.f_locals.get("mesh")
            if isinstance(mesh, Mesh) and tuple(mesh.axis_names) == tuple(axis_names):
                return mesh
        frame = frame.f_back
    return None


@contextlib.contextmanager
def per_device() -> Iterator[PerDeviceReport]:
    """Record ``jax.debug.print`` lines during the block, tagged with the device inside shard_map."""
    report = PerDeviceReport()
    with preserved_jax_state(()), capturing(_Recorder(report)):
        try:
            yield report
        except Exception as error:
            report.failure = error_line(error)
            raise
