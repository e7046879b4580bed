"""Which of the user's functions each JAX transformation on the stack was tracing.

JAX's API frames hold the function they were given: ``cache_miss`` (jit) and
``vmap_f``/``grad_f``/``value_and_grad_f`` keep it as ``fun``, ``scan`` as ``f``,
``while_loop``/``fori_loop`` as ``body_fun``. Walking a stack (live frames, or the
frames of an unfiltered traceback) outermost first gives the transformation path
around the innermost user function: ``jit(step) > grad`` with ``loss`` traced by
grad. These are JAX's private frame names, so they are read here only.

``leak_error_stacks()`` records that path at the moment JAX's leak checker builds
its error (``core.leaked_tracer_error``): the function whose trace just ended has
returned by then, but the transformation frames that traced it are still on the
stack. It watches that one code object only (``sys.monitoring`` local event), and
records strings and source lines, never a frame or a function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Callable, Iterator
from types import CodeType, FrameType, TracebackType
from typing import TYPE_CHECKING, TypeAlias, TypedDict, cast

from jaxmagic._jax.monitoring_tool import MonitoringTool, NoFreeToolId
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import code_kind, defining_code, is_user_file, source_line

if TYPE_CHECKING:
    from jax._src.source_info_util import SourceInfo

# A stack as the explanations read it: its frames outermost first, each with its current line.
Frames: TypeAlias = list[tuple[FrameType, int]]

# code name of a JAX API frame -> (transformation, the local that holds the function it was given)
_API_FRAMES = {
    "cache_miss": ("jit", "fun"),
    "vmap_f": ("vmap", "fun"),
    "grad_f": ("grad", "fun"),
    "grad_f_aux": ("grad", "fun"),
    "value_and_grad_f": ("grad", "fun"),
    "jacfwd_f": ("jacfwd", "fun"),
    "jacrev_f": ("jacrev", "fun"),
    "vjp": ("vjp", "fun"),
    "jvp": ("jvp", "fun"),
    "linearize": ("linearize", "fun"),
    "scan": ("scan", "f"),
    "while_loop": ("while_loop", "body_fun"),
    "fori_loop": ("fori_loop", "body_fun"),
    "checkpoint": ("checkpoint", "fun"),
    "pmap_f": ("pmap", "fun"),
}


_BODY_LABELS = {"scan": "scan body", "while_loop": "while loop", "fori_loop": "fori_loop body"}


@dataclasses.dataclass(frozen=True)
class Transformation:
    """One transformation on the stack and the user's function it was tracing."""

    name: str  # "jit", "grad", "vmap", ...
    function: str  # "loss", "Model.__call__" (the part of the qualified name the user wrote)
    defined_at: SourceLine | None  # where that function is defined
    called_from: SourceLine | None  # the user's line that applied the transformation
    parameters: tuple[str, ...] = ()  # the function's parameter names, as its code declares them

    @property
    def label(self) -> str:
        """``jit(step)`` for jit (the function names the compiled program), ``scan body`` for a loop's
        body (the words ``probes._support.attribution`` uses for a body's equations), else ``grad``."""
        if self.name == "jit":
            return f"jit({self.function})"
        return _BODY_LABELS.get(self.name, self.name)


def _is_jax_file(filename: str) -> bool:
    return code_kind(filename) == "jax"


class JitStatic(TypedDict):
    """A jit's own static arguments, as ``jax.jit`` was given them."""

    static_argnums: tuple[int, ...]
    static_argnames: tuple[str, ...]


# what a transformation's API frame holds for the user's function: (fun, args, kwargs)
Call = tuple[Callable[..., object], tuple[object, ...], dict[str, object]]


def _user_function(value: object) -> tuple[str, CodeType] | None:
    """(short name, code) of the user's function ``value`` stands for, or None."""
    for _ in range(8):  # a WrappedFun keeps the function as .f, a partial as .func
        inner = getattr(value, "f", None) if hasattr(value, "transforms") else None
        if inner is None and isinstance(value, functools.partial):
            inner = value.func
        if inner is None:
            break
        value = inner
    if value is None or not callable(value):
        return None
    try:
        code, _wrapper = defining_code(value)
    except Exception:
        return None
    if code is None or not is_user_file(code.co_filename):
        return None
    name = code.co_qualname.rsplit("<locals>.", 1)[-1]
    return name, code


