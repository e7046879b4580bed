"""The fix for a NaN, matched to the operation that produced it and the values it saw.

Each rule names only what is in the program (the line, the library function,
the dtype, the masked rows) and applies only to what was seen: a fix for
another bug is worse than none, so ``nan_fix`` returns "" when no rule fits.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

from jaxmagic.probes._nans.causes import FORWARD_CAUSES, lost_constant_cause, overflowed
from jaxmagic.probes._nans.library_parameters import library_object, parameters_of
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.tried_fixes import Choice, choose, untried, values_of
from jaxmagic.probes._support.nan.producer import NanProducer
from jaxmagic.probes._support.nan.value_fixes import CLAMP_BEFORE, FINITE_FILL, FLOAT32, FixTrial
from jaxmagic.probes._support.nan.widened import LINE_IN_FLOAT32
from jaxmagic.report import SourceLine

_ROW_FUNCTIONS = ("jax.nn.logsumexp", "jax.nn.log_softmax", "jax.nn.softmax", "jax.scipy.special.logsumexp")
_SQRT_LIKE = ("sqrt", "rsqrt", "pow")
# A fix that rewrites the user's line (a double where, a log-probability from logits, a dtype): trying it
# would mean running the user's Python again, which a trial never does.
NOT_TRIED = "it rewrites your line, and trying it would run your Python again"
_JAX_NAMES = ("jnp.", "jax.", "lax.")  # a JAX function's call is the user's to guard: its arguments are written there
SUGGESTION = f" (Not tried on the values: {NOT_TRIED}.)"


def _zero_operand(p: NanProducer) -> bool:
    return any(op.value in ("0.0", "-0.0", "0") for op in p.operands)


def _root_fix(report: NanReport, p: NanProducer, library: str, code: str) -> str:
    """``sqrt``/``rsqrt`` out of its domain: at 0 (``rsqrt``: inf) the input needs an epsilon - the layer's
    own ``eps`` when a library's normalisation layer made it - below 0 a clamp (and, for ``rsqrt``, the
    epsilon too: ``rsqrt(0)`` is inf). Only a candidate the trials found finite is offered."""
    got = _operand_float(p)
    if got is None:
        return ""
    prim = p.primitive
    why = {"clamp": "rsqrt(0) is inf"} if prim == "rsqrt" else {}
    if got < 0 and p.added_epsilon is not None:  # the epsilon added to it did not lift a negative value
        before = _clamped_before_epsilon(report, p, got, code)
        if before:
            return before
    if prim == "rsqrt" and got >= 0:
        choice = choose(report, p, ["eps", "clamp_eps"], why)
    else:
        choice = choose(report, p, ["clamp", "clamp_eps"], why)
    fix = choice.offered
    eps_parameter = _layer_epsilon(library)
    if fix is not None and fix.key == "eps" and eps_parameter is not None:
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


def _clamped_before_epsilon(report: NanReport, p: NanProducer, got: float, code: str) -> str:
    """``rsqrt(var + 1e-5)`` (``sqrt``, ``log``) with ``var`` below 0: the epsilon cannot lift a negative value,
    so the value it is added to is clamped at 0 before it - ``jnp.maximum(var, 0.0) + 1e-5``, tried by
    evaluating the program again with that add clamped. "" when the trial did not make it finite (the
    operation's own candidates then speak)."""
    added = p.added_epsilon
    assert added is not None, "said only of a producer with an epsilon added to its input"
    choice = choose(report, p, [CLAMP_BEFORE])
    if choice.offered is None:
        return ""
    written = f" in place of `{added.expression}`" if added.expression else ""
    value = f"`{added.clamped}`" if added.clamped else "the value the epsilon is added to"
    under = "; its gradient from the clamped forward values" if p.derivative or "jvp" in p.name_stack else ""
    tried = choice.tried_text.replace(": ", f" (the program evaluated again with that value clamped{under}): ", 1)
    return (
        f"`{p.primitive}` got {got:g}, a negative value{code}, and the epsilon added to its input "
        f"(`{added.written or f'{added.value:g}'}`) does not lift it: {value} itself went below 0 (a variance "
        f"computed as E[x**2] - E[x]**2 can round below 0 for a row of nearly equal values, the more so in "
        f"{added.dtype}). Clamp it at 0 before the epsilon: `{added.code}`{written}; or subtract the mean first "
        f"(`jnp.var`). {tried}"
    )


_DOMAIN = {  # operation -> (its domain, the candidates in the order offered, why a candidate can fail)
    "acos": ("[-1, 1]", ["clip", "clip_eps"], {}),
    "asin": ("[-1, 1]", ["clip", "clip_eps"], {}),
    "atanh": ("(-1, 1)", ["clip", "clip_eps"], {"clip": "atanh(1) is inf"}),
    "acosh": ("[1, inf)", ["floor"], {}),
    "log1p": ("(-1, inf)", ["clamp", "floor"], {"clamp": "log1p(-1) is -inf"}),
}


def _domain_fix(report: NanReport, p: NanProducer, code: str) -> str:
    """An operation given a value just outside its domain - a cosine similarity that rounded to 1.0000001
    before ``arccos`` - is kept inside it by a clip, tried on the values."""
    domain, order, why = _DOMAIN[p.primitive]
    got = p.operands[0].value if p.operands else "a value"
    choice = choose(report, p, order, why)
    said = f"`{p.primitive}` got {got}{code}, outside its domain {domain}"
    if choice.offered is None:
        text = f"{said}. {choice.tried_text}" if choice.tried_text else ""
        return text + " Look for why the value leaves the domain." if text else ""
    failed = f" {choice.failed_text}" if choice.failed_text else ""
    return (
        f"{said}: a value computed to be at its edge (a cosine similarity, a correlation) can round just past it. "
        f"Keep it inside, with `v` the value given to it: `{choice.offered.code}` as its input. "
        f"{choice.tried_text}{failed}"
    )


def _power_fix(report: NanReport, p: NanProducer, code: str) -> str:
    """``pow`` of a negative base (a non-integer power of it is NaN): the base clamped at 0, offered only
    when the trial found the result finite; "" for a base that is not negative (0 to a negative power)."""
    got = _operand_float(p)
    if got is None or got >= 0:
        return ""
    choice = choose(report, p, ["clamp"])
    if choice.offered is None:
        return f"`pow` got the negative base {got:g}{code}. {choice.tried_text}".rstrip()
    return (
        f"`pow` got the negative base {got:g}{code}: a non-integer power of a negative number is NaN. If the base "
        f"must not go below 0, clamp it (`v` the base): `jnp.power({choice.offered.code}, ...)`. {choice.tried_text}"
    )


def _operand_float(p: NanProducer) -> float | None:
    try:
        return float(p.operands[0].value) if p.operands else None
    except (TypeError, ValueError):
        return None


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


def _library_owned(library: str) -> bool:
    """Whether the operation ran in a library's own code (Optax, NumPyro, ...), which the user cannot edit;
    a JAX function's (``jnp.linalg.norm``) is guarded where the user calls it."""
    return bool(library) and not library.startswith(_JAX_NAMES)


def _inside_library_division(library: str, what: str, guard: str, tried: str) -> str:
    """A 0 denominator in a library's own code (``optax.clip_by_global_norm``'s 0/0): the guard cannot be
    written there; what the user's line gives the library (its arguments, the settings it was built
    with) made the 0. The guard's trial still says whether that 0 is the whole cause."""
    called = _as_called(library)
    what = what.replace("The denominator", f"The denominator inside `{library}`", 1)
    return (
        f"{what} That division is {library.split('.')[0]}'s code, not yours: the 0 comes from what your line gives "
        f"it - check the values and settings given to {called}: with them it divides by 0. Guarding the "
        f"division there (`{guard}`, which only the library can write) was tried {tried.removeprefix('Tried ')}"
    )


def _written_inf_fix(report: NanReport, p: NanProducer, library: str, code: str) -> str:
    """A NaN made from an inf the user wrote as a mask's fill (``jnp.where(valid, logits, -jnp.inf)``):
    the library function's own mask argument when it has one (optax's ``where=``), and a finite fill -
    offered when it made the operation finite on the values it got."""
    written = p.written_inf
    if written is None:
        return ""
    if p.written_inf_by:  # the library's own code wrote it (a log-probability outside the support): not a fill of yours
        same_call = p.line is not None and (p.line.filename, p.line.lineno) == (written.filename, written.lineno)
        # what the line called (`Gamma.log_prob`), not the decorator inside it that wrote the inf (validate_sample)
        writer = library if library and same_call else p.written_inf_by
        return (
            f"`{writer}`, called on your line {written.lineno} (`{written.code.strip()}`), returned an "
            f"inf that `{p.primitive}` turned into NaN{code}: no operation made the inf, the library's code wrote it "
            f"(an input outside what it accepts - a value outside a distribution's support, say). Keep the values "
            f"given to {_as_called(writer)} inside what it accepts. " + _finite_fill_tried(report, p)
        ).rstrip()
    if "inf" not in written.code:  # the line holds no inf: what it called wrote it, out of the frames JAX kept
        return (
            f"An inf written into the program (a constant, made by no operation) in what your line {written.lineno} "
            f"(`{written.code.strip()}`) called reached `{p.primitive}`"
            f"{' inside `' + library + '`' if library else ''}, which turned it into NaN{code}: the values given "
            "there are outside what the called code accepts. " + _finite_fill_tried(report, p)
        ).rstrip()
    dtype = next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "float32")
    parts = [
        f"Your line {written.lineno} (`{written.code.strip()}`) wrote an inf that `{p.primitive}`"
        f"{' inside `' + library + '`' if library else ''} turned into NaN{code}: no operation made the inf."
    ]
    if library and "where" in parameters_of(library_object(library, stop_at_class=False)):
        parts.append(
            f"`{library}` takes the mask itself: pass it as `where=` (e.g. `{library}(logits, labels, "
            "where=valid)`) and leave the values finite; masked entries are then left out of the sum." + SUGGESTION
        )
    parts.append(
        _finite_fill_tried(
            report, p, f"Or fill with a finite value instead: `jnp.finfo(jnp.{dtype}).min` for `-jnp.inf` in your line."
        )
    )
    return " ".join(part for part in parts if part)


