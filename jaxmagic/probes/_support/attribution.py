"""Attribution: one way, for every probe, to say where a value was made.

Every finding answers three questions (``jaxmagic.report.provenance.Provenance``):
the user's line that made the value, the innermost user function with the
transformations around it, and the user's line that started the trace or made the
call. The sources, most structured first:

- a jaxpr equation: ``source_info.traceback`` (the frames at trace time; for an
  equation of a backward pass JAX records its forward line) and the name stacks of
  the equation and of the equations around it (``vmap()``, ``jvp()``,
  ``transpose(jvp())``, ``jit(step)``, a scan body);
- a Python frame, when the event happens while the user's code runs (a trace, a
  key drawn eagerly);
- the line JAX's own error message names ("... from line file.py:4:8 (f)");
- a NumPy object's allocation traceback (``tracemalloc``, when it was tracing).

User code versus library is decided by ``usercode.source.is_user_file`` alone, never by
names: a Flax or Optax frame is a library frame, a frame of the user's own module is not.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import re
import sys
import tracemalloc
from collections.abc import Sequence
from types import FrameType, ModuleType

import jax
import jax.numpy as jnp

from jaxmagic._jax import jaxpr_parts, recorded_sources
from jaxmagic._jax.types import Equation, Traceback
from jaxmagic.probes._support.calls import library_calls
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.usercode.source import code_kind, innermost_user_frame, is_user_file, source_line, user_lines_of_stack

__all__ = [
    "Provenance",
    "public_name",
    "of_equation",
    "of_frame",
    "of_message",
    "of_numpy_built",
    "of_allocation",
    "of_source_line",
    "started_by",
    "transform_path",
]

# -- the transformation path ----------------------------------------------------------

_WRAPPED = re.compile(r"^([\w\-]+)\((.*)\)$")
_BODIES = {  # what a control-flow or call equation makes of the equations inside it
    "scan": "scan body",
    "while": "while loop",
    "cond": "cond branch",
    "custom_jvp_call": "custom_jvp",
    "custom_vjp_call": "custom_vjp",
    "custom_vjp_call_jaxpr": "custom_vjp",
    "remat": "checkpoint",
    "checkpoint": "checkpoint",
    "shard_map": "shard_map",
    "xla_pmap": "pmap",
}


def _name_stack_segments(text: str) -> list[str]:
    """``"vmap()/jvp()/encoder"`` -> ``["vmap", "jvp", "encoder"]``; ``transpose(jvp())`` is the
    backward pass of a gradient, ``jit(f)`` is kept as written."""
    out = []
    for raw in filter(None, (s.strip() for s in text.split("/"))):
        match = _WRAPPED.match(raw)
        if match is None:
            out.append(raw)  # a jax.named_scope of the user's
        elif match.group(1) in ("jit", "pjit"):
            out.append(f"jit({match.group(2)})" if match.group(2) else "jit")
        elif match.group(1) == "transpose":
            out.append("grad (backward pass)")
        else:
            out.append(match.group(1))
    return out


def transforms_of_name_path(op_name: str) -> list[str]:
    """The transformations (and named scopes) of a compiled instruction's ``op_name``
    (``jit(loss)/transpose(jvp())/dot_general`` -> ``["jit(loss)", "grad (backward pass)"]``):
    the name stack an equation had, with the operation itself left off."""
    return _name_stack_segments(op_name)[:-1]


def _body_name(eqn: Equation) -> str:
    """What an enclosing equation is, seen from an equation inside it."""
    primitive = eqn.primitive.name
    if primitive in ("jit", "pjit", "closed_call", "core_call"):
        name = str(eqn.params.get("name", "") or "")
        return f"jit({name})" if primitive in ("jit", "pjit") else name or primitive
    return _BODIES.get(primitive, primitive)


def transform_path(eqn: Equation, enclosing: Sequence[Equation] = ()) -> list[str]:
    """The transformations around ``eqn``, outermost first.

    ``enclosing`` holds the equations whose sub-programs contain it, outermost first
    (a ``jit`` equation, then a ``scan`` inside it): a name stack is relative to the
    program it is in, so the path is the enclosing equations' stacks and bodies in turn.
    """
    path: list[str] = []
    for outer in enclosing:
        path += _name_stack_segments(jaxpr_parts.name_stack_text(outer))
        path.append(_body_name(outer))
    path += _name_stack_segments(jaxpr_parts.name_stack_text(eqn))
    return [seg for i, seg in enumerate(path) if i == 0 or seg != path[i - 1]]


# -- from an equation -------------------------------------------------------------------


def _short_function(name: str) -> str:
    return name.rsplit("<locals>.", 1)[-1]


# JAX's dispatch machinery: frames between the user's line and the function it called
# (``api_boundary`` wrappers, jit's dispatch, WrappedFun calls) - never what the user called.
_DISPATCH_FILES = (
    "traceback_util.py",
    "pjit.py",
    "api.py",
    "api_util.py",
    "linear_util.py",
    "functools.py",
    "contextlib.py",
    "source_info_util.py",  # jax.named_scope's decorator, which Equinox puts around every module's __call__
)


def _called_library(frames: list[tuple[str, int, str]], user_index: int) -> str:
    """The library function the user's frame at ``user_index`` called (frames innermost first):
    a public JAX name (``jax.nn.logsumexp``), or another library's public callable as the user would
    type it (``numpyro.distributions.Normal.log_prob``, see ``library_calls``);
    "" when the user's line called no such function (an operator, a primitive bound directly)."""
    inward = [(name, qualname) for name, _line, qualname in reversed(frames[:user_index])]  # outermost first
    for k, (filename, function) in enumerate(inward):
        path = filename.replace("\\", "/")
        if path.rsplit("/", 1)[-1] in _DISPATCH_FILES or function.startswith("<"):
            continue
        if code_kind(filename) == "jax":
            return public_name(_short_function(function), filename)
        # another library: its public callable the line called, through its decorators and helpers
        return library_calls.library_called(inward[k:])
    return ""


