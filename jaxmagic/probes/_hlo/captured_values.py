"""Values of the user's that tracing fixed into the program: globals and closure values baked in as
literals, and arrays held as constants (named from the function's globals, closure and namespace)."""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import re
import tracemalloc
import types
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeGuard

import jax

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
    from jax.stages import Wrapped

    # one entry of ``jaxpr.walk_eqns``: (equation, its name path, in a backward pass, its sub-jaxprs, the
    # equations enclosing it)
    WalkedEqn = tuple[JaxprEqn, tuple[str, ...], bool, list[ClosedJaxpr | Jaxpr], tuple[JaxprEqn, ...]]
    # how a jaxpr prints one equation (with the names ``str(jaxpr)`` gives its variables)
    EqnPrinter = Callable[[JaxprEqn], str]

import numpy as np

from jaxmagic._jax import jaxpr_parts, jit_internals
from jaxmagic.probes._hlo.global_assignment import last_assignment
from jaxmagic.probes._hlo.jaxpr import aval_text, eqn_line, eqn_text, walk_eqns
from jaxmagic.probes._hlo.records import BAKED_CONSTANT_BYTES, BakedLiteral, CapturedConstant
from jaxmagic.probes._support.attribution import of_allocation, of_equation, of_numpy_built, root_array
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance

# A constant of a fresh trace of the function: (shape, dtype, where it was built, (name, kind) of the name
# whose current value it is, ("", "") for none)
RebuiltConstant = tuple[tuple[int, ...], str, Provenance, tuple[str, str]]
# A Python number a literal or a name can hold (``bool`` kept apart: True is no 1.0 setting)
Number = bool | int | float


class NameEnvironment:
    """The values a traced function can read by name: its closure, its globals, the user's namespace.

    The closure and globals (of the function, the functions it names, and theirs) are gathered when
    first asked for: a program that holds no constant never needs them.
    """

    def __init__(self, fn: Callable[..., Any], namespace: dict[str, Any] | None):
        self._fn = fn
        self.namespace = namespace or {}
        self._module_globals = getattr(_unwrapped(fn), "__globals__", None) or {}

    @property
    def closure(self) -> dict[str, Any]:
        return self._names[0]

    @property
    def globals(self) -> dict[str, Any]:
        return self._names[1]

    @functools.cached_property
    def _names(self) -> tuple[dict[str, Any], dict[str, Any]]:
        closure: dict[str, Any] = {}
        globals_: dict[str, Any] = {}
        seen = set()
        pending = [self._fn]
        for _ in range(3):  # the function, the functions it names, and theirs
            following = []
            for f in pending:
                f = _unwrapped(f)
                if id(f) in seen or not inspect.isfunction(f):
                    continue
                seen.add(id(f))
                try:
                    found = inspect.getclosurevars(f)
                except (TypeError, ValueError):
                    continue
                for name, value in found.nonlocals.items():
                    closure.setdefault(name, value)
                for name, value in found.globals.items():
                    globals_.setdefault(name, value)
                following += [v for v in list(found.nonlocals.values()) + list(found.globals.values()) if callable(v)]
            pending = following
        return closure, globals_

    def resolve(self, dotted: str) -> tuple[Any, str] | None:
        root, _, rest = dotted.partition(".")
        root_name = re.match(r"[A-Za-z_]\w*", root)
        if root_name is None:
            return None
        base = root_name.group(0)
        for table, kind in (  # noqa: B007 - kind is read after the break
            (self.closure, "closure"),
            (self.globals, "global"),
            (self.namespace, "global"),
            (self._module_globals, "global"),
        ):
            if base in table:
                value = table[base]
                break
        else:
            return None
        value = _follow(value, dotted[len(base) :])
        return None if value is _MISSING else (value, kind)

    def scalar_values(self) -> set[Number | None]:
        """Every Python number a name (or one attribute/key below it) can give: literals equal to
        none of these cannot be baked globals, and need no closer look."""
        values: set[Number | None] = set()

        def add(value: object) -> None:
            number = _scalar(value, python_only=True)
            if number is not None:
                values.add(_rounded(number))

        for table in (self.closure, self.globals, self.namespace, self._module_globals):
            for name, value in list(table.items()):
                if name.startswith("_") or name in ("In", "Out", "exit", "quit", "get_ipython"):
                    continue  # IPython's history and caches are nobody's settings
                if isinstance(value, (bool, int, float, np.generic)):
                    add(value)
                elif isinstance(value, dict):
                    for item in list(value.values())[:1000]:
                        add(item)
                elif not isinstance(value, (type, types.ModuleType, types.FunctionType)):
                    for attributes in (_attribute(value, "__dict__"), _attribute(type(value), "__dict__")):
                        if isinstance(attributes, (dict, types.MappingProxyType)):
                            for item in list(attributes.values())[:1000]:
                                add(item)
        return values

    @property
    def module_globals(self) -> dict[str, Any]:
        return self._module_globals

    def by_value(self, value: object) -> tuple[str, str]:
        """(name, kind) of the one NumPy array the function reads by name (its closure, the globals its code
        names) that ``value`` is JAX's copy of: the same shape and the same numbers in ``value``'s dtype (a
        float64 array JAX keeps as float32); ("", "") when none is, or more than one."""
        if not isinstance(value, np.ndarray) or value.size == 0:
            return "", ""
        found = []
        for table, kind in ((self.closure, "closure"), (self.globals, "global")):
            for name, candidate in table.items():
                if isinstance(candidate, np.ndarray) and candidate.shape == value.shape and not name.startswith("_"):
                    try:
                        same = np.array_equal(candidate.astype(value.dtype), value, equal_nan=True)
                    except (TypeError, ValueError):
                        same = False
                    if same:
                        found.append((name, kind))
        return found[0] if len(found) == 1 else ("", "")

    def by_identity(self) -> dict[int, tuple[str, str]]:
        out: dict[int, tuple[str, str]] = {}
        for table, kind in (
            (self.namespace, "global"),
            (self._module_globals, "global"),
            (self.globals, "global"),
            (self.closure, "closure"),
        ):
            for name, value in table.items():
                if (
                    not name.startswith("_")
                    and _attribute(value, "shape") is not None
                    and _attribute(value, "dtype") is not None
                ):
                    out[id(value)] = (name, kind)
        return out