def _finite_fill_tried(report: NanReport, p: NanProducer, advice: str = "") -> str:
    """The inf replaced by the finite extreme before the operation, tried on its values: ``advice`` (how to
    write that fill) and the trial when it made the operation finite; else what the trial gave."""
    advice = advice or (
        f"If such values should not count, leave the inf out of `{p.primitive}` "
        "(`jnp.where(jnp.isfinite(v), v, jnp.finfo(v.dtype).min)` on the library's result)."
    )
    choice = choose(report, p, [FINITE_FILL])
    if choice.offered is not None:
        return f"{advice} " + choice.tried_text.replace(
            ": `", ", the infinity it got replaced by the finite extreme: `", 1
        )
    return f"A finite fill was tried too and is not offered: {choice.tried_text}" if choice.tried_text else ""


def _inf_line(p: NanProducer) -> SourceLine | None:
    """The user's line among the producer's where ``-inf`` is written (the mask fill), if one is."""
    for line in (p.written_inf, p.discarded_line, p.nan_maker_line, p.line):
        if line is not None and "inf" in (line.code or ""):
            return line
    return None


# The logit from which 1 - sigmoid(z) rounds to 0 (measured: 1 - sigmoid(17.0) == 0 in float32)
_UNDERFLOW = {"float32": 17, "float64": 37}