def user_line_called(traceback: Traceback | None) -> tuple[SourceLine | None, str]:
    """(the innermost user line of a JAX traceback, the library function that line called)."""
    frames = recorded_sources.traceback_frames(traceback)  # innermost first
    for i, (filename, lineno, function) in enumerate(frames):
        if is_user_file(filename):
            return source_line(filename, lineno, _short_function(function)), _called_library(frames, i)
    return None, ""


def public_name(function: str, filename: str = "") -> str:
    """``logsumexp`` in ``jax/_src/nn/functions.py`` -> ``jax.nn.logsumexp``: the name a user writes;
    "" when no public namespace of JAX has it (``Primitive.bind``, an operator's helper)."""
    name = function.split(".")[-1]
    if "<" in name or "." in function.rsplit("<locals>.", 1)[-1]:
        return ""  # a method or a local helper of JAX's: not something the user called by name
    path = filename.replace("\\", "/")
    spaces = [
        ("jnp", jnp),
        ("jax.nn", jax.nn),
        ("jnp.linalg", jnp.linalg),
        ("jax.lax", jax.lax),
        ("jax.random", jax.random),
    ]
    preferred = (
        "jax.nn" if "/nn/" in path else "jnp.linalg" if "linalg" in path else "jax.lax" if "/lax/" in path else ""
    )
    spaces.sort(key=lambda entry: entry[0] != preferred)
    mirror = _mirrored_namespace(path)  # jax/_src/scipy/special.py -> jax.scipy.special
    if mirror is not None:
        spaces.insert(0, mirror)
    for candidate in (name, name.lstrip("_")):
        for prefix, space in spaces:
            if _defined_in(getattr(space, candidate, None), path):
                return f"{prefix}.{candidate}"
    return ""


def _mirrored_namespace(path: str) -> tuple[str, ModuleType] | None:
    """The public module that mirrors a private one of JAX's SciPy (``jax/_src/scipy/stats/norm.py`` ->
    ``jax.scipy.stats.norm``), when the user's program has it imported; else None. Only SciPy's: other
    mirrored modules (``jax.interpreters.ad``) hold JAX's machinery, not what the user's line called."""
    if "/jax/_src/scipy/" not in path or not path.endswith(".py"):
        return None
    dotted = "jax." + path.rsplit("/jax/_src/", 1)[1].removesuffix(".py").replace("/", ".")
    module = sys.modules.get(dotted)
    return (dotted, module) if module is not None else None


def _defined_in(public: object, path: str) -> bool:
    """Whether the public object ``public`` is the function whose frame ran in ``path``: a name alone
    is not enough (``loggamma`` in ``jax/_src/scipy/special.py`` is not ``jax.random.loggamma``,
    jax-ml/jax#38240's program). Objects without code of their own (``jnp.add``'s ufunc) and frames
    without a file are taken by name."""
    if public is None:
        return False
    code = getattr(inspect.unwrap(public), "__code__", None) if callable(public) else None
    if code is None or not path:
        return True
    return code.co_filename.replace("\\", "/") == path


