"""A global a jitted function read when it was traced, changed since: the compiled program still computes
with the value it was traced with (jit traces again for new argument types, never for a changed global).

``lr = 0.1 / (epoch + 1)`` in a loop around ``sgd`` whose body reads ``lr``: every call after the first computes
with 0.1, and nothing recompiles, so nothing says so (jax-ml/jax#7332, jax-ml/jax#1348). At the end
of the block the values each function carried at its last compilation (``baked.baked_values``: the plain
globals it reads) are read again; a plain value whose text changed is a stale global. Strings only.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

from jaxmagic.probes._compiles.baked import BakedValue, baked_values
from jaxmagic.report import SourceLine

GLOBAL_READ = "a global read by"  # the mark baked.py gives a value read as a global (BakedValue.held_by)


@dataclasses.dataclass
class StaleGlobal:
    """A plain global read by a jitted function whose value changed after its last compilation."""

    function: str  # "sgd"
    name: str  # "lr"
    traced: str  # the value it was traced with: "0.1"
    now: str  # its value at the end of the block: "0.03333333333333333"
    line: SourceLine | None = None  # the function's definition

    @property
    def headline(self) -> str:
        return (
            f"`{self.function}` read the global `{self.name}` when jit traced it ({self.traced}); `{self.name}` is "
            f"{self.now} now, and jit does not trace again for a changed global: every call after the change "
            f"computes with {self.traced}."
        )

    @property
    def short(self) -> str:
        return f"`{self.function}` uses a stale `{self.name}`"

    @property
    def fix(self) -> str:
        return (
            f"Pass `{self.name}` to `{self.function}` as an argument (a traced number, `jnp.float32({self.name})`: one "
            "compilation serves every value) instead of reading the global; make it a static argument only if it "
            "selects code (one compilation per value)."
        )


def stale_globals(
    function: str,
    traced_function: Any,
    traced_with: dict[str, BakedValue] | None,
    is_user: Callable[[str], bool],
    line: SourceLine | None = None,
) -> list[StaleGlobal]:
    """The plain globals ``traced_function`` (a weakref, or None) read at its last compilation whose value
    differs now; [] when not known (the function is gone, or carried no global)."""
    if not traced_with or traced_function is None:
        return []
    fun = traced_function() if isinstance(traced_function, weakref.ref) else None
    if fun is None:
        return []
    now = baked_values(fun, is_user) or {}
    return [
        StaleGlobal(function, name, then.text, now[name].text, line)
        for name, then in traced_with.items()
        if then.held_by.startswith(GLOBAL_READ)
        and then.by_value
        and name in now
        and now[name].by_value
        and now[name].text != then.text
    ]