_HALF = ("float16", "bfloat16")


def nan_fixes(report: NanReport) -> tuple[str, list[FixTrial]]:
    """The fix for this NaN in words (see ``nan_fix``) and as data: every candidate tried on the values
    (``offered`` on the one the words offer; the others failed or were not chosen), and the rule's own fix
    when it could not be tried (``tried`` False, ``result`` "not tried: <why>")."""
    text = nan_fix(report)
    p = report.producer
    fixes = [dataclasses.replace(t) for t in p.fix_trials] if p is not None else []
    if p is not None and p.primitive == "cholesky" and p.jitter and "Tried on these values" in text:
        fixes.append(FixTrial("jitter", f"K + {p.jitter} * jnp.eye(K.shape[-1])", True, True, "finite", "", True))
    if SUGGESTION in text:  # a fix in words that rewrites the line (a cause alone is no fix)
        fixes.append(untried("", NOT_TRIED))
    if IN_FLOAT32_NOT_TRIED in text:
        fixes.append(untried(IN_FLOAT32, IN_FLOAT32_NOT_TRIED))
    return text, fixes


def nan_fix(report: NanReport) -> str:
    """The fix for this NaN: chosen by the producing operation and the input values it saw, naming only
    what is in the program; "" when no fix is known for what was seen (never a fix for another bug). A
    fix the producer search could try on the values is offered only when it made them finite. An
    operation inside a library's own code that no rule fixes is said to be the library's, with what the
    user's line gives it: never a rewrite of code the user cannot edit."""
    p = report.producer
    for trial in p.fix_trials if p is not None else []:
        trial.offered = False
    lost = lost_constant_cause(p) if p is not None and p.phase == "forward" and not p.derivative else ""
    if p is not None and lost:  # the cause seen in the program first: the constant its dtype holds as 0
        fixed = _lost_constant_fix(report, p, lost)
        if fixed:
            return fixed
    return _fix_by_rule(report) or _inside_library_fix(p)


