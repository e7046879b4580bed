"""What the collector remembers of one jitted function between its compilations: the state each
new compilation is compared with to find its cause (``causes.classify``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxmagic.probes._compiles.baked import BakedValue
from jaxmagic.probes._compiles.metadata import MetaValue
from jaxmagic.probes._compiles.model import FunctionCompiles
from jaxmagic.probes._compiles.stack import StaticValue, TrialArguments, TrialPartial
from jaxmagic.probes._compiles.user_arguments import LeafValue


@dataclasses.dataclass
class FunctionState:
    summary: FunctionCompiles
    signatures: set[int] = dataclasses.field(default_factory=set)
    last_types: list[str] | None = None
    last_static: dict[str, StaticValue] | None = None
    last_metadata: dict[str, MetaValue] | None = (
        None  # static fields of pytree arguments at the last compilation (MetaValue)
    )
    static_seen: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    last_function: Any = None  # weakref to the Python function jit traced at the last compilation
    last_leaves: dict[str, LeafValue] | None = (
        None  # the user's arguments leaf by leaf, when a library repacked them (LeafValue)
    )
    # the last call's arguments to try a static-argument fix on (CallInfo.trial_arguments); dropped after the block
    trial_arguments: TrialArguments | None = None
    trial_partial: TrialPartial | None = None  # CallInfo.trial_partial; dropped after the block
    trial_function: Any = None  # CallInfo.trial_function (a library wrapper's user function); dropped after
    # the static number fields of pytree arguments whose value changed: path -> (type name, "Owner.field"),
    # for the trial of making them arrays (field_trial.py)
    changed_fields: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    explained: int = 0
    detailed: int = 0
    last_baked: dict[str, BakedValue] | None = (
        None  # the values the function carried at the last compilation (BakedValue)
    )
    baked_seen: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # a baked value's texts, in order
    earlier: int = 0  # compilations in earlier blocks (the watch's earlier cells), carried by CompileHistory

    @property
    def compiled_before(self) -> int:
        """Compilations before this one: in this block and in the earlier blocks the state was carried from."""
        return self.summary.count + self.earlier

    def carried(self, summary: FunctionCompiles) -> FunctionState:
        """A state for a new block (a new report's ``summary``) that remembers what this one compared with."""
        return FunctionState(
            summary,
            signatures=set(self.signatures),
            last_types=self.last_types,
            last_static=self.last_static,
            last_metadata=self.last_metadata,
            last_function=self.last_function,
            last_leaves=self.last_leaves,
            last_baked=self.last_baked,
            baked_seen={name: list(texts) for name, texts in self.baked_seen.items()},
            earlier=self.compiled_before,
        )


class CompileHistory:
    """What the compilation probe remembers of each function from one block to the next (``%jax_watch``'s
    cells): the last compilation each new one is compared with, so a function rebuilt once per cell is told
    as rebuilt, not as compiled for the first time. Strings, hashes and weak references only."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, str, str, int], FunctionState] = {}
