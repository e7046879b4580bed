"""Reports: what a probe found, as plain data.

A report holds strings, numbers, shapes and dtypes only - never an array, a
tracer or a user function - so keeping one (``-o NAME``) keeps no memory alive.
``to_dict()`` gives JSON-serialisable data and ``document()`` the report as a
domain-free ``Document``. The model imports no renderer: a probe's report shows
itself through ``jaxmagic.render.ShowsItself`` (``probes/_support/report_base.py``).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from jaxmagic.report.document import Document


class Status(str, enum.Enum):  # noqa: UP042 - reports compare and serialise it as a str
    """Overall verdict of a report, used for colour and the one-line summary."""

    OK = "ok"  # the tool looked and found nothing wrong
    PROBLEM = "problem"  # the tool found what it looks for
    ERROR = "error"  # the cell failed for a reason the tool does not explain
    RUNNING = "running"  # a live view of a cell still running: what was seen so far

    @property
    def word(self) -> str:
        """The badge word every renderer shows: OK, FOUND or FAILED."""
        return {"ok": "OK", "problem": "FOUND", "error": "FAILED", "running": "RUNNING"}[self.value]


@dataclasses.dataclass
class SourceLine:
    """One line of the user's code: where a problem arose or was called from."""

    filename: str
    lineno: int
    function: str
    code: str
    label: str = ""  # "In [3]" for a notebook cell, else empty

    @property
    def where(self) -> str:
        place = f"{self.label or self.filename}, line {self.lineno}"
        # A cell's top level has no function to name (Python calls module code "<module>").
        return place if self.function in ("", "<module>") else f"{place}, in {self.function}"


@dataclasses.dataclass
class Report:
    """Base of all reports. Subclasses add their findings as fields."""

    kind: ClassVar[str] = "report"  # the magic's name, e.g. "jax_nans"

    def to_dict(self) -> dict[str, Any]:
        data = _jsonable(dataclasses.asdict(self))
        data["kind"] = self.kind
        data["status"] = self.status.value
        data["summary"] = self.summary
        return data

    @property
    def status(self) -> Status:
        raise NotImplementedError

    def document(self) -> Document:
        """What every renderer draws: the report as a domain-free Document."""
        raise NotImplementedError

    @property
    def summary(self) -> str:
        """One sentence saying what was found."""
        raise NotImplementedError


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
