"""Notice the first NaN a cell produces without stopping the cell, then explain it with the NaN probe.

``%%jax_nans`` stops at the first NaN: right when hunting one NaN, wrong for
``%%jax_doctor``, which must see everything else the cell does too (a NaN at
step 0 of a training loop would hide the recompilation at every step and the
key that never changes). So the doctor *watches*: it sees every call of a
jitted function and every eager operation (``jaxmagic._jax.jit_calls``) and looks
at their float results for NaN. The first call whose results hold a NaN while
its arguments held none produced it; later calls only pass it on.

A call's results are looked at when the next call starts, when they are
normally computed already, so the watch does not make the program wait; the
last call's results are looked at when the cell ends (``flush``).

To name the operation and the line, that one call - not the cell - is run once
more after the cell, under the NaN probe (``jax.debug_nans``, its producer
search included: the line inside a scan body, the iteration, the values), with
the same arguments: a jitted function is
pure, so this repeats nothing the user would mind (its debug prints are
discarded). The call is rebuilt from JAX's dispatch frame (the function, its
jit options, the call's arguments) and kept only until then; a call whose
arguments were donated cannot be repeated. Eager operations need no re-run:
the primitive and the line are known when the NaN appears.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from jaxmagic._jax import compat, jit_calls
from jaxmagic.probes._support.failing_call import FailingCall
from jaxmagic.report import SourceLine
from jaxmagic.report.source import innermost_user_frame, source_line


@dataclasses.dataclass
class NanSighting:
    """The first call that produced a NaN, and how many calls returned one."""

    function: str  # the jitted function ("train_step") or the eager primitive ("log")
    jitted: bool
    call_number: int  # 1 for the function's first call in the cell
    line: SourceLine | None = None  # the user's line that made the call
    leaves: list[str] = dataclasses.field(default_factory=list)  # which outputs held NaN: "output 0 (64,)"
    came_in: bool = False  # its arguments already held a NaN (made before the cell or outside JAX)
    calls_with_nan: int = 0  # every call that returned a NaN, this one included
    call_source: str = ""  # the re-run call, e.g. "step_fn(params, X, Y, step_key, step)"
    rerun_note: str = ""


def _float_has_nan(value) -> bool:
    """True when a float array holds a NaN (call only for float values; see ``_is_float``)."""
    try:
        return bool(np.isnan(np.asarray(value)).any())
    except Exception:  # not readable here (deleted, on another process)
        return False


_float_dtypes: dict = {}


def _is_float(value) -> bool:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    try:
        return _float_dtypes[dtype]
    except (KeyError, TypeError):
        pass
    try:
        floating = bool(np.issubdtype(dtype, np.inexact))
    except TypeError:  # PRNG key dtypes and other extended dtypes
        floating = False
    try:
        _float_dtypes[dtype] = floating
    except TypeError:
        pass
    return floating


class NanWatch(jit_calls.CallObserver):
    """A call observer that remembers the first NaN-producing call (see the module docstring).

    A call's results are looked at when the next call starts (or at ``flush``):
    by then they are usually computed, so the watch does not make the program
    wait for each result the moment it is dispatched. Only the last call's
    arguments and results are held until then.
    """

    def __init__(self):
        self.sighting: NanSighting | None = None
        self._pending_rerun: FailingCall | None = None
        self._last = None  # (name, is_jit, args, outputs, number, user frame, its line, the jit frame's locals)
        self._calls: dict[str, int] = {}

    @property
    def calls_seen(self) -> int:
        """Calls watched so far (read by a live view from another thread)."""
        return sum(list(self._calls.values()))

    def before(self, name, is_jit, args, params) -> None:
        self.flush()

    def after(self, name, is_jit, args, params, outputs) -> None:
        self._calls[name] = number = self._calls.get(name, 0) + 1
        if self.sighting is not None and self.sighting.calls_with_nan > 1000:
            return  # enough counted
        if not any(_is_float(out) for out in outputs):
            return
        frame = user_frame()
        jit_locals = None
        if is_jit and self.sighting is None:
            local = jit_calls.call_locals()
            if local is not None:
                jit_locals = (local.get("fun"), local.get("jit_info"), local.get("args"), local.get("kwargs"))
        self._last = (name, is_jit, args, outputs, number, frame, frame.f_lineno if frame else 0, jit_locals)

    def flush(self) -> None:
        """Look at the last call's results now."""
        last, self._last = self._last, None
        if last is None:
            return
        name, is_jit, args, outputs, number, frame, lineno, jit_locals = last
        with jit_calls.reads_allowed():  # our reads are not the user's transfers
            bad = [i for i, out in enumerate(outputs) if _is_float(out) and _float_has_nan(out)]
            if not bad:
                return
            if self.sighting is not None:
                self.sighting.calls_with_nan += 1
                return
            came_in = any(_is_float(a) and _float_has_nan(a) for a in args)
        sighting = NanSighting(
            function=name,
            jitted=is_jit,
            call_number=number,
            line=source_line(frame.f_code.co_filename, lineno, frame.f_code.co_name) if frame else None,
            leaves=[f"output {i} {tuple(getattr(outputs[i], 'shape', ()))}" for i in bad[:4]],
            came_in=came_in,
            calls_with_nan=1,
        )
        self.sighting = sighting
        if is_jit and not came_in:
            call = _rebuilt_call(name, jit_locals)
            if call is None:
                sighting.rerun_note = (
                    "The call could not be repeated safely (a jitted call whose arguments were "
                    "donated, or that JAX did not dispatch from Python), so it was not re-run."
                )
            else:
                self._pending_rerun, sighting.call_source = call, call.source

    def take_rerun(self) -> tuple[NanSighting | None, FailingCall | None]:
        """Flush, then hand over the sighting and the call to re-run (kept no longer here).

        The re-run itself, under the NaN probe, is the doctor's
        (``jaxmagic.probes.nans.explain_nan_sighting``): a support
        module runs no probe.
        """
        self.flush()
        call, self._pending_rerun = self._pending_rerun, None
        return self.sighting, call


def _rebuilt_call(name: str, jit_locals) -> FailingCall | None:
    """The jitted call, rebuilt from JAX's dispatch frame: the same function, options and arguments.

    JAX's ``cache_miss`` frame holds the user's function, its jit options and
    the call's own arguments (static ones included); ``_cpp_pjit`` makes the
    same jitted function from them, sharing its caches.
    """
    if jit_locals is None:
        return None
    fun, info, args, kwargs = jit_locals
    if fun is None or info is None or args is None:
        return None
    if getattr(info, "donate_argnums", ()) or getattr(info, "donate_argnames", ()):
        return None  # its arguments were given away to the first call: they cannot be used again
    jitted = compat.compiled_call(fun, info)
    if jitted is None:
        return None
    return FailingCall(f"{name}(...)", jitted, [(f"argument {i}", a) for i, a in enumerate(args)], dict(kwargs or {}))


def user_frame():
    """The innermost frame of the user's code that led to the caller of this function."""
    return innermost_user_frame(sys._getframe(2))