def _inside_library_fix(p: NanProducer | None) -> str:
    library = p.library_function if p is not None else ""
    if p is None or not _library_owned(library) or not p.operands:
        return ""
    code = f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""
    values = ", ".join(op.value for op in p.operands if not op.constant) or p.operands[0].value
    at = f" at index {p.index}" if p.index else ""
    made = "for the gradient" if p.derivative or p.phase == "backward" else ""
    return (
        f"`{p.primitive}` inside `{library}`{code} got {values}{at} and made {p.value} {made}. That operation is "
        f"{library.split('.')[0]}'s code, not yours: keep the values and settings your line gives "
        f"{_as_called(library)} inside what it accepts there (not tried: only the library could change that line)."
    ).replace(" .", ".")


def _as_called(library: str) -> str:
    """How the user calls a library's callable, with its parameters: ``optax.clip_by_global_norm(max_norm)``,
    ``numpyro.distributions.Gamma(concentration, rate, validate_args).log_prob(value)``."""
    own = ("self", "args", "kwargs")
    function = library_object(library, stop_at_class=False)
    owner = library_object(library, stop_at_class=True)
    if isinstance(owner, type) and owner is not function:  # a method: the class built, then the method called
        built = ", ".join(name for name in parameters_of(owner) if name not in own)
        method = library.rsplit(".", 1)
        given = ", ".join(name for name in parameters_of(function) if name not in own)
        return f"`{method[0]}({built}).{method[1]}({given})`"
    names = ", ".join(name for name in parameters_of(function) if name not in own)
    return f"`{library}({names})`"


