"""NaN fix rules decided by the value an operation got: a constant its dtype holds as 0, a square root
or a power of a negative value, a 0 denominator, a log out of its domain, a value just outside an
operation's domain, and the usual cause when nothing more is known.

Each rule is declared once (``FixRule``) beside the function that words it; ``fixes.RULES`` orders them.
"""

from __future__ import annotations

import inspect

from jaxmagic.probes._nans.causes import lost_constant_cause, written_inf
from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.fix_rule import (
    IN_FLOAT32_NOT_TRIED,
    FixRule,
    as_called,
    code_of,
    library_owned,
    operand_float,
)
from jaxmagic.probes._nans.fixes.library_parameters import library_object, parameters_of
from jaxmagic.probes._nans.fixes.tried_fixes import Choice, choose
from jaxmagic.probes._nans.primitives import primitive
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.search.found import NanProducer

_ZEROS = ("0.0", "-0.0", "0")


def _lost_constant_fix(report: NanReport, p: NanProducer) -> str | None:
    """A 0 that the constant added to it should have kept away from 0, had its low-precision dtype held it
    (``+ 1e-8`` in float16, Optax's default ``eps``): the same constant with a value the dtype holds, tried by
    evaluating the program again with it in place. None when that trial did not make it finite (the
    operation's own rule then speaks, the cause said with it)."""
    lost = p.lost_constant
    assert lost is not None, "a lost-constant cause is said only of a producer that has one"
    lost_cause = lost_constant_cause(p)
    library = p.library_function
    value = f"{lost.replacement:g}"
    owned = library_owned(library)
    if owned and lost.written in parameters_of(library_object(library, stop_at_class=False)):
        for trial in p.fix_trials:
            if trial.key == FixKey.CONSTANT:  # what the user writes: the library's parameter, not its line
                trial.code = f"{library}(..., {lost.written}={value})"
    choice = choose(report, p, [FixKey.CONSTANT], naive=(FixKey.EPS,))
    fix = choice.offered
    if fix is None:
        return None
    what = lost_zero(p, lost_cause)
    in_place = f"(the program evaluated again with {value} in place of that constant)"
    tried = choice.tried_text.replace(": ", f" {in_place}: ", 1)
    failed = f" {choice.failed_text}" if choice.failed_text else ""
    alternative = (
        f" Or keep what your line gives `{library}` (and the state it keeps) in float32"
        if owned
        else " Or compute it in float32 - `v.astype(jnp.float32)` for each value `v` given to it"
    ) + f" (not tried: {IN_FLOAT32_NOT_TRIED})."
    if owned and fix.code.startswith(f"{library}("):
        return (
            f"{what} Give `{lost.written}` a value {lost.dtype} holds where `{library}` is made (to it, or to the "
            f"optimizer or layer you built that makes it): `{lost.written}={value}`. {tried}{failed}{alternative}"
        )
    if owned:  # the constant is the library's and no parameter of it was found by that name: evidence only
        fix.offered = False
        return (
            f"{what} It is {library.split('.')[0]}'s constant, not yours: with {value} in its place "
            f"{tried[0].lower()}{tried[1:]}{alternative}"
        )
    written = f" in place of `{lost.expression}`" if lost.expression else ""
    return f"{what} Use an epsilon {lost.dtype} holds: `{fix.code}`{written}. {tried}{failed}{alternative}"


def lost_zero(p: NanProducer, lost_cause: str) -> str:
    """ "The denominator inside `optax.scale_by_adam` (`tx.update(g, s, p)`) was 0 (...): the constant ..." """
    inside = f" inside `{p.library_function}`" if library_owned(p.library_function) else ""
    if primitive(p.primitive).divides:
        return f"The denominator{inside}{code_of(p)} was 0 ({p.description}): {lost_cause}."
    return f"{p.description}{inside}{code_of(p)}: {lost_cause}."


# Said first of all: the cause seen in the program (the constant its dtype holds as 0) before the operation's
# own rule; when its trial did not make the values finite, the rules after it speak.
LOST_CONSTANT = FixRule(
    key="lost_constant",
    applies=lambda p: p.phase == "forward" and not p.derivative and bool(lost_constant_cause(p)),
    words=_lost_constant_fix,
    says="0.0 in",
    tries=(FixKey.CONSTANT,),
)


