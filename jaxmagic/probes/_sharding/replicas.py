"""The replica check: the local copies of every block held by several devices, compared bit for bit."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxmagic._jax import array_shards
from jaxmagic.probes._sharding.report import ArrayLayout, CopyGroup
from jaxmagic.report.wording import error_line

# Blocks up to this many elements show their values when copies differ.
PREVIEW_ELEMENTS = 16


def block_bounds(index: slice | int, size: int) -> tuple[int, int]:
    if isinstance(index, slice):
        start, stop, _ = index.indices(size)
        return start, stop
    return int(index), int(index) + 1


def compare_replicas(x: jax.Array, layout: ArrayLayout) -> None:
    """Compare, bit for bit, the local copies of every block held by several devices."""
    with array_shards.addressable_shards(x) as shards:  # never x.addressable_shards: jaxlib keeps what it makes
        _compare(x, layout, shards)


def _compare(x: jax.Array, layout: ArrayLayout, shards: list[jax.Shard]) -> None:
    by_index: dict[tuple[tuple[int, ...], ...], list[jax.Shard]] = {}
    for shard in shards:
        key = tuple(block_bounds(s, n) for s, n in zip(shard.index, x.shape))
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
        layout.replica_check = f"not possible: {error_line(failure)}"
        return
    layout.copies_compared = compared
    layout.replica_check = "differ" if layout.blocks_differing else "consistent"


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit equality (NaN payloads and -0.0 included), compared as unsigned integers."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize, np.uint8)
    if a.dtype.itemsize not in (1, 2, 4, 8):
        a, b = a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)
    return bool(np.array_equal(a.view(unsigned), b.view(unsigned)))


def _preview(copy: np.ndarray, reference: np.ndarray) -> str:
    """The copy's values for small blocks; else how far it is from the first copy."""
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
