"""Fixes fitted to the failing line: which of a kind's standard fixes the line's code can take,
written with the line's own names and expressions.

The explainer's table (``explain.KINDS``) says what usually fixes a kind of tracer error. The line
that raised says which of those apply: a fix never names an operation the line does not do
(``jnp.nonzero(..., size=k)`` only where the line calls ``nonzero``; no ``jnp.where`` for an
``assert``), and where the line shows what to write, the fix is written from it::

    print("loss", float(loss))          ->  jax.debug.print("loss {}", loss)
    assert jnp.all(x > 0), "negative"   ->  checkify.check(jnp.all(x > 0), "negative")
    np.sin(x) * 2                       ->  jnp.sin(x) * 2         (the twin exists in jax.numpy)
    scipy.special.erfcx(np.asarray(x))  ->  jax.scipy.special.erfcx(jnp.asarray(x))
    x[i:i + k]                          ->  lax.dynamic_slice_in_dim(x, i, k, axis=0)
    activations[i](h)                   ->  lax.switch(i, activations, h)
    for _ in range(n):                  ->  lax.fori_loop(0, n, body, init)
    if x > limit: return limit; return x  ->  jnp.where(x > limit, limit, x)
    print(f"loss {float(loss):.3f}")    ->  jax.debug.print("loss {:.3f}", loss)
    math.exp(-x)                        ->  jnp.exp(-x)

The line's text is read, and the statements around an ``if`` for its two branches; for a library
call, the module its function comes from, looked up through module attributes only. A line that
is part of a longer statement is not parsed (a one-line lambda's body is: see
``explain._lambda_body``) and the table's fixes are left as they are. A fix written wholly from
the code (``from_line``) can be tried on the line's values (``fix_trial``); one with a
placeholder (``body_fn``, ``size=k``) is a suggestion.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import linecache
import re
import sys
import tokenize
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from jaxmagic.report.source import is_user_file


@dataclasses.dataclass(frozen=True)
class Fix:
    """One standard fix: what to write, and when it is the right one."""

    use: str  # "jnp.where(cond, a, b)"
    when: str  # "elementwise choice between two values"
    checked: str = ""  # "checked: ..." when jaxmagic tried it on your function, "suggestion: ..." when not
    from_line: bool = False  # written from the failing line's code (not a pattern): it can be tried on its values


class Traced(Protocol):
    """A name on the line bound to a tracer (``explain.TracedName``)."""

    name: str
    aval: str
    weak_type: bool


@dataclasses.dataclass(frozen=True)
class LineCode:
    """The failing line, parsed: what kind of statement, its condition, the calls it makes."""

    tree: ast.Module
    source: str  # the text that was parsed (``if x > 0: pass`` for ``if x > 0:``)
    statement: str  # "assert", "if", "while", "for" or "" for any other
    # an ``if`` that only chooses a value: (what receives it - "return" or a name -, value if true, if false)
    choice: tuple[str, str, str] | None = None
    # a ``while`` whose body updates one name: (the name, its new value)
    update: tuple[str, str] | None = None
    # an ``if`` whose body only raises: the text of the exception's message ('"..."' when it has none)
    raises: str | None = None

    @property
    def test(self) -> ast.expr | None:
        """The condition of an assert/if/while statement."""
        node = self.tree.body[0]
        return node.test if isinstance(node, (ast.Assert, ast.If, ast.While)) else None

    def calls(self) -> list[tuple[str, ast.Call]]:
        """(dotted name, call) for every call on the line whose function is a dotted name, outermost first."""
        found = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                name = dotted(node.func)
                if name:
                    found.append((name, node))
        return found

    def text(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ast.unparse(node)


def _written(use: str, when: str) -> Fix:
    """A fix written wholly from the line's own code (no placeholder such as ``body_fn``): one that can
    be tried on the line's values."""
    return Fix(use, when, from_line=True)


