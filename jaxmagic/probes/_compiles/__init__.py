"""Compilation probe: which functions compiled during a block, how often, and why.

Usage without IPython::

    with jaxmagic.probes.compiles(budget=1) as report:    # raises CompileBudgetExceeded on exit
        for step in range(8):
            params, loss = train_step(params, x, y, key, step)
    report.count("train_step"), report.function("train_step").main_cause

Sources, all switched on for the block only and put back afterwards:

* ``jax.monitoring``'s ``/jax/core/compile/backend_compile_duration`` event is
  the count: one event per real XLA compilation, with ``fun_name`` (``jit(f)``).
  Its trace and lowering siblings give the other two durations.
* ``jax.log_compiles()`` logs the argument types of each compilation and
  ``jax.explain_cache_misses()`` why the tracing cache missed. Both go to the
  ``jax`` loggers as WARNING records; a filter on those loggers takes them
  (and only them) out of the output and into the report.
* When a compilation happens, the Python stack is still that of the call: jit's
  ``cache_miss`` frame tells whether it is the user's function or an eager
  operation, where it is defined and which static arguments it was given, and
  the innermost frame of the user's code is the line that caused it.

Nothing here calls into JAX while the block runs (no ``jnp``, no jit): the
probe's bookkeeping is string work and compiles nothing itself. What is kept
per compilation is bounded (see ``model.DETAILS_PER_FUNCTION``), so a cell that
compiles a thousand shapes gives a summary, not a thousand log records.

The package: ``probe`` (the ``compiles`` context manager), ``collector`` (the
monitoring listener that builds the report as compilations happen), ``logs``
(the filter on the ``jax`` loggers), ``stack`` (jit's frame at a compilation),
``user_arguments`` (the user's arguments at a library's entry), ``metadata`` (pytree static fields);
``cause`` (each kind of cause, declared once: key, title, general fix, priority), ``causes`` (why one
compilation happened: ``classify``, its ordered ``STEPS``; ``identity_causes`` those about the function object
itself, ``leaf_causes`` those read from the user's objects a library repacked), ``function_state`` (what one
function's last compilation was), ``baked`` (the Python values a function carries into its trace),
``why_again`` (the cause object every magic words a recompilation from); ``model`` (the report's data and
how much is kept), ``report`` (the report, its verdict and headline), ``fixes`` (what to do, by cause and
by the kind of a static argument), ``sections`` (the document's section builders); ``static_trial``
(the static-number fix tried by tracing the function once more after the block), ``field_trial`` (the same
for a number in a pytree's static field), ``baked_trial`` (the same for a value a ``functools.partial``
binds); and what compiling costs: ``program_size`` (a program's equations per user line,
loops unrolled, constants), ``slow_programs`` (which compilations to examine, kept until the block ends),
``donations`` (donated buffers JAX could not reuse, named), ``cache_misses`` (persistent-cache misses and
why), ``stale_globals`` (globals a program holds an old value of) and ``cost_sections`` (their concerns,
headline, sections and the findings the doctor and watch tell).
"""

from jaxmagic.probes._compiles.cause import CAUSE_TITLES, FIXES
from jaxmagic.probes._compiles.causes import classify
from jaxmagic.probes._compiles.collector import (
    EVENT_BACKEND_COMPILE,
    EVENT_LOWER,
    EVENT_TRACE,
)
from jaxmagic.probes._compiles.fixes import STATIC_FIXES
from jaxmagic.probes._compiles.function_state import CompileHistory, FunctionState
from jaxmagic.probes._compiles.model import (
    CHANGES_KEPT,
    DETAILS_PER_FUNCTION,
    DETAILS_TOTAL,
    EXPLAIN_LIMIT,
    LOG_LINE_CHARS,
    STATIC_VALUES_KEPT,
    Compilation,
    CompileBudgetExceeded,
    FunctionCompiles,
)
from jaxmagic.probes._compiles.probe import CONFIG_NAMES, compiles
from jaxmagic.probes._compiles.report import CompileReport
from jaxmagic.probes._compiles.stack import CallInfo, StaticValue, static_value
from jaxmagic.probes._compiles.why_again import RecompileCause, budget_magic, why_compiled_again

__all__ = [
    "CAUSE_TITLES",
    "CHANGES_KEPT",
    "CONFIG_NAMES",
    "CallInfo",
    "CompileHistory",
    "Compilation",
    "CompileBudgetExceeded",
    "CompileReport",
    "DETAILS_PER_FUNCTION",
    "DETAILS_TOTAL",
    "EVENT_BACKEND_COMPILE",
    "EVENT_LOWER",
    "EVENT_TRACE",
    "EXPLAIN_LIMIT",
    "FIXES",
    "FunctionCompiles",
    "FunctionState",
    "LOG_LINE_CHARS",
    "RecompileCause",
    "STATIC_FIXES",
    "STATIC_VALUES_KEPT",
    "StaticValue",
    "budget_magic",
    "classify",
    "compiles",
    "static_value",
    "why_compiled_again",
]
