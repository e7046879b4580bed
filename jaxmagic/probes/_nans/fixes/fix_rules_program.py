"""NaN fix rules decided by what the program did around the operation: a half-precision overflow, an inf
written as a mask's fill, a fully masked row, a discarded branch, a derivative at a point where it is
infinite, a matrix that is not positive definite, a probability whose log was taken.

Each rule is declared once (``FixRule``) beside the function that words it; ``fixes.RULES`` orders them.
"""

from __future__ import annotations

import re

from jaxmagic.probes._nans.causes import overflowed
from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.fix_rule import (
    HALF,
    SUGGESTION,
    FixRule,
    as_called,
    code_of,
    float_dtype,
    zero_operand,
)
from jaxmagic.probes._nans.fixes.library_parameters import library_object, parameters_of
from jaxmagic.probes._nans.fixes.tried_fixes import choose, values_of
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.search.found import NanProducer
from jaxmagic.report import SourceLine

ROW_FUNCTIONS = ("jax.nn.logsumexp", "jax.nn.log_softmax", "jax.nn.softmax", "jax.scipy.special.logsumexp")
SQRT_LIKE = ("sqrt", "rsqrt", "pow")
# The logit from which 1 - sigmoid(z) rounds to 0 (measured: 1 - sigmoid(17.0) == 0 in float32)
_UNDERFLOW = {"float32": 17, "float64": 37}


def _derivative_overflow_fix(report: NanReport, p: NanProducer) -> str:
    """An operation of the backward pass that overflowed half precision (the sum of 65,546 cotangents in
    float16's log_softmax derivative, jax#40409): no guard the user writes reaches it; their line computed in
    float32 does, tried by evaluating the program again with that line's operations in float32."""
    half = next(op.dtype for op in p.operands if op.dtype in HALF)
    choice = choose(report, p, [FixKey.LINE_IN_FLOAT32])
    trial = next(t for t in p.fix_trials if t.key == FixKey.LINE_IN_FLOAT32)
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


DERIVATIVE_OVERFLOW = FixRule(
    key="derivative_overflow",
    applies=lambda p: (
        p.derivative and p.phase != "forward" and any(t.key == FixKey.LINE_IN_FLOAT32 for t in p.fix_trials)
    ),
    words=_derivative_overflow_fix,
    says="in the backward pass",
    tries=(FixKey.LINE_IN_FLOAT32,),
)


def _half_overflow_fix(report: NanReport, p: NanProducer) -> str:
    """A forward operation whose result is above its half-precision dtype's largest value: computed in
    float32, offered when that trial was finite (and said whether the result fits back)."""
    half = next(op.dtype for op in p.operands if op.dtype in HALF)
    choice = choose(report, p, [FixKey.FLOAT32])
    said = f"`{p.primitive}`{code_of(p)} overflowed {half}."
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


HALF_OVERFLOW = FixRule(
    key="half_overflow",
    applies=lambda p: (
        p.phase == "forward" and not p.derivative and any(op.dtype in HALF for op in p.operands) and bool(overflowed(p))
    ),
    words=_half_overflow_fix,
    says="overflowed",
    tries=(FixKey.FLOAT32,),
)


