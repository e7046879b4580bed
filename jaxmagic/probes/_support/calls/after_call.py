"""Whether the caller still needs an argument after the call, as the call's own line shows.

Donating an argument (``donate_argnums``) lets XLA write the call's results over it: the caller's array is
deleted, and a later read of it fails ("Array has been deleted", jax#16906; jax#9675 calls the same
donating function twice on one array). Donation is a way down only when the caller no longer needs the
argument, and one line can show that: its result rebinds the name the argument was passed under
(``params, opt_state = step(params, opt_state, batch)``, the shape of every training loop that donates,
jax#16647), or rebinds the object that held it (``state = step(state.params, batch)``), or the argument is a
temporary nothing else holds (``step(init(key), batch)``). Anything else - ``grads = grad_fn(params, x)``
followed by ``params - lr * grads`` - keeps the argument in the caller's hands, whatever comes after; and
without the line (a call measured, not run) it cannot be told. Read from the source text, nothing evaluated.
"""

from __future__ import annotations

import ast
import dataclasses

from jaxmagic.probes._support.calls.line_values import parsed_line

FREE, KEPT, UNKNOWN = "free", "kept", "unknown"  # the caller no longer needs it / still holds it / cannot tell
# calls that may hand back the very array they are given (a no-op on a device array): not temporaries
_SAME_ARRAY = frozenset({"asarray", "device_put", "block_until_ready", "stop_gradient"})


@dataclasses.dataclass(frozen=True)
class AfterCall:
    """One argument of a call, as the call's line passes it and what the line does with it afterwards."""

    verdict: str  # FREE, KEPT or UNKNOWN
    written: str  # what the line passed ("params", "state.params", "init(key)"); "" when not told
    why: str  # "the line rebinds `params` to the call's result", "...does not rebind it", why it cannot be told


def argument_after_call(code: str, callee: str, position: int | None, parameter: str = "") -> AfterCall:
    """The argument at ``position`` (or the keyword ``parameter``) of the call of ``callee`` on the line
    ``code``: FREE when the line rebinds it (or the object holding it) to the call's result or passes a
    temporary, KEPT when it passes a name the line leaves bound, UNKNOWN when the line does not tell (no
    line, no such call, the argument passed through ``*args``)."""
    unknown = f"whether `{parameter or 'it'}` is used after the call cannot be told"
    if not code.strip():
        return AfterCall(UNKNOWN, "", f"{unknown} (no line of yours that makes the call was seen)")
    tree = parsed_line(code)
    statement = tree.body[0] if isinstance(tree, ast.Module) and len(tree.body) == 1 else None
    call = _the_call(statement, callee) if statement is not None else None
    if statement is None or call is None:
        return AfterCall(UNKNOWN, "", f"{unknown} (`{code.strip()}` is not one call of `{callee}` jaxmagic can read)")
    passed = _passed(call, position, parameter)
    if passed is None:
        return AfterCall(UNKNOWN, "", f"{unknown} (`{code.strip()}` passes it through *args or **kwargs)")
    while _may_be_the_same(passed) and isinstance(passed, ast.Call) and passed.args:
        passed = passed.args[0]  # ``jnp.asarray(params)`` hands back ``params`` itself: the same array
    written = ast.unparse(passed)
    if not isinstance(passed, (ast.Name, ast.Attribute, ast.Subscript)) and not _may_be_the_same(passed):
        return AfterCall(FREE, written, f"the line passes a temporary (`{written}`) that nothing else holds")
    for target in _targets(statement):
        bound = ast.unparse(target)
        if written == bound:
            return AfterCall(FREE, written, f"the line rebinds `{written}` to the call's result")
        if written.startswith((bound + ".", bound + "[")):
            return AfterCall(FREE, written, f"the line rebinds `{bound}`, which held `{written}`, to the call's result")
    return AfterCall(KEPT, written, f"`{written}` may be used after the call (the line does not rebind it)")


def _the_call(statement: ast.stmt, callee: str) -> ast.Call | None:
    """The call of ``callee`` on the line (by the name it is called under, last part: ``step`` of
    ``self.step``); else the call whose result the statement binds or is (``grads = grad_fn(params, x)``:
    the function measured is named after the function it differentiates)."""
    calls = [node for node in ast.walk(statement) if isinstance(node, ast.Call)]
    short = callee.rsplit(".", 1)[-1]
    named = [c for c in calls if _called_name(c) in (callee, short)]
    if len(named) == 1:
        return named[0]
    value = getattr(statement, "value", None)
    return value if isinstance(value, ast.Call) and not named else None


def _called_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _passed(call: ast.Call, position: int | None, parameter: str) -> ast.expr | None:
    if position is not None:
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                return None  # later positions are not known
            if index == position:
                return arg
    keyword = next((k for k in call.keywords if k.arg is not None and k.arg == parameter), None)
    return keyword.value if keyword is not None else None


def _may_be_the_same(node: ast.expr) -> bool:
    """A call that may return the array it is given (``jnp.asarray(params)``): not a temporary of its own."""
    if not isinstance(node, ast.Call):
        return False
    name = ast.unparse(node.func)
    return any(name == same or name.endswith("." + same) for same in _SAME_ARRAY)


def _targets(statement: ast.stmt) -> list[ast.expr]:
    """The names an assignment binds, tuples unpacked (``params, opt_state = ...``); [] for another statement."""
    if isinstance(statement, ast.Assign):
        found: list[ast.expr] = []
        for target in statement.targets:
            found += _unpacked(target)
        return found
    if isinstance(statement, ast.AnnAssign):
        return _unpacked(statement.target)
    return []


def _unpacked(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [leaf for element in target.elts for leaf in _unpacked(element)]
    if isinstance(target, ast.Starred):
        return _unpacked(target.value)
    return [target]
