"""Which call ran out of memory: from an out-of-memory error back to the user's call and its arguments'
shapes, without running anything again.

XLA says only how many bytes it could not get. The call is found on the user's lines of the traceback:

* **at the call** - the innermost user line was calling a jitted function (the program ran out), a JAX
  function outside jit (an eager operation, ``jax.device_put``: a failed allocation outside any program);
* **at a later read** - JAX dispatches asynchronously, so a program that ran out returns at once and the
  error surfaces where a result is read (``print(nn[:3])``). The arrays named on that line that hold the
  error (``jax.block_until_ready`` raises it again, nothing is computed) are followed back to the
  assignment that made them, in the same cell or function first, then in the user's earlier cells.

The call's arguments are rebuilt as shapes: names and literals as they are, any other expression (a
``jnp.linspace(...)``, ``x * 2``) under ``jax.eval_shape`` - traced, nothing allocated - and only when it
calls nothing but JAX (``failing_call``'s rule), so no function of the user's runs.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
from types import FrameType, TracebackType
from typing import Any

import executing
import jax

from jaxmagic._jax import jit_internals
from jaxmagic.probes._memory.messages import OutOfMemoryMessage, read_message
from jaxmagic.probes._support.calls.library_wrappers import is_library_jit
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import is_user_file, source_line, user_tracebacks


def out_of_memory_message(error: BaseException) -> OutOfMemoryMessage | None:
    """The out-of-memory facts of ``error``; None for any other error. Only JAX's runtime errors count (a
    NumPy MemoryError is the host's, not a device's)."""
    if not isinstance(error, RuntimeError):
        return None
    try:
        text = str(error)
    except Exception:
        return None
    return read_message(text)


@dataclasses.dataclass
class FailedCall:
    """The user's call that ran out, with its arguments as shapes (``None`` args: they could not be rebuilt)."""

    function: Any  # the jitted callable, or the JAX function called eagerly
    text: str  # "nearest(jnp.linspace(0.0, 1.0, 2 ** 17))"
    line: SourceLine
    args: tuple[object, ...] | None = None
    kwargs: dict[str, object] | None = None
    jitted: bool = True
    surfaced_at: SourceLine | None = None  # the later read where the error surfaced (None: at the call)
    read: str = ""  # the name read there that held the error ("nn")
    problem: str = ""  # why the arguments could not be rebuilt


def failed_call(error: BaseException, function: str = "") -> FailedCall | None:
    """The call that ran out of memory, found as the module docstring says; None when it cannot be told.
    ``function``: the name XLA's message gives the program (``nearest`` of ``jit_nearest``): of the calls on
    a line, the one of that name first (``outer(nearest(x))``)."""
    user_tbs = user_tracebacks(error.__traceback__)
    if not user_tbs:
        return None
    innermost = user_tbs[-1]
    frame, lineno = innermost.tb_frame, innermost.tb_lineno
    # A name on the failing line whose array holds the error: a result read after its program failed
    # (`print(nn[:3])`, `jnp.sum(nn)`), never an allocation of that line's own.
    for name in _names_holding_the_error(innermost):
        found = _assignment_of(name, frame, lineno)
        if found is not None:
            found.surfaced_at = source_line(frame.f_code.co_filename, lineno, frame.f_code.co_name)
            found.read = name
            return found
    for user_tb in reversed(user_tbs):  # innermost first: the call that went into JAX
        node = _executing(user_tb)
        # the call running, else a jitted call whose result it reads (`nearest(x).block_until_ready()`):
        # the outermost one, whose result the line was using when the error arose
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)] if node is not None else []
        found_here = [f for f in (_call_of(c, user_tb.tb_frame, user_tb.tb_lineno) for c in calls) if f is not None]
        named = [f for f in found_here if function and _name(f.function) == function]
        if named or found_here:
            return (named or found_here)[0]
    return None


def _name(function: Any) -> str:
    inner = getattr(function, "__wrapped__", function)
    return str(getattr(inner, "__name__", "") or getattr(function, "__name__", ""))


def _executing(user_tb: TracebackType) -> ast.AST | None:
    try:
        return executing.Source.executing(user_tb).node
    except Exception:
        return None


def _call_of(node: ast.Call, frame: FrameType, lineno: int) -> FailedCall | None:
    """A call of a jitted function or of JAX's own, with its arguments rebuilt; None for any other callee."""
    scope = _Scope(frame)
    try:
        function = scope.pure(node.func)
    except Exception:
        return None
    jitted = jit_internals.is_jitted(function) or _is_compiled(function) or is_library_jit(function)
    if not jitted and not _is_jax_function(function):
        return None
    line = source_line(frame.f_code.co_filename, lineno, frame.f_code.co_name)
    found = FailedCall(function, ast.unparse(node), line, jitted=jitted)
    try:
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise ValueError("a *argument")
            args.append(scope.abstract(arg))
        kwargs = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise ValueError("a **argument")
            kwargs[keyword.arg] = scope.abstract(keyword.value)
        found.args, found.kwargs = tuple(args), kwargs
    except Exception as error:
        found.problem = f"its arguments could not be rebuilt without running your code ({error})"
    return found


