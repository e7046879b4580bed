"""Fixes that apply to the program: ``static_argnames`` only for a parameter of the jitted function,
for a value a jax.numpy call made from static values the Python expression that keeps it static,
and each fix tried - a static one by tracing the user's jitted function again with the same
arguments (nothing compiles), one written from the line on the shapes of its values."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import io
import linecache
import re
import sys
import types
from collections.abc import Callable

import jax

from jaxmagic._jax.transform_stack import Frames, Transformation, jit_call, jit_caller
from jaxmagic.probes._explain.branch_fixes import branch_operand_fix
from jaxmagic.probes._explain.fixes import NEW_PARAMETER
from jaxmagic.probes._explain.frames import innermost_user_frame
from jaxmagic.probes._explain.kinds import classify
from jaxmagic.probes._explain.library_static import (
    callable_static_fix,
    library_jit_call,
    library_static_fix,
)
from jaxmagic.probes._explain.line_fixes import trial as fix_trial
from jaxmagic.probes._explain.loop_fixes import carried_value_fix
from jaxmagic.probes._explain.report import TracerErrorReport
from jaxmagic.probes._leaks.tracers import text
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import is_user_file, source_line

# jax.numpy calls and what computes the same on static values, kept concrete: an operator, a Python
# or ``math`` function ("" for a conversion that is dropped: ``jnp.asarray(n)`` is ``n``)
_BINARY = {
    "add": "+",
    "subtract": "-",
    "multiply": "*",
    "divide": "/",
    "true_divide": "/",
    "floor_divide": "//",
    "power": "**",
    "mod": "%",
    "remainder": "%",
}
_PYTHON = {
    "ceil": "math.ceil",
    "floor": "math.floor",
    "sqrt": "math.sqrt",
    "log": "math.log",
    "log2": "math.log2",
    "exp": "math.exp",
    "prod": "math.prod",
    "sum": "sum",
    "maximum": "max",
    "minimum": "min",
    "abs": "abs",
    "round": "round",
    "int32": "int",
    "int64": "int",
    "asarray": "",
    "array": "",
}


def _jnp_call(node: ast.AST) -> str:
    """ "add" for a call of ``jnp.add`` / ``jax.numpy.add``, else ""."""
    func = getattr(node, "func", None)
    if not isinstance(func, ast.Attribute):
        return ""
    owner = func.value
    if isinstance(owner, ast.Name) and owner.id == "jnp":
        return func.attr
    if isinstance(owner, ast.Attribute) and owner.attr == "numpy" and getattr(owner.value, "id", "") == "jax":
        return func.attr
    return ""


def static_expression(code: str) -> tuple[str, str] | None:
    """(the jax.numpy call on a line, the Python/NumPy expression computing the same from static values):
    ``n = jnp.add(x.size, 1)`` -> ("jnp.add(x.size, 1)", "x.size + 1"); None when the line has no such call."""
    source = code.strip()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        op = _jnp_call(node)
        if not op or node.keywords:
            continue
        original = ast.get_source_segment(source, node) or ast.unparse(node)
        args = [ast.get_source_segment(source, a) or ast.unparse(a) for a in node.args]
        if op in _BINARY and len(args) == 2:
            return original, f"{args[0]} {_BINARY[op]} {args[1]}"
        if op in _PYTHON and len(args) >= 1:
            name = _PYTHON[op]
            return original, f"{name}({', '.join(args)})" if name else args[0]
        return original, f"np.{op}({', '.join(args)})"
    return None


def names_jit(use: str) -> bool:
    """A fix that tells the user to change a jit: static arguments, or ``jax.jit(...)`` itself."""
    return "static_argnums" in use or "static_argnames" in use or "jax.jit" in use


def _static_names(use: str) -> list[str]:
    """The names of a ``static_argnames=('n',)`` fix; [] for none or a pattern ``(...)``."""
    match = re.search(r"static_argnames=\(([^)]*)\)", use)
    if match is None:
        return []
    return re.findall(r"'(\w+)'", match.group(1))


def fit_static_fixes(
    report: TracerErrorReport, inside: list[Transformation], frames: Frames, tb: types.TracebackType | None = None
) -> None:
    """Make the fixes apply to this program: static_argnames only for a parameter of the jitted function
    (from its code); for a value a jax.numpy call computed from static values, the expression that keeps
    it static; a static_argnames fix tried on the user's own function with the same arguments."""
    jits = {t.function.rsplit(".", 1)[-1]: t for t in inside if t.name == "jit"}  # innermost wins

    def jit_of(fix: Fix) -> Transformation | None:
        return jits.get(_jitted_name(fix.use).rsplit(".", 1)[-1]) if _static_names(fix.use) else None

    parameters = _parameters_of_frames(frames)  # for a function no jit on the stack traced

    def applies(fix: Fix) -> bool:
        if names_jit(fix.use) and not jits and (inside or report.transformation != "jit"):
            return False  # a bare scan, vmap, grad: no jit of the user's to give static arguments to
        names = set(_static_names(fix.use))
        if not names or fix.checked == NEW_PARAMETER:  # a parameter the fix adds is not one the function has yet
            return True
        jitted = jit_of(fix)
        if jitted is not None:
            return names <= set(jitted.parameters)
        known = parameters.get(_jitted_name(fix.use).rsplit(".", 1)[-1])
        return known is None or names <= known

    fixes = [f for f in report.fixes if applies(f)]
    made = report.provenance.made_at if report.provenance is not None else None
    # only for a value JAX says it made from static inputs alone (literals in its operation)
    static_made = made is not None and any(
        op.static_inputs and (op.file, op.line) == (made.filename, made.lineno)
        for op in text.traced_operations(report.jax_message_text)
    )
    expression = static_expression(made.code) if made is not None and static_made else None
    if expression is not None and made is not None:
        original, static = expression
        fixes.insert(
            0,
            Fix(
                static,
                f"instead of `{original}` in `{made.code}` ({made.where}): a jax.numpy operation makes a traced "
                "value under jit even when its inputs are static (shapes, sizes, Python numbers); Python, `math` "
                "or NumPy arithmetic on them stays a concrete number",
                "suggestion: not tried (it changes your code)",
            ),
        )
    tried = []
    line_trial = _line_trial(report, fixes, jits, frames, tb)
    # A library's jit wrapper (eqx.filter_jit, nnx.jit) the user called: "make it static" in its own form.
    library = library_jit_call(frames)
    for fix in fixes:
        names = _static_names(fix.use)
        jitted = jit_of(fix)
        is_tracer_error = lambda failure: classify(failure) is not None  # noqa: E731
        if names and library is not None and _jitted_name(fix.use).rsplit(".", 1)[-1] in ("", library.name):
            fix = library_static_fix(fix, library, names, is_tracer_error)
        elif names and library is None and jitted is None and not fix.checked and not jits:
            # a library's callable given to jax.jit (model.apply): the user's arguments reach it by position
            fix = callable_static_fix(fix, names, frames, is_tracer_error) or line_trial(fix)
        elif names and jitted is not None and not fix.checked:
            fix = _try_static(fix, jitted, names, frames)
        elif not fix.checked:
            fix = line_trial(fix)
        tried.append(fix)
    _add_static_expression_with_static_arguments(report, tried, expression is not None, line_trial)
    carried = carried_value_fix(report, inside, frames) or branch_operand_fix(report, inside, frames)
    if carried is not None:
        tried.insert(0, carried)
    # a fix tried on the user's function that still fails does not apply: it is reported apart
    tried.sort(key=lambda f: f.checked.startswith("checked: not enough"))
    report.fixes = [f for f in tried if not f.checked.startswith("checked: still fails")]
    report.rejected_fixes = [f for f in tried if f.checked.startswith("checked: still fails")]


