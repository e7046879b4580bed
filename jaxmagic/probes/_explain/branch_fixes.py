"""The fix for a value a branch of ``lax.cond`` / ``lax.switch`` needs concrete, given to it as an operand:
pass it by closure instead - tried by tracing every branch with it so.

``lax.cond(pred, true_fun, false_fun, *operands)`` traces each branch with its operands abstract, so a size
given as an operand (``lax.cond(p, lambda n: jnp.arange(n), lambda n: jnp.zeros(n), n)``) is never concrete
inside the branch even when it is a Python number and nothing is jitted; a branch that reads it from the
enclosing scope (``lambda: jnp.arange(n)``, the operand dropped) gets the number itself. The fix is offered
when the operand was concrete where ``cond`` was called and every branch traces with it as that Python value
and returns the same types (``cond`` requires it); a traced operand (an argument of a jitted function) is no
Python value to close over - its static argument is the fix then.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import inspect
import io
import linecache
from collections.abc import Callable
from typing import Any

import jax

from jaxmagic._jax.loop_call import BranchCall, branch_call
from jaxmagic._jax.transform_stack import Frames, Transformation
from jaxmagic.probes._explain.report import TracerErrorReport
from jaxmagic.probes._support.calls.line_values import parsed_line
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.fixes.traced_trial import abstract_value, carried_leaf
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import user_lines

BRANCHING = ("cond", "switch")
_RAN = " (jaxmagic traced your branches once more to try it; their output while tracing was not shown)"
_WHEN = (
    "`lax.{kind}` traces each branch with its operands abstract, so `{argument}`, given as an operand, is never "
    "concrete in `{branch}`, though it is a Python number where `lax.{kind}` is called; a branch that reads it "
    "from the enclosing scope instead gets the number itself"
)


def branch_operand_fix(report: TracerErrorReport, inside: list[Transformation], frames: Frames) -> Fix | None:
    """The tried "close over it, not an operand" fix when the failing value is (made from) an operand of the
    ``lax.cond``/``lax.switch`` whose branch failed and that operand was a Python value; else None. The
    branching is JAX's "for cond" of the message (``report.transformation``) or the innermost on the stack."""
    kind = report.transformation if report.transformation in BRANCHING else ""
    kind = kind or (inside[-1].name if inside and inside[-1].name in BRANCHING else "")
    branch = report.traced_function.rsplit(".", 1)[-1]
    found = branch_call(frames, kind, branch) if kind else None
    if found is None:
        return None
    function = next(b for b in found.branches if _name(b) == branch)
    try:
        parameters = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None
    for position, parameter in enumerate(parameters[: len(found.operands)]):
        argument = next(
            (d for d in report.depends_on if d == parameter or d.startswith((f"{parameter}[", f"{parameter}."))), ""
        )
        if not argument:
            continue
        leaf = carried_leaf(found.operands, f"[{position}]{argument[len(parameter) :]}")
        if leaf is None or not _is_python_value(leaf[1]):
            return None  # traced where cond was called too: no Python value to close over
        return _tried(kind, branch, argument, found, leaf)
    return None


def _rewritten(found: BranchCall, kind: str, argument: str, index: int) -> str:
    """The user's ``lax.cond``/``lax.switch`` call with the operand dropped and the branches' parameter for it
    removed, when it is one line, the operand a whole positional argument and every branch a lambda there;
    "" otherwise (the sentence is offered then)."""
    if found.called_at is None or argument.endswith("]") or "." in argument:
        return ""
    tree = parsed_line(linecache.getline(*found.called_at))
    calls = [
        node
        for node in (ast.walk(tree) if tree is not None else ())
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == kind
    ]
    if len(calls) != 1 or any(isinstance(op, (tuple, list, dict)) for op in found.operands):
        return ""  # with every operand a leaf, the leaf's index is the operand's position
    call = calls[0]
    first = 3 if kind == "cond" else 2
    if len(call.args) != first + len(found.operands) or any(isinstance(a, ast.Starred) for a in call.args):
        return ""
    written = call.args[1:3] if kind == "cond" else getattr(call.args[1], "elts", [])
    branches = [b for b in written if isinstance(b, ast.Lambda) and len(b.args.args) > index]
    if not branches or len(branches) != len(written):
        return ""
    operand = call.args[first + index]
    if not isinstance(operand, (ast.Name, ast.Attribute, ast.Constant)):
        return ""  # an expression evaluated once as an operand is not written into each branch
    del call.args[first + index]
    for branch in branches:
        parameter = branch.args.args.pop(index).arg
        branch.body = _ReadAs(parameter, operand).visit(branch.body)
    return ast.unparse(call)


class _ReadAs(ast.NodeTransformer):
    """A branch's reads of its parameter, written as the operand the call passed (``n`` -> ``npix``)."""

    def __init__(self, parameter: str, operand: ast.expr) -> None:
        self.parameter, self.operand = parameter, operand

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return copy.deepcopy(self.operand) if node.id == self.parameter else node


def _name(function: Callable[..., Any]) -> str:
    return getattr(function.func if isinstance(function, functools.partial) else function, "__name__", "")


def _is_python_value(value: object) -> bool:
    return isinstance(value, (bool, int, float)) and not isinstance(value, jax.core.Tracer)


def _tried(kind: str, branch: str, argument: str, found: BranchCall, leaf: tuple[int, Any]) -> Fix:
    """Trace every branch with the operand leaf a Python constant and the other array operands abstract."""
    index, value = leaf
    leaves, tree = jax.tree.flatten(found.operands)
    given = [abstract_value(x) for x in leaves]
    traced_at = [k for k, x in enumerate(given) if isinstance(x, jax.ShapeDtypeStruct) and k != index]
    use = _rewritten(found, kind, argument, index) or (
        f"`{argument}` closed over by the branches, not passed to `lax.{kind}` (= {value!r})"
    )
    how = f"tracing every branch with `{argument}` as the Python value {value!r}"
    when = _WHEN.format(kind=kind, branch=branch, argument=argument)

    def with_constant(branch_fn: Callable[..., Any]) -> Callable[..., Any]:
        def traced(*arrays: object) -> object:

            filled = list(given)
            for k, array in zip(traced_at, arrays, strict=True):
                filled[k] = array
            filled[index] = value
            return branch_fn(*jax.tree.unflatten(tree, filled))

        return traced

    output = io.StringIO()
    results = []
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            for branch_fn in found.branches:
                results.append(jax.eval_shape(with_constant(branch_fn), *[given[k] for k in traced_at]))
    except Exception as failure:
        lines = user_lines(failure.__traceback__, below_jaxmagic=True)
        at = f" at `{lines[-1].code}` ({lines[-1].where})" if lines and lines[-1].code else ""
        failure.__traceback__ = None
        return Fix(use, when, f"checked: still fails - {how} raised {error_line(failure)}{at}{_RAN}")
    types = [(jax.tree.structure(r), [(x.shape, x.dtype) for x in jax.tree.leaves(r)]) for r in results]
    if any(t != types[0] for t in types):
        shown = "; ".join(", ".join(f"{d}{list(s)}" for s, d in t[1]) for t in types)
        checked = f"checked: still fails - {how} traces, but the branches return different types ({shown})"
        return Fix(use, when, checked + _RAN)
    return Fix(use, when, f"checked: {how} traces, and the branches return the same types{_RAN}")
