"""Bisection probe: is a wrong number the compiler's fault, the algorithm's, or float32's?

Usage without IPython::

    report = jaxmagic.probes.bisect(closure_version, X, ref=ref64)
    report.verdict          # "compilation", "algorithm", "precision", "before_program", "ok", "jit_differs", ...
    report.before_program   # when jit and eager disagree: stage, checked, line, fix
    report.jit.max_abs_error, report.eager.max_abs_error
    report.captured         # arrays the jitted function closes over (the chapter's section 1.4 trap)

Chapter section 1.4: when a result looks wrong without any error, compute the
same function three times - jitted, op by op under ``jax.disable_jit()``, and
in float64 - and compare:

* jit wrong, eager right: the compilation layer (fusion, constant folding, a
  backend bug) - look at the program with ``%jax_hlo``;
* both wrong: the algorithm or the data;
* both close to the reference but not equal: float32 precision.

The reference is ``ref`` when given (a value, e.g. a NumPy float64 result).
Otherwise the probe makes one when it can do so soundly: the same function,
op by op, with every floating-point input upcast to float64 under
``jax.enable_x64`` - and only if tracing it that way shows every
floating-point value of the computation in float64 (no cast back to float32)
and no random numbers (whose bits depend on the dtype). If not, the report
says why and compares jit with eager only.

Before a jit/eager difference is called the compiler's, the probe checks
what each run *receives* (``before_program.py``; verdict
``"before_program"``, details in ``report.before_program``), in this order:

* the eager call run again: if it does not repeat its numbers, Python code in
  the body (``np.random``, ``time.time()``, a counter) makes new values at each
  call, and under jit it ran once, at trace time;
* the arguments flattened and rebuilt as jit does (a dict by sorted keys, a
  custom node by its unflatten), each reordered dict alone too: if eager then
  gives jit's numbers, the function depends on the order; the line is the first
  operation whose operands change with the order (two traces compared by their
  ``source_info``) and the line iterating the dict (the function's source);
* Python numbers and NumPy arrays converted to JAX arrays as jit converts them;
* a new trace (jit of a new function object): if it gives eager's numbers, the
  program jit ran was traced when a global, a closed-over value or a static
  argument was different.

Each says ``checked: ...`` with its outcome; a check that does not explain the
difference says so and the verdict stays.

The function is called three times (jit, eager, reference); when jit and eager
disagree, up to about eight times more for the checks above. The report holds
the errors and shapes, not the results.

Modules: ``probe`` (the three runs and their comparison), ``report`` (the report,
the verdicts' wording, ``document()``), ``before_program`` (the checks of what the
runs receive, in order) with ``bisected_call`` (the call and the ways to run it
again), ``pytree_boundary`` (dict order, custom nodes, argument dtypes),
``trace_time`` (Python run at trace time, a stale trace), ``function_source``
(reading the function's source for the line) and ``program_difference`` (the
first operation where two traces differ).
"""

from jaxmagic.probes._bisect.probe import bisect, bisect_of_call, run_call
from jaxmagic.probes._bisect.report import (
    NEXT_STEPS,
    STAGES,
    VERDICTS,
    BeforeProgram,
    BisectReport,
    CapturedArray,
    ReorderedDict,
    RunResult,
)

__all__ = [
    "NEXT_STEPS",
    "STAGES",
    "VERDICTS",
    "BeforeProgram",
    "BisectReport",
    "CapturedArray",
    "ReorderedDict",
    "RunResult",
    "bisect",
    "bisect_of_call",
    "run_call",
]
