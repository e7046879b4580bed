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

How: for the duration of the block ``jax.debug.print`` is replaced by a
wrapper that adds two hidden keyword arguments, and JAX's print formatter
(``jax._src.debugging._format_print_callback``) by one that removes them,
records the line and prints it as JAX would. Both are put back afterwards.
Executables compiled during the block keep our formatter; outside a probe it
behaves exactly like JAX's. Prints in functions traced *before* the block (and
so not re-traced) carry no tag: they are counted, not attributed to a device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from typing import Iterator

from jaxmagic._frames import is_user_file, source_line
from jaxmagic._restore import preserved_jax_state
from jaxmagic.report import Report, SourceLine, Status

_WHERE = "_jaxmagic_where"   # hidden keyword: the device's mesh coordinates (an int array)
_SITE = "_jaxmagic_site"     # hidden keyword: which print call (a string, static)


@dataclasses.dataclass
class PrintSite:
    """One ``jax.debug.print`` call in the user's code."""

    key: str
    fmt: str
    line: SourceLine | None = None
    axes: list[str] = dataclasses.field(default_factory=list)   # manual mesh axes ([] outside shard_map)
    axis_sizes: list[int] = dataclasses.field(default_factory=list)
    device_ids: list[int] = dataclasses.field(default_factory=list)  # mesh order; [] if the mesh was not found


