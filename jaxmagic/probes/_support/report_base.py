"""The base of every probe's report: the plain-data model, plus showing itself where it is displayed.

The model (``jaxmagic.report.Report``, here ``ReportModel``) knows nothing of renderers; the
renderers know only ``Document``s. A probe's report is both data and
displayable: ``ShowsItself`` (from ``render/``) gives it ``_repr_mimebundle_``
and ``__str__``, as rich's ``JupyterMixin`` does for its renderables.
"""

from __future__ import annotations

from jaxmagic.render import ShowsItself
from jaxmagic.report import Report as ReportModel


class Report(ShowsItself, ReportModel):
    """A probe's report: a dataclass of strings and numbers that draws itself through its ``document()``."""
