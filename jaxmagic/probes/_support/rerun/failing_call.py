"""Find the call in the user's code that raised, and evaluate it again safely.

When a NaN is raised in a backward pass, JAX can name only the primitive. To
say more (which gradient leaf is NaN, which forward line it came from), the NaN
probe looks at the innermost call on the user's line that failed - for example
``jax.grad(reg_loss)(p_reg, x_reg)`` - and calls it once more under other
settings. We only do so when re-evaluating the callee and the arguments cannot
have side effects: names, attributes, subscripts, literals and arithmetic, plus
calls to JAX's own transformations (``jax.grad(f)``, ``jax.jit(f)``, ...).
Calling the function itself is the one thing repeated; the probe says so.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

import executing
import jax
import numpy as np

from jaxmagic._jax.jit_internals import is_jitted, transformed_function
from jaxmagic.usercode.source import user_tracebacks

_PURE_NODES = (
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Dict,
    ast.Slice,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.BoolOp,
    ast.Starred,
    ast.keyword,
    ast.Load,
    ast.operator,
    ast.unaryop,
    ast.cmpop,
    ast.boolop,
    ast.expr_context,
)


@dataclasses.dataclass
class FailingCall:
    """A call expression from the user's code, evaluated to its parts."""

    source: str  # "jax.grad(reg_loss)(p_reg, x_reg)"
    function: Any
    args: list[tuple[str, Any]]  # (source text, value) per positional argument
    kwargs: dict[str, Any]
    # the same, with a JAX transformation on the line (``jax.grad(loss)``) replaced by the function it
    # transforms (``loss``): what tells a value of the forward computation from one of its derivative
    forward: Any = None
    forward_of: str = ""  # the transformed function's name ("loss")
    # which user frame of the traceback it was read from, outermost 0: an inner frame's arguments may hold
    # values (an inf) that an outer frame's code made
    frame: int = 0

    def __call__(self) -> object:
        return self.function(*(v for _, v in self.args), **self.kwargs)


def looks_like_array_tree(value: object) -> bool:
    """Cheap test: is ``value`` an array, or a pytree that holds arrays - a list/tuple/dict, or an object of
    a registered pytree class (a Flax nnx Module or Optimizer, an Equinox Module, a flax struct)?

    A library's state object must count: a re-evaluated call takes it as an argument (flattened, so the
    call gets fresh copies) rather than closing over the user's object, which a library's jit wrapper
    writes its outputs back into - under a trace that leaves tracers in it, or a half-cleared object
    when the write fails (an nnx Module lost every attribute that way)."""
    if isinstance(value, (jax.Array, np.ndarray)):
        return True
    if isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        return any(looks_like_array_tree(v) for v in list(items)[:64])
    if isinstance(value, type) or jax.tree_util.all_leaves([value]):
        return False  # not a pytree node: a leaf of its own (a function, a number, an unregistered class)
    try:
        leaves = jax.tree_util.tree_leaves(value)
    except Exception:  # a flatten rule of the user's that fails: not something to pass as arrays
        return False
    return any(isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves)


def _is_jax_transformation(fn: object) -> bool:
    target = fn.func if isinstance(fn, functools.partial) else fn
    return (getattr(target, "__module__", "") or "").split(".")[0] == "jax"


class _Evaluator:
    def __init__(self, frame: FrameType) -> None:
        self.globals = frame.f_globals
        self.locals = dict(frame.f_locals)

    def eval(self, node: ast.expr) -> Any:  # the value of the user's expression: a function, an array, anything
        """Evaluate a side-effect-free expression, or raise ValueError."""
        self._check(node)
        code = compile(ast.Expression(body=node), "<jaxmagic re-evaluation>", "eval")
        return eval(code, self.globals, self.locals)

    def _check(self, node: ast.AST) -> None:
        if isinstance(node, ast.Lambda):  # creating a function runs none of its body
            return
        if isinstance(node, ast.Call):
            if not _is_jax_transformation(self.eval(node.func)):
                raise ValueError("calls something other than a JAX transformation")
            for child in [*node.args, *node.keywords]:
                self._check(child)
            return
        if not isinstance(node, _PURE_NODES):
            raise ValueError(f"contains {type(node).__name__}")
        for child in ast.iter_child_nodes(node):
            self._check(child)


def failing_calls(tb: TracebackType | None) -> list[FailingCall]:
    """The calls being made on the user's lines of ``tb`` that are safe to evaluate again, outermost first."""
    calls = [_call_at(user_tb) for user_tb in user_tracebacks(tb)]
    return [call for call in calls if call is not None]


def _call_at(user_tb: TracebackType) -> FailingCall | None:
    try:
        node = executing.Source.executing(user_tb).node
    except Exception:
        return None
    if not isinstance(node, ast.Call):
        return None
    evaluator = _Evaluator(user_tb.tb_frame)
    try:
        function = evaluator.eval(node.func)
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                return None
            args.append((ast.unparse(arg), evaluator.eval(arg)))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                return None
            kwargs[kw.arg] = evaluator.eval(kw.value)
    except Exception:
        return None
    return FailingCall(ast.unparse(node), function, args, kwargs)


