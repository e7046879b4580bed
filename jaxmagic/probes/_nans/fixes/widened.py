"""A line computed in float32: the fix of a half-precision overflow in the derivative JAX computed for it.

``jax.grad`` of ``jax.nn.log_softmax(x).sum()`` with ``x`` float16 of 65,546 entries: the forward values fit
float16, but the backward pass sums 65,546 cotangents in float16 (above its 65,504), gets inf, and
``inf * 0`` is NaN (jax-ml/jax#40409). No rewrite of the operation helps: the user does not write the
derivative. What helps is the line computed in float32 - ``jax.nn.log_softmax(x.astype(jnp.float32))``,
its gradient coming back to ``x`` in float16 through the cast.

That is tried here without running the user's Python: the searched program is evaluated again with every
equation of the user's line - forward and derivative, and what a call on that line runs - computing in
float32 on its half-precision inputs (a dtype in its parameters widened too), and the values leaving the
line cast back to the dtype the program gave them, as the cast at the line's edge would.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from jaxmagic._jax import jaxpr_parts
from jaxmagic._jax.jaxpr_interpreter import Interpreter, Level, Position
from jaxmagic._jax.types import Atom, Equation, Jaxpr, Program, Value
from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.value_fixes import (
    MAX_CALL_EQUATIONS,
    FixTrial,
    bad_text,
    calls_python,
    equation_count,
)
from jaxmagic.report import SourceLine

if TYPE_CHECKING:
    from jaxmagic.probes._nans.search.given import LineOf

HALF = ("float16", "bfloat16")
_MODULES = ("jax", "jnp", "np", "lax", "numpy", "nn", "optax", "nnx", "eqx", "hk", "math")


def _half(dtype: object) -> bool:
    return str(dtype) in HALF


class _Widened(Interpreter):
    """Evaluates a program with the equations ``on_line`` tells computing in float32. A level's state:
    whether it is inside the line (a call of the line opened: all of it computes in float32)."""

    def __init__(self, on_line: Callable[[Equation, tuple[Position, ...]], bool]) -> None:
        self.on_line = on_line
        self.widened = 0  # equations computed in float32

    def run(self, program: Program, args: list[Value]) -> list[Value]:
        jaxpr, consts = jaxpr_parts.closed_parts(program)
        return _cast_back(jaxpr, self.evaluate(jaxpr, consts, args, state=False))

    def outputs(self, level: Level, eqn: Equation, inputs: list[Value]) -> list[Value]:
        path = level.path
        widen = level.state or self.on_line(eqn, path)
        subs = jaxpr_parts.sub_jaxprs(eqn)
        if widen and not subs:
            outputs = jaxpr_parts.bind_equation(_widened_params(eqn), [_up(v) for v in inputs])
            self.widened += 1
            return outputs
        if subs and (widen or self._holds_line(eqn, path)):
            if len(subs) != 1 or eqn.primitive.name in ("scan", "while", "cond"):
                raise NotImplementedError(f"`{eqn.primitive.name}` on the line is not opened to widen it")
            inner, inner_consts = jaxpr_parts.closed_parts(subs[0])
            if len(inner.invars) != len(inputs) or len(inner.outvars) != len(eqn.outvars):
                raise NotImplementedError(f"`{eqn.primitive.name}` does not pass its inputs through")
            given = inputs if widen else [_as(v, var) for v, var in zip(inputs, inner.invars)]
            results = self.evaluate(inner, inner_consts, given, (*path, Position(eqn, "call")), state=widen)
            return results if widen else _cast_back(inner, results)
        # off the line: what the line gives back is cast to the dtype the program gave it
        return jaxpr_parts.bind_equation(eqn, [_as(v, var) for v, var in zip(inputs, eqn.invars)])

    def _holds_line(self, eqn: Equation, path: tuple[Position, ...]) -> bool:
        """Whether an equation of the line sits in ``eqn``'s sub-programs, at any depth."""
        inside = (*path, Position(eqn, "call"))
        for sub in jaxpr_parts.sub_jaxprs(eqn):
            for e in jaxpr_parts.closed_parts(sub)[0].eqns:
                if self.on_line(e, inside) or (jaxpr_parts.sub_jaxprs(e) and self._holds_line(e, inside)):
                    return True
        return False