def _guarded_division(choice: Choice, library: str, what: str) -> str:
    """A 0 denominator guarded by ``jnp.where`` where the user can write it; in a library's code the guard's
    trial is evidence only (``_inside_library_division``)."""
    if choice.offered is None:
        return f"{what} {choice.tried_text}".rstrip()
    failed = f" {choice.failed_text}" if choice.failed_text else ""
    if _library_owned(library):
        # the guard is evidence, not a fix the user can write: the fix table must not mark it offered
        choice.offered.offered = False
        return _inside_library_division(library, what, choice.offered.code, choice.tried_text)
    return f"{what} Guard that denominator: `{choice.offered.code}`. {choice.tried_text}{failed}"


# The other fix of a constant a low-precision dtype cannot hold: the computation in float32. Trying it would
# trace the user's function again on float32 values, which runs their Python again.
IN_FLOAT32 = "the values in float32"
IN_FLOAT32_NOT_TRIED = "it changes the dtype your code gives the program, and trying it would run your Python again"


def _derivative_overflow_fix(report: NanReport, p: NanProducer) -> str:
    """An operation of the backward pass that overflowed half precision (the sum of 65,546 cotangents in
    float16's log_softmax derivative, jax#40409): no guard the user writes reaches it; their line computed in
    float32 does, tried by evaluating the program again with that line's operations in float32."""
    half = next(op.dtype for op in p.operands if op.dtype in _HALF)
    choice = choose(report, p, [LINE_IN_FLOAT32])
    trial = next(t for t in p.fix_trials if t.key == LINE_IN_FLOAT32)
    inside = f" inside `{p.library_function}`" if p.library_function else ""
    line = p.expression or (p.line.code.strip() if p.line is not None else "your line")
    then = f"; `{p.nan_maker}` then made NaN of it ({p.nan_maker_values})" if p.nan_maker else ""
    why = overflowed(p) or f"it overflowed {half}"
    said = (
        f"`{p.primitive}`{inside} overflowed {half} in the backward pass: in the derivative JAX computed for "
        f"`{line}`, {why}{then}. No guard on your line reaches an operation of the derivative."
    )
    where = (
        f"Tried on {values_of(report)}: the program evaluated again with the {trial.result} (forward and derivative)"
    )
    if choice.offered is None:
        outcome = trial.call_result if trial.tried else trial.result
        return f"{said} Computing that line in float32 (`{trial.code}`) is not offered. {where}: {outcome}."
    cast = f"; its gradient comes back in {half} through the cast"
    if trial.code == "v.astype(jnp.float32)":  # the line names no single value to cast: said in words
        return (
            f"{said} Compute that line in float32 - `v.astype(jnp.float32)` for each {half} value `v` given to "
            f"`{line}`{cast}. {where}: its outputs finite."
        )
    return f"{said} Compute that line in float32: `{trial.code}`{cast}. {where}: its outputs finite."


def _lost_constant_fix(report: NanReport, p: NanProducer, lost_cause: str) -> str:
    """A 0 that the constant added to it should have kept away from 0, had its low-precision dtype held it
    (``+ 1e-8`` in float16, Optax's default ``eps``): the same constant with a value the dtype holds, tried by
    evaluating the program again with it in place. "" when that trial did not make it finite (the operation's
    own rule then speaks, the cause said with it)."""
    lost = p.lost_constant
    assert lost is not None, "a lost-constant cause is said only of a producer that has one"
    library = p.library_function
    value = f"{lost.replacement:g}"
    owned = _library_owned(library)
    if owned and lost.written in parameters_of(library_object(library, stop_at_class=False)):
        for trial in p.fix_trials:
            if trial.key == "constant":  # what the user writes: the library's parameter, not its line
                trial.code = f"{library}(..., {lost.written}={value})"
    choice = choose(report, p, ["constant"], naive=("eps",))
    fix = choice.offered
    if fix is None:
        return ""
    what = _lost_zero(p, lost_cause)
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


