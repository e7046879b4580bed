"""See every top-level call of a jitted function (and every eager operation) with its arguments and results.

JAX has no public hook for "a jitted function was called". Its C++ dispatch
runs a cached executable without entering Python at all. One documented
switch makes every call go through Python: ``jax_debug_key_reuse``, the
key-reuse checker, which must look at each call's key arguments. With it on,
each top-level primitive (``jit`` included) is run through
``jax.experimental.key_reuse._core.call_impl_with_key_reuse_checks``, and each
traced program is checked by ``check_key_reuse_jaxpr``.

While ``observing_calls`` is active we turn the checker on and put our own
function in place of those two, so that observers see each outermost call -
its name (``train_step``, or the primitive ``add``), its flat arguments and its
flat results - and the key-reuse checks themselves run as the caller asks:

* ``"off"``: not at all (the observer only watches; nothing can raise);
* ``"raise"``: exactly as JAX does with ``jax.debug_key_reuse(True)``;
* ``"record"``: JAX's check runs, and a ``KeyReuseError`` is handed to
  ``on_key_reuse`` instead of being raised - the call then runs as it would
  with the checker off, so the user's program and results are unchanged.

Separately for the per-call checks (eager code, and keys passed to a jitted
function) and the checks of each traced program (a key used twice inside one
function, found once when it is traced).

The cost: every call takes JAX's Python dispatch path (about a millisecond on
CPU instead of tens of microseconds), and ``jax_debug_key_reuse`` being part of
the compilation cache key, each function compiles once more for the block.
Calls made while another call is being observed (the jitted programs that
eager operations run internally) are not reported again.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import CodeType, FrameType
from typing import Any, Protocol

import jax
from jax._src import pjit
from jax.experimental.key_reuse import _core as key_reuse

from jaxmagic._jax import jit_internals, key_internals, runtime
from jaxmagic._jax.call_sampling import CallSampler
from jaxmagic._jax.exclusive import AlreadyActive
from jaxmagic._jax.fast_path_calls import CallDetails, FastPathCalls, donates  # noqa: F401 (donates: re-exported for observers)
from jaxmagic._jax.monitoring_tool import DISABLE, MonitoringTool, NoFreeToolId
from jaxmagic._jax.own_settings import note_own_value
from jaxmagic._jax.types import Params, Value
from jaxmagic.usercode.source import is_user_file

CHECK_MODES = ("off", "raise", "record")


class CallObserver:
    """Receives the outermost calls. Both methods may raise only on purpose (a probe stopping the cell)."""

    def before(self, name: str, is_jit: bool, args: tuple[Value, ...], params: Params) -> None:
        pass

    def after(self, name: str, is_jit: bool, args: tuple[Value, ...], params: Params, outputs: list[Value]) -> None:
        pass


class _CallState(threading.local):
    """Per thread: ``depth`` > 0 inside an observed call (or a probe's own re-run), ``call`` the
    details of the call being observed. Class-level defaults, because ``getattr(local, name, 0)``
    on a missing attribute raises and catches an AttributeError: ~1.3 us, at every jitted call."""

    depth = 0
    call: CallDetails | None = None
    primitive: Any = None  # the primitive of the outermost call being observed (``observed_primitive``)


_state = _CallState()
_active = False


def available() -> bool:
    """Whether this JAX has the two functions we put our observer in place of."""
    try:
        from jax.experimental.key_reuse import _core as key_reuse
    except ImportError:
        return False
    return callable(getattr(key_reuse, "call_impl_with_key_reuse_checks", None)) and callable(
        getattr(key_reuse, "check_key_reuse_jaxpr", None)
    )


def observed_primitive() -> Any:
    """The primitive of the outermost call an observer's ``before``/``after`` is being shown (``cond``,
    ``while``, ``jit``), so that it can bind the same call again (on the calling thread; None outside)."""
    return _state.primitive


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Run a block (a probe's own re-run of a call) unobserved and without key checks."""
    depth = _state.depth
    _state.depth = depth + 1
    try:
        with jax.debug_key_reuse(False):
            yield
    finally:
        _state.depth = depth