_MISSING = object()


def _attribute(value: object, name: str) -> Any:
    """``getattr(value, name, None)`` for any object of the user's: a property or ``__getattr__`` that
    raises something other than AttributeError means "no such attribute" here, not our failure."""
    try:
        return getattr(value, name, None)
    except Exception:
        return None


def _follow(value: Any, accessors: str) -> Any:
    """Apply ``.attr`` / ``['key']`` / ``[0]`` accessors without running user code."""
    for match in re.finditer(r"\.(\w+)|\[('([^']*)'|\"([^\"]*)\"|(-?\d+))\]", accessors):
        try:
            if match.group(1):
                value = inspect.getattr_static(value, match.group(1))
            elif match.group(5) is not None:
                value = value[int(match.group(5))] if isinstance(value, (list, tuple)) else _MISSING
            else:
                key = match.group(3) if match.group(3) is not None else match.group(4)
                value = value[key] if isinstance(value, dict) else _MISSING
        except (AttributeError, KeyError, IndexError, TypeError):
            return _MISSING
        if value is _MISSING:
            return value
    return value


def _unwrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    try:
        return inspect.unwrap(fn)
    except ValueError:
        return fn


def baked_literals(
    walked: list[WalkedEqn], env: NameEnvironment, printer: EqnPrinter | None = None
) -> list[BakedLiteral]:
    found: list[BakedLiteral] = []
    seen: set[tuple[str, str, int, str]] = set()  # (name, file, line, literal)
    candidates = env.scalar_values()
    for eqn, _segments, _back, _subs, parents in walked:
        literals = [v for v in eqn.invars if _is_literal(v) and _rounded(_scalar(v.val)) in candidates]
        if not literals:
            continue  # no global or closure value equals any literal here: nothing to look up
        line = eqn_line(eqn, parents)
        if line is None or not line.code:
            continue
        names, constants = _names_in_code(line.code)
        local = _local_names(line.filename, line.lineno)
        for literal in literals:
            value = _scalar(literal.val)
            if value is None or any(_equal(value, c) for c in constants):
                continue  # written in the code itself
            for dotted in names:
                if dotted.split(".")[0].split("[")[0] in local:
                    continue
                resolved = env.resolve(dotted)
                if resolved is None:
                    continue
                target, kind = resolved
                target_value = _scalar(target, python_only=True)
                if target_value is None or not _equal(value, target_value, literal):
                    continue
                key = (dotted, line.filename, line.lineno, str(literal))
                if key in seen:
                    break
                seen.add(key)
                found.append(
                    BakedLiteral(
                        name=dotted,
                        kind=kind,
                        value=_literal_text(literal),
                        equation=eqn_text(eqn, printer),
                        line=line,
                        provenance=_literal_provenance(eqn, parents, line),
                    )
                )
                break
    return found