def _written_inf_fix(report: NanReport, p: NanProducer) -> str:
    """A NaN made from an inf the user wrote as a mask's fill (``jnp.where(valid, logits, -jnp.inf)``):
    the library function's own mask argument when it has one (optax's ``where=``), and a finite fill -
    offered when it made the operation finite on the values it got."""
    written = p.written_inf
    assert written is not None, "said only of a producer that got a written inf"
    library, code = p.library_function, code_of(p)
    if p.written_inf_by:  # the library's own code wrote it (a log-probability outside the support): not a fill of yours
        same_call = p.line is not None and (p.line.filename, p.line.lineno) == (written.filename, written.lineno)
        # what the line called (`Gamma.log_prob`), not the decorator inside it that wrote the inf (validate_sample)
        writer = library if library and same_call else p.written_inf_by
        return (
            f"`{writer}`, called on your line {written.lineno} (`{written.code.strip()}`), returned an "
            f"inf that `{p.primitive}` turned into NaN{code}: no operation made the inf, the library's code wrote it "
            f"(an input outside what it accepts - a value outside a distribution's support, say). Keep the values "
            f"given to {as_called(writer)} inside what it accepts. " + _finite_fill_tried(report, p)
        ).rstrip()
    if "inf" not in written.code:  # the line holds no inf: what it called wrote it, out of the frames JAX kept
        return (
            f"An inf written into the program (a constant, made by no operation) in what your line {written.lineno} "
            f"(`{written.code.strip()}`) called reached `{p.primitive}`"
            f"{' inside `' + library + '`' if library else ''}, which turned it into NaN{code}: the values given "
            "there are outside what the called code accepts. " + _finite_fill_tried(report, p)
        ).rstrip()
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
            report,
            p,
            f"Or fill with a finite value instead: `jnp.finfo(jnp.{float_dtype(p)}).min` for `-jnp.inf` in your line.",
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
    choice = choose(report, p, [FixKey.FINITE_FILL])
    if choice.offered is not None:
        return f"{advice} " + choice.tried_text.replace(
            ": `", ", the infinity it got replaced by the finite extreme: `", 1
        )
    return f"A finite fill was tried too and is not offered: {choice.tried_text}" if choice.tried_text else ""


WRITTEN_INF = FixRule(
    key="written_inf",
    applies=lambda p: p.written_inf is not None and not p.neg_inf_rows,
    words=_written_inf_fix,
    says="into NaN",
    tries=(FixKey.FINITE_FILL,),
)


def _inf_line(p: NanProducer) -> SourceLine | None:
    """The user's line among the producer's where ``-inf`` is written (the mask fill), if one is."""
    for line in (p.written_inf, p.discarded_line, p.nan_maker_line, p.line):
        if line is not None and "inf" in (line.code or ""):
            return line
    return None


def _masked_row_fix(report: NanReport, p: NanProducer) -> str:
    """A max-subtracting row function (softmax, logsumexp) given a row that is all -inf: a finite fill of
    the masked entries, offered when it made the operation finite."""
    library, code = p.library_function, code_of(p)
    if p.nan_maker_library in ROW_FUNCTIONS:  # -inf made elsewhere, NaN in the row function
        library = p.nan_maker_library
        code = f" (`{p.nan_maker_line.code}`)" if p.nan_maker_line is not None and p.nan_maker_line.code else ""
    where = _inf_line(p)
    fill = f" - the `-jnp.inf` in `{where.code}`" if where is not None else ""
    name = f"`{library}`" if library else "the max-subtracting reduction"
    in_what = "its gradient" if p.phase == "backward" or p.derivative else "its value"
    said = (
        f"{name}{code} got {p.neg_inf_rows} in which every entry is -inf (a fully masked row): there the "
        f"max it subtracts is -inf too, and -inf - (-inf) is NaN (in {in_what})."
    )
    choice = choose(report, p, [FixKey.FINITE_FILL])
    if choice.tried_text and choice.offered is None:  # a finite fill leaves it non-finite: not offered
        return f"{said} Leave rows with no unmasked entry out of the loss. A finite fill is not offered: {choice.tried_text}"
    tried = f" {choice.tried_text}" if choice.offered is not None else SUGGESTION
    return (
        f"{said} Fill masked entries with a large finite negative number instead of -inf{fill} (e.g. "
        f"`jnp.finfo(jnp.{float_dtype(p)}).min`), or leave rows with no unmasked entry out of the loss.{tried}"
    )