def _lost_zero(p: NanProducer, lost_cause: str) -> str:
    """ "The denominator inside `optax.scale_by_adam` (`tx.update(g, s, p)`) was 0 (...): the constant ..." """
    library = p.library_function
    inside = f" inside `{library}`" if _library_owned(library) else ""
    code = f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""
    if p.primitive in ("div", "rem"):
        return f"The denominator{inside}{code} was 0 ({p.description}): {lost_cause}."
    return f"{p.description}{inside}{code}: {lost_cause}."


def _fix_by_rule(report: NanReport) -> str:
    p = report.producer
    if p is None:
        if report.primitive in FORWARD_CAUSES and report.phase == "forward":
            return (
                f"`{report.primitive}` produced {report.value or 'NaN'}: typically {FORWARD_CAUSES[report.primitive]}."
            )
        return ""
    if p.derivative and p.phase != "forward" and any(t.key == LINE_IN_FLOAT32 for t in p.fix_trials):
        return _derivative_overflow_fix(report, p)
    overflow = overflowed(p) if p.phase == "forward" and not p.derivative else ""
    if overflow and any(op.dtype in _HALF for op in p.operands):
        half = next(op.dtype for op in p.operands if op.dtype in _HALF)
        code = f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""
        choice = choose(report, p, [FLOAT32])
        said = f"`{p.primitive}`{code} overflowed {half}."
        if choice.offered is None:  # float32 overflows too (or it could not be tried)
            tried = f" {choice.tried_text}" if choice.tried_text else SUGGESTION
            return f"{said} Scale the values down first.{tried}"
        after = (
            f"and back to {half} after if you need it"
            if f"within {half}" in choice.offered.result
            else f"and keep the result in float32: it does not fit {half}"
        )
        return (
            f"{said} Compute it in float32 - `.astype(jnp.float32)` on its inputs, {after} - or scale the values "
            f"down first. {choice.tried_text}"
        )
    library = p.library_function
    code = f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""
    if p.written_inf is not None and not p.neg_inf_rows:
        return _written_inf_fix(report, p, library, code)
    if p.neg_inf_rows and p.nan_maker_library in _ROW_FUNCTIONS:  # -inf made elsewhere, NaN in the row function
        library = p.nan_maker_library
        code = f" (`{p.nan_maker_line.code}`)" if p.nan_maker_line is not None and p.nan_maker_line.code else ""
    if p.neg_inf_rows and (library in _ROW_FUNCTIONS or p.primitive in ("sub", "log", "exp", "mul")):
        where = _inf_line(p)
        fill = f" - the `-jnp.inf` in `{where.code}`" if where is not None else ""
        name = f"`{library}`" if library else "the max-subtracting reduction"
        dtype = next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "float32")
        in_what = "its gradient" if p.phase == "backward" or p.derivative else "its value"
        said = (
            f"{name}{code} got {p.neg_inf_rows} in which every entry is -inf (a fully masked row): there the "
            f"max it subtracts is -inf too, and -inf - (-inf) is NaN (in {in_what})."
        )
        choice = choose(report, p, [FINITE_FILL])
        if choice.tried_text and choice.offered is None:  # a finite fill leaves it non-finite: not offered
            return f"{said} Leave rows with no unmasked entry out of the loss. A finite fill is not offered: {choice.tried_text}"
        tried = f" {choice.tried_text}" if choice.offered is not None else SUGGESTION
        return (
            f"{said} Fill masked entries with a large finite negative number instead of -inf{fill} (e.g. "
            f"`jnp.finfo(jnp.{dtype}).min`), or leave rows with no unmasked entry out of the loss.{tried}"
        )
    if p.discarded_by and not library:
        prim = p.primitive
        at_where = f" (`{p.discarded_line.code}`)" if p.discarded_line is not None and p.discarded_line.code else ""
        return (
            f"`{prim}` made {p.value} in the branch `{p.discarded_by}` discarded{code}; its gradient is still "
            "computed and multiplied by zero (0 * NaN = NaN). Use the double where: make the input of "
            f"`{prim}` safe in the discarded case too - with `ok` the condition of the `{p.discarded_by}`{at_where} "
            f"and `v` the value given to `{prim}`: `jnp.where(ok, jnp.{prim}(jnp.where(ok, v, 1.0)), 0.0)`."
            + SUGGESTION
        )
    sqrt_made = p.primitive in _SQRT_LIKE or any(op.made_by in _SQRT_LIKE for op in p.operands)
    if library == "jnp.std" or library == "jnp.var" and sqrt_made:
        return (
            f"The gradient of `jnp.std`{code} where the variance is 0 (all entries equal) is 0.5/sqrt(0) = inf "
            f"({p.description}). Take the square root of the variance kept away from 0, with the same arguments "
            "as the `jnp.std` call: `jnp.sqrt(jnp.var(..., axis=...) + eps)`, or the double where on the variance."
            + SUGGESTION
        )
    expression = p.expression or (p.line.code.strip() if p.line is not None else "")
    if p.derivative and expression.startswith(("jnp.arccos(", "jnp.arcsin(")) and _zero_operand(p):
        function = expression.split("(")[0]
        return (
            f"The derivative of `{function}`{code} is 1/sqrt(1 - c**2): infinite where its input is -1 or 1 "
            f"({p.description}). Keep the input inside (-1, 1) where the gradient is taken: "
            f"`{function}(jnp.clip(c, -1 + eps, 1 - eps))` (`c` the value given to it, eps e.g. 1e-6)." + SUGGESTION
        )
    if p.derivative and expression.startswith("jnp.arctan2(") and _zero_operand(p):
        return (
            f"The derivative of `jnp.arctan2(y, x)`{code} is (x, -y) / (x**2 + y**2): 0/0 at y = x = 0 "
            f"({p.description}). Use the double where on its inputs: `ok = x**2 + y**2 > 0; jnp.where(ok, "
            "jnp.arctan2(jnp.where(ok, y, 0.0), jnp.where(ok, x, 1.0)), 0.0)`." + SUGGESTION
        )
    if sqrt_made and p.derivative and _zero_operand(p):
        what = f"`{library}`" if library else "the square root"
        if library == "jnp.linalg.norm" or any(
            op.made_by in _SQRT_LIKE and {"reduce_sum", "dot_general"} & set(op.made_from) for op in p.operands
        ):  # a norm: the square root of a sum of squares
            safe = (
                "Use the double-where safe norm, so that the gradient is finite at 0 too (`v` the vector "
                "whose norm is taken): `ss = jnp.sum(v**2, axis=-1); jnp.where(ss > 0, jnp.sqrt(jnp.where(ss > 0, "
                "ss, 1.0)), 0.0)`."
            )
        else:  # an elementwise square root
            safe = (
                f"Use the double where, so that the gradient is finite at 0 too (`v` the value given to {what} "
                "there): `jnp.where(v > 0, jnp.sqrt(jnp.where(v > 0, v, 1.0)), 0.0)`"
                + (
                    " - or `jnp.abs(...)` for the square root of a square."
                    if re.search(r"\*\*\s*2\b", expression)
                    else "."
                )
            )
        return f"The derivative of {what}{code} at 0 is 0.5/sqrt(0) = inf ({p.description}). {safe}" + SUGGESTION
    if p.primitive == "cholesky" and not p.derivative:
        what = f"`{library}`" if library else "`cholesky`"
        matrix = p.operands[0].value if p.operands else "a matrix that is not positive definite"
        fix = (
            f"{what}{code} got {matrix}; a Cholesky factorization needs a positive definite matrix. Add a "
            "small multiple of the identity before factorizing (`K` the matrix given there): "
        )
        if p.jitter:
            return (
                fix + f"`jnp.linalg.cholesky(K + {p.jitter} * jnp.eye(K.shape[-1]))`. Tried on these values: with "
                f"{p.jitter} added to the diagonal, the same `cholesky` gives finite values."
            )
        return fix + "`jnp.linalg.cholesky(K + eps * jnp.eye(K.shape[-1]))`." + SUGGESTION
    if p.primitive in ("sqrt", "rsqrt") and not p.derivative:
        return _root_fix(report, p, library, code)
    if p.primitive == "pow" and not p.derivative:
        return _power_fix(report, p, code)
    if p.primitive in ("div", "rem") and len(p.operands) == 2 and p.operands[1].value in ("0.0", "-0.0", "0"):
        den = p.operands[1]
        if p.derivative:
            return ""  # a derivative's own division: the cases above name the ones known
        lost = lost_constant_cause(p)  # its constant in a value the dtype holds did not make it finite
        choice = choose(report, p, ["guard"], naive=("eps", "constant") if lost else ("eps",))
        what = (
            _lost_zero(p, lost)
            if lost
            else f"The denominator{code} is a sum that was 0 ({p.description}) - e.g. a mask with no entry set, "
            "an all-padding batch."
            if den.made_by in ("reduce_sum", "add", "add_any") and not _library_owned(library)
            else f"The denominator{code} was 0 ({p.description})."
        )
        return _guarded_division(choice, library, what)
    if p.primitive == "log" and p.operands and (not library or library.startswith("jax.nn.")):
        # the log of a probability computed first: it rounds to 0 long before its logarithm is out of range
        op = p.operands[0]
        when = ""
        if op.made_by == "logistic":
            written = "`jax.nn.log_sigmoid(z)` for `jnp.log(jax.nn.sigmoid(z))`"
        elif op.made_by == "sub" and "logistic" in op.made_from:
            written = "`jax.nn.log_sigmoid(-z)` for `jnp.log(1 - jax.nn.sigmoid(z))`"
            if op.dtype in _UNDERFLOW:
                when = f" (1 - sigmoid(z) is 0 in {op.dtype} from z = {_UNDERFLOW[op.dtype]} on)"
        elif op.made_by == "div" and op.made_from[:1] == ["exp"]:
            written = "`jax.nn.log_softmax(z)` for `jnp.log(jax.nn.softmax(z))` (or of exp(z) / sum(exp(z)))"
        else:
            written = ""
        if written:
            return (
                f"`log` got {op.value}{code}: a probability computed from logits rounded to 0 in {op.dtype}{when}, "
                f"and its log is -inf. Compute the log-probability from the logits `z` directly: {written}; it "
                "stays finite, and so does its gradient." + SUGGESTION
            )
    # `log`, `log1p`, `acos`, ... made under jvp are the primal's: no derivative computes them (theirs divide)
    if p.primitive == "log" and not library:
        got = _operand_float(p)
        order = ["eps", "floor"] if got is not None and got >= 0 else ["clamp", "floor"]
        choice = choose(report, p, order, {"clamp": "log(0) is -inf", "eps": "a negative value stays negative"})
        said = f"`log` got {p.operands[0].value if p.operands else 'a value out of its domain'}{code}"
        if choice.offered is None:
            return f"{said}. {choice.tried_text}" if choice.tried_text else ""
        failed = f" {choice.failed_text}" if choice.failed_text else ""
        return (
            f"{said}: with `v` the value given to `log` there, use `jnp.log({choice.offered.code})`, or select "
            "with the double where (`jnp.where(v > 0, jnp.log(jnp.where(v > 0, v, 1.0)), fallback)`) if values "
            f"at or below 0 should not count. {choice.tried_text}{failed}"
        )
    if p.primitive in _DOMAIN and p.phase == "forward" and not library:
        return _domain_fix(report, p, code)
    if p.phase == "forward" and not p.derivative and p.primitive in FORWARD_CAUSES:
        return f"`{p.primitive}`: typically {FORWARD_CAUSES[p.primitive]}."
    return ""
