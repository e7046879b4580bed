"""The fix for a NaN, matched to the operation that produced it and the values it saw.

Each rule names only what is in the program (the line, the library function,
the dtype, the masked rows) and applies only to what was seen: a fix for
another bug is worse than none, so ``nan_fix`` returns "" when no rule fits.
"""

from __future__ import annotations

import inspect
import math
import re
import sys

from jaxmagic.probes._support.nan.producer import NanProducer
from jaxmagic.probes.nans.causes import FORWARD_CAUSES, overflowed
from jaxmagic.probes.nans.report import NanReport
from jaxmagic.report import SourceLine

_ROW_FUNCTIONS = ("jax.nn.logsumexp", "jax.nn.log_softmax", "jax.nn.softmax", "jax.scipy.special.logsumexp")
_SQRT_LIKE = ("sqrt", "rsqrt", "pow")
SUGGESTION = " (A suggestion: jaxmagic did not try it.)"


def _zero_operand(p: NanProducer) -> bool:
    return any(op.value in ("0.0", "-0.0", "0") for op in p.operands)


def _root_fix(p: NanProducer, library: str, code: str) -> str:
    """``sqrt``/``rsqrt`` out of its domain: at 0 (``rsqrt``: inf) the input needs an epsilon - the layer's
    own ``eps`` when a library's normalisation layer made it - below 0 a clamp (and, for ``rsqrt``, the
    epsilon too: ``rsqrt(0)`` is inf). Each fix is tried on the value the operation got."""
    got = _operand_float(p)
    if got is None:
        return ""
    eps_parameter = _layer_epsilon(library)
    eps = eps_parameter[1] if eps_parameter and isinstance(eps_parameter[1], float) and eps_parameter[1] > 0 else 1e-6
    fixed = max(got, 0.0) + eps if p.primitive == "rsqrt" else max(got, 0.0)
    result = 1 / math.sqrt(fixed) if p.primitive == "rsqrt" else math.sqrt(fixed)
    tried = f" Tried on the value it got: {p.primitive}({fixed:g}) = {result:.6g}, finite."
    if eps_parameter is not None and p.primitive == "rsqrt" and got >= 0:
        name, default = eps_parameter
        given = f" (its default: {default:g})" if isinstance(default, float) else ""
        return (
            f"`{p.primitive}` inside `{library}` got {got:g}{code}: 1/sqrt(0) is inf. The variance of a row whose "
            f"values are all equal is 0, and the layer's `{name}` is what keeps it finite: pass a positive "
            f"`{name}`{given} instead of 0." + tried
        )
    if got >= 0:  # rsqrt(0): inf (sqrt(0) makes no NaN)
        return (
            f"`rsqrt` got {got:g}{code}: 1/sqrt(0) is inf. Add a small epsilon to its input (`v` the value "
            f"given to it): `jax.lax.rsqrt(v + {eps:g})`." + tried
        )
    clamp = f"jnp.maximum(v, 0.0) + {eps:g}" if p.primitive == "rsqrt" else "jnp.maximum(v, 0.0)"
    why = " (not just the clamp: rsqrt(0) is inf)" if p.primitive == "rsqrt" else ""
    return (
        f"`{p.primitive}` got {got:g}, a negative value{code}: with `v` the value given to it, use "
        f"`{clamp}`{why}, or find why it goes negative (a variance computed as E[x**2] - E[x]**2 can round "
        "below 0: subtract the mean first)." + tried
    )


def _operand_float(p: NanProducer) -> float | None:
    try:
        return float(p.operands[0].value) if p.operands else None
    except (TypeError, ValueError):
        return None


def _library_object(library: str, stop_at_class: bool) -> object | None:
    """The object a public dotted name (``optax.softmax_cross_entropy``, ``haiku.LayerNorm.__call__``)
    names, read from the modules already imported (nothing is imported); with ``stop_at_class``, the class
    of a method. None when not found."""
    parts = library.split(".")
    for end in range(len(parts) - 1, 0, -1):
        value: object = sys.modules.get(".".join(parts[:end]))
        if value is None:
            continue
        for name in parts[end:]:
            if stop_at_class and isinstance(value, type):
                break
            value = getattr(value, name, None)
        return value
    return None


def _parameters(value: object) -> dict:
    try:
        return dict(inspect.signature(value).parameters) if callable(value) else {}
    except (TypeError, ValueError):
        return {}


def _layer_epsilon(library: str) -> tuple[str, object] | None:
    """``(name, default)`` of the parameter of a library's layer (``haiku.LayerNorm``,
    ``equinox.nn.LayerNorm.__call__``, ``flax.nnx.LayerNorm``) that keeps its 1/sqrt finite: ``eps`` or
    ``epsilon``, read from the class's signature; None when the function is no such layer's."""
    layer = _library_object(library, stop_at_class=True)
    parameters = _parameters(layer) if isinstance(layer, type) else {}
    for name in ("eps", "epsilon"):
        if name in parameters:
            default = parameters[name].default
            return name, default if default is not inspect.Parameter.empty else None
    return None