def _root_fix(report: NanReport, p: NanProducer) -> str:
    """``sqrt``/``rsqrt`` out of its domain: at 0 (``rsqrt``: inf) the input needs an epsilon - the layer's
    own ``eps`` when a library's normalisation layer made it - below 0 a clamp (and, for ``rsqrt``, the
    epsilon too: ``rsqrt(0)`` is inf). Only a candidate the trials found finite is offered."""
    got = operand_float(p)
    if got is None:
        return ""
    prim, library, code = p.primitive, p.library_function, code_of(p)
    why = primitive(prim).fails  # rsqrt(0) is inf
    if got < 0 and p.added_epsilon is not None:  # the epsilon added to it did not lift a negative value
        before = _clamped_before_epsilon(report, p, got)
        if before:
            return before
    if prim == "rsqrt" and got >= 0:
        choice = choose(report, p, [FixKey.EPS, FixKey.CLAMP_EPS], why)
    else:
        choice = choose(report, p, [FixKey.CLAMP, FixKey.CLAMP_EPS], why)
    fix = choice.offered
    eps_parameter = _layer_epsilon(library)
    if fix is not None and fix.key == FixKey.EPS and eps_parameter is not None:
        name, default = eps_parameter
        given = f" (its default: {default:g})" if isinstance(default, float) else ""
        return (
            f"`{prim}` inside `{library}` got {got:g}{code}: 1/sqrt(0) is inf. The variance of a row whose "
            f"values are all equal is 0, and the layer's `{name}` is what keeps it finite: pass a positive "
            f"`{name}`{given} instead of 0 (tried as `{fix.code}`, the variance with an epsilon added). "
            + choice.tried_text
        )
    subtract = (
        "find why it goes negative (a variance computed as E[x**2] - E[x]**2 can round below 0: "
        "subtract the mean first, `jnp.var`)"
    )
    if fix is None:
        return f"`{prim}` got {got:g}{code}. {choice.tried_text} {subtract[0].upper()}{subtract[1:]}."
    failed = f" {choice.failed_text}" if choice.failed_text else ""
    if got >= 0:  # rsqrt(0): inf (sqrt(0) makes no NaN)
        return (
            f"`{prim}` got {got:g}{code}: 1/sqrt(0) is inf. Keep its input away from 0 (`v` the value given "
            f"to it): `jax.lax.rsqrt({fix.code})`. {choice.tried_text}{failed}"
        )
    return (
        f"`{prim}` got {got:g}, a negative value{code}: with `v` the value given to it, use "
        f"`{fix.code}` as its input, or {subtract}. {choice.tried_text}{failed}"
    )


def _clamped_before_epsilon(report: NanReport, p: NanProducer, got: float) -> str:
    """``rsqrt(var + 1e-5)`` (``sqrt``, ``log``) with ``var`` below 0: the epsilon cannot lift a negative value,
    so the value it is added to is clamped at 0 before it - ``jnp.maximum(var, 0.0) + 1e-5``, tried by
    evaluating the program again with that add clamped. "" when the trial did not make it finite (the
    operation's own candidates then speak)."""
    added = p.added_epsilon
    assert added is not None, "said only of a producer with an epsilon added to its input"
    choice = choose(report, p, [FixKey.CLAMP_BEFORE])
    if choice.offered is None:
        return ""
    written = f" in place of `{added.expression}`" if added.expression else ""
    value = f"`{added.clamped}`" if added.clamped else "the value the epsilon is added to"
    under = "; its gradient from the clamped forward values" if p.derivative or "jvp" in p.name_stack else ""
    tried = choice.tried_text.replace(": ", f" (the program evaluated again with that value clamped{under}): ", 1)
    return (
        f"`{p.primitive}` got {got:g}, a negative value{code_of(p)}, and the epsilon added to its input "
        f"(`{added.written or f'{added.value:g}'}`) does not lift it: {value} itself went below 0 (a variance "
        f"computed as E[x**2] - E[x]**2 can round below 0 for a row of nearly equal values, the more so in "
        f"{added.dtype}). Clamp it at 0 before the epsilon: `{added.code}`{written}; or subtract the mean first "
        f"(`jnp.var`). {tried}"
    )