MASKED_ROW = FixRule(
    key="masked_row",
    applies=lambda p: (
        bool(p.neg_inf_rows)
        and (
            p.nan_maker_library in ROW_FUNCTIONS
            or p.library_function in ROW_FUNCTIONS
            or p.primitive in ("sub", "log", "exp", "mul")
        )
    ),
    words=_masked_row_fix,
    says="every entry is -inf (a fully masked row)",
    tries=(FixKey.FINITE_FILL,),
)


def _discarded_branch_fix(report: NanReport, p: NanProducer) -> str:
    """A NaN made in the branch a ``jnp.where`` discards, reaching the result through its gradient: the
    double where."""
    prim = p.primitive
    at_where = f" (`{p.discarded_line.code}`)" if p.discarded_line is not None and p.discarded_line.code else ""
    return (
        f"`{prim}` made {p.value} in the branch `{p.discarded_by}` discarded{code_of(p)}; its gradient is still "
        "computed and multiplied by zero (0 * NaN = NaN). Use the double where: make the input of "
        f"`{prim}` safe in the discarded case too - with `ok` the condition of the `{p.discarded_by}`{at_where} "
        f"and `v` the value given to `{prim}`: `jnp.where(ok, jnp.{prim}(jnp.where(ok, v, 1.0)), 0.0)`." + SUGGESTION
    )


DISCARDED_BRANCH = FixRule(
    key="discarded_branch",
    applies=lambda p: bool(p.discarded_by) and not p.library_function,
    words=_discarded_branch_fix,
    says="Use the double where",
)


def _sqrt_made(p: NanProducer) -> bool:
    """The operation is a square root, or got a value one made."""
    return p.primitive in SQRT_LIKE or any(op.made_by in SQRT_LIKE for op in p.operands)


def _expression(p: NanProducer) -> str:
    return p.expression or (p.line.code.strip() if p.line is not None else "")


def _line_code(p: NanProducer) -> str:
    """The whole line the operation is on (the expression may be only a part of it: `jnp.log(p)`)."""
    return p.line.code if p.line is not None else _expression(p)


def _std_at_zero_fix(report: NanReport, p: NanProducer) -> str:
    return (
        f"The gradient of `jnp.std`{code_of(p)} where the variance is 0 (all entries equal) is 0.5/sqrt(0) = inf "
        f"({p.description}). Take the square root of the variance kept away from 0, with the same arguments "
        "as the `jnp.std` call: `jnp.sqrt(jnp.var(..., axis=...) + eps)`, or the double where on the variance."
        + SUGGESTION
    )


STD_AT_ZERO = FixRule(
    key="std_at_zero",
    applies=lambda p: p.library_function == "jnp.std" or (p.library_function == "jnp.var" and _sqrt_made(p)),
    words=_std_at_zero_fix,
    says="where the variance is 0",
)


def _arc_derivative_fix(report: NanReport, p: NanProducer) -> str:
    function = _expression(p).split("(")[0]
    return (
        f"The derivative of `{function}`{code_of(p)} is 1/sqrt(1 - c**2): infinite where its input is -1 or 1 "
        f"({p.description}). Keep the input inside (-1, 1) where the gradient is taken: "
        f"`{function}(jnp.clip(c, -1 + eps, 1 - eps))` (`c` the value given to it, eps e.g. 1e-6)." + SUGGESTION
    )


ARC_DERIVATIVE = FixRule(
    key="arc_derivative",
    applies=lambda p: p.derivative and _expression(p).startswith(("jnp.arccos(", "jnp.arcsin(")) and zero_operand(p),
    words=_arc_derivative_fix,
    says="is 1/sqrt(1 - c**2)",
)


def _arctan2_derivative_fix(report: NanReport, p: NanProducer) -> str:
    return (
        f"The derivative of `jnp.arctan2(y, x)`{code_of(p)} is (x, -y) / (x**2 + y**2): 0/0 at y = x = 0 "
        f"({p.description}). Use the double where on its inputs: `ok = x**2 + y**2 > 0; jnp.where(ok, "
        "jnp.arctan2(jnp.where(ok, y, 0.0), jnp.where(ok, x, 1.0)), 0.0)`." + SUGGESTION
    )


