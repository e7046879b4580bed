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

    report = jaxmagic.probes.sharding_of_call(f, (x, w), collectives=True)
    report.call.collectives       # every collective XLA inserted: kind, line, scope, axes, bytes, cause
    report.call.collective_fixes  # input layouts / constraints tried by compiling again, with the new count

The report is data only (strings and numbers): the drawing is made from it by
``jaxmagic.probes._sharding.sharding_layout``. Reading the layout touches no array data;
only the replica check reads the copies of blocks held by more than one local
device, to compare them bit for bit (chapter section 8.3: a ``shard_map`` with
``check_vma=False`` returns a "replicated" value whose copies differ).

Modules: ``probe`` (the entry points), ``layouts`` (an array's blocks),
``replicas`` (the replica check), ``compiled`` (a jitted call's shardings),
``collectives`` (the collectives of the compiled call), ``collective_fixes`` (fixes tried for them),
``report`` (the report and its wording).
"""

from jaxmagic.probes._sharding.layouts import layout_of
from jaxmagic.probes._sharding.probe import run_call, sharding, sharding_of_call
from jaxmagic.probes._sharding.replicas import PREVIEW_ELEMENTS
from jaxmagic.probes._sharding.report import (
    MAX_INTERMEDIATES,
    ArrayLayout,
    Block,
    CallShardings,
    Collective,
    CollectiveFix,
    ConstraintCheck,
    CopyGroup,
    DeviceInfo,
    IntermediateSharding,
    LeafSharding,
    MeshInfo,
    ShardingReport,
)

__all__ = [
    "MAX_INTERMEDIATES",
    "PREVIEW_ELEMENTS",
    "ArrayLayout",
    "Block",
    "CallShardings",
    "Collective",
    "CollectiveFix",
    "ConstraintCheck",
    "CopyGroup",
    "DeviceInfo",
    "IntermediateSharding",
    "LeafSharding",
    "MeshInfo",
    "ShardingReport",
    "layout_of",
    "run_call",
    "sharding",
    "sharding_of_call",
]