def _is_literal(var: Var | Literal) -> TypeGuard[Literal]:
    return jaxpr_parts.is_literal(var)


def _literal_provenance(eqn: JaxprEqn, parents: tuple[JaxprEqn, ...], line: SourceLine) -> Provenance:
    """The line that read the global while tracing (the one the table shows), with the function and
    the transformations around its equation."""
    used = of_equation(eqn, parents)
    same = used.made_at is not None and (used.made_at.filename, used.made_at.lineno) == (line.filename, line.lineno)
    return Provenance(
        made_at=line,
        function=used.function if same else "",
        transforms=used.transforms,
        library_function=used.library_function if same else "",
    )


def _rounded(value: Number | None) -> Number | None:
    """A number as float32 would hold it (literals are usually f32): equal values compare equal."""
    if value is None or isinstance(value, bool):
        return value
    try:
        return float(np.float32(value))
    except (OverflowError, TypeError, ValueError):
        return value


def _literal_text(literal: Literal) -> str:
    """``2.0:f32[]``, as the jaxpr prints a literal (the value at its own precision: 0.9, not 0.8999...)."""
    aval = getattr(literal, "aval", None)
    value = _scalar(literal.val)
    try:
        shown = str(np.asarray(value, dtype=aval.dtype)[()]) if aval is not None else str(value)
    except (TypeError, ValueError):
        shown = str(value)
    return f"{shown}:{aval_text(aval)}" if aval is not None else shown