def transformations(frames: list[tuple[FrameType, int]]) -> list[Transformation]:
    """The transformations among ``frames`` (outermost first, each with its current line)."""
    found: list[Transformation] = []
    seen_codes: list[CodeType] = []  # the user function of the previous transformation, to fold grad_f > vjp > ...
    caller: SourceLine | None = None
    for frame, lineno in frames:
        code = frame.f_code
        if is_user_file(code.co_filename):
            caller = source_line(code.co_filename, lineno, code.co_qualname.rsplit("<locals>.", 1)[-1])
            seen_codes = []  # a user frame between two API frames: the next one is a new transformation
            continue
        entry = _API_FRAMES.get(code.co_name)
        if entry is None or not _is_jax_file(code.co_filename):
            continue
        name, local = entry
        try:
            held = frame.f_locals.get(local)
        except Exception:
            continue
        user = _user_function(held)
        del held
        if user is None:
            continue
        function, fcode = user
        if fcode in seen_codes:
            continue  # grad_f, then value_and_grad_f and vjp for the same function: one grad
        seen_codes.append(fcode)
        defined = source_line(fcode.co_filename, fcode.co_firstlineno, function)
        found.append(Transformation(name, function, defined, caller, _parameters(fcode)))
    return found


def _parameters(code: CodeType) -> tuple[str, ...]:
    count = code.co_argcount + code.co_kwonlyargcount
    names = code.co_varnames[:count]
    return tuple(n for n in names if n != "self")


def stack_at_raise(error: BaseException) -> list[tuple[FrameType, int]]:
    """The whole stack where ``error`` was raised, outermost first: the innermost frame of its
    traceback and every frame it was called from. A frame keeps its caller after it finished, so
    this holds JAX's frames even when JAX filtered them out of the traceback."""
    tb = error.__traceback__
    lines: dict[int, int] = {}
    in_tb = []
    while tb is not None:
        lines[id(tb.tb_frame)] = tb.tb_lineno
        in_tb.append(tb.tb_frame)
        tb = tb.tb_next
    # A finished generator's frame (a context manager's) has lost its caller: start from the
    # innermost frame that kept one.
    innermost = next((f for f in reversed(in_tb) if f.f_back is not None), in_tb[0] if in_tb else None)
    del in_tb
    frames = []
    frame = innermost
    while frame is not None:
        frames.append((frame, lines.get(id(frame), frame.f_lineno)))
        frame = frame.f_back
    del frame, innermost
    return frames[::-1]


def jit_call(
    frames: list[tuple[FrameType, int]], function: str
) -> tuple[Callable[..., object], tuple[object, ...], dict[str, object], JitStatic] | None:
    """``(fun, args, kwargs, static)`` of the jitted call of the user's ``function`` among ``frames``
    (jit's ``cache_miss`` keeps them; ``static`` is the jit's own ``{"static_argnums": ...,
    "static_argnames": ...}``), or None. The caller must not keep them past its check."""
    for frame, _ in frames:
        code = frame.f_code
        if code.co_name != "cache_miss" or not _is_jax_file(code.co_filename):
            continue
        try:
            fun, args, kwargs, info = (frame.f_locals.get(k) for k in ("fun", "args", "kwargs", "jit_info"))
        except Exception:
            continue
        user = _user_function(fun)
        if user is not None and user[0] == function and isinstance(args, tuple) and isinstance(kwargs, dict):
            static: JitStatic = {
                "static_argnums": tuple(getattr(info, "static_argnums", ()) or ()),
                "static_argnames": tuple(getattr(info, "static_argnames", ()) or ()),
            }
            return cast("Callable[..., object]", fun), args, kwargs, static  # jit takes only a callable
    return None


def transformation_call(frames: list[tuple[FrameType, int]], function: str) -> Call | None:
    """``(fun, args, kwargs)`` a JAX transformation's API frame among ``frames`` (``grad_f``,
    ``value_and_grad_f``, ``vmap_f``, jit's ``cache_miss``) holds for the user's ``function``: what it was
    given and called with; None when there is none. The caller must not keep them past its check."""
    for frame, _ in frames:
        code = frame.f_code
        entry = _API_FRAMES.get(code.co_name)
        if entry is None or not _is_jax_file(code.co_filename):
            continue
        try:
            fun, args, kwargs = (frame.f_locals.get(k) for k in (entry[1], "args", "kwargs"))
        except Exception:
            continue
        user = _user_function(fun)
        if user is not None and user[0] == function and isinstance(args, tuple) and isinstance(kwargs, dict):
            return cast("Callable[..., object]", fun), args, kwargs  # as each transformation takes
    return None