@contextlib.contextmanager
def observing_calls(
    *observers: CallObserver,
    call_checks: str = "off",
    trace_checks: str = "off",
    on_key_reuse: Callable[..., None] | None = None,
    only_user_calls: bool = False,
    direct_user_jit_calls: bool = False,
    fast_path: bool = False,
    on_calls_unseen: Callable[[], None] | None = None,
    sampler: CallSampler | None = None,
) -> Iterator[bool]:
    """Show every outermost call of the block to ``observers``; yield False if this JAX offers no way to.

    ``call_checks`` / ``trace_checks``: "off", "raise" or "record" (see the
    module docstring). Each ``KeyReuseError`` is shown to
    ``on_key_reuse(error, where, function, params, args)`` (args: the call's arguments, () for a
    trace) - where is "call" or
    "trace", function the name of the jitted function or primitive that got
    the consumed key (or the traced function), params the call's parameters
    ({} for a trace) - before it is raised ("raise") or instead ("record").
    ``only_user_calls``: observe only calls of jitted functions made by the
    user's own code (see ``_UserCallSwitch``): much cheaper, and eager
    operations are then not seen.
    ``direct_user_jit_calls``: for observers that need only the call's name
    (they get no arguments, parameters or outputs for these calls): the
    user's own calls of jitted functions are seen through ``sys.monitoring``
    (``_DirectUserJitCalls``) and run with the checker off, on JAX's usual
    path, instead of on the key-reuse path (~100 us more per call); every
    other call is observed as before. Key-reuse checks must be "off".
    ``fast_path``: observe only the user's own top-level calls of jitted
    functions, and leave them on JAX's C++ path (``fast_path_calls``: about
    0.4 ms less per call of a training step than the key-reuse path); the
    checker stays off, each program those calls trace is checked as
    ``trace_checks`` says, and ``call_checks`` must be "off". Falls back to
    ``only_user_calls`` when this JAX has no such hooks. ``on_calls_unseen()``
    is called at the end if the block switched ``jax.debug_nans`` itself, which
    takes over the hook: fast-path calls after that were not seen. ``sampler``
    (with ``fast_path``): observe only the fast-path calls it says are due
    (``call_sampling``); every call is counted.
    ``jax_debug_key_reuse`` is switched on for the block and put back after
    (not with ``fast_path``).
    Does not nest: raises AlreadyActive while another block observes calls.
    """
    _check_modes(call_checks, trace_checks, direct_user_jit_calls, fast_path)
    if not available():
        yield False
        return
    note_own_value("jax_debug_key_reuse", True)  # part of the cache key: never the user's cause (own_settings)
    if _active:
        raise AlreadyActive(
            "cannot run inside another magic that follows every jit call: "
            "%%jax_keys, %%jax_print, %%jax_transfers and %%jax_doctor do not combine with one another"
        )

    original_call = key_reuse.call_impl_with_key_reuse_checks
    original_check = key_reuse.check_key_reuse_jaxpr
    block_thread = threading.get_ident()  # only the block's own thread is observed (and checked our way)

    def report(error: BaseException, where: str, function: str, params: Params, args: tuple[Value, ...] = ()) -> None:
        if on_key_reuse is not None:
            on_key_reuse(error, where, function, params, args)

    def call_hook(seen: tuple[CallObserver, ...]) -> Callable[..., Any]:
        return _call_hook(seen, call_checks, original_call, report, block_thread)

    check, check_traced = _trace_check_hooks(trace_checks, original_check, report, block_thread)
    # With the fast path, `call` observes nothing: a call the user's own checker sends its way is the fast path's.
    with _key_reuse_patched(call_hook(() if fast_path else observers), check), contextlib.ExitStack() as stack:
        fast = None
        if fast_path:
            fast = FastPathCalls(observers, _state, on_trace=check_traced, on_lost=on_calls_unseen, sampler=sampler)
            if not fast.start():  # this JAX has no such hooks: `call` observes the calls, those of the user's code only
                key_reuse.call_impl_with_key_reuse_checks = call_hook(observers)
                fast, only_user_calls = None, True
        monitor = fast or _started_monitor(stack, observers, only_user_calls, direct_user_jit_calls)
        if monitor is not None:
            stack.callback(monitor.stop)  # before the checker is switched off again
        yield True