def _cast_back(jaxpr: Jaxpr, results: list[Value]) -> list[Value]:
    """A level's results outside the line: each in the dtype the program gave it."""
    return [jnp.asarray(_as(v, var)) for v, var in zip(results, jaxpr.outvars)]


def _up(value: Value) -> Value:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        dtype = np.asarray(value).dtype
    if _half(dtype):
        return np.asarray(value).astype(np.float32) if isinstance(value, np.ndarray) else value.astype(np.float32)
    return value


def _as(value: Value, var: Atom) -> Value:
    """``value`` in the dtype the program gave ``var`` (a literal keeps its own)."""
    wanted = getattr(getattr(var, "aval", None), "dtype", None)
    dtype = getattr(value, "dtype", None)
    if wanted is None or dtype is None or dtype == wanted or jaxpr_parts.is_literal(var):
        return value
    return value.astype(wanted)


def _widened_params(eqn: Equation) -> Equation:
    """``eqn`` with every half-precision dtype among its parameters (``convert_element_type``'s
    ``new_dtype``, ``dot_general``'s ``preferred_element_type``) made float32."""
    changed = {k: np.dtype(np.float32) for k, v in eqn.params.items() if _is_half_dtype(v)}
    return jaxpr_parts.with_params(eqn, **changed) if changed else eqn


def _is_half_dtype(value: object) -> bool:
    try:
        return isinstance(value, np.dtype) and _half(value)
    except TypeError:
        return False


def in_float32_code(expression: str, dtype: str) -> str:
    """The line's expression with its one half-precision input cast: ``jax.nn.log_softmax(x)`` ->
    ``jax.nn.log_softmax(x.astype(jnp.float32))``; "" when the expression names no single plain variable."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return ""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            values = [*node.args, *(k.value for k in node.keywords)]
            names += [v.id for v in values if isinstance(v, ast.Name) and v.id not in _MODULES]
        elif isinstance(node, ast.BinOp):
            names += [v.id for v in (node.left, node.right) if isinstance(v, ast.Name) and v.id not in _MODULES]
    names = list(dict.fromkeys(names))
    if len(names) != 1:
        return ""

    class _Cast(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id != names[0] or not isinstance(node.ctx, ast.Load):
                return node
            return ast.parse(f"{node.id}.astype(jnp.float32)", mode="eval").body

    return ast.unparse(_Cast().visit(tree))


def try_line_in_float32(
    line: SourceLine, code: str, line_of: LineOf, program: Program, values: list[Value], before: list[Value] | None
) -> FixTrial:
    """The searched ``program`` evaluated on ``values`` with every equation of the user's ``line`` (``line_of``:
    an equation and its path -> its user line) computing in float32, its results cast back where they leave
    the line: are the program's outputs finite? ``code``: the fix as written. Never raises."""
    trial = FixTrial(FixKey.LINE_IN_FLOAT32, code)
    jaxpr = jaxpr_parts.closed_parts(program)[0]
    why = ""
    if before is None:
        why = "the program could not be evaluated"
    elif calls_python(jaxpr):
        why = f"the program calls back into Python (`{calls_python(jaxpr)}`), which a trial must not run"
    elif equation_count(jaxpr) > MAX_CALL_EQUATIONS:
        why = f"the program has more than {MAX_CALL_EQUATIONS} operations"
    if why:
        trial.result = f"not tried: {why}"
        return trial

    def on_line(eqn: Equation, path: tuple[Position, ...]) -> bool:
        made = line_of(eqn, path)
        return made is not None and (made.filename, made.lineno) == (line.filename, line.lineno)

    widened = _Widened(on_line)
    try:
        outputs = widened.run(program, list(values))
    except Exception as error:
        trial.result = f"not tried: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return trial
    trial.tried = True
    bad = bad_text(outputs)
    if bad:
        bad += f" ({bad_text(before or []).removeprefix('still ')} without the fix)"
    trial.result = f"{widened.widened} operations of the line in float32"
    trial.call_result = bad or "finite"
    trial.finite = not bad
    return trial
