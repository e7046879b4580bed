"""See the user's own top-level calls of jitted functions while they stay on JAX's fast path.

``jit_calls.observing_calls`` sees a call by sending it through the key-reuse
checker's Python path: every call is traced-cache lookup, ``bind`` and a new
dispatch object (~0.5 ms per call of a ten-argument training step on CPU,
against ~0.1 ms on the C++ path). Two hooks JAX has anyway see the same calls
without moving them off the C++ path:

* JAX's C++ jit calls a thread-local *post hook* after each call it serves
  from its cache, with the call's own arguments and its result - the hook
  ``jax.debug_nans`` puts its NaN check in (``jit_internals.post_hook_state``);
* every other call runs jit's Python path, ``cache_miss`` in pjit.py; a
  ``sys.monitoring`` PY_RETURN event on that one code object (no other code
  pays for it) gives the result, and the frame the call's function, jit
  options, arguments and traced program.

Observers get what the key-reuse path gives them: the name, the flat
arguments (hoisted constants first), the jit parameters (``params["jaxpr"]``)
and the flat results. The program of a fast-path call is looked up by its
signature in the programs the block has seen (``jit_internals.jit_program`` traces
nothing for a signature JAX has traced). Only calls made by the
user's code - directly, or through a library's jit wrapper such as
``eqx.filter_jit`` or ``nnx.jit`` (then at the user's line that called the
wrapper) - at JAX's top level, in the block's thread are observed; eager
operations and calls JAX's own code makes are not. ``on_trace(closed_jaxpr, name)`` is told each program
such a call traced or used for the first time in the block (the key-reuse
checker's per-program check runs there, since the checker itself is off).

Before a call on that Python path runs (``sys.monitoring`` PY_START on ``cache_miss``),
observers with a ``before_donation(args, kwargs, jit_info)`` method are told the
arguments of a call of a function that donates, while they still exist (the NaN
watch copies them to replay the call).

With a ``CallSampler`` (``call_sampling``), every fast-path call is counted but
only the calls it says are due are observed, so that observing costs a bounded
share of the block's time; observers find the call's number (its count in the
block, per function) in ``jit_calls.call_number()``, and whether the function's next call will be
looked at in ``jit_calls.next_call_observed()``. The last call of each
function, if skipped, is observed when the block ends (with its own line, as
``jit_calls.call_site()`` gives every observed call's). An observer with a ``count_skipped(function,
number, args, kwargs)`` method is told the skipped calls of the functions in its ``skipped_wanted``
(it must cost a few dictionary reads:
``host_arguments`` counts the NumPy arrays at the paths a looked-at call showed).

A cell that switches ``jax.debug_nans`` itself replaces the post hook for the
rest of the block; ``lost`` then says so, and ``on_lost()`` is called at ``stop``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from functools import partial
from time import perf_counter
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import jax

from jaxmagic._jax import jit_internals, runtime
from jaxmagic._jax.call_sampling import CallSampler
from jaxmagic._jax.monitoring_tool import MonitoringTool, NoFreeToolId
from jaxmagic._jax.types import Params, Value
from jaxmagic.usercode.source import code_kind, user_call_site

# The most calls a settled function is only counted for before the sampler's rule is asked again.
SETTLED_CALLS = 4096

# The observed call's details, as observers read them (``jit_calls.call_locals``): "fun", "jit_info", "args",
# "kwargs", "number", "site", "next_observed" - each of its own kind.
CallDetails: TypeAlias = dict[str, Any]
# What JAX's post hook is given: (the jitted function, its args, its kwargs, its output).
PostHook: TypeAlias = Callable[[Any, tuple[object, ...], dict[str, object], Any], None]
# What an observer's ``count_skipped`` is given: (the function, the call's number, its args, its kwargs).
SkipCounter: TypeAlias = Callable[[object, int, tuple[object, ...], dict[str, object]], None]
# A call the sampler skipped: (the jitted function, args, kwargs, output, the user's frame, its instruction offset).
_Unlooked: TypeAlias = tuple[Any, tuple[object, ...], dict[str, object], Any, FrameType, int]
# A traced program's key: (id(jit info), signature, each dynamic leaf's (type, shape, dtype, weak type)).
_ProgramKey: TypeAlias = tuple[int, object, tuple[tuple[type[object], object, object, object], ...]]

if TYPE_CHECKING:
    from jaxmagic._jax.jit_calls import CallObserver


class CallState(Protocol):
    """``jit_calls``' thread-local: ``depth`` > 0 inside an observed call, ``call`` the observed call's details."""

    depth: int
    call: CallDetails | None


class FastPathCalls:
    """Observe the user's top-level jitted calls (``start`` / ``stop``); see the module docstring."""

    def __init__(
        self,
        observers: tuple[CallObserver, ...],
        state: CallState,
        on_trace: Callable[[Any, str], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        sampler: CallSampler | None = None,
    ) -> None:

        self._observers = observers
        # observers that count what a skipped call holds (``count_skipped(function, number, args, kwargs)``:
        # a few dictionary reads, e.g. the NumPy arrays of ``host_arguments``), so their counts are every
        # call's; told only the calls of the functions in their ``skipped_wanted`` (a dict or set they keep)
        self._skip_counters = tuple(
            (o.skipped_wanted, o.count_skipped)
            for o in observers
            if hasattr(o, "count_skipped") and hasattr(o, "skipped_wanted")
        )
        self._state = state  # jit_calls' thread-local: depth (inside an observed call) and the call's details
        self._on_trace = on_trace
        self._on_lost = on_lost
        self._sampler = sampler or CallSampler(share=None)  # none given: every call is observed
        self._unlooked: dict[object, _Unlooked] = {}  # function -> its last call, when the sampler skipped it
        # jitted function -> [calls counted, the call number due a look, its last call's (args, kwargs,
        # output) or None, the function, the user's frame and instruction offset of the call that settled
        # it, whether an observer counts its skipped calls]: a function whose calls are only counted until
        # its next look is due (``_made_hook``); its counts join the sampler's at ``_unsettle``
        self._settled: dict[object, list[Any]] = {}
        self._user: dict[str, str] = {}  # file name -> whose code it is (source.code_kind)
        self._programs: dict[
            _ProgramKey, tuple[Any, list[Value], Params]
        ] = {}  # (id(jit info), signature, leaf types) -> (jit info, consts, params)
        self._traced: dict[int, object] = {}  # id(closed jaxpr) -> it, told to on_trace once
        self._thread = threading.get_ident()
        self._hook_state: Any = None  # JAX's thread-local post-hook state (jit_internals.post_hook_state)
        self._previous_hook: Any = None
        self._previous_local: Any = None
        self._installed: PostHook | None = None
        self._tool: MonitoringTool | None = None
        self._between = 0  # frames between a callback and its event's frame (MonitoringTool.frames_between)
        self.lost = False
        self._ending = False  # observing each function's last call as the block ends
        self._replaced = False  # a trace ran while JAX's own NaN check had replaced our hook

    def start(self) -> bool:
        hook_state, code, top_level = (
            jit_internals.post_hook_state(),
            jit_internals.jit_cache_miss_code(),
            runtime.top_level_check(),
        )
        if hook_state is None or code is None or top_level is None:
            return False
        try:
            tool = MonitoringTool("jaxmagic jit calls")
        except NoFreeToolId:
            return False
        self._tool, self._top_level, self._between = tool, top_level, tool.frames_between
        tool.on(tool.events.PY_RETURN, self._on_miss_return)
        tool.on(tool.events.PY_START, self._on_miss_start)
        tool.watch_code(code, tool.events.PY_RETURN | tool.events.PY_START)
        # The hook in effect (jax.debug_nans' check, or None) is called after ours; what the thread
        # had set itself (JAX's "unset" marker, usually) is what ``stop`` puts back.
        self._hook_state, self._previous_hook = hook_state, hook_state.value
        self._installed = self._made_hook()
        self._previous_local = hook_state.swap_local(self._installed)
        return True

    def stop(self) -> None:
        self._look_at_last_calls()
        if self._tool is not None:
            self._tool.release()
            self._tool = None
        if self._hook_state.get_local() is self._installed and not self._replaced:
            self._hook_state.set_local(self._previous_local)
        else:  # jax.debug_nans entered or left in the block: JAX set its own hook (or none) since
            if self._hook_state.get_local() is self._installed:
                self._hook_state.set_local(self._previous_local)
            self.lost = True
            if self._on_lost is not None:
                self._on_lost()
        self._programs.clear()
        self._traced.clear()

    def _look_at_last_calls(self) -> None:
        """Observe each function's last call of the block when the sampler skipped it: a NaN a skipped
        call made and passed on to the end of the block is then still seen (its line, as it was)."""
        self._unsettle()
        self._ending = True  # no call comes after these (``jit_calls.next_call_observed``)
        unlooked = dict(self._unlooked)  # the dict itself stays: the hook holds it
        self._unlooked.clear()
        for function, (jitted, args, kwargs, output, caller, offset) in unlooked.items():
            try:
                looked = self._sampler.looked
                looked[function] = looked.get(function, 0) + 1
                lineno = line_at(caller.f_code, offset)
                self._fast_path_call(jitted, args, kwargs, output, self._sampler.calls[function], caller, lineno)
            except Exception:
                pass

    # -- the two hooks (inside the user's calls: never raising an error of ours) ------------

    def _made_hook(self) -> PostHook:
        """The post hook: a closure over what it reads, as it runs after every fast-path call of the
        block's thread - on a loop of a 9 us step each 0.1 us here is 1% of the cell. Its usual case is
        a function *settled* since its last skipped call (``_settled``): its calls from the same line
        until its next look is due are counted in a list and the last one kept, with no frame look-up,
        clock or dict write of its own (issue 56: between two calls the step's work evicts the hook from the caches, so each
        operation costs about twice what it costs in a tight loop). Every other call takes ``full``."""
        state, settled, previous, full = self._state, self._settled, self._previous_hook, self._full_hook()
        skip_counters = self._skip_counters
        one_counter: SkipCounter = skip_counters[0][1] if len(skip_counters) == 1 else _count_nothing

        def hook(jitted: Any, args: tuple[object, ...], kwargs: dict[str, object], output: Any) -> None:
            entry = settled.get(jitted)
            # Settled, not due, and called from the same instruction of the same running frame (that
            # frame's f_lasti is its call in progress: no sys._getframe), outside our own looks.
            if entry is not None and entry[0] + 1 < entry[1] and entry[4].f_lasti == entry[5] and not state.depth:
                number = entry[0] = entry[0] + 1
                entry[2] = (args, kwargs, output)  # looked at when the block ends, if it stays the last call
                if entry[6]:
                    try:
                        one_counter(entry[3], number, args, kwargs)
                    except Exception:
                        pass
            else:
                full(jitted, args, kwargs, output)
            if previous is not None:  # jax.debug_nans was on around the block: its check still runs
                previous(jitted, args, kwargs, output)

        return hook

    def _full_hook(self) -> PostHook:
        """What the post hook does for a call of a function not settled (or due a look): find the user's
        line, count the call (the sampler's ``take`` inlined: a method call is ~0.2 us), look at it when
        due, else keep it (its line as its instruction offset: ``f_lineno`` scans the code's line table,
        ~0.6 us) and settle its function until the next look is due."""
        getframe, state, user_files, made_by_user = sys._getframe, self._state, self._user, self._made_by_user
        sampler, unlooked, fast_path_call, settled = self._sampler, self._unlooked, self._fast_path_call, self._settled
        calls, looked = sampler.calls, sampler.looked
        skip_counters = self._skip_counters
        # The usual case, one observer counting skipped calls (host arguments): its wanted functions and method.
        one_wanted, one_counter = skip_counters[0] if len(skip_counters) == 1 else ({}, _count_nothing)
        other_counters = () if len(skip_counters) == 1 else skip_counters

        def full(jitted: Any, args: tuple[object, ...], kwargs: dict[str, object], output: Any) -> None:
            try:
                entry = settled.pop(jitted, None)
                if entry is not None:  # its calls counted while settled, and the last of them
                    calls[entry[3]] = entry[0]
                    if entry[2] is not None:
                        unlooked[entry[3]] = (jitted, *entry[2], entry[4], entry[5])
                caller: FrameType | None  # declared apart, so the frame got narrows it (no run-time cost)
                caller = getframe(2)  # the hook's caller
                if state.depth:
                    return
                kind = user_files.get(caller.f_code.co_filename)
                if kind == "jax":  # JAX's own code made the call (an eager op's parts): as ``made_by_user`` says
                    return
                if kind != "user":
                    caller = made_by_user(caller, jitted._fun)  # the user's line behind a library's wrapper
                if caller is None:
                    return
                function = jitted._fun
                number = calls[function] = calls.get(function, 0) + 1
                now = perf_counter()
                # first_calls read at each call: the sampler decides it at the first call looked at
                if number <= sampler.first_calls or now >= sampler.next_look:
                    looked[function] = looked.get(function, 0) + 1
                    unlooked.pop(function, None)
                    fast_path_call(jitted, args, kwargs, output, number, caller, caller.f_lineno)
                    sampler.spent_looking(perf_counter() - now)
                    return
                unlooked[function] = (jitted, args, kwargs, output, caller, caller.f_lasti)
                if function in one_wanted:
                    one_counter(function, number, args, kwargs)
                for wanted, count_skipped in other_counters:
                    if function in wanted:
                        count_skipped(function, number, args, kwargs)
                ahead = calls_until_due(sampler, number, now)
                if ahead > 1 and not other_counters:
                    settled[jitted] = [
                        number,
                        number + ahead,
                        None,
                        function,
                        caller,
                        caller.f_lasti,
                        function in one_wanted,
                    ]
            except Exception:
                pass  # a call we cannot read is not observed

        return full

    def _unsettle(self) -> None:
        """Put the calls counted for the settled functions into the sampler's counts, their last calls
        among those looked at when the block ends (before the block ends or a call takes jit's Python path)."""
        for jitted, (number, _, last, function, caller, offset, _) in list(self._settled.items()):
            self._sampler.calls[function] = number
            if last is not None:
                self._unlooked[function] = (jitted, *last, caller, offset)
        self._settled.clear()

    def _on_miss_return(self, code: CodeType, offset: int, result: Any) -> None:
        try:
            if threading.get_ident() == self._thread:
                self._keep_hook()
            if threading.get_ident() != self._thread or self._state.depth or not self._top_level():
                return None  # another thread's call, our own re-run, or a call inside a trace
            frame = sys._getframe(1 + self._between)
            caller = frame.f_back
            while caller is not None and caller.f_code.co_name == "reraise_with_filtered_traceback":
                caller = caller.f_back  # jax's api_boundary wrapper around cache_miss
            local = frame.f_locals
            caller = self._made_by_user(caller, local.get("fun")) if caller is not None else None
            if caller is None:
                return None
            p, jit_info, args, kwargs = local["p"], local["jit_info"], local["args"], local["kwargs"]
            found = jit_internals.jit_arguments(jit_info, args, kwargs)
            if found is None:
                return None
            self._programs.setdefault(self._program_key(jit_info, *found), (jit_info, list(p.consts), p.params))
            if self._settled:
                self._unsettle()  # the sampler's counts exact again before it counts this call
            number = self._sampler.count(local["fun"])
            self._unlooked.pop(local["fun"], None)
            observed = (local["fun"], jit_info, args, kwargs, list(p.consts), p.params, result[0], found[1])
            self._observe(*observed, number, caller, caller.f_lineno)
        except Exception:
            pass
        return None

    def _on_miss_start(self, code: CodeType, offset: int) -> None:
        """Before a call on jit's Python path runs: tell observers that keep donated arguments
        (``before_donation(args, kwargs, jit_info)``) while those arguments still exist."""
        try:
            if threading.get_ident() != self._thread or self._state.depth:
                return None
            frame = sys._getframe(1 + self._between)
            local = frame.f_locals
            jit_info = local.get("jit_info")
            if jit_info is None or not donates(jit_info) or not self._top_level():
                return None
            caller = frame.f_back
            while caller is not None and caller.f_code.co_name == "reraise_with_filtered_traceback":
                caller = caller.f_back
            if caller is None or self._made_by_user(caller, local.get("fun")) is None:
                return None
            for observer in self._observers:
                keep = getattr(observer, "before_donation", None)
                if keep is not None:
                    _quietly(keep, local.get("args", ()), local.get("kwargs", {}), jit_info)
        except Exception:
            pass
        return None

    def _keep_hook(self) -> None:
        """Put our hook back when JAX's own code took it away while tracing.

        JAX enters ``config.debug_nans(False)`` around parts of its own tracing
        (``jnp.var``/``jnp.std``, ``lax`` sorting, evaluating a scan body's jaxpr);
        leaving that context sets the thread's post hook to None, which would stop
        every later call of the block from being seen. A hook JAX set to its NaN
        check (the user's own ``jax.debug_nans(True)``) is left alone: that is the
        case ``lost`` reports. (A ``jax.debug_nans(True)`` block of the user's in which
        nothing is traced, followed later by a trace, is not told apart from JAX's own
        switch: the calls inside it go unseen without a note.)
        """
        state = self._hook_state
        if state is None or self._installed is None:
            return
        local = state.get_local()
        if local is None:
            state.set_local(self._installed)
        elif local is not self._installed:
            self._replaced = True  # the user's jax.debug_nans(True) is on: calls are not seen meanwhile

    # -- observing -------------------------------------------------------------------

    def _made_by_user(self, frame: FrameType, function: object = None) -> FrameType | None:
        """The user's frame that made the call ``frame`` made: ``frame`` itself, or through a library's
        jit wrapper (``eqx.filter_jit``, ``nnx.jit``) the user's line that called the wrapper; None for
        calls JAX's own code or jaxmagic's made (``source.user_call_site``), and for JAX's own jitted
        functions a library calls (``jnp.multiply`` inside an eager ``optax`` update: no call of the user's)."""
        filename = frame.f_code.co_filename
        kind = self._user.get(filename)
        if kind is None:
            kind = self._user[filename] = code_kind(filename)
        if kind == "user":
            return frame
        if kind not in ("library", "python") or self._is_jax_function(function):
            return None
        return user_call_site(frame.f_back)

    def _is_jax_function(self, function: object) -> bool:
        """Whether a jitted function is JAX's own (``jnp.multiply``'s implementation), by its code's file."""
        code = getattr(function, "__code__", None) or getattr(getattr(function, "__wrapped__", None), "__code__", None)
        if code is None:
            return False
        kind = self._user.get(code.co_filename)
        if kind is None:
            kind = self._user[code.co_filename] = code_kind(code.co_filename)
        return kind == "jax"

    @staticmethod
    def _program_key(jit_info: Any, signature: object, dynamic: list[Value]) -> _ProgramKey:
        return (
            id(jit_info),
            signature,
            tuple(
                (type(x), getattr(x, "shape", None), getattr(x, "dtype", None), getattr(x, "weak_type", None))
                for x in dynamic
            ),
        )

    def _fast_path_call(
        self,
        jitted: Any,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        output: Any,
        number: int,
        caller: FrameType,
        lineno: int,
    ) -> None:
        jit_info = jit_internals.jit_options(jitted)
        if jit_info is None:
            return
        found = jit_internals.jit_arguments(jit_info, args, kwargs)
        if found is None:
            return
        key = self._program_key(jit_info, *found)
        program = self._programs.get(key)
        if program is None:  # compiled before the block: from JAX's trace cache, once per signature
            traced = jit_internals.jit_program(jitted._fun, jit_info, args, kwargs)
            if traced is None:
                return
            program = self._programs[key] = (jit_info, *traced)
        _, consts, params = program
        self._observe(jitted._fun, jit_info, args, kwargs, consts, params, output, found[1], number, caller, lineno)

    def _observe(
        self,
        fun: Callable[..., Any],
        jit_info: Any,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        consts: list[Value],
        params: Params,
        output: Any,
        dynamic: list[Value],
        number: int,
        caller: FrameType,
        lineno: int,
    ) -> None:
        self._sampler.look_began = perf_counter()  # what this look costs so far (``next_call_due``)
        flat_args = (*consts, *dynamic)
        outputs = jax.tree_util.tree_leaves(output)
        if self._sampler.deferred is None:  # the block's first look: are looks deferred (how many first calls)
            self._sampler.saw_results(outputs)
        name = str(params.get("name", "jit"))
        closed = params.get("jaxpr")
        if self._on_trace is not None and closed is not None and id(closed) not in self._traced:
            self._traced[id(closed)] = closed
            self._on_trace(closed, name)
        self._state.depth = 1
        self._state.call = {
            "fun": fun, "jit_info": jit_info, "args": args, "kwargs": kwargs,
            "number": number, "site": (caller, lineno),
            "next_observed": _never if self._ending else partial(self._sampler.next_call_due, number),
        }  # fmt: skip
        try:
            # The call has run already; observers are told "before" and "after" in a row.
            for observer in self._observers:
                _quietly(observer.before, name, True, flat_args, params)
            for observer in self._observers:
                _quietly(observer.after, name, True, flat_args, params, outputs)
        finally:
            self._state.depth = 0
            self._state.call = None


def calls_until_due(sampler: CallSampler, number: int, now: float) -> int:
    """How many calls of a function (``number`` calls so far) until the sampler's next look is due, at
    the block's mean interval between two of its calls; at most ``SETTLED_CALLS``. Calls that slow down
    later are looked at later than the share allows; the sampler's own rule decides again at each look."""
    interval = (now - sampler.start) / number
    ahead = (sampler.next_look - now) / interval if interval > 0 else SETTLED_CALLS
    return int(min(ahead, SETTLED_CALLS))


def line_at(code: CodeType, offset: int) -> int:
    """The line of ``code`` the instruction at byte ``offset`` belongs to (a frame's ``f_lasti``);
    the code's first line for an instruction of no line (CPython marks some so)."""
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return line
    return code.co_firstlineno


def donates(jit_info: Any) -> bool:
    """True when the jitted function was made with ``donate_argnums`` / ``donate_argnames``."""
    return bool(getattr(jit_info, "donate_argnums", ()) or getattr(jit_info, "donate_argnames", ()))


def _never() -> bool:
    """No call of the function comes after this one (the block is ending)."""
    return False


def _count_nothing(function: object, number: int, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    """No observer counts skipped calls (never called: no function is wanted)."""


def _quietly(method: Callable[..., object], *args: object) -> None:
    try:
        method(*args)
    except Exception:
        pass  # one observer's failure is not the user's error, nor the other observers'