def _started_monitor(
    stack: contextlib.ExitStack, observers: tuple[CallObserver, ...], only_user_calls: bool, direct: bool
) -> _Monitor | None:
    """What sees the block's calls besides ``call``, started, when the fast path does not: the user's calls
    switched to the key-reuse path (``only_user_calls``), else (the checker then on for the block, in
    ``stack``) the user's direct jitted calls seen through ``sys.monitoring`` (``direct``), else None."""
    if only_user_calls:
        switch = _UserCallSwitch()
        if switch.start():
            return switch

    stack.enter_context(jax.debug_key_reuse(True))  # every call takes the key-reuse path
    direct_calls = _DirectUserJitCalls(observers) if direct else None
    if direct_calls is not None and direct_calls.start():
        return direct_calls
    return None


def _check_modes(call_checks: str, trace_checks: str, direct_user_jit_calls: bool, fast_path: bool) -> None:
    """Raise ValueError for a combination of ``observing_calls``' options that cannot work."""
    for mode in (call_checks, trace_checks):
        if mode not in CHECK_MODES:
            raise ValueError(f"key-reuse check mode must be one of {CHECK_MODES}, got {mode!r}")
    if direct_user_jit_calls and (call_checks, trace_checks) != ("off", "off"):
        raise ValueError("direct_user_jit_calls runs calls without key-reuse checks: both check modes must be 'off'")
    if fast_path and (call_checks != "off" or trace_checks == "raise"):
        # Its hooks run inside JAX's dispatch, where an error of theirs is never raised to the user.
        raise ValueError(
            "fast_path checks nothing per call and raises nothing: call_checks 'off', trace_checks not 'raise'"
        )


@contextlib.contextmanager
def _key_reuse_patched(call: Callable[..., Any], check: Callable[..., Any]) -> Iterator[None]:
    """Our ``call`` and ``check`` in place of the key-reuse checker's two functions for the block."""
    global _active

    original_call = key_reuse.call_impl_with_key_reuse_checks
    original_check = key_reuse.check_key_reuse_jaxpr
    _active = True
    key_reuse.call_impl_with_key_reuse_checks = call
    key_reuse.check_key_reuse_jaxpr = check
    try:
        yield
    finally:
        key_reuse.call_impl_with_key_reuse_checks = original_call
        key_reuse.check_key_reuse_jaxpr = original_check
        _active = False


# What ``observing_calls`` tells of a key reuse: (error, "call" or "trace", function, params, args).
_ReuseReport = Callable[[BaseException, str, str, Params, tuple[Value, ...]], None]


def _call_hook(
    observers: tuple[CallObserver, ...],
    call_checks: str,
    original_call: Callable[..., Any],
    report: _ReuseReport,
    block_thread: int,
) -> Callable[..., Any]:
    """The block's ``call_impl_with_key_reuse_checks``: each outermost call of the block's thread is shown
    to ``observers`` around it, and checked for key reuse as ``call_checks`` says."""
    reuse_error = jax.errors.KeyReuseError
    jit_p = pjit.jit_p

    def checked(prim: Any, raw_impl: Callable[..., Any], name: str, args: tuple[Value, ...], params: Params) -> Any:
        __tracebackhide__ = True
        if call_checks == "off":
            return raw_impl(*args, **params)
        try:
            return key_internals.call_with_key_reuse_checks(prim, raw_impl, args, params, original_call)
        except reuse_error as error:
            report(error, "call", name, params, args)
            if call_checks == "raise":
                raise
            return raw_impl(*args, **params)  # as it runs with the checker off

    def call(prim: Any, raw_impl: Callable[..., Any], *args: Any, **params: Any) -> Any:
        __tracebackhide__ = True
        if threading.get_ident() != block_thread:  # another thread with the checker on: JAX's own behaviour
            return original_call(prim, raw_impl, *args, **params)
        is_jit = prim is jit_p
        name = str(params.get("name", "jit")) if is_jit else str(getattr(prim, "name", prim))
        if _state.depth:  # inside an observed call: checked, not shown to the observers
            return checked(prim, raw_impl, name, args, params)
        _state.depth, _state.primitive = 1, prim
        try:
            for observer in observers:
                observer.before(name, is_jit, args, params)
            result = checked(prim, raw_impl, name, args, params)
            outputs = list(result) if getattr(prim, "multiple_results", False) else [result]
            for observer in observers:
                observer.after(name, is_jit, args, params, outputs)
            return result
        finally:
            _state.depth, _state.primitive = 0, None

    return call