@dataclasses.dataclass
class DevicePrint:
    site: str                  # PrintSite.key ("" for a print we did not tag)
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

    @property
    def status(self) -> Status:
        return Status.ERROR if self.failure else Status.OK

    @property
    def per_device_prints(self) -> list[DevicePrint]:
        return [p for p in self.prints if p.position]

    def by_device(self) -> dict:
        """{device id (or mesh position tuple when the mesh is unknown): [lines, in order]}."""
        grouped: dict = {}
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
            return ("No jax.debug.print output in this cell. (A function traced before the cell is not re-traced, "
                    "so its prints are not tagged: define it in the cell or call jax.clear_caches().)")
        if not tagged:
            return f"{len(self.prints)} line(s) printed, none inside a shard_map: nothing to split by device."
        return f"{len(tagged)} line(s) printed inside shard_map by {len(devices)} device(s), grouped by device."

    def document(self):
        from jaxmagic.render.document import Document, Grid, GridCell, Paragraph, Section, SourceLines, Table
        from jaxmagic.render.sharding_layout import device_colours

        sections = []
        for site in self.sites:
            prints = [p for p in self.prints if p.site == site.key]
            if not prints:
                continue
            blocks = [Paragraph(f"Format `{site.fmt}`" + (", inside a shard_map over mesh axes "
                                                           + ", ".join(f"`{a}`" for a in site.axes)
                                                           if site.axes else ""))]
            if site.line:
                blocks.append(SourceLines([site.line]))
            if site.axes:
                colours = device_colours(site.device_ids) if site.device_ids else {}
                grouped: dict[tuple, list[str]] = {}
                for p in prints:
                    grouped.setdefault(tuple(p.position), []).append(p.text)
                rows_n = site.axis_sizes[0] if len(site.axis_sizes) > 1 else 1
                cols_n = max(1, len(site.device_ids) // rows_n) if site.device_ids else \
                    (int(_prod(site.axis_sizes[1:])) if len(site.axis_sizes) > 1 else site.axis_sizes[0])
                cells = []
                for position, texts in sorted(grouped.items()):
                    flat = _flat_index(list(position), site.axis_sizes)
                    r, c = divmod(flat, cols_n)
                    device = site.device_ids[flat] if site.device_ids else None
                    name = f"device {device}" if device is not None else f"position {position}"
                    shown = texts[-1] if len(texts) == 1 else f"{texts[-1]} (+{len(texts) - 1} earlier)"
                    cells.append(GridCell(r, c, name, detail=_short(shown), colour=colours.get(device, ""),
                                          tooltip="\n".join(texts)))
                axes = ", ".join(f"{a}={n}" for a, n in zip(site.axes, site.axis_sizes))
                blocks.append(Grid(rows_n, cols_n, cells, caption=f"mesh {axes}: each device's last line"))
                rows = []
                for position, texts in sorted(grouped.items()):
                    flat = _flat_index(list(position), site.axis_sizes)
                    device = str(site.device_ids[flat]) if site.device_ids else "?"
                    coords = ", ".join(f"{a}={i}" for a, i in zip(site.axes, position))
                    rows += [[device, coords, text] for text in texts]
                blocks.append(Table(["device", "mesh position", "printed"], rows))
            else:
                blocks.append(Paragraph("Printed outside any shard_map (once for the whole array):"))
                blocks.append(Table(["printed"], [[p.text] for p in prints]))
            where = f" in {site.line.function} ({site.line.label or site.line.filename}, line {site.line.lineno})" \
                if site.line else ""
            sections.append(Section(f"jax.debug.print{where}", blocks))
        untagged = [p for p in self.prints if not p.site]
        if untagged:
            sections.append(Section("Not tagged", [Paragraph(
                f"{len(untagged)} line(s) came from functions traced before this cell, which JAX does not trace "
                "again, so they carry no device tag. Define the function in the cell (or call "
                "jax.clear_caches() first) to see them per device."),
                Table(["printed"], [[p.text] for p in untagged])]))
        return Document("%%jax_per_device", self.status, self.summary, sections)


def _prod(values) -> int:
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
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Recorder:
    """The active probe's storage; callbacks run on XLA's threads, hence the lock."""

    def __init__(self, report: PerDeviceReport):
        self.report = report
        self.sites: dict[str, PrintSite] = {}
        self.lock = threading.Lock()

    def add_site(self, site: PrintSite) -> PrintSite:
        """Register ``site``, or return the same call site seen before (a function traced twice)."""
        where = (site.line.filename, site.line.lineno) if site.line else None
        with self.lock:
            for known in self.report.sites:
                known_where = (known.line.filename, known.line.lineno) if known.line else None
                if (known.fmt, known_where, known.axes, known.device_ids) == (site.fmt, where, site.axes,
                                                                               site.device_ids):
                    return known
            self.sites[site.key] = site
            self.report.sites.append(site)
            return site

    def add_print(self, site_key: str, where, text: str) -> None:
        position = [int(i) for i in where] if where is not None else []
        site = self.sites.get(site_key)
        device = None
        if site and position and site.device_ids:
            device = site.device_ids[_flat_index(position, site.axis_sizes)]
        with self.lock:
            self.report.prints.append(DevicePrint(site_key if site else "", text, position, device))


_active: _Recorder | None = None
_site_counter = 0


def _recording_format_callback(fmt, np_printoptions, has_placeholders, logging_record, *args, **kwargs):
    """JAX's print formatter, plus: drop our hidden arguments and record the line."""
    import copy

    import numpy as np
    from jax._src import debugging

    where = kwargs.pop(_WHERE, None)
    site = kwargs.pop(_SITE, "")
    if has_placeholders:
        with np.printoptions(**np_printoptions):
            message = fmt.format(*args, **kwargs)
    else:
        message = " ".join((fmt, *(str(a) for a in args)))
    recorder = _active
    if recorder is not None:
        recorder.add_print(str(site), None if where is None else np.asarray(where).reshape(-1), message)
    if logging_record:
        logging_record = copy.copy(logging_record)
        logging_record.msg = message
        debugging.logger.handle(logging_record)
    else:
        sys.stdout.write(message + "\n")


def _mesh_of_enclosing_shard_map(axis_names: tuple[str, ...]):
    """The concrete Mesh of the shard_map being traced, found on the Python stack (None if not found).

    Inside the body only an abstract mesh is visible; the frames of JAX's
    shard_map implementation hold the concrete one as their ``mesh`` local.
    """
    from jax.sharding import Mesh

    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith("shard_map.py"):
            mesh = frame.f_locals.get("mesh")
            if isinstance(mesh, Mesh) and tuple(mesh.axis_names) == tuple(axis_names):
                return mesh
        frame = frame.f_back
    return None


def _user_line() -> SourceLine | None:
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return source_line(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


def _make_tagged_print(original):
    def tagged_print(fmt=None, *args, ordered=False, partitioned=False, skip_format_check=False, **kwargs):
        if fmt is None:  # the two-call form: jax.debug.print(ordered=True)("...", x=x)
            if args or kwargs:
                return original(fmt, *args, ordered=ordered, partitioned=partitioned,
                                skip_format_check=skip_format_check, **kwargs)
            return lambda fmt, *a, **k: tagged_print(fmt, *a, ordered=ordered, partitioned=partitioned,
                                                     skip_format_check=skip_format_check, **k)
        recorder = _active
        if recorder is None or kwargs.keys() & {_WHERE, _SITE}:
            return original(fmt, *args, ordered=ordered, partitioned=partitioned,
                            skip_format_check=skip_format_check, **kwargs)
        import numpy as np

        import jax
        from jax import lax
        from jax._src import debugging

        if not skip_format_check:  # the user's mistakes get JAX's own messages
            debugging.formatter.format(fmt, *args, **kwargs)
        global _site_counter
        _site_counter += 1
        site = PrintSite(key=f"site{_site_counter}", fmt=str(fmt), line=_user_line())
        mesh = jax.sharding.get_abstract_mesh()
        manual = tuple(getattr(mesh, "manual_axes", ()) or ())
        names = tuple(getattr(mesh, "axis_names", ()) or ())
        hidden = {_SITE: site.key}
        if manual and set(manual) == set(names):  # fully manual: the body runs once per device
            site.axes = list(names)
            site.axis_sizes = [int(s) for s in mesh.axis_sizes]
            concrete = _mesh_of_enclosing_shard_map(names)
            if concrete is not None:
                site.device_ids = [int(d.id) for d in np.asarray(concrete.devices).flat]
            hidden[_WHERE] = jax.numpy.stack([lax.axis_index(a) for a in names])
        hidden[_SITE] = recorder.add_site(site).key
        return original(fmt, *args, ordered=ordered, partitioned=partitioned, skip_format_check=True,
                        **kwargs, **hidden)

    tagged_print.__doc__ = original.__doc__
    tagged_print.__wrapped__ = original
    return tagged_print


@contextlib.contextmanager
def per_device() -> Iterator[PerDeviceReport]:
    """Record ``jax.debug.print`` lines during the block, tagged with the device inside shard_map."""
    global _active
    import jax
    from jax._src import debugging

    report = PerDeviceReport()
    if _active is not None:
        raise RuntimeError("per_device() is already active; it does not nest")
    original_print = jax.debug.print
    original_format = debugging._format_print_callback
    with preserved_jax_state(()):
        _active = _Recorder(report)
        jax.debug.print = _make_tagged_print(original_print)
        debugging._format_print_callback = _recording_format_callback
        try:
            yield report
        except Exception as error:
            lines = str(error).strip().splitlines()
            report.failure = f"{type(error).__name__}: {lines[0] if lines else ''}"
            raise
        finally:
            try:
                jax.effects_barrier()  # prints still in flight belong to this block
            finally:
                jax.debug.print = original_print
                debugging._format_print_callback = original_format
                _active = None
