"""Tracer-leak probe: run code with ``jax.checking_leaks()`` and name who holds each leaked tracer.

Usage without IPython::

    with jaxmagic.probes.leaks(namespace=globals()) as report:
        jax.jit(leaky_fn)(x)          # raises JAX's "Leaked trace ..." Exception
    report.leaked[0].held_by            # ["leaked[0]"]

Two things make JAX's own leak checking hard to use (chapter section 4.6):

* it only checks when a trace ends, so a function whose trace is cached is
  not checked; the probe makes everything trace afresh (``_jax.retrace``), without
  clearing caches;
* it says who holds a leaked tracer by object ids as the garbage collector sees
  them (``<list 4665787840>[0]``, then IPython's internals); the probe searches
  the user's namespace for the same objects and reports names such as
  ``leaked[0]``, ``cache.store['h']`` or ``m_leak.last_hidden``.

An ``UnexpectedTracerError`` in the block (a tracer leaked earlier and used
now) is explained too: where it was used, where it was created, which of your
variables still holds it.

Modules: ``probe`` (``leaks()``), ``explanations`` (reading a leak error, an
UnexpectedTracerError, a tracer kept past its trace; the tracers your variables
hold), ``report`` (the report, its wording and ``LEAK_FIX``).
"""

from jaxmagic.probes._leaks.explanations import (
    explain_kept_tracer,
    explain_leak,
    explain_unexpected_tracer,
    held_tracers,
)
from jaxmagic.probes._leaks.probe import CONFIG_NAMES, leaks
from jaxmagic.probes._leaks.report import LEAK_FIX, HeldTracer, LeakedTracer, LeakReport, UnexpectedTracer

__all__ = [
    "CONFIG_NAMES",
    "LEAK_FIX",
    "HeldTracer",
    "LeakReport",
    "LeakedTracer",
    "UnexpectedTracer",
    "explain_kept_tracer",
    "explain_leak",
    "explain_unexpected_tracer",
    "held_tracers",
    "leaks",
]