def _trace_check_hooks(
    trace_checks: str, original_check: Callable[..., Any], report: _ReuseReport, block_thread: int
) -> tuple[Callable[..., Any], Callable[[Any, str], None]]:
    """The block's ``check_key_reuse_jaxpr`` (each program the block's thread traces, checked as
    ``trace_checks`` says) and the check of a program a fast-path call traced or ran."""
    reuse_error = jax.errors.KeyReuseError

    def check(jaxpr: Any, *rest: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if threading.get_ident() != block_thread:
            return original_check(jaxpr, *rest, **kwargs)
        if trace_checks == "off":
            return None
        try:
            return original_check(jaxpr, *rest, **kwargs)
        except reuse_error as error:
            info = getattr(jaxpr, "debug_info", None)
            report(error, "trace", str(getattr(info, "func_name", "") or ""), {}, ())
            if trace_checks == "raise":
                raise
            return None

    def check_traced(closed_jaxpr: Any, name: str) -> None:  # a program a fast-path call traced or ran
        if trace_checks == "off" or jax.config.jax_debug_key_reuse:  # JAX checks it itself when the user's on
            return
        try:
            original_check(getattr(closed_jaxpr, "jaxpr", closed_jaxpr))
        except reuse_error as error:
            report(error, "trace", name, {}, ())

    return check, check_traced


class _Monitor(Protocol):
    """What sees the block's jitted calls: the fast path, or one of the sys.monitoring watchers below."""

    def stop(self) -> None: ...


class _UserCallMonitor:
    """The calls the block's thread makes from the user's own code, seen through ``sys.monitoring``.

    ``sys.monitoring`` reports each call made by Python code before it happens
    (CALL) and each return of a C-implemented callable (C_RETURN / C_RAISE).
    Call sites in library code are switched off at their first event
    (DISABLE). A subclass says what to do at a call of the user's
    (``_at_user_call``), at a return (``_on_return``) or raise (``_on_raise``),
    and how to leave the calls still entered when the block stops
    (``_leave_all``: a call that never returned, KeyboardInterrupt inside C code).
    """

    def __init__(self) -> None:
        self._is_user_file = is_user_file
        self._user: dict[str, bool] = {}  # file name -> whether it is the user's
        # (callable, its entered context) here; (callable, name, entered context) in ``_DirectUserJitCalls``
        self._entered: list[tuple[Any, ...]] = []
        self._tool: MonitoringTool | None = None
        # sys.monitoring reports every thread's calls; only the block's thread is watched (the
        # checker's switch is thread-local: entered in another thread, it would stay on there).
        self._thread = threading.get_ident()

    def start(self) -> bool:
        try:
            tool = MonitoringTool("jaxmagic jit calls", calls=True)
        except NoFreeToolId:
            return False
        events = tool.events
        tool.on(events.CALL, self._on_call)
        tool.on(events.C_RETURN, self._on_return)
        tool.on(events.C_RAISE, self._on_raise)
        tool.watch(events.CALL | events.C_RETURN | events.C_RAISE)
        self._tool = tool
        return True

    def stop(self) -> None:
        if self._tool is not None:
            self._tool.release()
            self._tool = None
        self._leave_all()

    def _on_call(self, code: CodeType, offset: int, callable_: object, arg0: object) -> object:
        if threading.get_ident() != self._thread:
            return None  # not DISABLE: that would switch the call site off for the block's thread too
        filename = code.co_filename
        user = self._user.get(filename)
        if user is None:
            user = self._user[filename] = self._is_user_file(filename)
        if not user:
            return DISABLE
        return self._at_user_call(callable_)

    def _at_user_call(self, callable_: object) -> object:
        """What ``sys.monitoring`` is told at a call of the user's (None, or ``DISABLE``)."""
        raise NotImplementedError

    def _on_return(self, code: CodeType, offset: int, callable_: object, arg0: object) -> None:
        raise NotImplementedError

    def _on_raise(self, code: CodeType, offset: int, callable_: object, arg0: object) -> None:
        return self._on_return(code, offset, callable_, arg0)

    def _leave_all(self) -> None:
        raise NotImplementedError


class _UserCallSwitch(_UserCallMonitor):
    """Switch the checker on only around calls of jitted functions made by the user's own code.

    When the user's code calls a jitted function, ``jax.debug_key_reuse`` is
    entered for that call, so only that call takes the Python path; eager
    operations and JAX's own jitted helpers keep the fast path.
    """

    def __init__(self) -> None:
        super().__init__()
        self._jit_type = jit_internals.jit_type()

    def _at_user_call(self, callable_: object) -> None:
        if type(callable_) is self._jit_type:
            context = jax.debug_key_reuse(True)
            context.__enter__()
            self._entered.append((callable_, context))
        return None

    def _on_return(self, code: CodeType, offset: int, callable_: object, arg0: object) -> None:
        if threading.get_ident() != self._thread:
            return None
        if self._entered and self._entered[-1][0] is callable_:
            self._entered.pop()[1].__exit__(None, None, None)
        return None

    def _leave_all(self) -> None:
        while self._entered:
            self._entered.pop()[1].__exit__(None, None, None)


_guarded_backend: list[bool] = []  # [whether device-to-host reads are guarded], once the backend is known


def reads_allowed() -> contextlib.AbstractContextManager[object]:
    """A context in which our own reads of device values (key data, results looked at for NaN) pass
    any transfer guard: they are not the user's transfers. On CPU nothing is guarded (a no-op)."""
    if not _guarded_backend:
        _guarded_backend.append(jax.default_backend() != "cpu")
    if not _guarded_backend[0]:
        return contextlib.nullcontext()
    return jax.transfer_guard_device_to_host("allow")


def _never_at_top_level() -> bool:
    """The top-level check of a JAX that offers none (``_DirectUserJitCalls`` then never starts)."""
    return False


class _DirectUserJitCalls(_UserCallMonitor):
    """Observe the user's own calls of jitted functions around the call, with the key-reuse checker off.

    With ``jax_debug_key_reuse`` on, every call takes JAX's key-reuse path
    (``jit_p.bind`` and a new dispatch object per call). Observers that need
    only the call's name do not need that path for the calls the user's code
    makes itself: ``sys.monitoring`` reports each such call before it happens
    (CALL) and its return (C_RETURN / C_RAISE), so the observers are told
    there and ``jax.debug_key_reuse(False)`` is entered for the call, which
    then runs as it does without jaxmagic. Only calls made at JAX's top level
    (nothing being traced) are taken this way, and calls made inside them are
    not observed (as on the key-reuse path: only outermost calls are). Calls the
    user's code makes through something else (a partial, a library) and eager
    operations are still observed on the key-reuse path.
    """

    def __init__(self, observers: tuple[CallObserver, ...]):
        super().__init__()  # self._entered holds (callable, name, the entered checker-off context)
        self._observers = observers
        self._jit_type = jit_internals.jit_type()
        top_level = runtime.top_level_check()
        self._can_tell_top_level = top_level is not None  # else never started: the key-reuse path observes
        self._top_level: Callable[[], bool] = top_level or _never_at_top_level
        self._checker_off = functools.partial(jax.debug_key_reuse, False)

    def start(self) -> bool:
        return self._can_tell_top_level and super().start()

    def _at_user_call(self, callable_: object) -> None:
        if type(callable_) is not self._jit_type or _state.depth or not self._top_level():
            # Not a jitted function; inside an observed call; or inside a trace (the user's code being
            # traced by jit, vmap, grad): there the key-reuse path decides, as without this class.
            return None
        name = str(getattr(callable_, "__name__", "jit"))
        context = self._checker_off()
        context.__enter__()
        _state.depth = 1
        self._entered.append((callable_, name, context))
        try:
            for observer in self._observers:
                observer.before(name, True, (), {})
        except BaseException:
            self._leave(None)
            raise
        return None

    def _on_return(self, code: CodeType, offset: int, callable_: object, arg0: object) -> None:
        if threading.get_ident() == self._thread and self._entered and self._entered[-1][0] is callable_:
            self._leave(self._observers)
        return None

    def _on_raise(self, code: CodeType, offset: int, callable_: object, arg0: object) -> None:
        if threading.get_ident() == self._thread and self._entered and self._entered[-1][0] is callable_:
            self._leave(None)  # as on the key-reuse path: a call that raised is not shown to ``after``
        return None

    def _leave_all(self) -> None:
        while self._entered:
            self._leave(None)

    def _leave(self, observers: tuple[CallObserver, ...] | None) -> None:
        _, name, context = self._entered.pop()
        try:
            for observer in observers or ():
                observer.after(name, True, (), {}, [])
        finally:
            context.__exit__(None, None, None)
            _state.depth = 0


def call_locals() -> CallDetails | None:
    """The observed jitted call's ``fun``, ``jit_info``, ``args`` and ``kwargs`` (static arguments
    included), for an observer to read during ``before``/``after``; None when not known."""
    details = _state.call
    if details is not None:  # observed on the fast path (fast_path_calls)
        return details
    frame = find_caller_frame()
    return None if frame is None else frame.f_locals


def call_number() -> int | None:
    """The observed call's number among its function's calls in the block, when the fast path counted
    it (``fast_path_calls``: calls it did not show observers are counted too); else None."""
    details = _state.call
    return None if details is None else details.get("number")


def next_call_observed() -> bool:
    """Whether the observed call's function's next call will be observed too, as far as the fast path's sampler
    can tell (``CallSampler.next_call_due``; False for a last call observed as the block ends); True where
    every call is observed."""
    details = _state.call
    predict = None if details is None else details.get("next_observed")
    if predict is None:
        return True
    try:
        return bool(predict())
    except Exception:
        return True


def call_site() -> tuple[FrameType, int] | None:
    """``(frame, line number)`` of the user's code that made the observed call, when the fast path
    knows it (it may be observed after the call, at the block's end); else None."""
    details = _state.call
    return None if details is None else details.get("site")


def donated_leaves(
    jit_info: Any, args: Sequence[Any] | None, kwargs: dict[str, object] | None
) -> list[tuple[str, Any]]:
    """``[(argument, array)]``: the array leaves of a call's arguments that ``donate_argnums`` /
    ``donate_argnames`` give away (deleted after the call); ``argument`` is "argument 0" or "lr="."""
    found: list[tuple[str, Any]] = []
    args, kwargs = tuple(args or ()), dict(kwargs or {})
    for i in getattr(jit_info, "donate_argnums", ()) or ():
        if 0 <= i < len(args):
            found += [
                (f"argument {i}", leaf) for leaf in jax.tree_util.tree_leaves(args[i]) if isinstance(leaf, jax.Array)
            ]
    for name in getattr(jit_info, "donate_argnames", ()) or ():
        if name in kwargs:
            found += [
                (f"{name}=", leaf) for leaf in jax.tree_util.tree_leaves(kwargs[name]) if isinstance(leaf, jax.Array)
            ]
    return found


def without_donation(jit_info: Any) -> Any:  # jit's private options tuple (pjit's JitInfo)
    """The same jit options with nothing donated: a re-run of the call keeps its (copied) arguments."""
    try:
        return jit_info._replace(donate_argnums=(), donate_argnames=())
    except Exception:
        return None


def find_caller_frame(name: str = "cache_miss", filename: str = "pjit.py") -> FrameType | None:
    """The innermost frame of JAX's jit dispatch (``cache_miss`` in pjit.py) on the current stack, or None.

    Its locals hold the call's original ``args`` and ``kwargs`` (static
    arguments included), which the flat arguments an observer gets do not.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == name and code.co_filename.endswith(filename):
            return frame
        frame = frame.f_back
    return None


_key_dtypes: dict[object, bool] = {}  # dtype -> whether it is a typed key's
_key_array_types: set[type] = set()  # classes whose every instance is an array of typed keys (JAX's PRNGKeyArray)


def is_typed_key(value: Any) -> bool:
    """True for an array of typed PRNG keys (``jax.random.key``), not for legacy uint32 keys."""
    if type(value) in _key_array_types:  # asked at every eager draw: a key array's dtype is made per access
        return True
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    try:
        return _key_dtypes[dtype]
    except (KeyError, TypeError):
        pass

    try:
        typed = bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:
        typed = False
    try:
        _key_dtypes[dtype] = typed
    except TypeError:
        pass
    if typed and type(value).__name__ == "PRNGKeyArray":  # JAX's key array: its instances are all keys
        _key_array_types.add(type(value))
    return typed