ARCTAN2_DERIVATIVE = FixRule(
    key="arctan2_derivative",
    applies=lambda p: p.derivative and _expression(p).startswith("jnp.arctan2(") and zero_operand(p),
    words=_arctan2_derivative_fix,
    says="0/0 at y = x = 0",
)


def _primal_tried(report: NanReport, p: NanProducer, what: str) -> tuple[str, str]:
    """(the fix's code, how it was tried) from the trials of the user's operation whose derivative this is
    (``primal_fixes``): the double where first, then the clamp; ("", "") when neither was tried finite."""
    choice = choose(report, p, [FixKey.DOUBLE_WHERE, FixKey.PRIMAL_CLAMP])
    if choice.offered is None:
        return "", choice.tried_text
    tried = choice.tried_text.replace(
        f"`{p.primitive}` ", f"{what} rewritten so (`v` = {p.primal_value or 'the value it got'}): ", 1
    )
    return choice.offered.code, tried


def _root_derivative_fix(report: NanReport, p: NanProducer) -> str:
    """The derivative of a square root at 0 (of a norm, or elementwise): the double where (or a clamp) at
    the user's square root - tried on the value it got, with its derivatives - never a guard inside JAX's
    derivative rule."""
    library = p.library_function
    what = f"`{library}`" if library else "the square root"
    code, tried = _primal_tried(report, p, f"`{p.primal or 'sqrt'}`")
    norm = library == "jnp.linalg.norm" or any(
        op.made_by in SQRT_LIKE and {"reduce_sum", "dot_general"} & set(op.made_from) for op in p.operands
    )
    if norm:  # a norm: the square root of a sum of squares
        safe = (
            "Use the double-where safe norm, so that the gradient is finite at 0 too (`v` the vector "
            "whose norm is taken): `ss = jnp.sum(v**2, axis=-1); jnp.where(ss > 0, jnp.sqrt(jnp.where(ss > 0, "
            "ss, 1.0)), 0.0)`"
            + (" - or, for the squared norm, `jnp.sum(v**2)` itself." if "** 2" in _line_code(p) else ".")
        )
    else:  # an elementwise square root
        square = re.search(r"\*\*\s*2\b|jnp\.square\(", _expression(p))
        written = code or "jnp.where(v > 0, jnp.sqrt(jnp.where(v > 0, v, 1.0)), 0.0)"
        safe = (
            f"Write it so that its derivative is finite at 0 too (`v` the value given to {what} there): `{written}`"
            + (" - or `jnp.abs(...)` for the square root of a square." if square else ".")
        )
    said = f"The derivative of {what}{code_of(p)} at 0 is 0.5/sqrt(0) = inf ({p.description})."
    if code:
        return f"{said} {safe} {tried}"
    return f"{said} {safe} {tried}".rstrip() if tried else f"{said} {safe}" + SUGGESTION


ROOT_DERIVATIVE = FixRule(
    key="root_derivative",
    applies=lambda p: _sqrt_made(p) and p.derivative and zero_operand(p) and p.primal in ("", "sqrt", "pow"),
    words=_root_derivative_fix,
    says="at 0 is 0.5/sqrt(0) = inf",
    tries=(FixKey.DOUBLE_WHERE, FixKey.PRIMAL_CLAMP),
)


def _log_derivative_fix(report: NanReport, p: NanProducer) -> str:
    """The derivative of ``log`` at 0 (1/0; 0/0 under ``x * log(x)``): the double where (or a floor) at the
    user's ``log``, tried on the value it got with its derivative."""
    code, tried = _primal_tried(report, p, "`log`")
    said = f"The derivative of `log`{code_of(p)} at 0 is 1/0 ({p.description}): `log` got {p.primal_value}."
    if not code:
        return f"{said} {tried}".rstrip()
    xlogy = (
        " For `x * jnp.log(x)`, `jax.scipy.special.xlogy(x, x)` is 0 at 0 with a finite gradient."
        if re.search(r"(\w+)\s*\*\s*jnp\.log\(\s*\1\s*\)", _line_code(p))
        else ""
    )
    return (
        f"{said} Write it so that its derivative is finite at 0 too (`v` the value given to `log`): `{code}`."
        f"{xlogy} {tried}"
    )