def _layer_epsilon(library: str) -> tuple[str, object] | None:
    """``(name, default)`` of the parameter of a library's layer (``haiku.LayerNorm``,
    ``equinox.nn.LayerNorm.__call__``, ``flax.nnx.LayerNorm``) that keeps its 1/sqrt finite: ``eps`` or
    ``epsilon``, read from the class's signature; None when the function is no such layer's."""
    layer = library_object(library, stop_at_class=True)
    parameters = parameters_of(layer) if isinstance(layer, type) else {}
    for name in ("eps", "epsilon"):
        if name in parameters:
            default = parameters[name].default
            return name, default if default is not inspect.Parameter.empty else None
    return None


ROOT_OF_NEGATIVE = FixRule(
    key="root_of_negative",
    applies=lambda p: p.primitive in ("sqrt", "rsqrt") and not p.derivative,
    words=_root_fix,
    says="sqrt` got",
    tries=(FixKey.CLAMP_BEFORE, FixKey.EPS, FixKey.CLAMP, FixKey.CLAMP_EPS),
)


def _power_fix(report: NanReport, p: NanProducer) -> str:
    """``pow`` of a negative base (a non-integer power of it is NaN): the base clamped at 0, offered only
    when the trial found the result finite; "" for a base that is not negative (0 to a negative power)."""
    got = operand_float(p)
    if got is None or got >= 0:
        return ""
    code = code_of(p)
    choice = choose(report, p, [FixKey.CLAMP])
    if choice.offered is None:
        return f"`pow` got the negative base {got:g}{code}. {choice.tried_text}".rstrip()
    return (
        f"`pow` got the negative base {got:g}{code}: a non-integer power of a negative number is NaN. If the base "
        f"must not go below 0, clamp it (`v` the base): `jnp.power({choice.offered.code}, ...)`. {choice.tried_text}"
    )


NEGATIVE_POWER = FixRule(
    key="negative_power",
    applies=lambda p: p.primitive == "pow" and not p.derivative,
    words=_power_fix,
    says="got the negative base",
    tries=(FixKey.CLAMP,),
)


def _inside_library_division(library: str, what: str, guard: str, tried: str) -> str:
    """A 0 denominator in a library's own code (``optax.clip_by_global_norm``'s 0/0): the guard cannot be
    written there; what the user's line gives the library (its arguments, the settings it was built
    with) made the 0. The guard's trial still says whether that 0 is the whole cause."""
    called = as_called(library)
    what = what.replace("The denominator", f"The denominator inside `{library}`", 1)
    return (
        f"{what} That division is {library.split('.')[0]}'s code, not yours: the 0 comes from what your line gives "
        f"it - check the values and settings given to {called}: with them it divides by 0. Guarding the "
        f"division there (`{guard}`, which only the library can write) was tried {tried.removeprefix('Tried ')}"
    )


def _guarded_division(choice: Choice, library: str, what: str) -> str:
    """A 0 denominator guarded by ``jnp.where`` where the user can write it; in a library's code the guard's
    trial is evidence only (``_inside_library_division``)."""
    if choice.offered is None:
        return f"{what} {choice.tried_text}".rstrip()
    failed = f" {choice.failed_text}" if choice.failed_text else ""
    if library_owned(library):
        # the guard is evidence, not a fix the user can write: the fix table must not mark it offered
        choice.offered.offered = False
        return _inside_library_division(library, what, choice.offered.code, choice.tried_text)
    return f"{what} Guard that denominator: `{choice.offered.code}`. {choice.tried_text}{failed}"


def _division_fix(report: NanReport, p: NanProducer) -> str:
    """A 0 denominator (a sum over an empty mask, an all-padding batch): guarded by ``jnp.where``; "" for a
    derivative's own division (the rules before name the ones known)."""
    if p.derivative:
        return ""
    library, code = p.library_function, code_of(p)
    den = p.operands[1]
    lost = lost_constant_cause(p)  # its constant in a value the dtype holds did not make it finite
    choice = choose(report, p, [FixKey.GUARD], naive=(FixKey.EPS, FixKey.CONSTANT) if lost else (FixKey.EPS,))
    what = (
        lost_zero(p, lost)
        if lost
        else f"The denominator{code} is a sum that was 0 ({p.description}) - e.g. a mask with no entry set, "
        "an all-padding batch."
        if den.made_by in ("reduce_sum", "add", "add_any") and not library_owned(library)
        else f"The denominator{code} was 0 ({p.description})."
    )
    return _guarded_division(choice, library, what)


