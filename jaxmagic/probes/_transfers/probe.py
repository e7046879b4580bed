"""The transfer probe itself: ``transfers()``, the block under ``jax.transfer_guard``, each transfer given its line.

``"disallow"`` turns the first implicit transfer into an error whose traceback
gives the line; the probe also records, with a RAISE event, each such error the
block catches itself. ``"log"`` lets the block run and makes JAX's C++ runtime write
one line per transfer to the process's stderr (file descriptor 2), without a
Python stack. To name the line of each transfer, the probe points descriptor 2
at a temporary file for the block, and follows the user's lines with
``sys.monitoring`` LINE events (JAX's and other libraries' code switch their
events off at the first hit, so only the user's lines cost anything): when the
file has grown since the last user line began, that line made the transfers
(the file is memory-mapped, so that check reads one byte instead of making a
system call on every line: see ``capture_file.py``).
Everything else written to descriptor 2 is passed on to the real stderr.

Following a line costs ~1,800 instructions (~0.5 us), a fifth of a loop of a tiny
jitted step. So once ``QUIET_LINES`` user lines in a row made no transfer, a line
that has run ``QUIET_RUNS`` times since without one goes quiet: its event is
switched off (``sys.monitoring.DISABLE``), and a loop costs nothing more. A line
that ran fewer times (the body of an ``if`` taken now and then, an outer loop's
line) switches every event on again (``sys.monitoring.restart_events``) so that
the line after it is seen: a transfer it makes is named exactly. Only a transfer
made by a quiet line itself - a line that ran clean many times and then passed
a host value - is found late, at the next line followed: it is listed with the
lines that may have made it (``Transfer.among``), and the rest of the block is
followed line by line, so the same transfer made again is named exactly. The
events are also switched on again at the end of a block that switched any off:
a switched-off line stays off across tool ids, and the user's function would go
unseen in the next block. ``restart_events`` switches on again what other tools
(a debugger) switched off for themselves too; they switch it off again at its
next run.

A call that is traced and run at once (the first call of a jitted function) runs the
user's function inside JAX, so the last user line before the copy of its NumPy
arguments is a line of the traced function. A user function that a library called (seen
at its first line) therefore also gets PY_RETURN events, for that code object only: when
it returns, the line that made the call is the current line again, and the host values
that line passed (its arguments that are NumPy arrays or Python scalars, looked up by
name: ``host_values.py``) are kept to name the argument of each copy. Limits: CPython
gives no LINE event to a one-line lambda made inside a function, so its trace is not seen
(the copy is still on the calling line, without the traced function); a function first
called by the user's own code and traced later is not followed either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any, TypeAlias

import jax

from jaxmagic._jax import jit_calls
from jaxmagic._jax.call_sampling import CallSampler
from jaxmagic._jax.compile_log import short_types
from jaxmagic._jax.exclusive import AlreadyActive
from jaxmagic._jax.monitoring_tool import DISABLE, MonitoringTool, NoFreeToolId, restart_events
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support import progress
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.attribution import started_by
from jaxmagic.probes._support.calls.host_arguments import HostArguments
from jaxmagic.probes._transfers.capture_file import CaptureFile
from jaxmagic.probes._transfers.host_values import argument_of, host_arguments, line_text
from jaxmagic.probes._transfers.named_copies import name_copies
from jaxmagic.probes._transfers.report import MAX_GROUPS, Transfer, TransferReport
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import error_line, first_line, message_of
from jaxmagic.usercode.source import innermost_user_line, is_user_file, source_line, user_lines

CONFIG_NAMES = (
    "jax_transfer_guard",
    "jax_transfer_guard_host_to_device",
    "jax_transfer_guard_device_to_host",
    "jax_transfer_guard_device_to_device",
)
MODES = ("log", "disallow")
# User lines in a row without a transfer after which a line's event is switched off (see the top) ...
QUIET_LINES = 1_000
QUIET_RUNS = 20  # ... once it has run this often since

_GUARD_LINE = re.compile(r"guard_lib\.cc:\d+\] (?P<direction>[\w-]+-to-[\w-]+) transfer:(?P<rest>.*)$")
# absl's log prefix: severity, date, time, then the writing thread's native id ("W1205 23:40:47.342555  9920 ")
_LOG_THREAD = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+(?P<thread>\d+) ")
_DISALLOWED = re.compile(r"Disallowed (?P<direction>[\w-]+-to-[\w-]+) transfer:(?P<rest>.*)$", re.MULTILINE)


def parse_transfer(text: str) -> tuple[str, str] | None:
    """(direction, short value type) from a transfer guard message; None if it is not one."""
    match = _GUARD_LINE.search(text) or _DISALLOWED.search(text)
    if not match:
        return None
    types = short_types(match["rest"].split("dst_sharding")[0]) if "aval=" in match["rest"] else []
    return match["direction"], types[0] if types else ""


@contextlib.contextmanager
def transfers(mode: str = "log", *, host_observer: HostArguments | None = None) -> Iterator[TransferReport]:
    """Run a block under ``jax.transfer_guard(mode)`` and report its implicit transfers.

    ``mode="log"`` (the default) lets the block run and lists every implicit
    transfer with its line; ``mode="disallow"`` stops the block at the first
    one with JAX's error (which propagates, after the report is filled in).
    In ``"log"`` mode the user's jitted calls are observed for the NumPy arrays
    they are given (``_support.host_arguments``), which name the log's copies
    (``named_copies``); ``host_observer``: an observer the caller feeds itself
    (``%%jax_doctor`` observes the calls for every probe at once), read at the end.
    """
    if mode not in MODES:
        raise ProbeArgumentError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    report = TransferReport(mode=mode)
    progress.publish(lambda: ([("implicit transfers", report.total)], []))
    with preserved_jax_state(CONFIG_NAMES):
        report.backend = jax.default_backend()
        try:
            if mode == "disallow":
                with _BlockedTransfers(report), jax.transfer_guard("disallow"):
                    yield report
            else:
                observed = host_observer or HostArguments()
                try:
                    with _GuardLog(report), jax.transfer_guard("log"), _observed_calls(report, host_observer, observed):
                        yield report
                finally:
                    name_copies(report, list(observed.seen.values()))
        except BaseException as error:
            found = parse_transfer(message_of(error)) if mode == "disallow" else None
            if found is not None:
                report.message = first_line(error)
                if not getattr(error, _SEEN, False):  # not seen raised (no sys.monitoring): from the traceback
                    lines = user_lines(error.__traceback__)
                    report.total += 1
                    line = lines[-1] if lines else None
                    report.transfers.append(
                        Transfer(
                            found[0],
                            found[1],
                            line,
                            provenance=Provenance(
                                made_at=line,
                                function=line.function if line else "",
                                started_by=lines[0] if lines else None,
                                unknown="" if line else "the error's traceback holds no line of yours",
                            ),
                        )
                    )
            else:
                report.other_error = error_line(error)
            raise
        finally:
            report.blocked = bool(report.message)


@contextlib.contextmanager
def _observed_calls(report: TransferReport, given: HostArguments | None, observer: HostArguments) -> Iterator[None]:
    """Observe the user's jitted calls with ``observer`` - within a share of the block's time, as
    ``%jax_watch`` does: the calls not looked at are still counted - unless the caller does (``given``)."""
    with contextlib.ExitStack() as stack:
        if given is None:
            try:
                watching = jit_calls.observing_calls(
                    observer, only_user_calls=True, fast_path=True, sampler=CallSampler()
                )
                if not stack.enter_context(watching):
                    report.calls_unobserved = "this JAX gives no way to see single calls"
            except AlreadyActive:
                report.calls_unobserved = "another probe follows every jitted call in this block"
        yield


_QUIET_UNKNOWN = (
    "made by a line that had run many times without a transfer, whose events jaxmagic had switched off "
    f"(after {QUIET_LINES:,} lines in a row without one, so that long loops cost nothing): one of the lines "
    "listed made it. From then on every line was followed again, so the same transfer made again is listed "
    "with its exact line"
)
# where a transfer was made: the user's line running (file, line, function), None before the first, or
# (file, line) of each line that had gone quiet, one of which made it
_Place: TypeAlias = tuple[str, int, str] | tuple[tuple[str, int], ...] | None
_SEEN = "_jaxmagic_transfer_recorded"  # set on a guard error once it is recorded, so it counts once


def _claimed_tool(report: TransferReport) -> MonitoringTool | None:
    """A watcher (a ``sys.monitoring`` tool id) for following the cell, or None (then said in the report)."""
    try:
        return MonitoringTool("jaxmagic transfers")
    except NoFreeToolId as why:
        report.lines_followed, report.lines_unfollowed = False, str(why)
        return None


class _BlockedTransfers:
    """disallow: records each transfer-guard error where it is raised, also those the block catches itself."""

    def __init__(self, report: TransferReport):
        self.report = report
        self._tool: MonitoringTool | None = None
        self._between = 0  # frames between a callback and its event's frame (MonitoringTool.frames_between)
        self._thread = threading.get_ident()

    def __enter__(self) -> _BlockedTransfers:
        self._tool = _claimed_tool(self.report)
        if self._tool is not None:
            self._between = self._tool.frames_between
            self._tool.on(self._tool.events.RAISE, self._on_raise)
            self._tool.watch(self._tool.events.RAISE)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tool is not None:
            self._tool.release()
            self._tool = None

    def _on_raise(self, code: CodeType, offset: int, exception: BaseException) -> None:
        if threading.get_ident() != self._thread:
            return
        # RAISE fires in every frame the exception passes through; the attribute makes it count once.
        if type(exception).__name__ not in ("JaxRuntimeError", "XlaRuntimeError") or getattr(exception, _SEEN, False):
            return
        found = parse_transfer(str(exception))
        if found is None:
            return
        try:
            setattr(exception, _SEEN, True)
        except Exception:
            return
        report = self.report
        report.total += 1
        if len(report.transfers) < MAX_GROUPS:
            frame = sys._getframe(1 + self._between)
            line = innermost_user_line(frame)
            provenance = Provenance(
                made_at=line,
                function=line.function if line else "",
                started_by=started_by(frame),
                unknown="" if line else "no frame of your code was on the stack",
            )
            report.transfers.append(Transfer(found[0], found[1], line, provenance=provenance))


class _GuardLog:
    """Captures descriptor 2 into a file and attributes transfer-guard lines to the user's line running."""

    def __init__(self, report: TransferReport):
        self.report = report
        self._groups: dict[tuple[tuple[str, str], _Place], Transfer] = {}
        # [code object, line number] of the user's line running ([None, 0] before the first), and the
        # user lines in a row without a transfer (-inf: lines never go quiet again in this block): a
        # list the LINE callback writes in place (cheaper there than attributes)
        self._at: list[Any] = [None, 0, 0]
        self._runs: dict[tuple[CodeType, int], int] = {}  # (code, line) -> runs after QUIET_LINES clean ones
        self._quiet: list[tuple[CodeType, int]] = []  # (code, line) of the lines whose events are off
        self._pending = b""
        self._user_file: dict[str, bool] = {}
        self._tool: MonitoringTool | None = None
        self._between = 0  # frames between a callback and its event's frame (MonitoringTool.frames_between)
        self._lock = threading.Lock()
        self._thread = threading.get_ident()
        self._native_thread = threading.get_native_id()  # what JAX's log lines name their writer by
        # (id(code), line) of a user line that called into JAX, which ran a user function (a trace)
        # and returned -> what was seen then: the host values the line passed, the function traced
        self._calls: dict[tuple[int, int], _CallSite] = {}
        self._frame_of_line: FrameType | None = None  # while check() runs from a LINE event: the frame of the new line
        self._code_state: dict[int, bool] = {}  # id(code) -> the user's code (kept in _codes)
        self._user_codes: set[int] = set()  # the ids in _code_state of the user's code objects
        self._codes: list[CodeType] = []

    # -- descriptor 2 -------------------------------------------------------------

    def __enter__(self) -> _GuardLog:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        self._capture = CaptureFile()
        self._saved = os.dup(2)
        os.dup2(self._capture.fd, 2)
        try:
            self._start_following()
        except BaseException:
            self._restore_fd()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stop_following()
            self._frame_of_line = None
            if self._quiet:
                restart_events()  # a switched-off line stays off for the next block: see top
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            self.check()
            if self._pending:  # a last line without newline
                self._handle_line(self._pending, [])
                self._pending = b""
        finally:
            self._restore_fd()
            self._calls.clear()  # code objects and nothing of the user's values: but not kept past the block
            self._runs.clear()
            self._quiet.clear()
            self._code_state.clear()
            self._user_codes.clear()
            self._codes.clear()

    def _restore_fd(self) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._capture.close()

    def check(self) -> None:
        """Read what was written to descriptor 2 since the last check; attribute it to the current line."""
        with self._lock:
            data = self._capture.take()
            if not data:
                return
            if self._at[2] > 0:
                self._at[2] = 0
            self._runs.clear()
            among = self._unsure() if self._quiet else []
            *complete, self._pending = (self._pending + data).split(b"\n")
            for line in complete:
                self._handle_line(line + b"\n", among)

    def _unsure(self) -> list[SourceLine]:
        """Lines had gone quiet when something was written: the lines that may have written it (the
        quiet ones and the last followed); every line is followed again for the rest of the block."""
        candidates = {(code.co_filename, line, code.co_name) for code, line in self._quiet}
        current = self._current()
        if current is not None:
            candidates.add(current)
        self._at[2] = float("-inf")
        self._follow_every_line()
        return [source_line(*where) for where in sorted(candidates, key=lambda where: (where[0], where[1]))]

    def _follow_every_line(self) -> None:
        self._quiet.clear()
        if self._tool is not None:
            restart_events()

    def _quieting(self, code: CodeType, line_number: int) -> object:
        """The LINE event of a user line after QUIET_LINES lines without a transfer: DISABLE once the
        line ran QUIET_RUNS times since; a line that ran fewer times while others are quiet switches
        their events on again, so that the line after it is seen (see the top)."""
        key = (code, line_number)
        runs = self._runs[key] = self._runs.get(key, 0) + 1
        if runs >= QUIET_RUNS:
            self._quiet.append(key)
            return DISABLE
        if self._quiet:
            self._follow_every_line()
        return None

    def _handle_line(self, raw: bytes, among: list[SourceLine]) -> None:
        text = raw.decode("utf-8", "replace")
        found = parse_transfer(text)
        if found is None:
            os.write(self._saved, raw)  # not ours: on to the real stderr
            return
        report = self.report
        writer = _LOG_THREAD.match(text)
        if writer is not None and int(writer["thread"]) != self._native_thread:
            # another thread's transfer (its own guard set to log: a data loader, a global setting); the
            # block's line running meanwhile did not make it
            report.other_threads += 1
            return
        report.total += 1
        if among:  # lines had gone quiet: one of them made it
            place = tuple((line.filename, line.lineno) for line in among)
            unsure = (found, place)
            group = self._groups.get(unsure) or self._same_kind(found, place)
            if group is not None:
                group.count += 1
            elif len(self._groups) < MAX_GROUPS:
                group = self._groups[unsure] = Transfer(found[0], found[1], None, among=among)
                group.provenance = Provenance(unknown=_QUIET_UNKNOWN)
                report.transfers.append(group)
            return
        current = self._current()
        described = self._same_kind(found, current)
        if described is not None:
            described.count += 1
            return
        key = (found, current)
        group = self._groups.get(key)
        if group is not None:
            group.count += 1
        elif len(self._groups) < MAX_GROUPS:
            line = source_line(*current) if current else None
            group = self._groups[key] = Transfer(found[0], found[1], line)
            self._describe(group)
            report.transfers.append(group)

    def _same_kind(self, found: tuple[str, str], place: _Place) -> Transfer | None:
        """The group an undescribed copy belongs to: JAX's C++ fast path does not describe the value, so at a
        place (a line, or the lines one of which made it) with one kind of copy described by a slower call
        (the first), it is that kind again."""
        if found[1]:
            return None
        described = [g for (f, where), g in self._groups.items() if where == place and f[0] == found[0] and f[1]]
        return described[0] if len(described) == 1 else None

    def _describe(self, group: Transfer) -> None:
        """The argument, traced function and provenance of a new group (at most MAX_GROUPS times)."""
        code, line_number, _ = self._at
        site = self._calls.get((id(code), line_number)) if code is not None else None
        if site is not None:
            group.traced = site.traced
            group.argument, group.candidates = argument_of(site.arguments, group.value)
            group.provenance = Provenance(
                made_at=group.line,
                function=group.line.function if group.line else "",
                started_by=site.started_by,
            )
        elif group.line is not None:
            group.provenance = Provenance(made_at=group.line, function=group.line.function)
            frame = self._frame_of_line
            if frame is not None and code is not None and frame.f_code is code:
                # The next line runs in the same frame: its variables are the ones the line passed.
                group.argument, group.candidates = argument_of(host_arguments(frame, group.line.code), group.value)
        else:
            group.provenance = Provenance(unknown="the transfer came before any line of yours ran in the block")

    def _current(self) -> tuple[str, int, str] | None:
        """(file, line, function) of the user's line running, or None before the first."""
        code, line_number, _ = self._at
        if code is None:
            return None
        return (code.co_filename, line_number, code.co_name)

    # -- following the user's lines ------------------------------------------------

    def _start_following(self) -> None:
        self._tool = _claimed_tool(self.report)
        if self._tool is not None:
            self._between = self._tool.frames_between
            self._tool.on(self._tool.events.LINE, self._line_callback())
            self._tool.on(self._tool.events.PY_RETURN, self._return_callback())
            self._tool.watch(self._tool.events.LINE)  # PY_RETURN: per code object, see _first_sight

    def _stop_following(self) -> None:
        if self._tool is not None:
            self._tool.release()
            self._tool = None

    def _line_callback(self) -> Callable[[CodeType, int], object]:
        """The LINE callback. It runs on every line of the user's code, so its usual case - the block's
        thread, a user's line already seen, nothing written since the previous line - does the least
        it can: an identity test (or a set lookup), one byte of the memory map and two stores into a
        list. Each Python operation here is paid on every line: in a two-line loop valgrind counted
        ~3,300 instructions a line with the former callback (a dict lookup per line, a new tuple in
        an attribute), ~1,800 with a callback like this one, ~700 with an empty one."""
        block_thread, get_ident = self._thread, threading.get_ident
        capture, view, at, user_codes = self._capture, self._capture.view, self._at, self._user_codes
        other_line, quieting = self._other_line, self._quieting

        def on_line(code: CodeType, line_number: int) -> object:
            # `code is at[0]`: the line before ran in the same code object (a loop, a function's body)
            if get_ident() == block_thread and (code is at[0] or id(code) in user_codes) and not view[capture.read]:
                at[0] = code
                at[1] = line_number
                at[2] += 1
                if at[2] > QUIET_LINES:  # lines in a row without a transfer: this one may go quiet
                    return quieting(code, line_number)
                return None
            return other_line(code, line_number)

        return on_line

    def _other_line(self, code: CodeType, line_number: int) -> object:
        """Every other LINE event: another thread's, a code object's first, or after a write."""
        if threading.get_ident() != self._thread:  # another thread's line (a data loader) made none of the
            return None  # block's transfers (the guard is thread-local); not DISABLE: the line may be shared
        user = self._code_state.get(id(code))
        if user is None:
            user = self._first_sight(code)
        if not user:
            return DISABLE  # library code: never call back for this line again
        if self._capture.view[self._capture.read]:
            self._frame_of_line = sys._getframe(2 + self._between)  # 0: here, 1: on_line, 2: the frame of the new line
            try:
                self.check()  # what was written since the previous user line belongs to it
            finally:
                self._frame_of_line = None
        self._at[0], self._at[1] = code, line_number
        return None

    def _first_sight(self, code: CodeType) -> bool:
        """Whether ``code`` is the user's (asked once per code object, at its first line). A function
        of the user's that a library called - JAX tracing it for a jitted call, a transformation -
        also gets PY_RETURN events (for this code object only, so ordinary calls cost nothing more):
        when it returns, the line that called into the library runs again."""
        name = code.co_filename
        user = self._user_file.get(name)
        if user is None:
            user = self._user_file[name] = is_user_file(name)
        self._codes.append(code)  # ids stay unique while the entries live
        self._code_state[id(code)] = user
        if user:
            self._user_codes.add(id(code))
        if user and self._tool is not None:
            caller = sys._getframe(
                3 + self._between
            ).f_back  # 0: here, 1: _other_line, 2: on_line, 3: the function's own frame
            if caller is not None and not is_user_file(caller.f_code.co_filename):
                self._tool.watch_code(code, self._tool.events.PY_RETURN)
        return user

    def _return_callback(self) -> Callable[[CodeType, int, object], object]:
        """The PY_RETURN callback: when a function of the user's returns, the line that called it
        runs again - also when JAX called it, tracing it for a jitted call: then the host arguments
        of that call are copied after the trace, and belong to the user's line that made the call,
        not to the last line traced inside the function. Switched on per code object by
        ``_first_sight``."""
        block_thread, get_ident = self._thread, threading.get_ident
        user_file = self._user_file
        capture, view, check = self._capture, self._capture.view, self.check
        calls, between = self._calls, self._between

        def on_return(
            code: CodeType, _offset: int, _value: object
        ) -> object:  # only for the user's functions a library called
            if get_ident() != block_thread:
                return None
            if view[capture.read]:
                check()  # written by the function's last line: that line's
            caller = sys._getframe(1 + between).f_back
            if caller is None:
                return None
            name = caller.f_code.co_filename
            known = user_file.get(name)
            if known is None:
                known = user_file[name] = is_user_file(name)
            if known:  # called by the user's code: that line continues
                self._at[0], self._at[1] = caller.f_code, caller.f_lineno
                return None
            # Called by a library (JAX tracing it for a jitted call, a transformation, a callback):
            # the user's line below, which made the call, continues - remember what it passed.
            below = caller.f_back
            while below is not None and not is_user_file(below.f_code.co_filename):
                below = below.f_back
            if below is None:
                return None
            self._at[0], self._at[1] = below.f_code, below.f_lineno
            key = (id(below.f_code), below.f_lineno)
            if key not in calls:  # once per call site: the first trace
                calls[key] = _CallSite(
                    code=below.f_code,
                    traced=code.co_qualname.rsplit("<locals>.", 1)[-1],
                    arguments=host_arguments(below, line_text(below)),
                    started_by=started_by(below),
                )
            return None

        return on_return


@dataclasses.dataclass
class _CallSite:
    """A user line whose call into JAX ran (traced) a user function: seen when that function returned."""

    code: object  # the line's code object (kept so its id stays unique while the entry lives)
    traced: str  # the function that was traced
    arguments: list[tuple[str, str]]  # (expression, type as the guard writes it) of the host values passed
    started_by: SourceLine | None