LOG_DERIVATIVE = FixRule(
    key="log_derivative",
    applies=lambda p: p.derivative and p.primal == "log",
    words=_log_derivative_fix,
    says="The derivative of `log`",
    tries=(FixKey.DOUBLE_WHERE, FixKey.PRIMAL_CLAMP),
)


def _cholesky_fix(report: NanReport, p: NanProducer) -> str:
    """A Cholesky factorization of a matrix that is not positive definite: a jitter on the diagonal, the
    smallest the search found to factor it when it tried."""
    library = p.library_function
    what = f"`{library}`" if library else "`cholesky`"
    matrix = p.operands[0].value if p.operands else "a matrix that is not positive definite"
    fix = (
        f"{what}{code_of(p)} got {matrix}; a Cholesky factorization needs a positive definite matrix. Add a "
        "small multiple of the identity before factorizing (`K` the matrix given there): "
    )
    if p.jitter:
        return (
            fix + f"`jnp.linalg.cholesky(K + {p.jitter} * jnp.eye(K.shape[-1]))`. Tried on these values: with "
            f"{p.jitter} added to the diagonal, the same `cholesky` gives finite values."
        )
    return fix + "`jnp.linalg.cholesky(K + eps * jnp.eye(K.shape[-1]))`." + SUGGESTION


CHOLESKY = FixRule(
    key="cholesky",
    applies=lambda p: p.primitive == "cholesky" and not p.derivative,
    words=_cholesky_fix,
    says="needs a positive definite matrix",
    tries=(FixKey.JITTER,),  # found by the search itself (``NanProducer.jitter``), not a ``FixTrial``
)


def _log_of_probability(p: NanProducer) -> str:
    """How to write the log-probability from logits for the probability ``log`` got ("" when its value
    was made otherwise)."""
    op = p.operands[0]
    if op.made_by == "logistic":
        return "`jax.nn.log_sigmoid(z)` for `jnp.log(jax.nn.sigmoid(z))`"
    if op.made_by == "sub" and "logistic" in op.made_from:
        return "`jax.nn.log_sigmoid(-z)` for `jnp.log(1 - jax.nn.sigmoid(z))`"
    if op.made_by == "div" and op.made_from[:1] == ["exp"]:
        return "`jax.nn.log_softmax(z)` for `jnp.log(jax.nn.softmax(z))` (or of exp(z) / sum(exp(z)))"
    return ""


def _log_probability_fix(report: NanReport, p: NanProducer) -> str:
    """The log of a probability computed first: it rounds to 0 long before its logarithm is out of range."""
    op = p.operands[0]
    when = ""
    if op.made_by == "sub" and op.dtype in _UNDERFLOW:
        when = f" (1 - sigmoid(z) is 0 in {op.dtype} from z = {_UNDERFLOW[op.dtype]} on)"
    return (
        f"`log` got {op.value}{code_of(p)}: a probability computed from logits rounded to 0 in {op.dtype}{when}, "
        f"and its log is -inf. Compute the log-probability from the logits `z` directly: {_log_of_probability(p)}; "
        "it stays finite, and so does its gradient." + SUGGESTION
    )


LOG_PROBABILITY = FixRule(
    key="log_probability",
    applies=lambda p: (
        p.primitive == "log"
        and bool(p.operands)
        and (not p.library_function or p.library_function.startswith("jax.nn."))
        and bool(_log_of_probability(p))
    ),
    words=_log_probability_fix,
    says="Compute the log-probability from the logits",
)