def library_callable_jit_call(
    frames: list[tuple[FrameType, int]],
) -> tuple[Callable[..., object], tuple[object, ...], dict[str, object], JitStatic, tuple[FrameType, int]] | None:
    """``(fun, args, kwargs, static, caller)`` of the outermost jitted call among ``frames`` whose function
    is a library's callable that runs the user's code (``jax.jit(model.apply)`` of a Flax Linen module,
    ``jax.jit(hk.transform(f).apply)``), called from the user's line (``caller``: that frame and line);
    None when there is none. The caller must not keep them past its check."""
    caller = None
    for frame, lineno in frames:
        code = frame.f_code
        if is_user_file(code.co_filename):
            caller = (frame, lineno)
            continue
        if code.co_name != "cache_miss" or not _is_jax_file(code.co_filename):
            continue
        try:
            fun, args, kwargs, info = (frame.f_locals.get(k) for k in ("fun", "args", "kwargs", "jit_info"))
        except Exception:
            return None
        module = getattr(fun, "__module__", None) or ""
        if caller is None or _user_function(fun) is not None or module.split(".")[0] in ("jax", "jaxlib"):
            return None
        if not isinstance(args, tuple):
            return None
        if not isinstance(kwargs, dict):
            return None
        static: JitStatic = {
            "static_argnums": tuple(getattr(info, "static_argnums", ()) or ()),
            "static_argnames": tuple(getattr(info, "static_argnames", ()) or ()),
        }
        return cast("Callable[..., object]", fun), args, kwargs, static, caller
    return None


def jit_caller(frames: list[tuple[FrameType, int]], function: str) -> tuple[FrameType, int] | None:
    """The user's frame and line that made the jitted call of ``function`` found by ``jit_call``
    (the last frame of the user's before that call's ``cache_miss``); None when there is none."""
    caller = None
    for frame, lineno in frames:
        code = frame.f_code
        if code.co_name == "cache_miss" and _is_jax_file(code.co_filename):
            try:
                user = _user_function(frame.f_locals.get("fun"))
            except Exception:
                user = None
            if user is not None and user[0] == function:
                return caller
        elif is_user_file(code.co_filename):
            caller = (frame, lineno)
    return None


def traced_for(tracer: object) -> tuple[str, str]:
    """(transformation, function) of the trace that made ``tracer``, from the debug info jit keeps on
    its trace (``("jit", "step")``); a name JAX does not know (a callable object) is ""."""
    trace = getattr(made_by(tracer), "_trace", None)
    info = getattr(getattr(trace, "frame", None), "debug_info", None)
    if info is None:
        return "", ""
    how = str(getattr(info, "traced_for", "") or "")
    name = str(getattr(info, "func_name", "") or "")
    return how, "" if name.startswith("<unknown") else name.rsplit("<locals>.", 1)[-1]


def of_traceback(tb: TracebackType | None) -> list[Transformation]:
    """The transformations in a traceback (all of JAX's frames are there only when it was not filtered)."""
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    try:
        return transformations(frames)
    finally:
        del frames


def of_stack(frame: FrameType | None) -> list[Transformation]:
    """The transformations on the live stack from ``frame`` outwards."""
    frames = []
    while frame is not None:
        frames.append((frame, frame.f_lineno))
        frame = frame.f_back
    try:
        return transformations(frames[::-1])
    finally:
        del frames, frame


def unfiltered_traceback(error: BaseException) -> TracebackType | None:
    """The traceback with JAX's frames: the error's own (mode "off"/"tracebackhide", IPython's default),
    or the one JAX keeps in ``__cause__`` in mode "remove_frames"; None when JAX removed them."""
    cause = error.__cause__
    if cause is not None and type(cause).__name__ == "UnfilteredStackTrace":
        return cause.__traceback__
    tb = error.__traceback__
    probe = tb
    while probe is not None:
        if _is_jax_file(probe.tb_frame.f_code.co_filename):
            return tb
        probe = probe.tb_next
    return None


