"""Reading an array's layout: its devices, mesh, spec and blocks (which devices hold which index ranges)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from numpy.typing import DTypeLike

from jaxmagic.probes._sharding.replicas import block_bounds, compare_replicas
from jaxmagic.probes._sharding.report import ArrayLayout, Block, DeviceInfo, MeshInfo


def layouts_of_tree(value: Any, check_replicas: bool, root: str = "") -> tuple[list[ArrayLayout], list[list[str]]]:
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
    if isinstance(leaf, jax.Array):
        return not isinstance(leaf, jax.core.Tracer)
    return isinstance(leaf, jax.ShapeDtypeStruct) and leaf.sharding is not None


def _what_is(leaf: Any) -> str:
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
        layout.dim_axes = [axes_of(entry) for entry in tuple(spec)] + [[] for _ in range(len(shape) - len(spec))]
    index_map = sharding.devices_indices_map(shape)
    blocks: dict[tuple[tuple[int, int], ...], list[int]] = {}
    device_objects = {}
    for device, index in index_map.items():
        key = tuple(block_bounds(s, n) for s, n in zip(index, shape))
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
        compare_replicas(x, layout)
    return layout


def _is_addressable(device: jax.Device) -> bool:
    return device.process_index == jax.process_index()


def _itemsize(dtype: DTypeLike) -> int:
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:  # extended dtypes such as PRNG keys
        return int(getattr(dtype, "itemsize", 0) or 0)


def axes_of(entry: object) -> list[str]:
    if entry is None:
        return []
    if isinstance(entry, (tuple, list)):
        return [str(a) for a in entry]
    return [str(entry)]