def read_line(code: str, filename: str = "", lineno: int = 0) -> LineCode | None:
    """The line parsed as one statement; None when it is not one on its own (part of a longer one).
    With its file and line number, an ``if`` that only chooses a value is read with its branches."""
    source = _without_comment(code.strip())
    if source.startswith("elif "):
        source = source[2:]
    if source.endswith(":"):
        source += " pass"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    statement = {ast.Assert: "assert", ast.If: "if", ast.While: "while", ast.For: "for"}.get(type(node), "")
    choice = _if_choice(filename, lineno) if statement == "if" and filename else None
    update = _while_update(filename, lineno) if statement == "while" and filename else None
    raises = _if_raises(filename, lineno) if statement == "if" and filename else None
    return LineCode(tree, source, statement, choice, update, raises)


def _if_raises(filename: str, lineno: int) -> str | None:
    """The message of the ``raise`` that is the whole body of the ``if`` at ``lineno`` (a check of the
    inputs: ``if jnp.any(x < 0): raise ValueError("negative")``); None for any other ``if``."""
    found = _statement_at(filename, lineno, ast.If)
    if found is None:
        return None
    source, node, _ = found
    if len(node.body) != 1 or not isinstance(node.body[0], ast.Raise) or node.orelse:  # type: ignore[attr-defined]
        return None
    raised = node.body[0].exc  # type: ignore[attr-defined]
    if isinstance(raised, ast.Call) and raised.args:
        return ast.get_source_segment(source, raised.args[0]) or ast.unparse(raised.args[0])
    return '"..."'


def _statement_at(filename: str, lineno: int, kind: type) -> tuple[str, ast.stmt, ast.stmt | None] | None:
    """(the file's source, the ``kind`` statement starting at ``lineno``, the statement after it)."""
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for parent in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(parent, field, None)
            if not isinstance(block, list):
                continue
            for position, node in enumerate(block):
                if isinstance(node, kind) and node.lineno == lineno:
                    return source, node, block[position + 1] if position + 1 < len(block) else None
    return None


def _if_choice(filename: str, lineno: int) -> tuple[str, str, str] | None:
    """(receiver, value if true, value if false) of the ``if`` at ``lineno`` when each branch is one
    ``return v`` (or the ``return`` right after an ``if`` without ``else``) or one ``y = v`` to the same
    name: ``if x > limit: return limit`` / ``return x`` -> ("return", "limit", "x")."""
    found = _statement_at(filename, lineno, ast.If)
    if found is None:
        return None
    source, node, after = found
    assert isinstance(node, ast.If)
    return _branches(source, node, after)


def _while_update(filename: str, lineno: int) -> tuple[str, str] | None:
    """(the name, its new value) of a ``while`` at ``lineno`` whose body is one assignment to one name:
    ``while jnp.abs(delta) > tol: delta = delta / 2`` -> ("delta", "delta / 2")."""
    found = _statement_at(filename, lineno, ast.While)
    if found is None:
        return None
    source, node, _ = found
    assert isinstance(node, ast.While)
    if node.orelse or len(node.body) != 1:
        return None
    body = node.body[0]
    if isinstance(body, ast.Assign) and len(body.targets) == 1 and isinstance(body.targets[0], ast.Name):
        value = ast.get_source_segment(source, body.value)
        return (body.targets[0].id, value) if value else None
    if isinstance(body, ast.AugAssign) and isinstance(body.target, ast.Name):
        value = ast.get_source_segment(source, body.value)
        operator = _AUGMENTED.get(type(body.op))
        if not isinstance(body.value, (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)):
            value = f"({value})"  # x *= a + b is x * (a + b)
        return (body.target.id, f"{body.target.id} {operator} {value}") if value and operator else None
    return None


_AUGMENTED = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Pow: "**"}


