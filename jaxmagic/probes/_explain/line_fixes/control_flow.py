"""Fitters for Python control flow on a traced value (``if``/``while``/``and``/``or``, ``assert``)
and for a traced value used as a Python int (``range(n)``, ``branches[i](x)``)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence

from jaxmagic.probes._support.fixes.fix import Fix, drop, static_fixes, written_fix
from jaxmagic.probes._support.fixes.line_code import LineCode, Resolve, Traced, uses

# -- Python control flow on a traced value --------------------------------------------------------


def _jnp_condition(line: LineCode, node: ast.expr) -> str:
    """The condition with ``and``/``or``/``not`` written as jax.numpy calls (they call bool())."""

    def write(n: ast.expr) -> str:
        if isinstance(n, ast.BoolOp):
            function = "jnp.logical_and" if isinstance(n.op, ast.And) else "jnp.logical_or"
            parts = [write(v) for v in n.values]
            text = parts[-1]
            for part in reversed(parts[:-1]):
                text = f"{function}({part}, {text})"
            return text
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return f"jnp.logical_not({write(n.operand)})"
        return line.text(n)

    return write(node)


def fit_bool(
    fixes: list[Fix], line: LineCode, names: set[str], traced: Sequence[Traced], resolve: Resolve
) -> list[Fix]:
    static = static_fixes(fixes)
    test = line.test
    if line.statement == "assert" and test is not None:
        return _assert_fixes(line, test, static)
    condition = _jnp_condition(line, test) if test is not None else "cond"
    if line.raises is not None and test is not None:  # `if bad: raise ...` is a check, like an assert
        return _raise_fixes(condition, line.raises, static)
    if line.statement == "while":
        return _while_fixes(fixes, line, condition)
    if test is None:
        found = _expression_fixes(fixes, line, names)
        if found is not None:
            return found
    if line.choice is not None and test is not None:
        return _choice_fixes(fixes, line.choice, condition)
    rewritten = []
    for fix in drop(fixes, "lax.while_loop"):
        if fix.use.startswith("jnp.where"):
            fix = dataclasses.replace(fix, use=f"jnp.where({condition}, a, b)")
        elif fix.use.startswith("lax.cond"):
            fix = dataclasses.replace(fix, use=f"lax.cond({condition}, true_fn, false_fn, operand)")
        rewritten.append(fix)
    return rewritten


_CHECKIFY_WHEN = (
    "keep the check in the compiled program: from jax.experimental import checkify; call the jitted "
    "function as checkify.checkify(f)(...), which returns (err, out); err.throw() raises your message"
)


def _assert_fixes(line: LineCode, test: ast.expr, static: list[Fix]) -> list[Fix]:
    """``assert cond, message`` on a traced value: a checkify check, or the assert before the call."""
    message = line.tree.body[0].msg  # type: ignore[attr-defined]
    said = line.text(message) if message is not None else '"..."'
    return [
        written_fix(f"checkify.check({line.text(test)}, {said})", _CHECKIFY_WHEN),
        Fix(
            "the assert outside the traced function",
            "the check is about the inputs: assert on them before the call, where they are concrete",
        ),
        *static,
    ]


def _raise_fixes(condition: str, raises: str, static: list[Fix]) -> list[Fix]:
    """``if bad: raise ...`` on a traced value: a checkify check of the opposite, or the check before the call."""
    return [
        written_fix(f"checkify.check(jnp.logical_not({condition}), {raises})", _CHECKIFY_WHEN),
        Fix(
            "the check outside the traced function",
            "the check is about the inputs: test them before the call, where they are concrete",
        ),
        *static,
    ]


def _while_fixes(fixes: list[Fix], line: LineCode, condition: str) -> list[Fix]:
    """A ``while`` on a traced value: ``lax.while_loop``, written out when the loop updates one variable."""
    others = [f for f in fixes if not f.use.startswith(("jnp.where", "lax.cond", "lax.while_loop"))]
    if line.update is not None and line.test is not None:
        name, value = line.update
        if uses(line.test, {name}):
            written = f"{name} = lax.while_loop(lambda {name}: {condition}, lambda {name}: {value}, {name})"
            return [
                written_fix(written, _when(fixes, "lax.while_loop") + ": the loop's one variable is its state")
            ] + others
    return [Fix(f"lax.while_loop(lambda state: {condition}, body_fn, init)", _when(fixes, "lax.while_loop"))] + others


def _expression_fixes(fixes: list[Fix], line: LineCode, names: set[str]) -> list[Fix] | None:
    """A line with no ``if``/``while``: its ``a if cond else b`` or its ``and``/``or``/``not`` on a traced
    value written with JAX; None when it has neither."""
    chosen = _conditional_expression(line, names)
    if chosen is not None:
        written, node = chosen
        branches = f"lambda: {line.text(node.body)}, lambda: {line.text(node.orelse)}"
        cond = _replaced(line, node, f"lax.cond({_jnp_condition(line, node.test)}, {branches})")
        return [
            written_fix(
                written,
                "the conditional expression only chooses a value: both are computed, one is kept elementwise",
            ),
            written_fix(cond, _when(fixes, "lax.cond")),
            *drop(fixes, "lax.while_loop", "jnp.where", "lax.cond"),
        ]
    bool_ops = [n for n in ast.walk(line.tree) if isinstance(n, ast.BoolOp) and uses(n, names)]
    if bool_ops:
        written = _jnp_condition(line, bool_ops[0])
        return [
            written_fix(written, "and/or/not call bool() on their operands; the jax.numpy functions work elementwise"),
            *drop(fixes, "lax.while_loop"),
        ]
    return None


def _choice_fixes(fixes: list[Fix], choice: tuple[str, str, str], condition: str) -> list[Fix]:
    """An ``if`` that only chooses a value (``receiver`` = one of two): ``jnp.where`` or ``lax.cond``."""
    receiver, if_true, if_false = choice
    where = f"jnp.where({condition}, {if_true}, {if_false})"
    written = where if receiver == "return" else f"{receiver} = {where}"
    return [
        written_fix(written, "the if only chooses a value: both are computed, one is kept elementwise"),
        written_fix(f"lax.cond({condition}, lambda: {if_true}, lambda: {if_false})", _when(fixes, "lax.cond")),
        *drop(fixes, "lax.while_loop", "jnp.where", "lax.cond"),
    ]


def _conditional_expression(line: LineCode, names: set[str]) -> tuple[str, ast.IfExp] | None:
    """The line with its first ``a if cond else b`` on a traced condition written as ``jnp.where``
    (``relu = lambda v: v if v > 0 else 0.`` -> ``relu = lambda v: jnp.where(v > 0, v, 0.)``), and that
    expression; None when the line has none."""
    for node in ast.walk(line.tree):
        if isinstance(node, ast.IfExp) and uses(node.test, names):
            where = f"jnp.where({_jnp_condition(line, node.test)}, {line.text(node.body)}, {line.text(node.orelse)})"
            return _replaced(line, node, where), node
    return None


def _replaced(line: LineCode, node: ast.expr, text: str) -> str:
    """The line's source with ``node`` written as ``text`` (columns are UTF-8 byte offsets)."""
    source = line.source.encode()
    start, end = node.col_offset, node.end_col_offset
    if node.lineno != 1 or node.end_lineno != 1 or end is None:
        return text
    return (source[:start] + text.encode() + source[end:]).decode()


