"""The fix for a tracer stored outside the traced function (a leak), written from the storing line."""

from __future__ import annotations

import ast
import linecache
from collections.abc import Sequence

from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.fixes.line_code import read_line


def leak_fixes(
    fixes: Sequence[Fix],
    stored: str,
    function: str,
    loop_body: bool = False,
    filename: str = "",
    lineno: int = 0,
    traced: str = "",
) -> list[Fix]:
    """The leak's fixes with the value the storing line keeps (``self.last_hidden = h`` ->
    ``return out, h``; in a scan body, ``return carry, h``: the per-step outputs) and that line
    named; the table's as they are when the line is not read. With the storing line's file and
    number, ``out`` / ``carry`` are what the function's own ``return`` gives (``return c, c``)."""
    line = read_line(stored)
    value: ast.expr | None = None
    if line is not None:
        node = line.tree.body[0]
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            value = node.value
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.value.args:
            value = node.value.args[-1]  # history.append(h), cache.setdefault(k, h)
    if line is None or value is None:
        return list(fixes)
    kept = line.text(value)
    if traced and function and function.rsplit(".", 1)[-1] != traced.rsplit(".", 1)[-1] and not loop_body:
        # stored by a function the traced one calls (self._remember(h)): the traced one returns the value
        return [
            Fix(
                line.source,
                f"drop this line: with it `{function}`, which `{traced}` calls, keeps a traced value; return the "
                f"value from `{traced}` instead (under jax.grad, with has_aux=True)",
            ),
            *(f for f in fixes if not f.use.startswith("return out")),
        ]
    returns = _returned_by_function_at(filename, lineno) if filename else None
    if returns and kept in returns:
        gets = "lax.scan's results stack the per-step outputs" if loop_body else "the caller gets it"
        returned = Fix(
            line.source,
            f"drop this line: `{function}` already returns `{kept}` (`return {', '.join(returns)}`); {gets} - "
            "use that instead of the stored tracer",
        )
        return [returned, *(f for f in fixes if not f.use.startswith("return out"))]
    if loop_body:
        carry = returns[0] if returns else "carry"
        outputs = f"({returns[1]}, {kept})" if returns and len(returns) == 2 and returns[1] != carry else kept
        returned = Fix(
            f"return {carry}, {outputs}",
            f"return `{kept}` as the per-step output of the scan body `{function}` and drop `{line.source}`: "
            "lax.scan stacks it over the steps",
        )
    else:
        out = ", ".join(returns) if returns else "out"
        returned = Fix(
            f"return {out}, {kept}" if not returns or len(returns) == 1 else f"return ({out}), {kept}",
            f"return `{kept}` from `{function}` and drop `{line.source}`: the caller gets it as an output "
            "(under jax.grad, with has_aux=True)",
        )
    return [returned, *(f for f in fixes if not f.use.startswith("return out"))]


def _returned_by_function_at(filename: str, lineno: int) -> list[str] | None:
    """The expressions the last ``return`` of the function holding ``lineno`` gives (a tuple's items),
    as written; None when it is not found or returns nothing."""
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    holding = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.lineno <= lineno <= (node.end_lineno or node.lineno)
    ]
    if not holding:
        return None
    function = max(holding, key=lambda node: node.lineno)  # the innermost
    returns = [node for node in ast.walk(function) if isinstance(node, ast.Return) and node.value is not None]
    if not returns:
        return None
    value = max(returns, key=lambda node: node.lineno).value
    if value is None:  # kept only returns with a value: never
        return None
    items = value.elts if isinstance(value, ast.Tuple) else [value]
    return [ast.get_source_segment(source, item) or ast.unparse(item) for item in items]
