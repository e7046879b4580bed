"""A library's own trace-level error: an object of the library changed under a JAX transformation it was not
made in (Flax NNX's ``TraceContextError``: "Cannot mutate RngCount from a different trace level").

``jax.grad(loss)(params, rest)`` whose ``loss`` does ``nnx.merge(graphdef, params, rest)`` and runs Dropout
(google/flax#5050), or whose ``loss`` calls a Module it closes over (google/flax#3997's shape under jax.grad):
the library refuses to mutate its state from inside a transformation that does not carry that state out. It is
no tracer error of JAX's, so the explainer declined it ("not a tracer error"). Told by mechanism: the error's
class is a library's (``usercode.code_owner``), its message speaks of a trace, and a JAX transformation of the
user's function was running when it was raised (``transform_stack``).

The fixes are the library's (``_LIBRARY_FIXES``, by the error class's package): for Flax NNX, the same
transformation from ``nnx`` (``nnx.grad`` for ``jax.grad``), which carries the state in and out - tried by
tracing it with ``jax.eval_shape`` on copies of the call's arguments (the user's function runs traced, as every
static-fix trial does; the user's own objects are not touched); when that still fails (a Module the function
closes over), passing the Module as an argument; and ``copy=True`` on an ``nnx.merge`` inside the function, which
makes the merged objects the transformation's own (a suggestion: it changes the function).
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
import re
import sys
import types
from typing import Any

import jax

from jaxmagic._jax.transform_stack import Frames, Transformation, stack_at_raise, transformation_call, transformations
from jaxmagic.probes._explain.kinds import KINDS
from jaxmagic.probes._explain.report import TracerErrorReport
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.report.wording import error_line, first_line, message_of
from jaxmagic.usercode.source import code_kind, user_lines

_TRACE_WORDS = re.compile(r"\btrace\b|\btrace level\b|\btracing\b", re.IGNORECASE)
# a JAX transformation on the user's line and its twin in the library's module: (JAX's name, the library's)
_TWINS = ("grad", "value_and_grad", "jit", "vmap")


@dataclasses.dataclass(frozen=True)
class LibraryFixes:
    """How one library's transformations are named: ``nnx.grad`` from ``flax.nnx``."""

    module: str  # "flax.nnx": where its transformations live (looked up in sys.modules, never imported)
    alias: str  # "nnx": how people write it
    graph_node: str  # the library's test for an object it changes in place ("is_graph_node")


_LIBRARY_FIXES = {"flax": LibraryFixes("flax.nnx", "nnx", "graph.is_graph_node")}


def is_library_trace_error(error: BaseException) -> bool:
    """A library's error class, a message that speaks of a trace, raised while a JAX transformation ran the
    user's function."""
    module = sys.modules.get(type(error).__module__)
    file = getattr(module, "__file__", None)
    if not file or code_kind(file) != "library" or not _TRACE_WORDS.search(first_line(message_of(error))):
        return False
    frames = stack_at_raise(error)
    try:
        return bool(transformations(frames))
    finally:
        del frames


def explain_library_trace(error: BaseException) -> TracerErrorReport:
    """The report of a library's trace-level error, with the library's fixes (tried where a trace can tell)."""
    kind = KINDS["library_trace"]
    package = type(error).__module__.split(".")[0]
    report = TracerErrorReport(
        error_type=type(error).__name__,
        error_kind=kind.key,
        title=kind.title,
        message=first_line(message_of(error)),
        jax_message_text=message_of(error),
        why=kind.why.replace("{library}", package),
        your_lines=user_lines(error.__traceback__),
    )
    frames = stack_at_raise(error)
    try:
        inside = transformations(frames)
        outer = inside[0]
        report.traced_function, report.transformation = outer.function, outer.name
        report.function_line = outer.defined_at
        names = _LIBRARY_FIXES.get(package)
        tried = _library_fixes(names, outer, frames) if names is not None else []
    finally:
        del frames
    report.fixes = [f for f in tried if not f.checked.startswith("checked: still fails")] or list(kind.fixes)
    report.rejected_fixes = [f for f in tried if f.checked.startswith("checked: still fails")]
    return report