def _names_holding_the_error(user_tb: TracebackType) -> list[str]:
    """Names read on the failing line whose arrays hold the error (reading them raises it again)."""
    node = _executing(user_tb)
    statement = node
    while statement is not None and not isinstance(statement, ast.stmt):
        statement = getattr(statement, "parent", None)
    if statement is None:
        statement = node
    if statement is None:
        return []
    scope = {**user_tb.tb_frame.f_globals, **user_tb.tb_frame.f_locals}
    names = []
    for name in dict.fromkeys(n.id for n in ast.walk(statement) if isinstance(n, ast.Name)):
        value = scope.get(name)
        leaves = [leaf for leaf in _leaves(value) if isinstance(leaf, jax.Array)]
        if leaves and any(_holds_error(leaf) for leaf in leaves):
            names.append(name)
    return names


def _leaves(value: object) -> list[object]:
    try:
        return jax.tree.leaves(value)
    except Exception:
        return []


def _holds_error(array: jax.Array) -> bool:
    try:
        array.block_until_ready()
    except Exception as error:  # the program that made it failed: the same error again
        return out_of_memory_message(error) is not None
    return False


def _assignment_of(name: str, frame: FrameType, lineno: int) -> FailedCall | None:
    """The last call assigned to ``name`` before ``lineno`` in the frame's own source, then in the user's
    earlier cells and files (newest first), when its callee is jitted."""
    filename = frame.f_code.co_filename
    candidates = [(filename, lineno)] + [(f, None) for f in reversed(list(linecache.cache)) if f != filename]
    for candidate, before in candidates:
        if not is_user_file(candidate):
            continue
        node, line = _last_assignment(candidate, name, before)
        if node is None:
            continue
        found = _call_of(node, frame, line)
        if found is not None:
            found.line = source_line(candidate, line, _function_at(frame, candidate))
            return found
    return None


def _last_assignment(filename: str, name: str, before: int | None) -> tuple[ast.Call | None, int]:
    text = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None, 0
    best: tuple[ast.Call | None, int] = (None, 0)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            if before is not None and node.lineno >= before:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if name in bound and node.lineno > best[1]:
                best = (node.value, node.lineno)
    return best


def _function_at(frame: FrameType, filename: str) -> str:
    return frame.f_code.co_name if frame.f_code.co_filename == filename else "<module>"


def _is_compiled(function: object) -> bool:
    return isinstance(function, jax.stages.Compiled)


def _is_jax_function(function: object) -> bool:
    module = getattr(function, "__module__", "") or ""
    return module == "jax" or module.startswith(("jax.", "jaxlib"))


_PURE = (ast.Name, ast.Attribute, ast.Constant, ast.Load, ast.Tuple, ast.List, ast.Dict, ast.keyword)


class _Scope:
    """Evaluates expressions of a frame: pure ones as they are, others as shapes under ``jax.eval_shape``."""

    def __init__(self, frame: FrameType) -> None:
        self.globals = frame.f_globals
        self.locals = dict(frame.f_locals)

    def _eval(self, node: ast.expr) -> object:
        code = compile(ast.Expression(body=node), "<jaxmagic: the call's arguments>", "eval")
        return eval(code, self.globals, self.locals)

    def pure(self, node: ast.expr) -> object:
        """Names, attributes, literals and their tuples: nothing runs but attribute lookups."""
        for child in ast.walk(node):
            if not isinstance(child, _PURE) and not isinstance(child, ast.expr_context):
                raise ValueError(f"{type(child).__name__} in {ast.unparse(node)}")
        return self._eval(node)

    def abstract(self, node: ast.expr) -> object:
        try:
            return self.pure(node)
        except ValueError:
            pass
        self._check_calls_only_jax(node)
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        reads_arrays = any(_is_array_like(self.locals.get(n, self.globals.get(n))) for n in names)
        calls = any(isinstance(n, ast.Call) for n in ast.walk(node))
        if not reads_arrays and not calls:
            return self._eval(node)  # arithmetic of Python numbers (2 ** 17): a static value stays one

        return jax.eval_shape(lambda: self._eval(node))

    def _check_calls_only_jax(self, node: ast.expr) -> None:
        for child in ast.walk(node):
            if isinstance(child, ast.Lambda):
                raise ValueError("a lambda")
            if isinstance(child, ast.Call):
                function = self.pure(child.func)
                if not _is_jax_function(function):  # NumPy would allocate for real: eval_shape traces JAX only
                    raise ValueError(f"it calls {ast.unparse(child.func)}")


def _is_array_like(value: object) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")
