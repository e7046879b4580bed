"""Doctor probe: one run of a cell under every applicable probe, findings ranked in the order to fix them.

Usage without IPython::

    with jaxmagic.probes.doctor(namespace=globals()) as report:
        params, losses = train(step_fn, params0, X, Y, 8)
    [f.area for f in report.findings]     # ["NaN", "recompilation", "random keys"]
    report.compiles.count("train_step"), report.nan_sighting.function, report.keys.repeated_flows

The probes - NaN/inf, compilations, tracer leaks, key reuse, implicit
transfers, live arrays - are entered together, around one run of the cell.
Two of JAX's tools stop a program at the first finding, which would hide
everything after it; the doctor uses them so that they do not:

* NaN: ``jax.debug_nans`` raises at the first NaN - at step 0 of a training
  loop, before any recompilation or key problem could show. The doctor watches
  the results of every call instead (``jaxmagic.probes._nans.watch``) and, after the
  cell, re-runs only the one jitted call that first produced a NaN, with the
  same arguments, under the ``%%jax_nans`` probe - a jitted function is pure,
  so nothing the user would mind happens twice. The cell itself is never run
  again.
* Key reuse: recorded, not raised (``jaxmagic.probes.keys(record=True)``); each
  traced function is checked for a key used twice, and the keys reaching each
  jitted function are counted. Keys consumed twice between calls are not
  checked call by call (that check re-traces operations at every call and
  would make the doctor several times slower); the count shows their effect,
  and ``%%jax_keys`` gives the line.
* Transfers: logged (``jax.transfer_guard("log")``), never disallowed.

A tracer leak still stops the cell, as under ``%%jax_leaks``: the leaked tracer
would break the code that uses it anyway. Traces are made under a cache key of
the doctor's own, kept from one doctor cell to the next, so a function is traced
(with leak checking) and compiled once more the first time the doctor sees it,
not at every doctor cell.

Order of attack (chapter section 9.4): NaN first, because it makes every other
symptom meaningless; then errors that stop the program (leaked tracers); then
speed and memory (recompilation, implicit transfers, arrays piling up); then
silent logic bugs such as a random key that never changes.
"""

from __future__ import annotations

from jaxmagic.probes._doctor.measure import doctor
from jaxmagic.probes._doctor.report import (
    AREAS,
    LIVE_PILE_UP,
    ORDER_OF_ATTACK,
    PROBES,
    RETRACE_TOKEN,
    DoctorReport,
    Finding,
    rank_findings,
)
from jaxmagic.probes._nans.sighting import explain_nan_sighting
from jaxmagic.probes._support.calls.host_arguments import HostArgumentUse as HostArgument
from jaxmagic.probes._transfers.report import REPEATED_TRANSFERS

__all__ = [
    "AREAS",
    "LIVE_PILE_UP",
    "ORDER_OF_ATTACK",
    "PROBES",
    "REPEATED_TRANSFERS",
    "RETRACE_TOKEN",
    "DoctorReport",
    "Finding",
    "HostArgument",
    "doctor",
    "explain_nan_sighting",
    "rank_findings",
]
