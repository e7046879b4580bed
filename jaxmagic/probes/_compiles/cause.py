"""One cause of one compilation: its kind, its sentence and the changes that show it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Cause:
    cause: str  # a key of CAUSE_TITLES
    why: str
    changes: list[str] = dataclasses.field(default_factory=list)
