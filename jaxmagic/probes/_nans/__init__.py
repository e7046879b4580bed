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
report and its wording), ``causes`` (why a primitive made NaN/inf: ``primitives``
holds what is known of each), ``sighting`` (explaining a NaN that ``%%jax_doctor``
or ``%jax_watch`` saw, for their reports), ``watch`` (their NaN watch), ``scope``
and ``inside``/``inside_calls`` (what a clean report checked, ``--inside``), and by
role: ``search/`` (which operation made the value, from what: ``producer``,
``given``, ...) and ``fixes/`` (the candidate fixes tried on the values, ``value_fixes``,
and the rules that word one, ``rules``).
"""

from jaxmagic.probes._nans.fixes.rules import nan_fix, nan_fixes
from jaxmagic.probes._nans.fixes.value_fixes import FixTrial
from jaxmagic.probes._nans.inside import InsideSearch
from jaxmagic.probes._nans.nonfinite import NonFiniteLeaf
from jaxmagic.probes._nans.probe import CONFIG_NAMES, nans
from jaxmagic.probes._nans.report import BACKWARD_EXPLANATION, NanReport
from jaxmagic.probes._nans.search.found import LoopPosition, NanProducer, OperandValue, ProducerSearch
from jaxmagic.probes._nans.sighting import (
    explain_call,
    explain_nan_sighting,
    nan_finding_provenance,
    nan_finding_text,
    offered_fix,
)

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