def _written_inf_fix(p: NanProducer, library: str, code: str) -> str:
    """A NaN made from an inf the user wrote as a mask's fill (``jnp.where(valid, logits, -jnp.inf)``):
    the library function's own mask argument when it has one (optax's ``where=``), and a finite fill."""
    written = p.written_inf
    if written is None:
        return ""
    dtype = next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "float32")
    parts = [
        f"Your line {written.lineno} (`{written.code.strip()}`) wrote an inf that `{p.primitive}`"
        f"{' inside `' + library + '`' if library else ''} turned into NaN{code}: no operation made the inf."
    ]
    if library and "where" in _parameters(_library_object(library, stop_at_class=False)):
        parts.append(
            f"`{library}` takes the mask itself: pass it as `where=` (e.g. `{library}(logits, labels, "
            "where=valid)`) and leave the values finite; masked entries are then left out of the sum."
            " (Not tried: it changes your line.)"
        )
    tried = ""
    if p.primitive == "mul":
        tried = f" Tried on the values it got: 0.0 * finfo({dtype}).min = -0.0, finite."
    parts.append(
        f"Or fill with a finite value instead: `jnp.finfo(jnp.{dtype}).min` for `-jnp.inf` in your line.{tried}"
    )
    return " ".join(parts)


def _inf_line(p: NanProducer) -> SourceLine | None:
    """The user's line among the producer's where ``-inf`` is written (the mask fill), if one is."""
    for line in (p.written_inf, p.discarded_line, p.nan_maker_line, p.line):
        if line is not None and "inf" in (line.code or ""):
            return line
    return None


# The logit from which 1 - sigmoid(z) rounds to 0 (measured: 1 - sigmoid(17.0) == 0 in float32)
_UNDERFLOW = {"float32": 17, "float64": 37}

_HALF = ("float16", "bfloat16")


def nan_fix(report: NanReport) -> str:
    """The fix for this NaN: chosen by the producing operation and the input values it saw, naming only
    what is in the program; "" when no fix is known for what was seen (never a fix for another bug)."""
    p = report.producer
    if p is None:
        if report.primitive in FORWARD_CAUSES and report.phase == "forward":
            return (
                f"`{report.primitive}` produced {report.value or 'NaN'}: typically {FORWARD_CAUSES[report.primitive]}."
            )
        return ""
    overflow = overflowed(p) if p.phase == "forward" and not p.derivative else ""
    if overflow and any(op.dtype in _HALF for op in p.operands):
        half = next(op.dtype for op in p.operands if op.dtype in _HALF)
        code = f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""
        return (
            f"`{p.primitive}`{code} overflowed {half}. Compute it in float32 - `.astype(jnp.float32)` on its "
            f"inputs, and back to {half} after if you need it - or scale the values down first." + SUGGESTION
        )
    library = p.library_function
    code = f" (`{p.expression or p.line.code}`)" if p.line is not None and p.line.code else ""
    if p.written_inf is not None and not p.neg_inf_rows:
        return _written_inf_fix(p, library, code)
    if p.neg_inf_rows and p.nan_maker_library in _ROW_FUNCTIONS:  # -inf made elsewhere, NaN in the row function
        library = p.nan_maker_library
        code = f" (`{p.nan_maker_line.code}`)" if p.nan_maker_line is not None and p.nan_maker_line.code else ""
    if p.neg_inf_rows and (library in _ROW_FUNCTIONS or p.primitive in ("sub", "log", "exp", "mul")):
        where = _inf_line(p)
        fill = f" - the `-jnp.inf` in `{where.code}`" if where is not None else ""
        name = f"`{library}`" if library else "the max-subtracting reduction"
        dtype = next((op.dtype for op in p.operands if op.dtype.startswith(("float", "bfloat"))), "float32")
        in_what = "its gradient" if p.phase == "backward" or p.derivative else "its value"
        return (
            f"{name}{code} got {p.neg_inf_rows} in which every entry is -inf (a fully masked row): there the "
            f"max it subtracts is -inf too, and -inf - (-inf) is NaN (in {in_what}). Fill masked entries with a large finite "
            f"negative number instead of -inf{fill} (e.g. `jnp.finfo(jnp.{dtype}).min`), or leave rows with no "
            "unmasked entry out of the loss." + SUGGESTION
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
        return _root_fix(p, library, code)
    if p.primitive in ("div", "rem") and len(p.operands) == 2 and p.operands[1].value in ("0.0", "-0.0", "0"):
        den = p.operands[1]
        if p.derivative:
            return ""  # a derivative's own division: the cases above name the ones known
        if den.made_by in ("reduce_sum", "add", "add_any"):
            return (
                f"The denominator{code} is a sum that was 0 ({p.description}) - e.g. a mask with no entry set, "
                "an all-padding batch. Guard that denominator: `den = ...; num / jnp.maximum(den, 1)`, or "
                "`jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)`." + SUGGESTION
            )
        return (
            f"The denominator{code} was 0 ({p.description}): guard it, "
            "`jnp.where(den != 0, num / jnp.where(den != 0, den, 1.0), 0.0)`." + SUGGESTION
        )
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
    if p.primitive in ("log", "log1p") and not library:
        return (
            f"`{p.primitive}` got {p.operands[0].value if p.operands else 'a value out of its domain'}{code}: "
            f"with `v` the value given to `{p.primitive}` there, clamp it (`jnp.{p.primitive}(jnp.maximum(v, tiny))`) "
            f"or select with the double where (`jnp.where(v > 0, jnp.{p.primitive}(jnp.where(v > 0, v, 1.0)), "
            "fallback)`)." + SUGGESTION
        )
    if p.phase == "forward" and not p.derivative and p.primitive in FORWARD_CAUSES:
        return f"`{p.primitive}`: typically {FORWARD_CAUSES[p.primitive]}."
    return ""