def _branches(source: str, node: ast.If, after: ast.stmt | None) -> tuple[str, str, str] | None:
    def text(value: ast.expr) -> str:
        written = ast.get_source_segment(source, value) or ""
        # `return x, y` is a tuple: written inside a lambda or a call it needs its parentheses
        return f"({written})" if isinstance(value, ast.Tuple) and not written.startswith("(") else written

    def one(block: list[ast.stmt]) -> tuple[str, str] | None:
        if len(block) != 1:
            return None
        statement = block[0]
        if isinstance(statement, ast.Return) and statement.value is not None:
            return "return", text(statement.value)
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            return statement.targets[0].id, text(statement.value)
        return None

    true = one(node.body)
    false = one(node.orelse) if node.orelse else (one([after]) if after is not None else None)
    if true is None or false is None or true[0] != false[0] or not true[1] or not false[1]:
        return None
    if not node.orelse and true[0] != "return":
        return None  # `if c: y = a` then `y = b`: b overwrites, not an else
    return true[0], true[1], false[1]


def _without_comment(source: str) -> str:
    """The line without its trailing ``# comment`` (a ``#`` inside a string stays)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    return source[: comment.start[1]].rstrip() if comment is not None and comment.start[0] == 1 else source


def dotted(node: ast.AST) -> str:
    """ "np.linalg.norm" for that attribute chain of names; "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def fit(
    kind: str,
    fixes: Sequence[Fix],
    line: LineCode | None,
    traced: Sequence[Traced],
    resolve: Callable[[str], Any] = lambda name: None,
) -> list[Fix]:
    """The fixes of ``kind`` that apply to ``line``, written with its code, best first.

    ``traced`` are the names on the line bound to tracers; ``resolve`` gives (the object, the
    name of the module it was found in) for a dotted name on the line (None when unknown), to
    tell a NumPy or SciPy function from another library's.
    """
    if line is None:
        return list(fixes)
    names = {t.name for t in traced}
    fitting = _FITTERS.get(kind)
    return list(fixes) if fitting is None else fitting(list(fixes), line, names, traced, resolve)