@contextlib.contextmanager
def leak_error_stacks() -> Iterator[list[list[Transformation]]]:
    """Record, for each leak error JAX builds in the block, the transformations on the stack then.

    Yields a list that receives one list of ``Transformation`` per leak error (in order).
    Without a watcher (``monitoring_tool``: every tool id taken) nothing is recorded.
    """
    recorded: list[list[Transformation]] = []
    try:
        from jax._src import core
    except Exception:
        yield recorded
        return
    code = getattr(getattr(core, "leaked_tracer_error", None), "__code__", None)
    if code is None:
        yield recorded
        return
    try:
        tool = MonitoringTool("jaxmagic leak stacks")
    except NoFreeToolId:
        yield recorded
        return

    def on_start(started: CodeType, offset: int) -> None:
        if started is code:
            try:
                recorded.append(of_stack(sys._getframe(1 + tool.frames_between)))
            except Exception:
                pass

    try:
        tool.on(tool.events.PY_START, on_start)
        tool.watch_code(code, tool.events.PY_START)
        yield recorded
    finally:
        tool.release()


def trace_ended(tracer: object) -> bool | None:
    """True when the trace that made ``tracer`` has ended (the tracer leaked), None if JAX does not say."""
    trace = getattr(tracer, "_trace", None)
    is_valid = getattr(trace, "is_valid", None)
    if is_valid is None:
        return None
    try:
        return not is_valid()
    except Exception:
        return None


def trace_running_on(tracer: object, frames: list[tuple[FrameType, int]]) -> bool:
    """Whether the trace that made ``tracer`` was still being traced where ``frames`` were (the stack
    of an error, outermost first): a JAX frame on it holds that trace in a variable (``trace`` of
    the function that runs the user's function under it). Every way into a trace sets one up so -
    ``make_jaxpr``, ``eval_shape``, ``lax.cond``'s branches, ``custom_jvp`` - also those no table
    of API functions names; a tracer kept from a trace that ended is held by no frame."""
    trace = getattr(tracer, "_trace", None)
    if trace is None:
        return False
    for frame, _ in frames:
        if not _is_jax_file(frame.f_code.co_filename):
            continue
        try:
            if any(value is trace for value in frame.f_locals.values()):
                return True
        except Exception:
            continue
    return False


def traced_below(frames: list[tuple[FrameType, int]], start: int) -> bool:
    """Whether the error whose stack is ``frames`` was raised while a transformation traced code called from
    ``frames[start]`` (the user's failing line): a frame after it holds a tracer whose trace a JAX frame keeps
    in a local of its own - the frame that runs a function under that trace (``trace``; never ``self``, which
    a method of an ended trace applied to a leaked tracer holds too). ``jax.jit(opt.init)(params)``: Optax's
    ``_factored_dims`` holds the traced hyperparameter while jit's ``trace_to_jaxpr`` holds its trace."""
    traces: dict[int, object] = {}
    for frame, _ in frames[start + 1 :]:
        try:
            values = list(frame.f_locals.values())
        except Exception:
            continue
        for value in values:
            trace = getattr(value, "_trace", None) if _is_tracer(value) else None
            if trace is not None:
                traces[id(trace)] = trace
        del values
    if not traces:
        return False
    try:
        for frame, _ in frames:
            if not _is_jax_file(frame.f_code.co_filename):
                continue
            try:
                held = [value for name, value in frame.f_locals.items() if name != "self"]
            except Exception:
                continue
            if any(id(value) in traces and value is traces[id(value)] for value in held):
                return True
        return False
    finally:
        traces.clear()


def _is_tracer(value: object) -> bool:
    core = sys.modules.get("jax.core")
    tracer = getattr(core, "Tracer", None)
    return tracer is not None and isinstance(value, tracer)


def made_by(tracer: object) -> object:
    """The tracer a grad tracer wraps (``primal``), whose line JAX records; else the tracer itself."""
    primal = getattr(tracer, "primal", None)
    return primal if primal is not None and hasattr(primal, "_trace") else tracer


def line_info(tracer: object) -> SourceInfo | None:
    """The source info JAX recorded where ``tracer`` was made: ``_line_info`` of a jit tracer (a grad
    tracer's primal), ``source_info`` of a vmap tracer; None when it recorded none."""
    made = made_by(tracer)
    info = getattr(made, "_line_info", None)
    if info is None:
        info = getattr(made, "source_info", None)
    return info if hasattr(info, "traceback") else None