ZERO_DENOMINATOR = FixRule(
    key="zero_denominator",
    applies=lambda p: bool(primitive(p.primitive).divides) and len(p.operands) == 2 and p.operands[1].value in _ZEROS,
    words=_division_fix,
    says="The denominator",
    tries=(FixKey.GUARD,),
)


def _log_fix(report: NanReport, p: NanProducer) -> str:
    """``log`` of 0 (an epsilon) or of a negative value (a clamp), offered when the trial was finite.
    (``log``, ``log1p``, ``acos``, ... made under jvp are the primal's: no derivative computes them.)"""
    got = operand_float(p)
    order = [FixKey.EPS, FixKey.FLOOR] if got is not None and got >= 0 else [FixKey.CLAMP, FixKey.FLOOR]
    choice = choose(report, p, order, {**primitive("log").fails, FixKey.EPS: "a negative value stays negative"})
    said = f"`log` got {p.operands[0].value if p.operands else 'a value out of its domain'}{code_of(p)}"
    if choice.offered is None:
        return f"{said}. {choice.tried_text}" if choice.tried_text else ""
    failed = f" {choice.failed_text}" if choice.failed_text else ""
    return (
        f"{said}: with `v` the value given to `log` there, use `jnp.log({choice.offered.code})`, or select "
        "with the double where (`jnp.where(v > 0, jnp.log(jnp.where(v > 0, v, 1.0)), fallback)`) if values "
        f"at or below 0 should not count. {choice.tried_text}{failed}"
    )


LOG_OUT_OF_DOMAIN = FixRule(
    key="log_out_of_domain",
    applies=lambda p: p.primitive == "log" and not p.library_function,
    words=_log_fix,
    says="`log` got",
    tries=(FixKey.EPS, FixKey.CLAMP, FixKey.FLOOR),
)


def _domain_fix(report: NanReport, p: NanProducer) -> str:
    """An operation given a value just outside its domain - a cosine similarity that rounded to 1.0000001
    before ``arccos`` - is kept inside it by a clip, tried on the values."""
    row = primitive(p.primitive)
    domain, order, why = row.domain, [fix.key for fix in row.input_fixes], row.fails
    got = p.operands[0].value if p.operands else "a value"
    choice = choose(report, p, order, why)
    said = f"`{p.primitive}` got {got}{code_of(p)}, outside its domain {domain}"
    if choice.offered is None:
        text = f"{said}. {choice.tried_text}" if choice.tried_text else ""
        return text + " Look for why the value leaves the domain." if text else ""
    failed = f" {choice.failed_text}" if choice.failed_text else ""
    return (
        f"{said}: a value computed to be at its edge (a cosine similarity, a correlation) can round just past it. "
        f"Keep it inside, with `v` the value given to it: `{choice.offered.code}` as its input. "
        f"{choice.tried_text}{failed}"
    )


OUT_OF_DOMAIN = FixRule(
    key="out_of_domain",
    applies=lambda p: bool(primitive(p.primitive).domain) and p.phase == "forward" and not p.library_function,
    words=_domain_fix,
    says="outside its domain",
    tries=(FixKey.CLIP, FixKey.CLIP_EPS, FixKey.CLAMP, FixKey.FLOOR),
)


def _passed_on_inf(report: NanReport, p: NanProducer) -> str:
    inf = written_inf(p)
    assert inf is not None, "said only of a producer that got a written inf"
    return (
        f"`{p.primitive}`: passed on an inf written into the program{code_of(p)}, its {inf.role} operand "
        f"{inf.value}: no operation made it, nothing overflowed."
    )


# An inf made of an inf the code wrote (`x * jnp.inf`): no operation's usual cause applies (a cause, no fix)
PASSED_ON_INF = FixRule(
    key="passed_on_inf",
    applies=lambda p: p.value == "inf" and written_inf(p) is not None,
    words=_passed_on_inf,
    says="passed on an inf written into the program",
)


# The last rule: no fix, only the usual cause ("`exp`: typically ..."), which ``causes.is_a_fix`` tells apart
FORWARD_CAUSE = FixRule(
    key="forward_cause",
    applies=lambda p: p.phase == "forward" and not p.derivative and bool(primitive(p.primitive).forward_cause),
    words=lambda report, p: f"`{p.primitive}`: typically {primitive(p.primitive).forward_cause}.",
    says=": typically ",
)
