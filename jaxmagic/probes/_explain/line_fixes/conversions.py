"""Fitters for a traced value converted to a NumPy array (``np.sin(x)``, a SciPy function) and for a
concrete value needed from one (``float(x)``, ``print``, ``jnp.nonzero(x)``, ``math.exp(x)``)."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Sequence

import jax.numpy as jnp

from jaxmagic.probes._support.fixes.fix import Fix, written_fix
from jaxmagic.probes._support.fixes.line_code import LineCode, Resolve, Traced, dotted, uses
from jaxmagic.usercode.source import is_user_file

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


def fit_array(
    fixes: list[Fix], line: LineCode, names: set[str], traced: Sequence[Traced], resolve: Resolve
) -> list[Fix]:
    twins: dict[ast.expr, str] = {}
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
        elif uses(call, names) and _is_library(module):
            foreign.append((name, call))
    twins.update(_numpy_functions_given(line, resolve))
    if foreign:
        name, call = foreign[0]
        operand = next((line.text(a) for a in call.args if uses(a, names)), "x")
        return [
            written_fix(
                f"jax.pure_callback({name}, jax.ShapeDtypeStruct({operand}.shape, {operand}.dtype), {operand})",
                f"{name} has no JAX version: call it from the compiled program on the values (it receives NumPy "
                "arrays), declaring the result's shape and dtype (not differentiable)",
            )
        ]
    if not twins:
        return fixes
    statement = line.tree.body[0]
    rewritten = _replace_functions(line, statement, twins)
    return [written_fix(rewritten, "the same functions from jax.numpy / jax.scipy, which trace")]


def _numpy_functions_given(line: LineCode, resolve: Resolve) -> dict[ast.expr, str]:
    """NumPy's functions the line hands to another call (``jax.jit(np.asarray)(xs)``, ``jax.vmap(np.sin)``):
    the transformation traces them, and they convert their traced argument - their JAX twins trace."""
    found: dict[ast.expr, str] = {}
    for _name, call in line.calls():
        for argument in call.args:
            if not isinstance(argument, (ast.Attribute, ast.Name)):
                continue
            resolved = resolve(dotted(argument))
            if resolved is None or not callable(resolved[0]) or resolved[1].split(".")[0] != "numpy":
                continue
            twin = _twin(resolved[1], dotted(argument).rsplit(".", 1)[-1])
            if twin:
                found[argument] = twin
    return found


def _replace_functions(line: LineCode, statement: ast.stmt, twins: dict[ast.expr, str]) -> str:
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


def _fixed_window(line: LineCode, call: ast.Call) -> str:
    """``jnp.arange(2) + (x[0] - 1)`` for ``jnp.arange(x[0] - 1, x[0] + 1)``: a range whose stop is its start
    plus a fixed number (both written as one expression plus or minus a literal), any step 1; "" otherwise."""
    if len(call.args) != 2 or any(k.arg != "dtype" for k in call.keywords):
        return ""
    start, stop = (_base_and_offset(a) for a in call.args)
    if start is None or stop is None or ast.dump(start[0]) != ast.dump(stop[0]):
        return ""
    length = stop[1] - start[1]
    if not isinstance(length, int) or length <= 0:
        return ""
    first = line.text(call.args[0])
    first = first if isinstance(call.args[0], (ast.Name, ast.Attribute, ast.Subscript)) else f"({first})"
    dtype = "".join(f", {line.text(k)}" for k in call.keywords)
    return f"{line.text(call.func)}({length}{dtype}) + {first}"


def _base_and_offset(node: ast.expr) -> tuple[ast.expr, int | float] | None:
    """(E, c) for ``E + c``, ``E - c``, ``c + E`` or ``E`` itself (c 0), c an int literal; None otherwise."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        right, left = node.right, node.left
        if isinstance(right, ast.Constant) and type(right.value) is int:
            return left, right.value if isinstance(node.op, ast.Add) else -right.value
        if isinstance(node.op, ast.Add) and isinstance(left, ast.Constant) and type(left.value) is int:
            return right, left.value
    if isinstance(node, ast.Constant):
        return None  # a literal start or stop: the length is not the question
    return node, 0


def fit_concrete(
    fixes: list[Fix], line: LineCode, names: set[str], traced: Sequence[Traced], resolve: Resolve
) -> list[Fix]:
    calls = line.calls()
    converted = [(c, arg) for n, c in calls if (arg := _conversion_argument(line, n, c)) and uses(c, names)]
    printing = next((c for n, c in calls if n == "print" and uses(c, names)), None)
    sized = [(n, c) for n, c in calls if n.rsplit(".", 1)[-1] in _SIZED_OUTPUTS and c.args]
    sized = [(n, c) for n, c in sized if not (n.endswith("where") and len(c.args) != 1)]
    shaped = any(n.rsplit(".", 1)[-1] in _SHAPE_MAKERS for n, _ in calls)
    found: list[Fix] = []
    # math.exp(x), math.sqrt(x) on a traced value: float() is called on it; jnp has the same function
    twins: dict[ast.expr, str] = {}
    for name, call in calls:
        resolved = resolve(name) if uses(call, names) else None
        if resolved is not None and resolved[1] == "math":
            last = name.rsplit(".", 1)[-1]
            if callable(getattr(jnp, last, None)):
                twins[call.func] = f"jnp.{last}"
    if twins:
        rewritten = _replace_functions(line, line.tree.body[0], twins)
        found.append(written_fix(rewritten, "the math module converts its argument to a Python float; jnp traces"))
    if printing is not None:
        found.append(
            written_fix(
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
    repeated = next((c for n, c in calls if n.endswith("repeat") and len(c.args) >= 2 and uses(c, names)), None)
    if repeated is not None and not any(k.arg == "total_repeat_length" for k in repeated.keywords):
        written = ", ".join([*(line.text(a) for a in repeated.args), *(line.text(k) for k in repeated.keywords)])
        found.append(
            Fix(
                f"{dotted(repeated.func)}({written}, total_repeat_length=N)",
                "the repeat counts are data: give the output's length N (a setting or a shape); the output is "
                "cut or padded to it",
            )
        )
    window = next((w for n, c in calls if n.rsplit(".", 1)[-1] == "arange" and (w := _fixed_window(line, c))), None)
    if window is not None:
        found.append(
            written_fix(
                window,
                "the length is fixed (stop - start does not depend on the traced value): only the start is data, "
                "so make a fixed-length range and add the start to it",
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
