"""Program probe: what JAX traced and XLA compiled for one call, ahead of time.

Usage without IPython::

    report = jaxmagic.probes.hlo(model, params, x, scope="encoder")
    report.counts            # {"jaxpr": 2, "stablehlo": 4, "hlo": 3}
    report.ops_in("hlo")     # the optimized-HLO instructions of the scope
    report.literals          # globals/closure values baked in as constants
    report.memory            # Compiled.memory_analysis() figures

The call is traced, lowered and compiled (``jit(f).trace(...).lower().compile()``)
but never run, so arguments may be ``jax.ShapeDtypeStruct``s and nothing is
allocated. The probe reads each stage from its structured source where JAX has
one - the jaxpr's equations and their ``source_info.name_stack``, the StableHLO
module through the MLIR Python bindings JAX ships (operation locations) - and
the optimized HLO from its text, through ``jaxmagic.probes._hlo.hlo_text`` only.

One module per concept: ``probe`` (trace, lower, compile; fill the report),
``jaxpr``, ``stablehlo`` and ``optimized_hlo`` (each stage's operations),
``scopes`` (matching them to named scopes), ``captured_values`` (baked literals
and captured constants), ``memory`` (memory and cost figures, the sweep);
``records`` and ``report`` hold the report, its wording and its document.
"""

from jaxmagic.probes._hlo.captured_values import captured_constants_of_call
from jaxmagic.probes._hlo.memory import Sweep
from jaxmagic.probes._hlo.probe import hlo, hlo_of_call, parse_stages, run_call
from jaxmagic.probes._hlo.records import (
    STAGES,
    BakedLiteral,
    CapturedConstant,
    Kernel,
    MemoryFigures,
    ScopeNode,
    ScopeOp,
    SweepPoint,
)
from jaxmagic.probes._hlo.report import HloReport

__all__ = [
    "hlo",
    "hlo_of_call",
    "run_call",
    "parse_stages",
    "Sweep",
    "captured_constants_of_call",
    "HloReport",
    "STAGES",
    "ScopeOp",
    "Kernel",
    "ScopeNode",
    "BakedLiteral",
    "CapturedConstant",
    "MemoryFigures",
    "SweepPoint",
]
