"""Which compiled programs the user's jitted calls ran in a block, for the profiler to name their kernels.

A profiler trace names each kernel after its optimized-HLO instruction
(``ynn_fusion.1``) and its module (``jit_mlp``); what the instruction computes,
its ``named_scope`` and the user's line are in the program's HLO text, which
JAX gives only for a ``Compiled`` object. To get one per program that ran:

* ``sys.monitoring`` CALL events in the user's own code (library code switches
  its events off at the first hit) show each call of a jitted function, before
  it happens. At the first call of each jitted function in the block its C++
  dispatch cache is emptied (``jit_internals.clear_dispatch_cache``), so that call
  takes jit's Python path once - JAX finds the program in its own caches,
  nothing compiles again - and a PY_START event on that path (``cache_miss``)
  shows the call's arguments. Calls that compile anyway take the same path.
* The arguments are kept as ``jax.ShapeDtypeStruct`` (static and Python scalar
  arguments as they are) until the block ends; then ``f.lower(*specs).compile()``
  gives the program's text and ``memory_analysis()`` - from JAX's caches, cheap.

Where no CALL events can be had (Python 3.11 has no ``sys.monitoring``; its trace hook does not see a
jitted function called), the calls are seen as ``fast_path_calls`` sees them: JAX's post hook after each
call its C++ dispatch served from its cache (the call's own function and arguments; the user's frame is
the hook's caller), and PY_START on ``cache_miss`` before the others (the function rebuilt from that
frame's ``fun`` and ``jit_info``: ``jit_internals.jitted_again``). A ``Compiled`` called directly is not seen there.

A ``jax.stages.Compiled`` the user calls directly (``jit(f).lower(x).compile()``)
gives its text at once and is kept until the block ends.

A call a library makes of a jitted function it made for the user (``nnx.jit``'s ``jitted_fn``,
``eqx.filter_jit``'s ``_cached``: not JAX's own function, a user's frame behind the library's) is the
user's, at the user's line that called the library; every other library call site is switched off at its
first event. Calls made while JAX traces (tracer arguments) and calls on other threads than the block's
are not captured. A function called again with a signature compiled in an earlier
cell is seen only at its first signature (its later programs show by kernel
name). Costs: one Python callback per call in the user's code, and one
Python-path dispatch (under a millisecond on CPU) per jitted function.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, TypeAlias

import jax
import numpy as np

from jaxmagic._jax import jit_internals
from jaxmagic._jax.monitoring_tool import DISABLE, MonitoringTool, NoFreeToolId
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import code_kind, is_user_file, user_call_site

MAX_PROGRAMS = 64  # distinct (function, signature) pairs captured per block


@dataclasses.dataclass
class CompiledProgram:
    """One program the block ran: its optimized HLO text and memory figures (no arrays)."""

    function: str  # the jitted function's name, e.g. "mlp"
    module: str  # the HLO module name, e.g. "jit_mlp" (what trace events call it)
    hlo_text: str
    memory: dict[str, int]  # memory_analysis() fields, in bytes
    call_site: tuple[str, int, str] | None  # (filename, line, function) of the first call
    problem: str = ""  # why the text could not be had ("" when it could)


@dataclasses.dataclass
class CapturedCall:
    """A jitted call the block made: arrays as ``jax.ShapeDtypeStruct``s, other arguments as given."""

    function: Any  # the jitted callable (held until the block ends)
    args: tuple[object, ...]
    kwargs: dict[str, object]
    call_site: tuple[str, int, str] | None
    # the user's names for the traced arguments, in JAX's order ("" where JAX's own name stands), when the
    # capture was given a way to tell them: a library's jit repacks the user's arrays under its own names
    argument_names: list[str] = dataclasses.field(default_factory=list)


# Given a jitted callable and the arguments it is called with, while the call is on the stack: the user's
# names for its traced arguments, in JAX's order ("" keeps JAX's); [] when they are JAX's own.
ArgumentNamer: TypeAlias = Callable[[Any, tuple[object, ...], dict[str, object]], list[str]]


class ProgramCapture:
    """Context manager: see the user's jitted calls; ``programs()`` afterwards compiles their text.

    ``available`` is False when this Python or JAX offers no way to see them (no watcher could be had, no
    jit dispatch path to watch); ``unavailable`` then says why, in words.
    """

    def __init__(self, argument_names: ArgumentNamer | None = None) -> None:
        self._argument_names = argument_names
        self.available = False
        self.unavailable = "this JAX has no jit dispatch path jaxmagic can watch"
        self._calls: dict[tuple[int, object, tuple[object, ...]], CapturedCall] = {}  # (id, treedef, specs)
        self._cleared: dict[int, Any] = {}
        self._user: dict[str, bool] = {}
        self._kinds: dict[str, str] = {}  # file name -> whose code it is (source.code_kind)
        self._pending: tuple[object, CodeType, int] | None = None  # (callable, code, offset)
        # id -> (jax.stages.Compiled, call site), called directly; Any: it is told by its type at run time
        self._compiled: dict[int, tuple[Any, tuple[str, int, str]]] = {}
        self._tool: MonitoringTool | None = None
        self._code: CodeType | None = None
        self._hook_state: Any = None  # JAX's post-hook state, when calls are seen through it (no CALL events)
        self._hook: Any = None
        self._previous_local: Any = None
        self._between = 0  # frames between a callback and its event's frame (MonitoringTool.frames_between)
        self.overflow = 0
        self._thread = threading.get_ident()  # the block's thread (set again on entering)

    def __enter__(self) -> ProgramCapture:
        self._thread = threading.get_ident()
        self._code = jit_internals.jit_cache_miss_code()
        if self._code is None:
            return self
        self._jit_type: type = jit_internals.jit_type()
        self._compiled_type: type = jax.stages.Compiled
        self._tracer: type = jax.core.Tracer
        try:
            tool = MonitoringTool("jaxmagic profile", calls=True)
        except NoFreeToolId as why:
            self.unavailable = str(why)
            return self._enter_without_calls()
        events = tool.events
        tool.on(events.CALL, self._on_call)
        tool.on(events.PY_START, self._on_start)
        tool.watch(events.CALL)
        tool.watch_code(self._code, events.PY_START)
        self._tool = tool
        self.available, self.unavailable = True, ""
        return self

    def _enter_without_calls(self) -> ProgramCapture:
        """See the calls through JAX's post hook and ``cache_miss`` (see the module docstring)."""
        hook_state = jit_internals.post_hook_state()
        if hook_state is None or self._code is None:
            return self
        try:
            tool = MonitoringTool("jaxmagic profile")
        except NoFreeToolId as why:
            self.unavailable = str(why)
            return self
        tool.on(tool.events.PY_START, self._on_miss_start)
        tool.watch_code(self._code, tool.events.PY_START)
        self._tool, self._between = tool, tool.frames_between
        previous, capture = hook_state.value, self._after_fast_call

        def hook(jitted: Any, args: tuple[object, ...], kwargs: dict[str, object], output: Any) -> None:
            capture(jitted, args, kwargs)
            if previous is not None:  # jax.debug_nans' check, or another watcher's hook: still runs
                previous(jitted, args, kwargs, output)

        self._hook_state, self._hook = hook_state, hook
        self._previous_local = hook_state.swap_local(hook)
        self.available, self.unavailable = True, ""
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tool is not None:
            self._tool.release()
            self._tool = None
        if self._hook_state is not None:
            if self._hook_state.get_local() is self._hook:  # else the block set its own (jax.debug_nans): left
                self._hook_state.set_local(self._previous_local)
            self._hook_state = self._hook = self._previous_local = None
        self._cleared.clear()
        self._pending = None

    # -- callbacks (run inside the user's code: small and never raising) --------

    def _on_call(self, code: CodeType, offset: int, callable_: object, arg0: object) -> object:
        if threading.get_ident() != self._thread:  # another thread's call (a data loader): not the block's
            return None  # not DISABLE: the line may run on the block's thread too
        kind = type(callable_)
        whose = self._kinds.get(code.co_filename)
        if whose is None:
            whose = self._kinds[code.co_filename] = code_kind(code.co_filename)
        if whose != "user":
            # A library's call of a jitted function it made for the user (``nnx.jit``'s ``jitted_fn``,
            # ``eqx.filter_jit``'s ``_cached``) is the user's program, seen at the user's line that called
            # the library; any other call site in a library (or in JAX) is switched off at its first event.
            if whose != "library" or kind is not self._jit_type or not self._made_for_user(callable_, 2):
                return DISABLE
        if kind is self._compiled_type:  # jit(f).lower(x).compile() called: its text is at hand
            if id(callable_) not in self._compiled and len(self._compiled) < MAX_PROGRAMS:
                caller = sys._getframe(1)
                self._compiled[id(callable_)] = (callable_, (code.co_filename, caller.f_lineno or 0, code.co_name))
                del caller
            return None
        if kind is self._jit_type:
            key = id(callable_)
            if key not in self._cleared:
                self._cleared[key] = callable_  # held, so its id is not reused within the block
                jit_internals.clear_dispatch_cache(callable_)
            self._pending = (callable_, code, offset)
        return None

    def _made_for_user(self, jitted: object, depth: int) -> bool:
        """Whether a library's call of ``jitted`` is made for the user: the function is not JAX's own (a
        ``jnp`` helper an eager optax update calls) and a user's frame is behind the library's frames.
        ``depth``: the library's frame making the call, counted from the caller of this method."""
        fun = getattr(jitted, "_fun", None)
        code = getattr(fun, "__code__", None) or getattr(getattr(fun, "__wrapped__", None), "__code__", None)
        if code is not None and code_kind(code.co_filename) == "jax":
            return False
        frame = sys._getframe(depth)
        try:
            return user_call_site(frame) is not None
        finally:
            del frame

    def _on_start(self, code: CodeType, offset: int) -> None:
        if threading.get_ident() != self._thread:
            return None
        pending, self._pending = self._pending, None
        if pending is None or len(self._calls) >= MAX_PROGRAMS:
            if pending is not None:
                self.overflow += 1
            return None
        try:
            self._capture(pending, sys._getframe(1))
        except Exception:
            pass  # a call we cannot read is shown by kernel name only
        return None

    def _after_fast_call(self, jitted: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        """The post hook's part: a call the C++ dispatch served from its cache, made by the user's code."""
        try:
            if threading.get_ident() != self._thread:
                return
            caller = sys._getframe(2)  # 0: here, 1: the hook, 2: the frame that called the jitted function
            code = caller.f_code
            user = self._user.get(code.co_filename)
            if user is None:
                user = self._user[code.co_filename] = is_user_file(code.co_filename)
            if not user and not (code_kind(code.co_filename) == "library" and self._made_for_user(jitted, 3)):
                return  # a library's call is the user's only when made for the user (``_on_call``)
            if len(self._calls) >= MAX_PROGRAMS:
                self.overflow += 1
                return
            self._capture_arguments(jitted, args, kwargs, _user_site(caller, start=caller))
        except Exception:
            pass  # a call we cannot read is shown by kernel name only

    def _on_miss_start(self, code: CodeType, offset: int) -> None:
        """PY_START on ``cache_miss`` without a CALL event before it: the function is rebuilt from its frame."""
        try:
            if threading.get_ident() != self._thread:
                return None
            frame = sys._getframe(1 + self._between)
            local = frame.f_locals
            jitted = jit_internals.jitted_again(local.get("fun"), local.get("jit_info"))
            if jitted is None:
                return None
            if len(self._calls) >= MAX_PROGRAMS:
                self.overflow += 1
                return None
            self._capture((jitted, None, None), frame)
        except Exception:
            pass
        return None

    def _capture(self, pending: tuple[object, ...], frame: FrameType) -> None:
        function = pending[0]
        args, kwargs = frame.f_locals.get("args", ()), frame.f_locals.get("kwargs", {})
        self._capture_arguments(function, args, kwargs, _user_site(frame))

    def _capture_arguments(
        self, function: Any, args: tuple[object, ...], kwargs: dict[str, object], site: tuple[str, int, str] | None
    ) -> None:
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        specs = []
        for leaf in leaves:
            if isinstance(leaf, self._tracer):
                return  # a call inside a function being traced: not a program of its own
            specs.append(_spec(leaf))
        key = (id(function), treedef, tuple(_spec_key(s) for s in specs))
        if key in self._calls:
            return
        spec_args, spec_kwargs = jax.tree_util.tree_unflatten(treedef, specs)
        names = []
        if self._argument_names is not None:
            try:  # while the arrays are the user's own objects: read now, not from the specs kept
                names = self._argument_names(function, tuple(args), dict(kwargs))
            except Exception:
                names = []  # JAX's names stand
        self._calls[key] = CapturedCall(function, tuple(spec_args), dict(spec_kwargs), site, names)

    # -- after the block -------------------------------------------------------

    @property
    def seen(self) -> int:
        """How many distinct calls were captured so far (read by a live view's thread)."""
        return len(self._calls)

    def captured_calls(self) -> list[CapturedCall]:
        """The distinct calls seen (function and signature), in the order first made; then forgets them."""
        calls, self._calls = list(self._calls.values()), {}
        return calls

    def programs(self) -> list[CompiledProgram]:
        """Lower and compile each captured call again (from JAX's caches); then forget the calls."""
        found = []
        calls, self._calls = list(self._calls.values()), {}
        compiled, self._compiled = list(self._compiled.values()), {}
        for program, site in compiled:
            try:
                text = program.as_text() or ""
                module = _module_name(text)
                name = module[4:] if module.startswith("jit_") else module or "compiled"
                found.append(CompiledProgram(name, module, text, _memory(program), site))
            except Exception as problem:
                found.append(CompiledProgram("compiled", "", "", {}, site, problem=error_line(problem)))
        del compiled
        for call in calls:
            name = str(getattr(call.function, "__name__", "") or "jit")
            try:
                compiled = call.function.lower(*call.args, **call.kwargs).compile()
                text = compiled.as_text() or ""
                memory = _memory(compiled)
                module = _module_name(text)
                found.append(CompiledProgram(name, module, text, memory, call.call_site))
            except Exception as problem:
                found.append(CompiledProgram(name, "", "", {}, call.call_site, problem=error_line(problem)))
        return found


def _module_name(text: str) -> str:
    """``HloModule jit_mlp, is_scheduled=true, ...`` -> ``jit_mlp``."""
    return text.split(None, 2)[1].rstrip(",") if text.startswith("HloModule ") else ""


def _user_site(frame: FrameType, start: FrameType | None = None) -> tuple[str, int, str] | None:
    """(filename, line, function) of the innermost user frame above jit's dispatch frame (or from ``start``)."""
    current = start if start is not None else frame.f_back
    del frame
    try:
        while current is not None:
            if is_user_file(current.f_code.co_filename):
                return current.f_code.co_filename, current.f_lineno or 0, current.f_code.co_name
            current = current.f_back
        return None
    finally:
        del current


def _spec(leaf: object) -> object:
    """A ShapeDtypeStruct for an array (a sharding only when it spans devices); other leaves as they are."""
    if isinstance(leaf, jax.Array):
        sharding = leaf.sharding if len(leaf.sharding.device_set) > 1 else None
        return jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=sharding, weak_type=bool(getattr(leaf, "weak_type", False))
        )
    if isinstance(leaf, (np.ndarray, np.generic)):
        return jax.ShapeDtypeStruct(np.shape(leaf), leaf.dtype)
    return leaf


def _spec_key(spec: object) -> tuple[object, ...]:
    if isinstance(spec, jax.ShapeDtypeStruct):
        return ("spec", spec.shape, str(spec.dtype), spec.weak_type, str(spec.sharding))
    try:
        hash(spec)
        return ("value", type(spec).__name__, spec)
    except TypeError:
        return ("object", id(spec))


MEMORY_FIELDS = {
    "argument_size_in_bytes": "arguments",
    "output_size_in_bytes": "outputs",
    "temp_size_in_bytes": "temporaries",
    "alias_size_in_bytes": "aliased",
    "generated_code_size_in_bytes": "generated code",
}


def _memory(compiled: jax.stages.Compiled) -> dict[str, int]:
    try:
        analysis = compiled.memory_analysis()
    except Exception:
        return {}
    if analysis is None:
        return {}
    return {label: int(getattr(analysis, field, 0) or 0) for field, label in MEMORY_FIELDS.items()}