def _add_static_expression_with_static_arguments(
    report: TracerErrorReport, tried: list[Fix], added: bool, trial: Callable[[Fix], Fix]
) -> None:
    """With the arguments static the line still fails because a jax.numpy call on them makes a traced
    value (``int(jnp.ceil(T / dt))``): both together - the arguments static and the Python/``math``
    expression for the call - go first, tried on the values the call passed."""
    static = next((f for f in tried if _static_names(f.use) and f.checked.startswith("checked: not enough")), None)
    if static is None or added:
        return
    expression = static_expression(report.failing_line.code if report.failing_line else "")
    if expression is None:
        return
    original, replacement = expression
    on_line = {report.origin_arguments.get(t.name, t.name) for t in report.traced_names}
    if not on_line or not on_line <= set(_static_names(static.use)):
        return
    fix = Fix(
        replacement,
        from_line=True,
        when=f"instead of `{original}`, together with `{static.use}`: a jax.numpy operation makes a traced value "
        "under jit even from static inputs; Python or `math` keeps the number concrete",
    )
    tried.insert(0, trial(fix))


def _line_trial(
    report: TracerErrorReport,
    fixes: list[Fix],
    jits: dict[str, Transformation],
    frames: Frames,
    tb: types.TracebackType | None,
) -> Callable[[Fix], Fix]:
    """``trial(fix) -> fix``: a fix written as a line of JAX code, traced on the shapes of the failing
    frame's values (``fix_trial``), the names the report's static_argnames fix makes static given the
    values this call passed; any other fix is marked as a suggestion."""
    untried = dataclasses.replace
    core = getattr(sys.modules.get("jax"), "core", None)
    frame = innermost_user_frame(tb)
    if frame is None or core is None:
        return lambda fix: untried(fix, checked="suggestion: not tried")
    scope = {**frame.f_globals, **frame.f_locals}
    del frame
    concrete = {}
    static_fix = next((f for f in fixes if _static_names(f.use)), None)
    jitted = jits.get(_jitted_name(static_fix.use).rsplit(".", 1)[-1]) if static_fix is not None else None
    call = jit_call(frames, jitted.function) if jitted is not None else None
    if call is not None and static_fix is not None:
        fun, args, kwargs, _ = call
        try:
            passed = inspect.signature(fun).bind(*args, **kwargs).arguments
        except (TypeError, ValueError):
            passed = {}
        parameters = {report.origin_arguments.get(t.name, t.name): t.name for t in report.traced_names}
        for name in _static_names(static_fix.use):
            if name in passed and name in parameters:
                concrete[parameters[name]] = passed[name]
        del call, fun, args, kwargs, passed

    def trial(fix: Fix) -> Fix:
        if not fix.from_line or fix_trial.expression_of(fix.use) is None:
            return untried(fix, checked="suggestion: not tried")

        def attempt(given: dict[str, object]) -> tuple[str, str]:
            is_tracer_error = lambda failure: classify(failure) is not None  # noqa: E731
            return fix_trial.try_on_shapes(fix.use, scope, core.Tracer, given, is_tracer_error)

        # As written first; then, if that fails, with the names the static_argnames fix makes static
        # given the values this call passed (a slice length, the inputs of a math expression).
        outcome, detail = attempt({})
        given = ""
        if outcome != "ok" and outcome != "not tried" and concrete:
            again, detail_again = attempt(concrete)
            if again != "not tried":  # static, the names may leave the fix untriable: the first result stands
                outcome, detail = again, detail_again
                given = ", ".join(f"{n} = {v!r}" for n, v in concrete.items())
        how = " (jaxmagic traced it with jax.eval_shape on the shapes of your values; nothing ran)"
        static = f" once {given} {'is' if len(concrete) == 1 else 'are'} static" if given else ""
        if outcome == "ok" and not detail:
            return untried(fix, checked=f"checked: gives a concrete value{static}")
        if outcome == "ok":
            return untried(fix, checked=f"checked: traces with {detail}{static}{how}")
        static = f" even with {given} static" if given else ""
        if outcome == "traced-error":
            return untried(fix, checked=f"checked: not enough on its own - it still raises {detail}{static}{how}")
        if outcome == "error":
            return untried(fix, checked=f"checked: still fails - it raised {detail}{static}{how}")
        return untried(fix, checked="suggestion: not tried")

    return trial


