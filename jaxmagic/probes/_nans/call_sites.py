"""Count how often each call site of the user's code ran, to say "call 3 of the loop" afterwards.

When a NaN stops a cell inside ``for batch in batches: loss = step(params, batch)``
the traceback says which line failed, not which pass of the loop. Counting the
calls made at each call site of the user's own code (``sys.monitoring`` CALL
events, Python 3.12+) answers that: the failing frame's call instruction has
run N times, so it failed in call N. Call sites in library code are switched
off at their first event, so only the user's own calls cost a callback (well
under a microsecond each; a jitted call costs tens). Only the thread that
entered the block is counted.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from types import CodeType, TracebackType
from typing import Any

from jaxmagic._jax import jit_internals, runtime
from jaxmagic._jax.monitoring_tool import DISABLE, MonitoringTool, NoFreeToolId
from jaxmagic.usercode.source import is_user_file


class CallSiteCounts:
    """Calls made so far at each ``(code, instruction offset)`` of the user's code, by the block's thread."""

    def __init__(self) -> None:
        # id(code) -> (code, {offset: calls}). Keyed by identity: hashing a code object hashes its
        # bytecode and constants (microseconds, more than the rest of a callback); the entry keeps
        # the code alive, so its id cannot be reused while we count.
        self._by_code: dict[int, tuple[CodeType, dict[int, int]]] = {}
        self._thread = threading.get_ident()
        self.jitted: dict[str, int] = {}  # name -> top-level calls of that jitted function the user's code made
        self.on_call = self._callback()

    def _callback(self) -> Callable[[CodeType, int, object, object], object]:
        """The CALL callback: it runs on every call the user's code makes, so it reads only locals. A loop
        calls from one site over and over: the last site's counts are kept at hand (no ``id(code)``, an
        int made per call, and no dict look-up), and a jitted function is its own key (PjitFunction hashes
        by identity). In a loop of a jitted step each operation here costs about twice what it costs in a
        tight loop: the step's work evicts the callback from the caches (issue 56)."""
        by_code, block_thread = self._by_code, self._thread
        user_file: dict[str, bool] = {}
        get_ident, disable = threading.get_ident, DISABLE
        jitted, jit_type, top_level = self.jitted, jit_internals.jit_type(), runtime.top_level_check()
        user_jit: dict[object, str] = {}  # jitted function -> its name if defined in the user's code, else ""
        last: list[Any] = [None, None]  # the code of the last call site counted, and its {offset: calls}

        def on_call(code: CodeType, offset: int, callable_: object, arg0: object) -> object:
            if get_ident() != block_thread:  # another thread's call: not the cell's (and not DISABLE:
                return None  # the call site may be the cell's too)
            if code is last[0]:
                sites = last[1]
            else:
                entry = by_code.get(id(code))
                if entry is None:
                    filename = code.co_filename
                    user = user_file.get(filename)
                    if user is None:
                        user = user_file[filename] = is_user_file(filename)
                    if not user:
                        return disable  # library code: this call site never calls back again
                    entry = by_code[id(code)] = (code, {})
                last[0], last[1] = code, entry[1]
                sites = entry[1]
            sites[offset] = sites.get(offset, 0) + 1
            if type(callable_) is jit_type:
                name = user_jit.get(callable_)
                if name is None:
                    name = user_jit[callable_] = (
                        str(getattr(callable_, "__name__", "jit")) if _defined_by_user(callable_) else ""
                    )
                if name and (top_level is None or top_level()):  # the top-level check last: it costs most
                    jitted[name] = jitted.get(name, 0) + 1
            return None

        return on_call

    def number(self, tb: TracebackType) -> int:
        """How many times the call running in ``tb``'s frame had been made (0 if not counted)."""
        code = tb.tb_frame.f_code
        entry = self._by_code.get(id(code))
        if entry is None or entry[0] is not code:
            return 0
        return entry[1].get(tb.tb_lasti, 0)


def _defined_by_user(jitted: object) -> bool:
    """Whether a jitted function is the user's own (``jnp.log`` is a jitted function too, of JAX's):
    by the file of the function it wraps; True when that is not known (a jitted ``partial``)."""
    code = getattr(getattr(jitted, "__wrapped__", None), "__code__", None)
    return code is None or is_user_file(code.co_filename)


@contextlib.contextmanager
def counting_call_sites() -> Iterator[CallSiteCounts | None]:
    """Count the user's calls in the block; yield None when no watcher of calls can be had
    (``monitoring_tool.why_no_tool(calls=True)`` says why: Python 3.11, or every tool id taken)."""
    try:
        tool = MonitoringTool("jaxmagic call sites", calls=True)
    except NoFreeToolId:
        yield None
        return
    counts = CallSiteCounts()
    with tool:
        tool.on(tool.events.CALL, counts.on_call)
        tool.watch(tool.events.CALL)
        yield counts
