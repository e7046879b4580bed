"""Trying a rewritten line on the shapes of the user's values, without running anything of theirs.

A fix the explainer writes from the failing line (``jax.scipy.special.erfcx(jnp.asarray(x))``,
``lax.dynamic_slice_in_dim(x, i, k, axis=0)``) can be checked where it is cheap: the rewritten
expression is traced once by ``jax.eval_shape`` with each traced name on the line replaced by an
abstract value of the same shape and dtype, and each name that the fix makes static by the value
the call passed. Nothing is compiled or run, and the expression is tried only when it calls
nothing but JAX (``jax``, ``jnp``, ``lax``), ``math`` and methods of the traced values: no
function of the user's runs a second time.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
from collections.abc import Callable
from typing import Any

import jax

from jaxmagic.report.wording import error_line

# Names a rewritten line may use besides the failing frame's: the modules fixes are written with.
_MODULES = {"jax": "jax", "jnp": "jax.numpy", "lax": "jax.lax", "math": "math"}


def expression_of(code: str) -> ast.expr | None:
    """The expression a fix's line computes (the value of ``return e``, ``y = e`` or ``e``)."""
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    if isinstance(node, (ast.Expr, ast.Return, ast.Assign, ast.AnnAssign)) and node.value is not None:
        return node.value
    return None


def try_on_shapes(
    code: str,
    scope: dict[str, Any],
    tracer_class: type,
    concrete: dict[str, Any],
    is_tracer_error: Callable[[BaseException], bool],
) -> tuple[str, str]:
    """Trace the expression of ``code`` on abstract values: ("ok" | "traced-error" | "error" | "not tried",
    detail): for "ok" the traced names with their shapes ("" when none: the value is concrete), else
    the error or why it was not tried.

    ``scope`` is the failing frame's (locals over globals); a name bound to a tracer there
    becomes a ``jax.ShapeDtypeStruct`` of its shape and dtype, unless ``concrete`` gives the
    value the call passed for it (a name the fix makes static).
    """
    expression = expression_of(code)
    if expression is None:
        return "not tried", "the fix is not one expression"
    body_of = ""
    if isinstance(expression, ast.Lambda):
        # `act = lambda h: jnp.tanh(h) * 2.0`: the line makes a function, which eval_shape cannot return;
        # what the fix changes is the body, tried on the shapes its parameters had when the line failed
        expression, why = _lambda_body(expression, scope, tracer_class)
        if expression is None:
            return "not tried", why
        body_of = " (the lambda's body, on the shapes its parameters had)"
    names = {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}
    traced = {n for n in names if isinstance(scope.get(n), tracer_class) and n not in concrete}
    # the line's own name for a JAX module (`import jax.numpy as np`) is JAX's as much as `jnp`
    modules = {n for n in names if _is_jax_module(scope.get(n))}
    for node in ast.walk(expression):
        if isinstance(node, ast.Call) and not _calls_only_jax(node.func, traced | modules):
            return "not tried", f"`{ast.unparse(node.func)}` is not a JAX function"
    missing = [n for n in names if n not in scope and n not in _MODULES and n not in concrete]
    if missing:
        return "not tried", f"`{missing[0]}` is not a name of your function"
    handed = [
        n for n in names if n in scope and n not in _MODULES and n not in modules and _holds_own_function(scope[n])
    ]
    if handed:  # lax.switch(i, branches, x) would call them: not tried, to run nothing of the user's
        return "not tried", f"`{handed[0]}` holds functions of yours"
    values = {n: importlib.import_module(m) for n, m in _MODULES.items() if n in names and n not in scope}
    values.update({n: scope[n] for n in names if n in scope and n not in traced})
    values.update({n: v for n, v in concrete.items() if n in names})
    order = sorted(traced)
    shapes = [_abstract(scope[n]) for n in order]
    compiled = compile(ast.Expression(expression), "<jaxmagic fix>", "eval")

    def evaluate(*abstract: object) -> object:
        # one namespace, as globals: a lambda in the expression (lax.cond's branches) sees it too
        return eval(compiled, {"__builtins__": __builtins__, **values, **dict(zip(order, abstract))})

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            jax.eval_shape(evaluate, *shapes)
    except Exception as failure:
        return ("traced-error" if is_tracer_error(failure) else "error"), error_line(failure)
    shapes_text = ", ".join(f"{n}: {_short(scope[n])}" for n in order)
    if not shapes_text and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Call) for n in ast.walk(expression)):
        # `jax.jit(jnp.asarray)(xs)`: a transformation the line applies traces the values it is given
        return "ok", "the values your line gives it"
    return "ok", shapes_text + body_of if shapes_text else ""


def _lambda_body(function: ast.Lambda, scope: dict[str, Any], tracer_class: type) -> tuple[ast.expr | None, str]:
    """The body of a lambda the fix's line makes, when each of its parameters is a value of the failing
    frame (the frame is the lambda's own call); else None and why it cannot be tried."""
    arguments = function.args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.defaults:
        return None, "the lambda's parameters are not plain positional ones"
    parameters = [a.arg for a in arguments.posonlyargs + arguments.args]
    unknown = [p for p in parameters if p not in scope]
    if unknown:
        return None, f"the lambda's parameter `{unknown[0]}` has no value in the failing frame"
    if parameters and not any(isinstance(scope[p], tracer_class) for p in parameters):
        return None, "none of the lambda's parameters is a traced value in the failing frame"
    return function.body, ""


def _calls_only_jax(function: ast.expr, traced: set[str]) -> bool:
    """A call of a JAX or math function (``jnp.sin``, ``lax.dynamic_slice_in_dim``) or a method of a
    traced value (``x.astype``)."""
    if isinstance(function, ast.Call):  # `jax.jit(jnp.asarray)(xs)`: what a JAX transformation returns
        return _calls_only_jax(function.func, traced)
    root = function
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and (root.id in _MODULES or (root.id in traced and root is not function))


def _is_jax_module(value: Any) -> bool:
    return isinstance(value, type(ast)) and (value.__name__ == "jax" or value.__name__.startswith("jax."))


def _holds_own_function(value: object) -> bool:
    """A function that is not JAX's, or a list/tuple/dict of such (a JAX function may call it)."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if callable(item) and not isinstance(item, type):
            module = getattr(item, "__module__", "") or ""
            if not module.startswith(("jax", "jaxlib")):
                return True
    return False


def _abstract(tracer: Any) -> jax.ShapeDtypeStruct:
    aval = tracer.aval
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=bool(getattr(aval, "weak_type", False)))


def _short(tracer: Any) -> str:
    aval: Any = getattr(tracer, "aval", None)
    return aval.str_short() if hasattr(aval, "str_short") else str(aval)
