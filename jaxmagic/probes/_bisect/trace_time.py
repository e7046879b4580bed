"""Python that runs at trace time: a body that gives new values at each call, a program traced with old values.

Under jit the function's Python body runs once, when it is traced: a NumPy random
draw, ``time.time()`` or a counter is frozen into the program (the eager call run
again does not repeat its numbers), and a global, a closed-over value or a static
argument is read then and kept while the program is reused (a new trace gives
eager's numbers).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.types import Program
from jaxmagic.probes._bisect.bisected_call import BisectedCall
from jaxmagic.probes._bisect.function_source import names_on, nondeterministic_lines, outer_names_on
from jaxmagic.probes._bisect.program_difference import first_difference
from jaxmagic.probes._bisect.report import BeforeProgram, short_number
from jaxmagic.probes._support import attribution
from jaxmagic.report.provenance import Provenance


def nondeterministic_stage(found: BeforeProgram, call: BisectedCall, eager_again: float) -> None:
    """Two eager runs differ: is jit frozen (trace-time Python) or new at each run too?"""
    rtol = call.rtol
    try:
        jit_again = call.distance(call.run_jit(), call.jit_result)
    except Exception:
        jit_again = None
    frozen = jit_again is not None and jit_again <= rtol
    found.stage, found.explains = ("trace_time_python" if frozen else "nondeterministic"), True
    found.checked = (
        f"checked: two eager runs of the same call differ from each other (max relative difference "
        f"{short_number(eager_again)})"
        + (
            ", two jit runs give the same numbers: the function's Python code makes new values at each run, "
            "and under jit it ran once, when it was traced, so the program keeps the values of that run"
            if frozen
            else (", two jit runs differ too" if jit_again is not None else "")
            + ": the call gives new numbers at each run, so a difference between a jit and an eager run "
            "says nothing about compilation"
        )
    )
    seeded = _with_global_random_state_kept(call.run_eager, call.args, call.kwargs, call.distance)
    if seeded is not None:
        found.checked += (
            "; with NumPy's and Python's global random states set back before the second run, two eager runs "
            + (
                f"repeat their numbers (max relative difference {short_number(seeded)}): the new values come from "
                "a global random draw"
                if seeded <= rtol
                else f"still differ (max relative difference {short_number(seeded)}): not (only) a global random draw"
            )
        )
    lines = nondeterministic_lines(call.inner)
    if lines:
        found.line, found.line_how = lines[0], "the function's source calls this when it runs (found by reading it)"
        found.provenance = attribution.of_source_line(lines[0])
        found.fix = (
            f"Make the value an argument of the function (a `jax.random` key for random numbers, the time or "
            f"counter as an input) instead of computing it in the body at `{lines[0].code}`: a suggestion, "
            "not tried."
        )
    else:
        found.provenance = Provenance(unknown="no call of random, time or a counter was found in its source")
        found.fix = (
            "Pass anything that changes between calls (random keys, times, counters) as an argument instead "
            "of computing it in Python inside the function: a suggestion, not tried."
        )


def stale_stage(found: BeforeProgram, call: BisectedCall, notes: list[str]) -> bool:
    """A new trace gives eager's numbers: the program jit ran is an old one (True: named in ``found``)."""
    assert call.fresh_jit is not None
    try:
        fresh, fresh_program, used_program = call.fresh_jit()
        fresh_gap = call.distance(fresh, call.eager_result)
    except Exception:
        fresh_gap, fresh_program, used_program = None, None, None
    if fresh_gap is not None and fresh_gap <= call.rtol:
        found.stage, found.explains = "stale_trace", True
        found.checked = (
            f"checked: a new trace of the function (jit of a new function object calling it, so nothing "
            f"cached is reused) gives eager's numbers (max relative difference {short_number(fresh_gap)}), while "
            "the program the jitted call ran gives other numbers: that program was traced earlier, when a "
            "Python value the function reads was different"
        )
        statics = [n for n, a in zip(call.names, call.args) if call.is_static(a)]
        statics += [k for k, v in call.kwargs.items() if call.is_static(v)]
        _stale_line(found, call.inner, used_program, fresh_program, statics)
        return True
    notes.append(
        "a new trace of the function (nothing cached) could not be run"
        if fresh_gap is None
        else f"a new trace of the function (nothing cached) differs from eager too (max relative difference "
        f"{short_number(fresh_gap)}), so the program jit ran is not an old one"
    )
    return False


def _stale_line(
    found: BeforeProgram,
    inner: Callable[..., Any],
    used_program: Program | None,
    fresh_program: Program | None,
    statics: list[str],
) -> None:
    eqn = None
    if used_program is not None and fresh_program is not None:
        try:
            eqn = first_difference(*jaxpr_parts.closed_parts(fresh_program), *jaxpr_parts.closed_parts(used_program))
        except Exception:
            eqn = None
    names: list[str] = []
    static_read: list[str] = []
    if eqn is not None:
        found.provenance = attribution.of_equation(eqn)
        found.line = found.provenance.made_at
        found.line_how = (
            "the first operation that differs between the program jit ran and a new trace (its source_info)"
        )
        if found.line is not None:
            names = outer_names_on(inner, found.line.lineno)
            static_read = [n for n in names_on(inner, found.line.lineno) if n in statics]
    if found.provenance is None:
        found.provenance = Provenance(
            unknown="no operation differs between the two traces that JAX recorded a line for"
        )
    read = ", ".join(f"`{n}`" for n in names[:3])
    found.argument = static_read[0] if static_read else names[0] if names else ""
    static_words = ", ".join(f"`{n}`" for n in static_read[:3])
    found.fix = (
        (
            f"The line reads the static argument {static_words}: jit looks a static value up by its hash and "
            "equality, so an object changed in place after the first call finds the old program; make it "
            "immutable (a frozen dataclass, a tuple) and pass a new object when it changes. "
            if static_read
            else ""
        )
        + (f"The line reads {read} from outside the function. " if read else "")
        + "jit reads globals, closed-over Python values and static arguments once, when it traces, and reuses "
        "that program while the arguments' shapes and dtypes stay the same (a new `jax.jit(f)` of the same "
        "function reuses it too): pass the value as an argument, or mark it static with a value that compares "
        "unequal when it changes. A suggestion, not tried."
    )


def _with_global_random_state_kept(
    run_eager: Callable[[tuple[Any, ...], dict[str, Any]], object],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    distance: Callable[[Any, Any], float],
) -> float | None:
    """Run the eager call twice from the same NumPy and Python global random states; the difference
    of the two runs (None when a run failed). The states are left as the first run left them."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        first = run_eager(args, kwargs)
        numpy_after, python_after = np.random.get_state(), random.getstate()
        np.random.set_state(numpy_state)
        random.setstate(python_state)
        second = run_eager(args, kwargs)
        np.random.set_state(numpy_after)
        random.setstate(python_after)
        return distance(first, second)
    except Exception:
        return None