def _library_fixes(names: LibraryFixes, outer: Transformation, frames: Frames) -> list[Fix]:
    """The library's transformation in place of JAX's on the user's line (tried), an argument in place of a
    closed-over object when that fails, and ``copy=True`` on the function's ``nnx.merge``."""
    found: list[Fix] = []
    line = outer.called_from
    written = _twin_call(line.code if line else "", names.alias)
    library = sys.modules.get(names.module)
    if written is not None and library is not None:
        found.append(_tried_twin(written, names, library, outer, frames))
    if found and found[0].checked.startswith("checked: still fails"):
        found.append(
            Fix(
                f"{names.alias}.{written[1] if written else 'grad'}(lambda model, *args: ...)(model, *args)",
                f"`{outer.function}` changes a {names.alias} object it reads from outside (a Module it closes over): "
                f"{names.alias}'s transformations carry only the objects passed as arguments in and out - pass "
                "the Module as an argument",
                "suggestion: not tried (it changes your function)",
            )
        )
    merge = _merge_without_copy(outer)
    if merge:
        found.append(
            Fix(
                merge,
                f"`{outer.function}` merges the state with copy=False (the default since flax 0.11.2): the merged "
                f"objects are the ones made outside the transformation; a copy is the transformation's own",
                "suggestion: not tried (it changes your function)",
            )
        )
    return found


def _twin_call(code: str, alias: str) -> tuple[str, str] | None:
    """(the call on the user's line with ``jax.grad(`` written ``nnx.grad(`` - ``nnx.grad(loss)(params, rest)``,
    the transformation's name); None when the line applies none of ``_TWINS`` by that name."""
    pattern = re.compile(r"\bjax\.(" + "|".join(_TWINS) + r")\(")
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        tree = None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Call)] if tree else []
    applied = next((ast.get_source_segment(code.strip(), c) for c in calls if pattern.match(ast.unparse(c.func))), None)
    text = applied or code.strip()
    match = pattern.search(text)
    if match is None:
        return None
    return text[: match.start()] + f"{alias}.{match.group(1)}(" + text[match.end() :], match.group(1)


def _tried_twin(
    written: tuple[str, str], names: LibraryFixes, library: types.ModuleType, outer: Transformation, frames: Frames
) -> Fix:
    """The library's twin of the transformation, traced with ``jax.eval_shape`` on copies of the call's arguments."""
    text, name = written
    use = text.strip().removeprefix("return ")
    when = (
        f"{names.alias}.{name} carries the {names.alias} objects' state in and out of the transformation, which "
        f"jax.{name} does not: the library then lets them change inside it"
    )
    call = transformation_call(frames, outer.function)
    twin = getattr(library, name, None)
    if call is None or twin is None:
        return Fix(use, when, f"suggestion: not tried (jaxmagic could not read the call of {outer.function})")
    fun, args, kwargs = call
    if any(_is_graph_node(leaf, library, names) for leaf in (*args, *kwargs.values())):
        return Fix(use, when, "suggestion: not tried (the arguments hold Modules, which a trial would change)")
    try:
        copies = jax.tree.map(lambda leaf: leaf, (args, kwargs))  # new containers: the user's are untouched
        jax.eval_shape(lambda a, k, held=fun: twin(held)(*a, **k), *copies)
    except Exception as failure:  # the trial's outcome is the fix's evidence
        return Fix(use, when, f"checked: still fails - it raised {error_line(failure)}")
    finally:
        del fun, args, kwargs, call
    how = f"jaxmagic traced {names.alias}.{name}({outer.function}) with jax.eval_shape on copies of your arguments"
    return Fix(use, when, f"checked: traces ({how}; nothing ran)")


def _is_graph_node(value: Any, library: types.ModuleType, names: LibraryFixes) -> bool:
    """An object the library changes in place (an nnx Module): a trial would change the user's own."""
    test: Any = library
    for part in names.graph_node.split("."):
        test = getattr(test, part, None)
    try:
        return bool(test(value)) if callable(test) else True  # unknown: treated as one (never tried on it)
    except Exception:
        return True


def _merge_without_copy(outer: Transformation) -> str:
    """``nnx.merge(..., copy=True)`` for the first ``nnx.merge(...)`` call in the traced function's source without
    ``copy=True``; "" for none."""
    where = outer.defined_at
    if where is None:
        return ""
    lines = linecache.getlines(where.filename)
    start = where.lineno - 1
    for text in lines[start : start + 60]:
        stripped = text.strip()
        if "merge(" not in stripped:
            continue
        try:
            tree = ast.parse(stripped.removeprefix("return "))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("merge"):
                if any(k.arg == "copy" and getattr(k.value, "value", None) is True for k in node.keywords):
                    return ""
                keywords = [k for k in node.keywords if k.arg != "copy"]
                fixed = ast.Call(node.func, node.args, [*keywords, ast.keyword("copy", ast.Constant(True))])
                return ast.unparse(fixed)
    return ""
