"""A traced program lowered with its constants as arguments: the trial of "pass the array as an argument".

JAX 0.12's ``Jaxpr`` holds its constants (``jaxpr.consts``); ``with_consts(())`` detaches them into
leading inputs (``partial_eval.convert_constvars_jaxpr``), so the same equations are lowered with the
arrays as inputs instead of literals written into the program. Nothing of the user's runs.
"""

from __future__ import annotations

import time

import jax
from jax._src import core
from jax._src.interpreters import partial_eval

from jaxmagic._jax.types import Jaxpr, Value


def lowered_without_constants(program: Jaxpr) -> tuple[int, float]:
    """Lower ``program`` with its constants as arguments: (characters of StableHLO text, seconds)."""
    detached = partial_eval.convert_constvars_jaxpr(program)
    specs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in detached.invars]  # type: ignore[attr-defined]  # ShapedArray

    def run(*args: Value) -> list[Value]:
        return core.jaxpr_as_fun(detached)(*args)  # curried

    started = time.perf_counter()
    lowered = jax.jit(run).lower(*specs)
    seconds = time.perf_counter() - started
    return len(lowered.as_text()), seconds