def _uses(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _drop(fixes: list[Fix], *starts: str) -> list[Fix]:
    return [f for f in fixes if not f.use.startswith(starts)]


def _static(fixes: list[Fix]) -> list[Fix]:
    return [f for f in fixes if "static_argnames" in f.use]


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


def _fit_bool(fixes, line, names, traced, resolve):
    static = _static(fixes)
    test = line.test
    if line.statement == "assert" and test is not None:
        message = line.tree.body[0].msg  # type: ignore[attr-defined]
        said = line.text(message) if message is not None else '"..."'
        return [
            _written(
                f"checkify.check({line.text(test)}, {said})",
                "keep the check in the compiled program: from jax.experimental import checkify; call the jitted "
                "function as checkify.checkify(f)(...), which returns (err, out); err.throw() raises your message",
            ),
            Fix(
                "the assert outside the traced function",
                "the check is about the inputs: assert on them before the call, where they are concrete",
            ),
            *static,
        ]
    condition = _jnp_condition(line, test) if test is not None else "cond"
    if line.raises is not None and test is not None:  # `if bad: raise ...` is a check, like an assert
        return [
            _written(
                f"checkify.check(jnp.logical_not({condition}), {line.raises})",
                "keep the check in the compiled program: from jax.experimental import checkify; call the jitted "
                "function as checkify.checkify(f)(...), which returns (err, out); err.throw() raises your message",
            ),
            Fix(
                "the check outside the traced function",
                "the check is about the inputs: test them before the call, where they are concrete",
            ),
            *static,
        ]
    if line.statement == "while" and line.update is not None and test is not None:
        name, value = line.update
        if _uses(test, {name}):
            written = f"{name} = lax.while_loop(lambda {name}: {condition}, lambda {name}: {value}, {name})"
            return [_written(written, _when(fixes, "lax.while_loop") + ": the loop's one variable is its state")] + [
                f for f in fixes if not f.use.startswith(("jnp.where", "lax.cond", "lax.while_loop"))
            ]
    if line.statement == "while":
        return [Fix(f"lax.while_loop(lambda state: {condition}, body_fn, init)", _when(fixes, "lax.while_loop"))] + [
            f for f in fixes if not f.use.startswith(("jnp.where", "lax.cond", "lax.while_loop"))
        ]
    if test is None:
        bool_ops = [n for n in ast.walk(line.tree) if isinstance(n, ast.BoolOp) and _uses(n, names)]
        if bool_ops:
            written = _jnp_condition(line, bool_ops[0])
            return [
                _written(written, "and/or/not call bool() on their operands; the jax.numpy functions work elementwise"),
                *_drop(fixes, "lax.while_loop"),
            ]
    if line.choice is not None and test is not None:
        receiver, if_true, if_false = line.choice
        where = f"jnp.where({condition}, {if_true}, {if_false})"
        written = where if receiver == "return" else f"{receiver} = {where}"
        return [
            _written(written, "the if only chooses a value: both are computed, one is kept elementwise"),
            _written(f"lax.cond({condition}, lambda: {if_true}, lambda: {if_false})", _when(fixes, "lax.cond")),
            *_drop(fixes, "lax.while_loop", "jnp.where", "lax.cond"),
        ]
    rewritten = []
    for fix in _drop(fixes, "lax.while_loop"):
        if fix.use.startswith("jnp.where"):
            fix = dataclasses.replace(fix, use=f"jnp.where({condition}, a, b)")
        elif fix.use.startswith("lax.cond"):
            fix = dataclasses.replace(fix, use=f"lax.cond({condition}, true_fn, false_fn, operand)")
        rewritten.append(fix)
    return rewritten


def _when(fixes: list[Fix], start: str) -> str:
    return next((f.when for f in fixes if f.use.startswith(start)), "")


# -- a traced value used as a Python int ------------------------------------------------------------


def _fit_int(fixes, line, names, traced, resolve):
    found: list[Fix] = []
    for name, call in line.calls():
        if name == "range" and call.args and any(_uses(a, names) for a in call.args):
            bounds = [line.text(a) for a in call.args[:2]]
            lower, upper = (["0", *bounds] if len(bounds) == 1 else bounds)[:2]
            found.append(Fix(f"lax.fori_loop({lower}, {upper}, body, init)", _when(fixes, "lax.fori_loop")))
            break
    for node in ast.walk(line.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and _uses(node.func.slice, names):
            chosen, index = line.text(node.func.value), line.text(node.func.slice)
            operands = ", ".join(line.text(a) for a in node.args) or "operand"
            found.append(
                _written(
                    f"lax.switch({index}, {chosen}, {operands})",
                    "pick one of several functions by a traced index: every branch is traced, one runs",
                )
            )
            break
        if isinstance(node, ast.Subscript) and _uses(node.slice, names) and not _uses(node.value, names):
            container, index = line.text(node.value), line.text(node.slice)
            found.append(_written(f"jnp.asarray({container})[{index}]", _when(fixes, "jnp.asarray")))
            break
    return found + _static(fixes) if found else _drop(fixes, "lax.fori_loop", "jnp.asarray")


# -- a traced value converted to a NumPy array ------------------------------------------------------


def _twin(module: str, name: str) -> str:
    """The JAX function standing in for NumPy's or SciPy's ``module.name`` (``jnp.linalg.norm``), ""
    when JAX has none."""
    root, _, rest = module.partition(".")
    if root not in ("numpy", "scipy"):
        return ""
    public = ".".join(part for part in rest.split(".") if part and not part.startswith("_"))
    jax_path = ".".join(filter(None, ["jax.numpy" if root == "numpy" else "jax.scipy", public]))
    try:
        jax_module = importlib.import_module(jax_path)
    except ImportError:
        return ""
    if not callable(getattr(jax_module, name, None)):
        return ""
    return f"{jax_path.replace('jax.numpy', 'jnp', 1)}.{name}"


def _is_library(module: str) -> bool:
    """An installed library other than NumPy (SciPy, scikit-learn, ...), not a module of the user's."""
    root = module.split(".")[0]
    if root in ("numpy", "jaxmagic", "__main__"):
        return False
    file = getattr(sys.modules.get(root), "__file__", None)
    return bool(file) and not is_user_file(file)


def _fit_array(fixes, line, names, traced, resolve):
    twins: dict[ast.AST, str] = {}
    foreign: list[tuple[str, ast.Call]] = []  # library functions without a JAX twin
    for name, call in line.calls():
        found = resolve(name)
        if found is None:
            continue
        value, module = found
        if not callable(value) or module.split(".")[0] in ("jax", "jaxlib", "builtins", ""):
            continue
        twin = _twin(module, name.rsplit(".", 1)[-1])
        if twin:
            twins[call.func] = twin
        elif _uses(call, names) and _is_library(module):
            foreign.append((name, call))
    if foreign:
        name, call = foreign[0]
        operand = next((line.text(a) for a in call.args if _uses(a, names)), "x")
        return [
            _written(
                f"jax.pure_callback({name}, jax.ShapeDtypeStruct({operand}.shape, {operand}.dtype), {operand})",
                f"{name} has no JAX version: call it from the compiled program on the values (it receives NumPy "
                "arrays), declaring the result's shape and dtype (not differentiable)",
            )
        ]
    if not twins:
        return fixes
    statement = line.tree.body[0]
    rewritten = _replace_functions(line, statement, twins)
    return [_written(rewritten, "the same functions from jax.numpy / jax.scipy, which trace")]


def _replace_functions(line: LineCode, statement: ast.stmt, twins: dict[ast.AST, str]) -> str:
    """The statement's text with the function expressions in ``twins`` replaced."""
    text = line.source
    spans = []
    for node, twin in twins.items():
        start = _offset(text, node.lineno, node.col_offset)
        end = _offset(text, node.end_lineno or node.lineno, node.end_col_offset or 0)
        spans.append((start, end, twin))
    for start, end, twin in sorted(spans, reverse=True):
        text = text[:start] + twin + text[end:]
    text = text.removesuffix(" pass").strip()
    # `return f(x)` / `f(x)`: the expression is what to write; an assignment stays whole
    return text.removeprefix("return ") if isinstance(statement, (ast.Return, ast.Expr)) else text


def _offset(text: str, lineno: int, col: int) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(x) for x in lines[: lineno - 1]) + len(lines[lineno - 1].encode()[:col].decode())


# -- a concrete value needed --------------------------------------------------------------------------

_CONVERSIONS = ("float", "int", "complex", "bool")
_SIZED_OUTPUTS = ("nonzero", "argwhere", "flatnonzero", "unique", "unique_values", "unique_counts", "where")
_SHAPE_MAKERS = (
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "linspace",
    "eye",
    "tile",
    "repeat",
    "reshape",
    "broadcast_to",
    "split",
    "array_split",
)


def _conversion_argument(line: LineCode, name: str, call: ast.Call) -> str:
    """ "loss" of ``float(loss)`` / ``loss.item()``; "" for a call that is no conversion."""
    if name in _CONVERSIONS and len(call.args) == 1:
        return line.text(call.args[0])
    if name.endswith((".item", ".tolist")) and isinstance(call.func, ast.Attribute):
        return line.text(call.func.value)
    return ""


def _called(line: LineCode, call: ast.Call) -> str:
    """ "float()" of ``float(loss)``, ".item()" of ``loss.item()``."""
    if isinstance(call.func, ast.Attribute):
        return f".{call.func.attr}()"
    return f"{line.text(call.func)}()"


def _debug_print(line: LineCode, call: ast.Call) -> str:
    """``print("loss", float(loss))`` written as ``jax.debug.print("loss {}", loss)``."""
    parts, values = [], []

    def value_of(node: ast.expr) -> str:
        if isinstance(node, ast.Call):
            inner = _conversion_argument(line, dotted(node.func), node)
            if inner:
                return inner
        return line.text(node)

    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            parts.append(arg.value.replace("{", "{{").replace("}", "}}"))
        elif isinstance(arg, ast.JoinedStr):
            piece = ""
            for value in arg.values:
                if isinstance(value, ast.Constant):
                    piece += str(value.value).replace("{", "{{").replace("}", "}}")
                elif isinstance(value, ast.FormattedValue):
                    spec = ""
                    if isinstance(value.format_spec, ast.JoinedStr):
                        spec = ":" + "".join(
                            str(v.value) for v in value.format_spec.values if isinstance(v, ast.Constant)
                        )
                    piece += "{" + spec + "}"
                    values.append(value_of(value.value))
            parts.append(piece)
        else:
            parts.append("{}")
            values.append(value_of(arg))
    form = " ".join(parts)
    quoted = f'"{form}"' if '"' not in form else repr(form)
    return f"jax.debug.print({', '.join([quoted, *values])})"


def _fit_concrete(fixes, line, names, traced, resolve):
    calls = line.calls()
    converted = [(c, arg) for n, c in calls if (arg := _conversion_argument(line, n, c)) and _uses(c, names)]
    printing = next((c for n, c in calls if n == "print" and _uses(c, names)), None)
    sized = [(n, c) for n, c in calls if n.rsplit(".", 1)[-1] in _SIZED_OUTPUTS and c.args]
    sized = [(n, c) for n, c in sized if not (n.endswith("where") and len(c.args) != 1)]
    shaped = any(n.rsplit(".", 1)[-1] in _SHAPE_MAKERS for n, _ in calls)
    found: list[Fix] = []
    # math.exp(x), math.sqrt(x) on a traced value: float() is called on it; jnp has the same function
    twins = {}
    for name, call in calls:
        resolved = resolve(name) if _uses(call, names) else None
        if resolved is not None and resolved[1] == "math":
            import jax.numpy as jnp

            last = name.rsplit(".", 1)[-1]
            if callable(getattr(jnp, last, None)):
                twins[call.func] = f"jnp.{last}"
    if twins:
        rewritten = _replace_functions(line, line.tree.body[0], twins)
        found.append(_written(rewritten, "the math module converts its argument to a Python float; jnp traces"))
    if printing is not None:
        found.append(
            _written(
                _debug_print(line, printing),
                "print a traced value: print() runs once, while the function is traced, before any value "
                "exists; jax.debug.print prints the values at every call of the compiled program",
            )
        )
    if sized:
        name, call = sized[0]
        fill = "" if "unique" in name else ", fill_value=-1"
        found.append(
            Fix(
                f"{name}({line.text(call.args[0])}, size=k{fill})",
                "give the output size: at most k results, padded; leave the padding out of what you compute next",
            )
        )
    repeated = next((c for n, c in calls if n.endswith("repeat") and len(c.args) >= 2 and _uses(c, names)), None)
    if repeated is not None and not any(k.arg == "total_repeat_length" for k in repeated.keywords):
        written = ", ".join([*(line.text(a) for a in repeated.args), *(line.text(k) for k in repeated.keywords)])
        found.append(
            Fix(
                f"{dotted(repeated.func)}({written}, total_repeat_length=N)",
                "the repeat counts are data: give the output's length N (a setting or a shape); the output is "
                "cut or padded to it",
            )
        )
    kept = []
    for fix in fixes:
        if fix.use.startswith("stay in JAX"):
            if not converted or printing is not None:
                continue
            call, arg = converted[0]
            fix = Fix(
                f"stay in JAX: {arg} as an array instead of {line.text(call)} (.astype(...) for a dtype)",
                "the Python number was only a means to compute; a size, a loop count or a branch needs "
                "one of the other fixes",
            )
        elif fix.use.startswith("jnp.nonzero"):
            continue  # written from the line's own call above, where it has one
        elif fix.use.startswith("a fixed size"):
            if printing is not None or not (shaped or sized or any(n == "int" for n, _ in calls)):
                continue
        kept.append(fix)
    if converted and printing is None:
        call, arg = converted[0]
        kept.append(
            Fix(
                f"return {arg} from the traced function and call {_called(line, call)} on the result",
                "the number is needed outside the computation (a log, a list of losses, a Python decision)",
            )
        )
    return found + kept


# -- an array shape from a traced value -------------------------------------------------------------


def _fit_shape(fixes, line, names, traced, resolve):
    # A size made from array data (``n = jnp.sum(mask)``) cannot be a setting: no weakly typed
    # Python number on the line means the size is data, and a fixed size with a mask comes first.
    if traced and not any(t.weak_type for t in traced):
        return sorted(fixes, key=lambda f: not f.use.startswith("a fixed size"))
    return fixes


# -- slice bounds from a traced value ---------------------------------------------------------------


def _fit_slice(fixes, line, names, traced, resolve):
    for node in ast.walk(line.tree):
        if not isinstance(node, ast.Subscript):
            continue
        axes = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for axis, piece in enumerate(axes):
            if isinstance(piece, ast.Slice) and _uses(piece, names) and piece.step is None:
                return _slice_fixes(fixes, line, node, axis, piece, names)
    return fixes


def _slice_fixes(fixes, line, node: ast.Subscript, axis: int, piece: ast.Slice, names: set[str]) -> list[Fix]:
    array = line.text(node.value)
    start = line.text(piece.lower) if piece.lower is not None else "0"
    upper = piece.upper
    if upper is None:
        size = f"{array}.shape[{axis}] - {start}"
    elif (
        isinstance(upper, ast.BinOp)
        and isinstance(upper.op, ast.Add)
        and piece.lower is not None
        and ast.dump(upper.left) == ast.dump(piece.lower)
    ):
        size = line.text(upper.right)
    else:
        size = f"{line.text(upper)} - {start}" if piece.lower is not None else line.text(upper)
    size_node = ast.parse(size, mode="eval")
    size_traced = sorted({n.id for n in ast.walk(size_node) if isinstance(n, ast.Name) and n.id in names})
    needs = (
        f"; {', '.join(f'`{n}`' for n in size_traced)} must then be static (the length is a shape)"
        if size_traced
        else ""
    )
    updating = isinstance(node.value, ast.Attribute) and node.value.attr == "at"
    if updating:
        target = line.text(node.value.value)
        setter = next(
            (
                n
                for n in ast.walk(line.tree)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.value is node
                and n.func.attr == "set"
                and len(n.args) == 1
            ),
            None,
        )
        when = "write a window at a traced position; the update's length is fixed" + needs
        if setter is not None:  # x.at[i:i + k].set(v): the update is v
            update = line.text(setter.args[0])
            found = [_written(f"lax.dynamic_update_slice_in_dim({target}, {update}, {start}, axis={axis})", when)]
        else:
            found = [Fix(f"lax.dynamic_update_slice_in_dim({target}, update, {start}, axis={axis})", when)]
    else:
        leading = ":, " * axis
        found = [
            _written(
                f"lax.dynamic_slice_in_dim({array}, {start}, {size}, axis={axis})",
                "the start is data, the length is fixed" + needs,
            ),
            _written(f"{array}[{leading}jax.ds({start}, {size})]", "the same with indexing syntax" + needs),
        ]
    static = _static(fixes)
    if size_traced and static:  # the length, not the start, is what must be a setting
        written = re.sub(r"static_argnames=\([^)]*\)", f"static_argnames={tuple(size_traced)!r}", static[0].use)
        static = [dataclasses.replace(static[0], use=written, when="the length is a setting, not data")]
    return found + static


# -- a tracer stored outside the traced function (a leak) -------------------------------------------


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
    value = None
    if line is not None:
        node = line.tree.body[0]
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            value = node.value
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.value.args:
            value = node.value.args[-1]  # history.append(h), cache.setdefault(k, h)
    if value is None:
        return list(fixes)
    kept = line.text(value)
    if traced and function and function.rsplit(".", 1)[-1] != traced.rsplit(".", 1)[-1] and not loop_body:
        # stored by a function the traced one calls (self._remember(h)): the traced one returns the value
        return [
            Fix(
                f"return the value from {traced}",
                f"`{line.source}` in `{function}`, which `{traced}` calls, keeps a traced value: drop it and "
                f"return the value from `{traced}` (under jax.grad, with has_aux=True)",
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
    items = value.elts if isinstance(value, ast.Tuple) else [value]
    return [ast.get_source_segment(source, item) or ast.unparse(item) for item in items]


# -- boolean masks ------------------------------------------------------------------------------

_AT_UPDATES = {
    "set": "jnp.where({mask}, {v}, {x})",
    "add": "{x} + jnp.where({mask}, {v}, 0)",
    "multiply": "jnp.where({mask}, {x} * {v}, {x})",
    "min": "jnp.where({mask}, jnp.minimum({x}, {v}), {x})",
    "max": "jnp.where({mask}, jnp.maximum({x}, {v}), {x})",
}


def _fit_bool_index(fixes, line, names, traced, resolve):
    """``x.at[mask].set(v)`` is ``jnp.where(mask, v, x)`` (the table's ``jnp.where(mask, x, 0)`` zeroes
    what such a line keeps); ``x[mask].sum()`` / ``.mean()`` keep the shape and mask the reduction."""
    for node in ast.walk(line.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) == 1):
            continue
        target = node.func.value
        at = target.value if isinstance(target, ast.Subscript) else None
        if not (isinstance(at, ast.Attribute) and at.attr == "at" and _uses(target.slice, names)):
            continue
        pattern = _AT_UPDATES.get(node.func.attr)
        if pattern is None:
            continue
        x, mask, v = line.text(at.value), line.text(target.slice), line.text(node.args[0])
        return [
            _written(
                pattern.format(x=x, mask=mask, v=v),
                f"the same update where `{mask}` holds, every other entry kept - the shape stays known",
            )
        ] + _with_mask(fixes, mask)
    for node in ast.walk(line.tree):
        if not (isinstance(node, ast.Subscript) and _uses(node.slice, names)):
            continue
        x, mask = line.text(node.value), line.text(node.slice)
        reduce = _reduction_of(line, node)
        if reduce == "sum":
            written = _written(f"jnp.sum(jnp.where({mask}, {x}, 0))", "sum over the masked entries, shape kept")
        elif reduce == "mean":
            written = _written(
                f"jnp.sum(jnp.where({mask}, {x}, 0)) / jnp.sum({mask})",
                "mean over the masked entries, shape kept (0/0 when none is set)",
            )
        else:
            written = _written(
                f"jnp.where({mask}, {x}, 0)",
                "keep the shape, zero the entries outside the mask; then reduce with the mask",
            )
        return [written] + _with_mask(fixes, mask)
    return fixes


def _with_mask(fixes: list[Fix], mask: str) -> list[Fix]:
    """The table's other fixes, with the line's mask for ``mask`` (its jnp.where one is replaced)."""
    return [
        dataclasses.replace(f, use=f.use.replace("(mask,", f"({mask},"))
        for f in fixes
        if not f.use.startswith("jnp.where(mask")
    ]


def _reduction_of(line: LineCode, subscript: ast.Subscript) -> str:
    """ "sum" / "mean" when the masked subscript is reduced at once: ``x[m].sum()``, ``jnp.mean(x[m])``."""
    for node in ast.walk(line.tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.value is subscript and not node.args:
            return node.func.attr if node.func.attr in ("sum", "mean") else ""
        name = dotted(node.func)
        if name in ("jnp.sum", "jnp.mean") and node.args and node.args[0] is subscript and len(node.args) == 1:
            return name.split(".")[1]
    return ""


_FITTERS: dict[str, Callable[..., list[Fix]]] = {
    "bool_index": _fit_bool_index,
    "bool": _fit_bool,
    "int": _fit_int,
    "array": _fit_array,
    "concrete": _fit_concrete,
    "shape": _fit_shape,
    "slice": _fit_slice,
}
