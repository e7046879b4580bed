"""The fix for a Python value baked into a function jitted anew per value - "pass it traced" - tried by
tracing, before it is offered, where that is cheap: a value bound by ``functools.partial``.

``jax.jit(functools.partial(update, lr=lr))`` built per learning rate compiles once per value (optax#577:
the learning rate embedded in the HLO). The fix - jit ``update`` once and pass ``lr`` at each call - is
right when ``lr`` only feeds arithmetic and wrong when it sets a shape or a count. For a partial the
trial is one trace: ``update`` traced (``jax.eval_shape``) with the call's arguments as their shapes and
dtypes, the partial's other bound values as given and ``lr`` a traced scalar.

A value closed over (``make_step(lr)`` returning ``jax.jit(lambda p, g: p - lr * g)``) or a global the
function reads is not tried: the function would have to be rebuilt with the value as a parameter, which
means running the user's code that builds it again (with its side effects) or putting a tracer into a
closure cell that other functions may share (and that a later call would then see).
"""

from __future__ import annotations

import inspect

from jaxmagic.probes._compiles.baked import BakedValue
from jaxmagic.probes._compiles.fixes import why_it_stays_static
from jaxmagic.probes._compiles.model import FunctionCompiles
from jaxmagic.probes._compiles.stack import TrialPartial
from jaxmagic.probes._compiles.static_trial import TRIAL_SECONDS
from jaxmagic.probes._support.fixes.traced_trial import trace_with, traced_scalar

UNTRIED_MARK = "(A suggestion: not tried on your code.)"  # baked_fix's last sentence, replaced by the trial's
CLOSURE_UNTRIED = (
    "(A suggestion: not tried - trying it needs the function rebuilt with the value as a parameter, which "
    "means running your code that builds it again, or putting a traced value into a closure cell that "
    "other functions may share.)"
)
_NUMBERS = ("int", "float", "bool")


def try_baked_fix(
    summary: FunctionCompiles,
    partial: TrialPartial | None,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    baked: dict[str, BakedValue] | None,
) -> None:
    """Trace the partial's function with the baked number passed traced; the outcome words the fix
    (``summary.field_fixes["baked_constant"]``, ``baked_fix_trial``, ``baked_fix_works``). ``partial``:
    (weakref to the partial's function, its bound args, its bound keywords) as the last call had them."""
    fix = summary.field_fixes.get("baked_constant", "")
    if UNTRIED_MARK not in fix or not summary.baked_values:
        return
    name = next(iter(summary.baked_values))
    value = (baked or {}).get(name)
    if value is None or not value.held_by.startswith("bound by functools.partial") or "." in name:
        return
    if value.type_name not in _NUMBERS:
        return say_baked_untried(summary, f"`{name}` is a {value.type_name}, not a number to pass as an array")
    one_trace = summary.trace_seconds / max(summary.count, 1)
    if one_trace > TRIAL_SECONDS:
        return say_baked_untried(summary, f"one trace of `{summary.name}` took {one_trace:.1f} s")
    function = partial[0]() if partial is not None else None
    if function is None:
        return say_baked_untried(summary, "the function the partial binds no longer exists after the cell")
    traced = traced_scalar(True if value.type_name == "bool" else 1.0 if value.type_name == "float" else 1)
    bound, keywords = list(partial[1]), dict(partial[2])  # type: ignore[index]
    if name in keywords:
        keywords[name] = traced
    else:
        try:
            at = list(inspect.signature(function).parameters).index(name)
        except (TypeError, ValueError):
            at = len(bound)
        if at >= len(bound):
            return say_baked_untried(summary, f"where the partial binds `{name}` could not be told")
        bound[at] = traced
    trial = trace_with(function, (*bound, *args), {**keywords, **kwargs})
    del function
    dtype = {"bool": "bool", "float": "float32"}.get(value.type_name, "int32")
    kind = "int" if value.type_name == "int" else "number"
    summary.baked_fix_trial = trial.sentence(
        summary.name, f"`{name}` passed traced ({'an' if dtype[0] == 'i' else 'a'} {dtype} argument)", {name: kind}
    )
    summary.baked_fix_error = trial.detail if trial.outcome == "fails" else ""
    summary.baked_fix_works = None if trial.outcome == "not tried" else trial.outcome == "traces"
    summary.traced_again_to_try = summary.traced_again_to_try or trial.traced_again
    ran = (
        f" (jaxmagic traced `{summary.name}` once more after the cell to try it; its output while tracing was "
        "not shown)"
        if trial.traced_again
        else ""
    )
    if summary.baked_fix_works is True:
        tried = f"Checked: {summary.baked_fix_trial}{ran}."
    elif summary.baked_fix_works is False:
        head = fix.split(" Pass it traced instead:", 1)[0]
        summary.field_fixes["baked_constant"] = (
            f"{head} Keep it bound: passing `{name}` traced does not trace ({summary.baked_fix_trial}). "
            f"{why_it_stays_static(trial.chooses_code)[:-1]}{ran}."
        )
        return
    else:
        tried = f"(A suggestion: {summary.baked_fix_trial})"
    summary.field_fixes["baked_constant"] = fix.replace(UNTRIED_MARK, tried)


def say_baked_untried(summary: FunctionCompiles, why: str) -> None:
    """The baked-value fix offered untried, saying why."""
    fix = summary.field_fixes.get("baked_constant", "")
    if UNTRIED_MARK in fix:
        summary.baked_fix_trial = f"not tried ({why})"
        summary.field_fixes["baked_constant"] = fix.replace(UNTRIED_MARK, f"(A suggestion: not tried - {why}.)")
