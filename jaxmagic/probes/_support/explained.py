"""An error a jaxmagic report already explained: the probe that explained it marks it, and the
tracer-error explainer (``%jax_explain``, the explainer hook) does not explain it a second time."""

from __future__ import annotations

from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Status

# the attribute set on the exception: the kind of the report that explained it ("jax_leaks", ...)
_MARK = "_jaxmagic_explained"


def mark_explained(error: BaseException, report: Report) -> None:
    """Tell the tracer-error explainer that ``report`` already explained ``error`` (no second explanation)."""
    if report.status is Status.PROBLEM:
        try:
            setattr(error, _MARK, report.kind)
        except Exception:
            pass


def already_explained(error: BaseException) -> bool:
    """True when a jaxmagic report shown for this very error already explained it."""
    return bool(getattr(error, _MARK, ""))