def of_equation(
    eqn: Equation, enclosing: Sequence[Equation] = (), started: SourceLine | None = None, position: str = ""
) -> Provenance:
    """Where ``eqn`` of a traced program was made.

    Inside a nested jit JAX records only the frames below that jit, so when the
    equation's own traceback has no user frame the enclosing equations are asked,
    innermost first.
    """
    line, library = None, ""
    for made in (eqn, *reversed(list(enclosing))):
        line, library = user_line_called(getattr(made.source_info, "traceback", None))
        if line is not None:
            break
    return Provenance(
        made_at=line,
        function=line.function if line is not None else "",
        transforms=transform_path(eqn, enclosing),
        position=position,
        started_by=started,
        library_function=library,
        unknown="" if line is not None else "JAX recorded no frame of your code for this operation",
    )


# -- from a Python frame -----------------------------------------------------------------


def of_frame(frame: FrameType | None, transforms: Sequence[str] = ()) -> Provenance:
    """Where the code running in ``frame`` (or the nearest user frame it was called from) is."""
    user = innermost_user_frame(frame)
    if user is None:
        return Provenance(transforms=list(transforms), unknown="no frame of your code was on the stack")
    line = source_line(user.f_code.co_filename, user.f_lineno, _short_function(user.f_code.co_qualname))
    return Provenance(made_at=line, function=line.function, transforms=list(transforms), started_by=started_by(user))


def started_by(frame: FrameType | None = None) -> SourceLine | None:
    """The outermost user line on the stack: the cell line that made the call or started the trace."""
    frame = frame if frame is not None else sys._getframe(1)
    lines = user_lines_of_stack(frame)
    return lines[0] if lines else None


# -- from JAX's error message ------------------------------------------------------------

# "operation a:i32[] = add 3:i32[] 1:i32[]\n    from line /tmp/m.py:4:8 (f)"
_FROM_LINE = re.compile(r"from line (?P<file>.+?):(?P<line>\d+)(?::\d+)? \((?P<function>[^)]*)\)")
# "The error occurred while tracing the function f at /tmp/m.py:2 for jit."
_WHILE_TRACING = re.compile(
    r"while tracing the function (?P<function>\S+) at (?P<file>.+?):(?P<line>\d+) for (?P<how>\w+)"
)


def of_message(text: str) -> Provenance | None:
    """The line JAX's error message says made the offending value, with the function it traced;
    None when the message names no line of the user's."""
    made = None
    for match in _FROM_LINE.finditer(text):
        if is_user_file(match["file"]):
            made = source_line(match["file"], int(match["line"]), _short_function(match["function"]))
    traced = _WHILE_TRACING.search(text)
    if made is None and traced is None:
        return None
    function = made.function if made is not None else _short_function(traced["function"]) if traced else ""
    transforms = [f"{traced['how']}({_short_function(traced['function'])})"] if traced else []
    # The "at file:line" of the traced function is where it is defined, not the call that
    # started the trace: the caller fills ``started_by`` from the stack when it has one.
    return Provenance(
        made_at=made,
        function=function,
        transforms=transforms,
        unknown="" if made is not None else "JAX's message names the traced function but not the line",
    )


# -- from a line a probe already placed (a key drawn eagerly, a call that compiled) -------------


def of_source_line(
    line: SourceLine | None, started: SourceLine | None = None, transforms: Sequence[str] = ()
) -> Provenance:
    """Provenance of a value a probe already placed on a user line (a key consumed eagerly, a call
    that compiled): that line, its function, and the line that started it as context."""
    if line is None:
        return Provenance(
            transforms=list(transforms), started_by=started, unknown="no line of your code was on the stack"
        )
    return Provenance(made_at=line, function=line.function, transforms=list(transforms), started_by=started)


# -- from an allocation: NumPy arrays and JAX arrays' Python objects (tracemalloc) -------------
#
# The innermost user frame of an allocation traceback is not enough: for an array JAX
# allocated itself (the float32 copy of a float64 NumPy array, made when the array is first
# used or when the trace ends) that frame is the line that *used* the array, or the line that
# started the trace - not the line that built it. The functions below accept a frame only when
# the allocation was made by it (directly, or through NumPy), never through JAX.


