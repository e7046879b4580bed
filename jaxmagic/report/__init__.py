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
import re
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

if TYPE_CHECKING:
    from jaxmagic.report.document import Document

# A report's ``to_dict()`` data: JSON-serialisable, its values of every JSON kind (strings, numbers, lists,
# nested dicts), each field its own - so ``Any``, under this one name.
JsonDict: TypeAlias = dict[str, Any]


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


class Severity(str, enum.Enum):  # noqa: UP042 - serialised as a str
    """How much one thing a report tells weighs in its verdict."""

    ACT = "act"  # something the user should act on: the report cannot be OK
    FAILED = "failed"  # the cell (or the probe) failed for a reason the report does not explain
    NOTE = "note"  # worth knowing, nothing to fix: the report may still be OK


@dataclasses.dataclass
class Concern:
    """One thing a report tells about the program, with its weight: the input of the report's verdict."""

    severity: Severity
    text: str


def act(text: str) -> Concern:
    return Concern(Severity.ACT, text)


def failed(text: str) -> Concern:
    return Concern(Severity.FAILED, text)


def note(text: str) -> Concern:
    return Concern(Severity.NOTE, text)


def status_of(concerns: list[Concern]) -> Status:
    """The one rule of every report's verdict: FOUND when there is anything to act on, else FAILED when
    the cell failed unexplained, else OK - notes never change it."""
    severities = {concern.severity for concern in concerns}
    if Severity.ACT in severities:
        return Status.PROBLEM
    if Severity.FAILED in severities:
        return Status.ERROR
    return Status.OK


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
    """Base of all reports. Subclasses add their findings as fields, and list them in ``concerns()``.

    The verdict (``status``) is derived here, from ``concerns()`` alone (``status_of``), never set beside
    the findings: a report telling something to act on cannot say OK. A subclass does not define
    ``status`` (``tests/test_one_verdict.py`` checks every one).
    """

    kind: ClassVar[str] = "report"  # the magic's name, e.g. "jax_nans"

    def to_dict(self) -> JsonDict:
        data = _jsonable(dataclasses.asdict(self))
        data["kind"] = self.kind
        data["status"] = self.status.value
        data["summary"] = self.summary
        data["concerns"] = _jsonable([dataclasses.asdict(concern) for concern in self.concerns()])
        return data

    def concerns(self) -> list[Concern]:
        """Everything the report holds that weighs in its verdict: what to act on (``act``), an unexplained
        failure (``failed``), and notes that leave it OK (``note``)."""
        raise NotImplementedError

    @property
    def status(self) -> Status:
        """The verdict: a function of ``concerns()`` only."""
        return status_of(self.concerns())

    def document(self) -> Document:
        """What every renderer draws: the report as a domain-free Document."""
        raise NotImplementedError

    @property
    def summary(self) -> str:
        """One sentence saying what was found."""
        raise NotImplementedError

    def unexplained(self) -> str:
        """Why there is nothing to do, for a report that failed (FAILED) on an error it does not explain: the
        error is the cell's own, and its traceback - raised again by the magic after the report - says where
        (``Document.nothing_to_do``); "" for any other verdict."""
        if self.status is not Status.ERROR:
            return ""
        error = next(c.text for c in self.concerns() if c.severity is Severity.FAILED)
        kind = _EXCEPTION_NAME.search(error)
        named = f"`{kind.group(0)}`" if kind else "error"
        return f"the cell stopped on its own {named}, which this magic does not explain; its traceback follows this report."


_EXCEPTION_NAME = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b")


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