def failing_expressions(tb: TracebackType | None) -> list[FailingCall]:
    """Per user frame of ``tb`` (outermost first), the largest expression around the call that was
    running which is safe to evaluate again, as a function of the arrays it reads.

    For ``y = jnp.where(x > 0, jnp.log(x), 0.0)`` failing in ``jnp.log`` this is
    ``lambda x: jnp.where(x > 0, jnp.log(x), 0.0)`` called with ``x``: tracing it
    gives the whole statement's program, so a NaN the ``where`` discards is seen
    as discarded. The function is compiled with the frame's file name and line
    numbers, so the equations it makes point at the user's own line.
    """
    expressions = []
    for index, user_tb in enumerate(user_tracebacks(tb)):
        expression = _expression_at(user_tb)
        if expression is not None:
            expression.frame = index
            expressions.append(expression)
    return expressions


def _expression_at(user_tb: TracebackType) -> FailingCall | None:
    try:
        node = executing.Source.executing(user_tb).node
    except Exception:
        return None
    if not isinstance(node, ast.expr):
        return None
    chain: list[ast.expr] = [node]
    # Up to the frame's own expression: a lambda's (or a generator expression's) body runs in a frame of
    # its own, so what encloses it - `jax.tree.map(lambda p, g: ..., params, grads)` - belongs to the
    # frame that made the lambda, and evaluated here it would read this frame's names.
    parent = getattr(node, "parent", None)  # executing links each node to its parent
    while isinstance(parent, ast.expr) and not isinstance(parent, (ast.Lambda, ast.GeneratorExp)):
        chain.append(parent)
        parent = getattr(parent, "parent", None)
    frame = user_tb.tb_frame
    for candidate in reversed(chain):  # the largest first
        call = _as_function(candidate, frame)
        if call is not None:
            return call
    return None


def _as_function(node: ast.expr, frame: FrameType) -> FailingCall | None:

    evaluator = _Evaluator(frame)
    try:
        if isinstance(node, ast.Call):  # the callee may be the user's own function; what it gets must be pure
            evaluator.eval(node.func)
            for child in [*node.args, *node.keywords]:
                evaluator._check(child)
        else:
            evaluator._check(node)
    except Exception:
        return None
    names = list(dict.fromkeys(n.id for n in ast.walk(node) if isinstance(n, ast.Name)))
    scope = {**frame.f_globals, **evaluator.locals}
    arrays = [(name, scope[name]) for name in names if name in scope and looks_like_array_tree(scope[name])]
    text = ast.unparse(node)
    function = _compiled(node, arrays, scope, frame)
    if function is None:
        return None
    forward, forward_of = _without_transformation(node, arrays, scope, frame)
    return FailingCall(text, function, arrays, {}, forward=forward, forward_of=forward_of)


def _compiled(
    node: ast.expr,
    arrays: list[tuple[str, Any]],
    scope: dict[str, Any],
    frame: FrameType,
    extra: dict[str, Any] | None = None,
) -> Callable[..., Any] | None:
    """``node`` as a function of the arrays it reads, compiled with the frame's file and line numbers."""
    try:
        tree = ast.parse(f"lambda {', '.join(name for name, _ in arrays)}: ({ast.unparse(node)})", mode="eval")
        ast.increment_lineno(tree, getattr(node, "lineno", 1) - 1)
        code = compile(tree, frame.f_code.co_filename, "eval")
        function = eval(code, {**{k: v for k, v in scope.items() if k not in dict(arrays)}, **(extra or {})})
        function.__code__ = function.__code__.replace(
            co_name=frame.f_code.co_name, co_qualname=frame.f_code.co_qualname
        )
    except Exception:
        return None
    return function


_FORWARD = "_jaxmagic_forward"


def _without_transformation(
    node: ast.expr, arrays: list[tuple[str, Any]], scope: dict[str, Any], frame: FrameType
) -> tuple[Callable[..., Any] | None, str]:
    """``node`` with its first callee that is a JAX transformation of a function (``jax.grad(loss)``)
    replaced by that function, and that function's name; (None, "") when it has none."""
    evaluator = _Evaluator(frame)
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        try:
            transformed = transformed_function(evaluator.eval(call.func))
        except Exception:
            continue
        if transformed is None:
            continue
        replaced = copy.deepcopy(node)
        for inner in ast.walk(replaced):
            if isinstance(inner, ast.Call) and ast.dump(inner.func) == ast.dump(call.func):
                inner.func = ast.copy_location(ast.Name(_FORWARD, ast.Load()), inner.func)
                break
        name = str(getattr(transformed, "__name__", "") or ast.unparse(call.func))
        return _compiled(replaced, arrays, scope, frame, {_FORWARD: transformed}), name
    return None, ""


def enters_jax(user_tb: TracebackType) -> bool:
    """True when the call running in this user frame is a JAX function (``f`` jitted, ``jax.grad(f)``,
    ``jnp.sum``): the user frames below it run because JAX traces (or re-runs) them, not once per call."""
    try:
        node = executing.Source.executing(user_tb).node
        if not isinstance(node, ast.Call):
            return False
        callee = _Evaluator(user_tb.tb_frame).eval(node.func)
    except Exception:
        return False

    # jax.grad(f) keeps f's name and module (functools.wraps): known by the function it transforms
    return is_jitted(callee) or _is_jax_transformation(callee) or transformed_function(callee) is not None