def root_array(obj: object) -> object:
    """The NumPy array a view (JAX's ``TypedNdArray`` of a constant is one) was made from."""
    seen = 0
    while seen < 16:
        base = getattr(obj, "base", None)
        if base is None or not hasattr(base, "shape") or not hasattr(base, "dtype"):
            return obj
        obj, seen = base, seen + 1
    return obj


def allocation_traceback(obj: object) -> tuple[list[tracemalloc.Frame], str] | tuple[None, str]:
    """``tracemalloc``'s frames for ``obj`` (innermost first), or (None, why not)."""
    if not tracemalloc.is_tracing():
        why = "allocations are recorded only while tracemalloc traces (`tracemalloc.start(25)` before the code that makes them)"
        return None, why
    try:
        trace = tracemalloc.get_object_traceback(obj)
    except Exception:
        trace = None
    if trace is None:
        return None, "it was made before tracemalloc started recording allocations"
    return list(reversed(list(trace))), ""


def of_numpy_built(obj: object) -> Provenance:
    """The user's line that built a NumPy array (also when ``obj`` is a view of it, such as the
    constant JAX keeps), from ``tracemalloc``; unknown, with the reason, when the array was
    allocated by JAX (a converted copy) or before allocations were recorded."""
    frames, why = allocation_traceback(root_array(obj))
    if frames is None:
        return Provenance(unknown=why)
    for frame in frames:
        if is_user_file(frame.filename):
            return _made_by(frame, frames)
        package = library_calls.package_of(frame.filename)
        if package == "numpy":
            continue  # np.linspace and friends: NumPy's Python code, called by the user's line
        if code_kind(frame.filename) == "jax":
            return Provenance(
                unknown=(
                    "the array JAX keeps is a copy JAX made of it (for example converting float64 to float32), "
                    "so the NumPy call that built the original was not recorded"
                )
            )
        where = package or frame.filename
        return Provenance(unknown=f"it was allocated by code that is not yours ({where}), not by a line of yours")
    return Provenance(unknown="no frame of your code allocated it")


def of_allocation(obj: object) -> Provenance:
    """The user's line whose call allocated ``obj`` (any Python object: a JAX array's Python
    object is made by the user's line that called ``jax.random.split``, ``jnp.ones``, a jitted
    function or iterated an array), from ``tracemalloc``; unknown with the reason otherwise."""
    frames, why = allocation_traceback(obj)
    if frames is None:
        return Provenance(unknown=why)
    for frame in frames:
        if is_user_file(frame.filename):
            return _made_by(frame, frames)
    if len(frames) <= 1:
        return Provenance(unknown="tracemalloc kept one frame per allocation (start it with `tracemalloc.start(25)`)")
    return Provenance(unknown="no frame of your code was among the frames tracemalloc kept")


def _made_by(frame: tracemalloc.Frame, frames: Sequence[tracemalloc.Frame]) -> Provenance:
    """A provenance from tracemalloc's frame of the user's that allocated, named with its function
    (tracemalloc keeps no function names: the source says which ``def`` holds the line)."""
    function = enclosing_function(frame.filename, frame.lineno)
    line = source_line(frame.filename, frame.lineno, function or "<module>")
    return Provenance(made_at=line, function=function, started_by=_outermost_user(frames))


def _outermost_user(frames: Sequence[tracemalloc.Frame]) -> SourceLine | None:
    for frame in reversed(frames):
        if is_user_file(frame.filename):
            function = enclosing_function(frame.filename, frame.lineno)
            return source_line(frame.filename, frame.lineno, function or "<module>")
    return None


@functools.lru_cache(maxsize=1024)
def enclosing_function(filename: str, lineno: int) -> str:
    """The innermost ``def`` whose body holds ``filename:lineno`` ("" at module level, or when the
    source cannot be read or parsed)."""
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source) if source else None
    except (SyntaxError, ValueError):
        tree = None
    if tree is None:
        return ""
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = getattr(node, "end_lineno", node.lineno)
            if node.lineno <= lineno <= end and (best is None or node.lineno >= best.lineno):
                best = node
    return best.name if best is not None else ""


# -- the library function a line called (the NaN producer search) ------------------------------


def library_called(traceback: Traceback | None) -> str:
    """The library function (public name) that the innermost user line of a JAX traceback called;
    "" when it called none. For an equation JAX traced for a backward pass, pass the traceback of
    the forward line it was attributed to."""
    return user_line_called(traceback)[1]
