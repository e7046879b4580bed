"""Tracer-error explainer: which kind of tracer error, which function, which argument, which fix.

Usage without IPython::

    try:
        jax.jit(clip_positive)(x, 1.0)
    except Exception as error:
        report = jaxmagic.probes.explain(error)   # None for errors it does not explain
    report.error_kind, report.traced_function, report.depends_on, report.fixes

Inside ``jit``/``vmap``/``scan`` a function's arguments are tracers that know
their shape and dtype but not their values; any Python operation that needs a
value fails (chapter section 4). The exception classes are not one family
(``TracerIntegerConversionError`` is no ``ConcretizationTypeError``; a shape or
slice problem is a plain ``TypeError``/``IndexError``), so the explainer
classifies by class *and* message. The facts come from JAX's message ("while
tracing the function clip_positive ... depends on the values of the arguments
x and limit"), from the traceback (your line) and from that frame's variables
(which names on your line are tracers); the fixes are the chapter's table.

Modules: ``probe`` (``explain()``, ``explain_any()``, ``explain_or_say_why()``:
the analysis), ``kinds`` (the table of error kinds, ``classify``), ``frames``
(reading your frames of the traceback), ``fixes`` (the kind's fixes written for
your line), ``program_fixes`` (static arguments and expressions fitted to your
program, each fix tried), ``report`` (the reports and their wording), ``non_array`` and
``non_array_report`` (a function, string or object among a jitted function's arguments: the leaves
named, ``eqx.filter_jit`` / a static argument tried by tracing), ``unhashable_static`` and
``unhashable_static_report`` (a static argument jit cannot hash: a dict, a list, a dataclass not frozen;
the fix for its kind, tried on the value as JAX wrote it). A tracer
kept past its trace is explained by the leak probe (``probes.leaks``).
"""

from jaxmagic.probes._explain.kinds import KINDS, ErrorKind, classify
from jaxmagic.probes._explain.probe import explain, explain_any, explain_or_say_why
from jaxmagic.probes._explain.program_fixes import static_expression
from jaxmagic.probes._explain.report import TracedName, TracerErrorReport, UnexplainedErrorReport
from jaxmagic.probes._support.explained import already_explained

__all__ = [
    "KINDS",
    "ErrorKind",
    "TracedName",
    "TracerErrorReport",
    "UnexplainedErrorReport",
    "already_explained",
    "classify",
    "explain",
    "explain_any",
    "explain_or_say_why",
    "static_expression",
]