def _scalar(value: object, python_only: bool = False) -> Number | None:
    """A Python number for a scalar value, else None (arrays with more than one element are not literals)."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)  # also JAX's TypedInt/TypedFloat literals: plain Python numbers
    if isinstance(value, float):
        return float(value)
    if isinstance(value, np.generic):
        return value.item()
    if python_only:
        return None  # a global array is a captured constant, not a baked Python value
    try:
        array = np.asarray(value)
    except Exception:
        return None
    if array.shape == () and array.dtype.kind in "biuf":
        return array.item()
    return None


def _equal(a: Number, b: Number, literal: Literal | None = None) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    try:
        dtype = getattr(literal.aval, "dtype", None) if literal is not None else None
        if dtype is not None:  # compared as the literal's dtype holds them: 0.1 == float32(0.1)
            return bool(np.asarray(a, dtype=dtype) == np.asarray(b, dtype=dtype))
        return float(a) == float(b)
    except (TypeError, ValueError, OverflowError):
        return False


@lru_cache(maxsize=512)
def _names_in_code(code: str) -> tuple[tuple[str, ...], tuple[int | float, ...]]:
    """Dotted names (``SCALE``, ``cfg.scale``, ``CONFIG['lr']``) and numeric constants in one line."""
    tree = None
    for candidate in (code, code.rstrip(":") + ": pass", "(" + code + ")"):
        try:
            tree = ast.parse(candidate.strip())
            break
        except SyntaxError:
            continue
    if tree is None:
        return (), ()
    names, constants = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            constants.append(node.value)
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(
            getattr(node, "ctx", None), ast.Load
        ):
            text = _dotted(node)
            if text:
                names.append(text)
    # Longest first: cfg.scale before cfg.
    return tuple(sorted(dict.fromkeys(names), key=len, reverse=True)), tuple(constants)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _dotted(node.value)
        return f"{base}[{node.slice.value!r}]" if base else None
    return None


@lru_cache(maxsize=256)
def _local_names(filename: str, lineno: int) -> frozenset[str]:
    """Parameters and assigned names of the function enclosing ``filename:lineno`` (not globals)."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return frozenset()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            end = getattr(node, "end_lineno", node.lineno)
            if node.lineno <= lineno <= end and (best is None or node.lineno >= best.lineno):
                best = node
    if best is None:
        return frozenset()
    names = set()
    args = best.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]:
        names.add(arg.arg)
    declared_global = set()
    body = best.body if isinstance(best.body, list) else [best.body]
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                declared_global.update(node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return frozenset(names - declared_global)


def captured_constants_of_call(
    jitted: Wrapped,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    *,
    fn: Callable[..., object],
    namespace: dict[str, object] | None = None,
    building_lines: bool = False,
) -> list[CapturedConstant]:
    """The arrays ``jitted(*args, **kwargs)`` holds as constants, named from ``fn``'s globals and closure.

    Only the trace and the constants, none of the rest of the report: for a probe that already ran
    ``jitted`` with these arguments, whose trace JAX then has in its cache. Raises what tracing raises.
    ``building_lines``: find the line that built a NumPy constant by tracing a fresh copy of ``fn``
    once more with tracemalloc on (see :func:`captured_constants`); off, the provenance says why not.
    """
    closed = jitted.trace(*args, **kwargs).jaxpr
    return captured_constants(
        closed,
        list(walk_eqns(closed)),
        NameEnvironment(fn, namespace),
        fresh_trace=fresh_trace_of(fn, args, kwargs) if building_lines else None,
    )


def captured_constants(
    closed: ClosedJaxpr, walked: list[WalkedEqn], env: NameEnvironment, fresh_trace: Callable[[], Any] | None = None
) -> list[CapturedConstant]:
    """Arrays held as constants of the traced program (closed-over globals and closure values).

    ``fresh_trace`` (from :func:`fresh_trace_of`): when a NumPy array built while tracing has no
    recorded allocation (the trace came from JAX's cache, or tracemalloc was off), a fresh copy of
    the function is traced once with tracemalloc on, to find the line that built it.
    """
    identities: dict[int, tuple[str, str]] | None = None  # looked up at the first constant: most programs hold none
    rebuilt: list[RebuiltConstant] | None = None  # per top-level constant of a fresh trace
    found: list[CapturedConstant] = []
    seen: set[int] = set()
    jaxprs = [(closed, ())] + [
        (sub, (*parents, eqn)) for eqn, _segments, _back, subs, parents in walked for sub in subs
    ]
    for jaxpr, enclosing in jaxprs:
        consts = list(getattr(jaxpr, "consts", None) or [])
        if not consts:
            continue
        inner = getattr(jaxpr, "jaxpr", jaxpr)
        constvars = list(getattr(inner, "constvars", []))
        for index, value in enumerate(consts):
            shape = tuple(getattr(value, "shape", ()) or ())
            if id(value) in seen or not hasattr(value, "dtype"):
                continue
            seen.add(id(value))
            if identities is None:
                identities = env.by_identity()
            # JAX keeps a NumPy constant as its own view of the array (or a float32 copy of a float64 one)
            name, kind = identities.get(id(value)) or identities.get(id(root_array(value))) or env.by_value(value)
            nbytes = int(getattr(value, "nbytes", 0) or 0)
            earlier = False  # an earlier value of a name the function reads (JAX's trace cache)
            if not name and nbytes < BAKED_CONSTANT_BYTES:
                continue  # a small array made inside the function: ordinary, not worth a line
            use = _first_use(inner, constvars[index]) if index < len(constvars) else None
            line = eqn_line(use, enclosing) if use is not None else None
            provenance = constant_provenance(value, use, enclosing, line)
            if provenance.made_at is None and kind == "global":
                # made before tracemalloc recorded it (another cell, usually): the line that assigned the name
                assigned = last_assignment(name, env.module_globals)
                if assigned is not None:
                    provenance = Provenance(made_at=assigned, function="", transforms=[])
            if (
                provenance.made_at is None
                and not name
                and not enclosing
                and fresh_trace is not None
                and isinstance(value, np.ndarray)
                and _not_recorded(value)
            ):
                if rebuilt is None:
                    rebuilt = _built_in_fresh_trace(fresh_trace, env)
                if len(rebuilt) == len(consts) and rebuilt[index][:2] == (shape, str(value.dtype)):
                    now_name, now_kind, provenance = _as_built_afresh(rebuilt[index], provenance, env)
                    if now_name:
                        name, kind, earlier = now_name, now_kind, True
                else:
                    provenance.unknown += "; a fresh trace of the function did not make the same constants"
            found.append(
                CapturedConstant(
                    earlier=earlier,
                    name=name,
                    kind=kind,
                    shape=shape,
                    dtype=str(value.dtype),
                    nbytes=nbytes,
                    line=line,
                    numpy=isinstance(value, np.ndarray),
                    provenance=provenance,
                )
            )
    found.sort(key=lambda c: -c.nbytes)
    return found


def _as_built_afresh(
    rebuilt: RebuiltConstant, provenance: Provenance, env: NameEnvironment
) -> tuple[str, str, Provenance]:
    """What a fresh trace of the function tells of a constant: (name, kind, provenance). A name when the fresh
    trace holds that name's current value (so the program asked about holds an earlier one); else ("", "",
    provenance) with the line that built it, or why it could not be told."""
    fresh, (now_name, now_kind) = rebuilt[2], rebuilt[3]
    if now_name:
        # traced afresh, the function holds the name's current value; the program asked about
        # holds other numbers: JAX reused the program it traced before the name was rebound
        assigned = last_assignment(now_name, env.module_globals) if now_kind == "global" else None
        now = f" (its current value was assigned at {assigned.where})" if assigned is not None else ""
        return (
            now_name,
            now_kind,
            Provenance(
                function=provenance.function,
                transforms=provenance.transforms,
                unknown=(
                    f"the program holds an earlier value of `{now_name}`{now}: JAX reused the program it "
                    f"traced for this function before `{now_name}` was assigned again; a fresh trace of the "
                    "function holds the current one"
                ),
            ),
        )
    if fresh.made_at is not None:
        function = fresh.function
        transforms = provenance.transforms if function == provenance.function else []
        return "", "", Provenance(made_at=fresh.made_at, function=function, transforms=transforms)
    _reason, _, first_use = provenance.unknown.partition("; ")
    why = f"{fresh.unknown} (seen in a fresh trace of the function with tracemalloc on)"
    provenance.unknown = f"{why}; {first_use}" if first_use else why
    return "", "", provenance


def _first_use(jaxpr: Jaxpr, var: Var) -> JaxprEqn | None:
    for eqn in jaxpr.eqns:
        if any(v is var for v in eqn.invars):
            return eqn
    return None


def constant_provenance(
    value: object, use: JaxprEqn | None, enclosing: tuple[JaxprEqn, ...], line: SourceLine | None
) -> Provenance:
    """Where a constant of the program was built: the line that allocated it (``tracemalloc``,
    for a NumPy array the NumPy call itself, never a copy JAX made), with the function and
    transformations of its first use; otherwise no line, and why - the program records only
    the equation that first uses it, which is not where the array was built."""
    built = of_numpy_built(value) if isinstance(value, np.ndarray) else of_allocation(value)
    used = of_equation(use, enclosing) if use is not None else Provenance()
    if built.made_at is not None:
        function = built.function  # the def holding the building line (attribution reads the source)
        same = bool(function) and function == used.function
        return Provenance(
            made_at=built.made_at,
            function=function,
            transforms=used.transforms if same else [],
            started_by=built.started_by,
        )
    first = f"it is first used at {line.where}" if line is not None else "no use of it names a line of yours"
    return Provenance(
        function=used.function,
        transforms=used.transforms,
        unknown=f"{built.unknown}; the program records only where it is used ({first})",
    )


# -- the building line from a fresh trace ------------------------------------------------


def _not_recorded(value: np.ndarray) -> bool:
    """True when tracemalloc holds no allocation record for the array (off, or started after it)."""
    if not tracemalloc.is_tracing():
        return True
    root = value
    while isinstance(root.base, np.ndarray):  # a view: its allocation is its base's
        root = root.base
    try:
        return tracemalloc.get_object_traceback(root) is None
    except Exception:
        return True


def fresh_trace_of(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
) -> Callable[[], Any] | None:
    """A function that traces a fresh copy of ``fn`` (the Python function under its jit) with the
    same static arguments, so that JAX's caches cannot answer and its NumPy code runs again; None
    when ``fn`` is no plain Python function or its jit has options a copy would not keep."""
    original = _unwrapped(fn)
    if not inspect.isfunction(original):
        return None
    options: dict[str, Any] = {}
    if jit_internals.is_jitted(fn):
        info = jit_internals.jit_options(fn)
        if info is None or getattr(info, "user_specified_in_shardings", True) or getattr(info, "device", None):
            return None
        if getattr(info, "backend", None):
            return None
        options = {
            "static_argnums": tuple(getattr(info, "static_argnums", ()) or ()) or None,
            "static_argnames": tuple(getattr(info, "static_argnames", ()) or ()) or None,
        }

    def trace() -> ClosedJaxpr:
        copy = functools.wraps(original)(lambda *a, **k: original(*a, **k))
        return jax.jit(copy, **options).trace(*args, **kwargs).jaxpr

    return trace


def _built_in_fresh_trace(fresh_trace: Callable[[], Any], env: NameEnvironment) -> list[RebuiltConstant]:
    """(shape, dtype, where it was built, the name whose current value it is) of each constant of a fresh
    trace made with tracemalloc on; [] when the trace fails. Runs the function's Python code once more."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(25)
    try:
        closed = fresh_trace()
        out = []
        for value in list(getattr(closed, "consts", None) or []):
            built = of_numpy_built(value) if isinstance(value, np.ndarray) else Provenance(unknown="not a NumPy array")
            shape = tuple(getattr(value, "shape", ()) or ())
            out.append((shape, str(getattr(value, "dtype", "")), built, env.by_value(value)))
        del closed
        return out
    except Exception:
        return []
    finally:
        if started:
            tracemalloc.stop()
