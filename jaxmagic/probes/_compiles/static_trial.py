"""The fix for a static number that compiles the function again at each value - "pass it traced" - tried
by tracing the function with it traced, before it is offered.

It is right for a learning rate or a step counter and wrong for the count of ``jax.random.split(key, n)``
or a ``lax.scan(..., length=n)``, which must be static (jax-ml/jax#3603 and #4473: a jitted scan whose
``length`` is traced; jax-ml/jax#2506: a traced count given to a split). The trial traces the
function once, after the block, with the number as ``jnp.int32(n)``'s abstract value and the other arguments
as the last compiling call had them (their shapes and dtypes; the other static values as given).
"""

from __future__ import annotations

from typing import Any

from jaxmagic.probes._compiles.cause import STATIC
from jaxmagic.probes._compiles.model import FunctionCompiles
from jaxmagic.probes._support.fixes.traced_trial import trace_with, traced_scalar

TRIAL_SECONDS = 2.0  # the longest trace of the user's function jaxmagic repeats to try a fix


def try_static_fix(
    summary: FunctionCompiles,
    function: Any,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    positions: dict[str, int],
) -> None:
    """Trace ``function`` with its changing static numbers traced; the outcome goes into ``summary``
    (``static_fix_trial``, ``static_fix_works``, ``traced_again_to_try``), which words the fix from it."""
    names = changing_static_numbers(summary)
    if not names:
        return
    shown = ", ".join(f"`{n}`" for n in names)
    one_trace = summary.trace_seconds / max(summary.count, 1)
    if one_trace > TRIAL_SECONDS:  # a trial costs one more trace: only where that is cheap
        summary.static_fix_trial = f"not tried (one trace of `{summary.name}` took {one_trace:.1f} s)"
        return
    if function is None:
        summary.static_fix_trial = f"not tried (the function `{summary.name}` no longer exists after the cell)"
        return
    new_args, new_kwargs = list(args), dict(kwargs)
    for name in names:
        if name in new_kwargs:
            new_kwargs[name] = traced_scalar(new_kwargs[name])
        elif positions.get(name, len(new_args)) < len(new_args):
            new_args[positions[name]] = traced_scalar(new_args[positions[name]])
        else:
            summary.static_fix_trial = f"not tried (where the call passed `{name}` could not be told)"
            return
    trial = trace_with(function, tuple(new_args), new_kwargs)
    as_array = ", ".join(f"jnp.{_dtype_of(args, kwargs, positions, n)}({n})" for n in names)
    kinds = {n: "int" if _dtype_of(args, kwargs, positions, n) == "int32" else "number" for n in names}
    summary.static_fix_trial = trial.sentence(summary.name, f"{shown} traced (as {as_array})", kinds)
    summary.static_fix_error = trial.detail if trial.outcome == "fails" else ""
    summary.static_fix_chooses_code = trial.chooses_code
    summary.static_fix_works = None if trial.outcome == "not tried" else trial.outcome == "traces"
    summary.traced_again_to_try = trial.traced_again


def changing_static_numbers(summary: FunctionCompiles) -> list[str]:
    """The static arguments that are numbers and compiled the function again with new values."""
    if STATIC.key not in summary.causes:
        return []
    return [
        name
        for name, kind in summary.static_kinds.items()
        if kind == "number" and summary.static_value_counts.get(name, 0) > 1
    ]


def say_untried(summary: FunctionCompiles, why: str) -> None:
    """The static-number fix is offered untried, saying why (a probe that does not trace the function again)."""
    if changing_static_numbers(summary):
        summary.static_fix_trial = f"not tried ({why})"


def _dtype_of(args: tuple[object, ...], kwargs: dict[str, object], positions: dict[str, int], name: str) -> str:
    value = kwargs[name] if name in kwargs else args[positions[name]]
    return "float32" if isinstance(value, float) else "bool_" if isinstance(value, bool) else "int32"