def _when(fixes: list[Fix], start: str) -> str:
    return next((f.when for f in fixes if f.use.startswith(start)), "")


# -- a traced value used as a Python int ------------------------------------------------------------


def fit_int(fixes: list[Fix], line: LineCode, names: set[str], traced: Sequence[Traced], resolve: Resolve) -> list[Fix]:
    found: list[Fix] = []
    for name, call in line.calls():
        if name == "range" and call.args and any(uses(a, names) for a in call.args):
            bounds = [line.text(a) for a in call.args[:2]]
            lower, upper = (["0", *bounds] if len(bounds) == 1 else bounds)[:2]
            found.append(Fix(f"lax.fori_loop({lower}, {upper}, body, init)", _when(fixes, "lax.fori_loop")))
            break
    for node in ast.walk(line.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and uses(node.func.slice, names):
            chosen, index = line.text(node.func.value), line.text(node.func.slice)
            operands = ", ".join(line.text(a) for a in node.args) or "operand"
            found.append(
                written_fix(
                    f"lax.switch({index}, {chosen}, {operands})",
                    "pick one of several functions by a traced index: every branch is traced, one runs",
                )
            )
            break
        if isinstance(node, ast.Subscript) and uses(node.slice, names) and not uses(node.value, names):
            container, index = line.text(node.value), line.text(node.slice)
            found.append(written_fix(f"jnp.asarray({container})[{index}]", _when(fixes, "jnp.asarray")))
            break
    return found + static_fixes(fixes) if found else drop(fixes, "lax.fori_loop", "jnp.asarray")