def _try_static(fix: Fix, jitted: Transformation, names: list[str], frames: Frames) -> Fix:
    """Trace the user's jitted function again with ``names`` static and the same arguments (no compile)."""
    call = jit_call(frames, jitted.function)
    if call is None:
        return dataclasses.replace(fix, checked="suggestion: not tried (the call's arguments were not found)")
    shown = ", ".join(f"`{n}`" for n in names)
    output = io.StringIO()  # the function's own prints while it is traced again are not the user's output
    names_now = tuple(names)
    try:
        fun, args, kwargs, static = call
        names_now = tuple(dict.fromkeys(static["static_argnames"] + tuple(names)))
        # Given both, jit takes each list as written: the new names' positions are added to the numbers.
        positional = [
            p.name
            for p in inspect.signature(fun).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        numbers = set(static["static_argnums"]) | {positional.index(n) for n in names if n in positional}
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            jax.jit(fun, static_argnames=names_now, static_argnums=tuple(sorted(numbers)) or None).trace(
                *args, **kwargs
            )
    except Exception as failure:
        if classify(failure) is not None:  # valid, but other traced values still need a fix of their own
            result = (
                f"checked: not enough on its own - tracing `{jitted.function}` with {shown} static still raises "
                f"{error_line(failure)}"
            )
        else:  # the static argument itself cannot work (an array is not hashable, ...)
            result = (
                f"checked: still fails - tracing `{jitted.function}` with {shown} static raised {error_line(failure)}"
            )
    else:
        result = f"checked: tracing `{jitted.function}` with {shown} static succeeds with this call's arguments"
    finally:
        del call
    use = fix.use
    if len(names_now) > len(names) and use.startswith(f"jax.jit({jitted.function}, static_argnames="):
        use = f"jax.jit({jitted.function}, static_argnames={names_now!r})"  # keep what was static already
    given = _jit_as_given(frames, jitted.function, f"static_argnames={names_now!r}")
    if given is not None:
        use, where = given
        result += where
    return dataclasses.replace(fix, use=use, checked=result + " (jaxmagic traced your function once more to try it)")


def _jit_as_given(frames: Frames, function: str, option: str) -> tuple[str, str] | None:
    """A static fix written for what the user gave jax.jit, when that is not ``function`` by its name:
    the call line's ``jax.jit(jax.vmap(f, ...))`` (jitting bare ``f`` drops the vmap), or a function
    decorated with ``@jax.jit`` (jitting the jitted function again still traces the argument).
    ``(fix, where)``; None when ``jax.jit(function, option)`` is what the user would write."""
    found = jit_caller(frames, function)
    if found is None:
        return None
    frame, lineno = found
    scope = {**frame.f_globals, **frame.f_locals}
    line = source_line(frame.f_code.co_filename, lineno, "").code.strip()
    del frame, found
    tree = None
    for candidate in (line, line.split(":", 1)[-1].strip()):  # `try: step(x)` holds the call after its colon
        try:
            tree = ast.parse(candidate.rstrip(":") or "0")
            break
        except SyntaxError:
            continue
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        inner = node.func
        if isinstance(inner, ast.Call) and _is_jax_jit(inner.func) and inner.args:
            given = ast.unparse(inner.args[0])
            if given == function:
                return None
            return f"jax.jit({given}, {option})", f", as your line gives it to jax.jit (`{given}`)"
        if isinstance(inner, ast.Name) and inner.id in scope:
            underlying = getattr(scope[inner.id], "__wrapped__", None)
            code = getattr(underlying, "__code__", None)
            if code is None or not hasattr(scope[inner.id], "lower"):
                continue  # not a jitted function
            above = linecache.getline(code.co_filename, code.co_firstlineno).strip()
            if above.startswith("@") and "jit" in above:
                return (
                    f"@functools.partial(jax.jit, {option})",
                    f"; `{inner.id}` is decorated with `{above}`: put this decorator there instead (wrapping "
                    "the jitted function in another jax.jit would still trace the argument)",
                )
    return None


def _is_jax_jit(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "jit") or (isinstance(node, ast.Name) and node.id == "jit")


def _jitted_name(use: str) -> str:
    """ "count_up" of ``jax.jit(count_up, static_argnames=('n',))``; "" for a fix without one."""
    match = re.match(r"jax\.jit\(([\w.]+),", use)
    return match.group(1) if match else ""


def _parameters_of_frames(frames: Frames) -> dict[str, set[str]]:
    """The parameter names of each user function running in ``frames``, by its name."""
    found: dict[str, set[str]] = {}
    for frame, _ in frames:
        code = frame.f_code
        if is_user_file(code.co_filename):
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            found.setdefault(code.co_name, set()).update(n for n in names if n != "self")
    return found
