"""What a jitted call receives, against what the same call receives op by op.

``jax.jit`` does not hand the function the arguments it was given: it flattens them
(a dict by its *sorted* keys, a custom pytree node by its flatten function), turns
every leaf into an array (a Python ``int`` into a weakly typed int32, a float64 NumPy
array into float32 without x64) and rebuilds the tree from the flat list. The
function body runs once, when it is traced: a NumPy random draw, ``time.time()`` or a
Python counter in the body is frozen into the program. An eager run sees none of
this. So a difference between a jitted and an eager run can be made before the
compiled program runs at all; :func:`before_program` tells, by re-running the eager
function with what jit gave it, and names the stage, the user's line and a fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from jaxmagic.probes._bisect.bisected_call import BisectedCall
from jaxmagic.probes._bisect.pytree_boundary import dtype_stage, pytree_stage
from jaxmagic.probes._bisect.report import BeforeProgram, short_number
from jaxmagic.probes._bisect.trace_time import nondeterministic_stage, stale_stage
from jaxmagic.probes._support import attribution


def before_program(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object], **checks: Any
) -> BeforeProgram:
    """Re-run the eager call with what jit gave the function, stage by stage; the first stage after
    which eager gives jit's numbers is where the difference was made (see :func:`_checks` for the
    keywords). The finding's provenance is started by the user's line that made the bisecting call."""
    found = _checks(fn, args, kwargs, **checks)
    if found.provenance is not None and found.provenance.started_by is None:
        found.provenance.started_by = attribution.started_by()
    return found


def _checks(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object], **options: Any
) -> BeforeProgram:
    """Re-run the eager call with what jit gave the function, stage by stage; the first stage after
    which eager gives jit's numbers is where the difference was made.

    ``distance(a, b)``: max relative difference of two results (inf when they do not match in
    structure). ``run_eager(args, kwargs)`` runs ``fn`` op by op; ``run_jit()`` the jitted call again;
    ``fresh_jit()`` jits a new function object calling ``fn`` (a new trace, nothing cached) and returns
    (its result, the program it traced, the program the jitted call used).
    """
    call = BisectedCall(fn, args, kwargs, **options)
    found = BeforeProgram()
    # 1. does the eager run even repeat itself? If not, jit froze the first trace's Python values.
    try:
        eager_again = call.distance(call.run_eager(args, kwargs), call.eager_result)
    except Exception as error:
        found.checked = (
            f"checked: running the eager call again failed ({type(error).__name__}), so nothing was compared"
        )
        return found
    if eager_again > call.rtol:
        nondeterministic_stage(found, call, eager_again)
        return found
    notes = [f"the eager call run again repeats its numbers (max relative difference {short_number(eager_again)})"]

    try:
        leaves, treedef = jax.tree_util.tree_flatten(call.given)
        rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    except Exception as error:
        found.checked = f"checked: flattening the arguments as jit does failed ({type(error).__name__})"
        return found
    # 2. the pytree boundary: the same leaves, the tree rebuilt as jit rebuilds it
    if pytree_stage(found, call, rebuilt):
        return found
    # 3. the leaves: Python numbers and NumPy arrays become JAX arrays under jit
    if dtype_stage(found, call, treedef):
        return found
    # 4. was the program jit ran traced when a global, a closed-over or a static value was different?
    #    (last: it compiles the function once more)
    if call.fresh_jit is not None and stale_stage(found, call, notes):
        return found
    found.stage = "none"
    done = "; ".join(notes)
    if found.checked:
        found.checked = f"checked: {done}; {found.checked.removeprefix('checked: ')}"
    else:
        found.checked = (
            f"checked: {done}; the arguments hold no dict whose order jit changes, no custom pytree node and no "
            "Python number or NumPy array jit would convert"
        )
    return found
