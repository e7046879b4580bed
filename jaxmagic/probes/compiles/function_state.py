"""What the collector remembers of one jitted function between its compilations: the state each
new compilation is compared with to find its cause (``causes.classify``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxmagic.probes.compiles.report import FunctionCompiles
from jaxmagic.probes.compiles.stack import StaticValue


@dataclasses.dataclass
class FunctionState:
    summary: FunctionCompiles
    signatures: set = dataclasses.field(default_factory=set)
    last_types: list[str] | None = None
    last_static: dict[str, StaticValue] | None = None
    last_metadata: dict | None = None  # static fields of pytree arguments at the last compilation (MetaValue)
    static_seen: dict[str, set] = dataclasses.field(default_factory=dict)
    last_function: Any = None  # weakref to the Python function jit traced at the last compilation
    last_leaves: dict | None = None  # the user's arguments leaf by leaf, when a library repacked them (LeafValue)
    # the last call's arguments to try a static-argument fix on (CallInfo.trial_arguments); dropped after the block
    trial_arguments: tuple[tuple, dict, dict[str, int]] | None = None
    explained: int = 0
    detailed: int = 0
