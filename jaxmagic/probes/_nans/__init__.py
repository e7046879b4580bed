"""NaN/inf probe: run code with JAX's NaN (and inf) checking scoped to it.

Usage without IPython::

    with jaxmagic.probes.nans() as report:
        grads = jax.grad(loss)(params, x)   # raises FloatingPointError on a NaN
    # report.primitive, report.phase, report.origin_lines, report.nonfinite ...

We use the scoped ``jax.debug_nans(True)`` form, never
``jax.config.update("jax_debug_nans", True)``: in JAX 0.12 the global switch
misses NaNs in computations that already ran once any ``vmap`` has been
traced in the process (chapter section 3.1); the scoped form does not.

The package: ``probe`` (``nans()``: the checks, and the search once one
raised), ``call_sites`` (which pass of the user's loop failed), ``report`` (the
report and its wording), ``causes`` (what makes each primitive give NaN/inf),
``fixes`` (the fix for what was found; ``tried_fixes``: which candidate, tried on the values by the
search, is offered, and in what words) and ``sighting`` (explaining a NaN that
``%%jax_doctor`` or ``%jax_watch`` saw, for their reports). The search itself
is in ``probes/_support/nan/``.
"""

from jaxmagic.probes._nans.fixes.rules import nan_fix, nan_fixes
from jaxmagic.probes._nans.inside import InsideSearch
from jaxmagic.probes._nans.probe import CONFIG_NAMES, nans
from jaxmagic.probes._nans.report import BACKWARD_EXPLANATION, NanReport
from jaxmagic.probes._nans.sighting import (
    explain_call,
    explain_nan_sighting,
    nan_finding_provenance,
    nan_finding_text,
    offered_fix,
)
from jaxmagic.probes._support.nan.nonfinite import NonFiniteLeaf
from jaxmagic.probes._support.nan.producer import LoopPosition, NanProducer, OperandValue, ProducerSearch
from jaxmagic.probes._support.nan.value_fixes import FixTrial

__all__ = [
    "BACKWARD_EXPLANATION",
    "CONFIG_NAMES",
    "FixTrial",
    "InsideSearch",
    "LoopPosition",
    "NanProducer",
    "NanReport",
    "NonFiniteLeaf",
    "OperandValue",
    "ProducerSearch",
    "explain_call",
    "explain_nan_sighting",
    "nan_finding_provenance",
    "nan_finding_text",
    "nan_fix",
    "nan_fixes",
    "nans",
    "offered_fix",
]
