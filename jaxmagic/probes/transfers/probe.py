"""Transfer probe: every implicit host-to-device transfer of a block, with the user's line that made it.

Usage without IPython::

    with jaxmagic.probes.transfers() as report:          # mode="log": the block runs to the end
        for _ in range(100):
            y = f(np_x, 1.0)                             # a NumPy array and a Python scalar: 2 transfers a call
    report.transfers[0].line.code, report.transfers[0].count

    with jaxmagic.probes.transfers(mode="disallow"):     # the first implicit transfer raises
        f(np_x)

It runs the block under ``jax.transfer_guard`` (chapter section 5.5): passing a
NumPy array or a Python scalar to a jitted function, ``jnp.array(list)`` or
``x + 1`` copies host data to the device implicitly, on every call; an explicit
``jax.device_put`` is allowed.

``"disallow"`` turns the first implicit transfer into an error whose traceback
gives the line. ``"log"`` lets the block run and makes JAX's C++ runtime write
one line per transfer to the process's stderr (file descriptor 2), without a
Python stack. To name the line of each transfer, the probe points descriptor 2
at a temporary file for the block, and follows the user's lines with
``sys.monitoring`` LINE events (JAX's and other libraries' code switch their
events off at the first hit, so only the user's lines cost anything): when the
file has grown since the last user line began, that line made the transfers
(the file is memory-mapped, so that check reads one byte instead of making a
system call on every line: see ``_CaptureFile``).
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
name) are kept to name the argument of each copy. Limits: CPython gives no LINE event to
a one-line lambda made inside a function, so its trace is not seen (the copy is still on
the calling line, without the traced function); a function first called by the user's
own code and traced later is not followed either.

On the CPU backend arrays already live in host memory, so device-to-host reads
(``float(x)``, ``np.asarray(x)``) are not intercepted; on GPU/TPU the guard
catches them too.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import mmap
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from types import CodeType

import numpy as np

from jaxmagic._jax.compile_log import short_types
from jaxmagic._jax.monitoring_tool import MonitoringTool, NoFreeToolId
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support import progress
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.attribution import started_by
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import SourceLine, Status
from jaxmagic.report.document import Document, Facts, Paragraph, Section, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.source import innermost_user_line, is_user_file, source_line, user_lines
from jaxmagic.report.wording import error_line, first_line, message_of, short_dtype

CONFIG_NAMES = (
    "jax_transfer_guard",
    "jax_transfer_guard_host_to_device",
    "jax_transfer_guard_device_to_host",
    "jax_transfer_guard_device_to_device",
)
MODES = ("log", "disallow")
MAX_GROUPS = 200  # distinct (line, value) groups kept; further transfers are only counted
TRUNCATE_AT = 1 << 20  # bytes of captured stderr after which the file is emptied again
MAPPED_BYTES = 4 << 20  # size of the capture file's memory map (sparse; above TRUNCATE_AT)
# User lines in a row without a transfer after which a line's event is switched off (see the top) ...
QUIET_LINES = 1_000
QUIET_RUNS = 20  # ... once it has run this often since

_GUARD_LINE = re.compile(r"guard_lib\.cc:\d+\] (?P<direction>[\w-]+-to-[\w-]+) transfer:(?P<rest>.*)$")
_DISALLOWED = re.compile(r"Disallowed (?P<direction>[\w-]+-to-[\w-]+) transfer:(?P<rest>.*)$", re.MULTILINE)

CPU_NOTE = (
    "On the CPU backend arrays already live in host memory, so reading a result back (float(x), "
    "np.asarray(x), printing) is not intercepted. On GPU and TPU the guard catches those device-to-host "
    "transfers too; that cannot be shown on this machine."
)
WHY = (
    "A NumPy array, a Python scalar or a Python list given to JAX is copied to the device every time it is "
    "used - in a loop, on every iteration - and nothing in the code shows it. Creating a JAX array from host "
    "values (jnp.array(list), jnp.float32(0.5), even jnp.ones, which sends its fill value) is such a copy "
    "too. Move the data to the device once, before the loop, with jax.device_put(x) (an explicit transfer, "
    "which the guard allows), and keep it there; make scalars that select code static instead."
)


@dataclasses.dataclass
class Transfer:
    """Implicit transfers of one kind of value made by one line (``count`` of them)."""

    direction: str  # "host-to-device"
    value: str  # "f32[3]", "f32[] weak"; "" when JAX did not describe it
    line: SourceLine | None  # the user's line that handed the host value to JAX (the call that passed it)
    count: int = 1
    argument: str = ""  # the expression on that line whose value was copied ("batch"); "" when not told
    candidates: list[str] = dataclasses.field(default_factory=list)  # several arguments of that type: one of them
    traced: str = ""  # the user function a trace of this call ran ("loss"), when the call was traced first
    # line is None: the lines one of which made it, when lines had gone quiet (see _GuardLog)
    among: list[SourceLine] = dataclasses.field(default_factory=list)
    provenance: Provenance | None = None  # made_at: the line above; started_by: the outermost call

    @property
    def what(self) -> str:
        """What the transferred value probably was, from its type."""
        if not self.value:
            return "not described by JAX (its fast path)"
        if self.value.endswith(" weak"):
            return "a Python scalar"
        return "a NumPy array or other host data"


@dataclasses.dataclass
class TransferReport(Report):
    """What ``%%jax_transfers`` found: implicit transfers, grouped by line and value."""

    kind = "jax_transfers"

    mode: str = "log"
    transfers: list[Transfer] = dataclasses.field(default_factory=list)
    total: int = 0  # every implicit transfer seen, also those not kept in a group
    blocked: bool = False  # disallow: the block stopped at a transfer (the error was not caught)
    message: str = ""  # disallow: JAX's error, first line
    lines_followed: bool = True  # False when sys.monitoring had no free tool id
    backend: str = ""
    other_error: str = ""

    @property
    def status(self) -> Status:
        if self.total:
            return Status.PROBLEM
        return Status.ERROR if self.other_error else Status.OK

    @property
    def lines(self) -> list[SourceLine]:
        """The user's lines that made implicit transfers, in order of first transfer, without repeats."""
        return list({(t.line.filename, t.line.lineno): t.line for t in self.transfers if t.line}.values())

    @property
    def summary(self) -> str:
        if self.blocked:
            last = self.transfers[-1] if self.transfers else None
            at = _at(last.line) if last and last.line else ""
            value = f" of {last.value} ({last.what})" if last and last.value else ""
            earlier = f" ({self.total - 1} earlier one(s) blocked and caught by your code)" if self.total > 1 else ""
            return f"Stopped at an implicit host-to-device transfer{value}{at}{earlier}."
        if self.total:
            lines = self.lines
            where = f" on {len(lines)} line(s) of yours" if lines else ""
            verb = "blocked (your code caught the errors)" if self.mode == "disallow" else "made"
            first = self.transfers[0]
            head = f"{self.total} implicit transfer(s) {verb}{where}"
            if first.line:
                head += (
                    f"; the first at {first.line.label or first.line.filename}, line {first.line.lineno}: "
                    f"`{_code(first.line)}`"
                )
                if first.argument:
                    head += f" (argument `{first.argument}`)"
            elif first.among:
                head += "; the first on one of " + ", ".join(f"line {line.lineno}" for line in first.among)
            return head + "."
        if self.other_error:
            return f"The cell failed with {self.other_error}; no implicit transfer happened before."
        return "No implicit host-to-device transfer in this cell."

    def document(self):

        sections = []
        if self.transfers:
            rows = [
                [_line_cell(t.line, t.among), t.value or "-", t.what, _argument_cell(t), str(t.count)]
                for t in self.transfers
            ]
            kept = sum(t.count for t in self.transfers)
            blocks = [Table(["your line", "value", "what it is", "argument", "times"], rows)]
            for t in self.transfers[:3]:
                if t.traced and t.provenance is not None and (t.argument or t.candidates):
                    blocks += provenance_blocks(t.provenance, f"the transfer of {t.value or 'the value'}")
                    blocks.append(
                        Paragraph(
                            f"This call traced `{t.traced}` first; its argument {_argument_cell(t)} was copied "
                            "to the device after the trace, when the call ran on this line (not by the last "
                            "line traced inside the function)."
                        )
                    )
            if self.total > kept:
                blocks.append(
                    Paragraph(
                        f"{self.total - kept} more transfer(s) on other lines or values were "
                        f"counted but not listed (the first {MAX_GROUPS} groups are)."
                    )
                )
            if not self.lines_followed:
                blocks.append(
                    Paragraph(
                        "Lines could not be followed (sys.monitoring had no free tool id), so the "
                        "transfers are listed without their line."
                    )
                )
            sections.append(Section("Implicit transfers", blocks))
            sections.append(Section("Why it matters", [Paragraph(WHY)]))
        if self.blocked and self.message:
            sections.append(Section("JAX's error", [Paragraph(self.message)]))
        facts = [("mode", f"jax.transfer_guard({self.mode!r})"), ("backend", self.backend or "-")]
        sections.append(Section("Checked", [Facts(facts)] + ([Paragraph(CPU_NOTE)] if self.backend == "cpu" else [])))
        return Document("%%jax_transfers", self.status, self.summary, sections)


def _code(line: SourceLine) -> str:
    """The line's code without a trailing comment (for headlines)."""
    return line.code.split("  #")[0].rstrip()


def _at(line: SourceLine) -> str:
    return f" at {line.label or line.filename}, line {line.lineno}: `{_code(line)}`"


def _argument_cell(t: Transfer) -> str:
    if t.argument:
        return f"`{t.argument}`"
    if t.candidates:
        return "one of " + ", ".join(f"`{c}`" for c in t.candidates)
    return "-"


def _line_cell(line: SourceLine | None, among: Sequence[SourceLine] = ()) -> str:
    if line is None:
        return "one of " + "; ".join(_line_cell(candidate) for candidate in among) if among else "(not known)"
    inside = f" in {line.function}" if line.function not in ("<module>", "") else ""
    return f"{line.label or line.filename}:{line.lineno}{inside} `{line.code}`"


def parse_transfer(text: str) -> tuple[str, str] | None:
    """(direction, short value type) from a transfer guard message; None if it is not one."""
    match = _GUARD_LINE.search(text) or _DISALLOWED.search(text)
    if not match:
        return None
    types = short_types(match["rest"].split("dst_sharding")[0]) if "aval=" in match["rest"] else []
    return match["direction"], types[0] if types else ""


# -- the probe ------------------------------------------------------------------


@contextlib.contextmanager
def transfers(mode: str = "log") -> Iterator[TransferReport]:
    """Run a block under ``jax.transfer_guard(mode)`` and report its implicit transfers.

    ``mode="log"`` (the default) lets the block run and lists every implicit
    transfer with its line; ``mode="disallow"`` stops the block at the first
    one with JAX's error (which propagates, after the report is filled in).
    """
    import jax

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
                with _GuardLog(report), jax.transfer_guard("log"):
                    yield report
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


_QUIET_UNKNOWN = (
    "made by a line that had run many times without a transfer, whose events jaxmagic had switched off "
    f"(after {QUIET_LINES:,} lines in a row without one, so that long loops cost nothing): one of the lines "
    "listed made it. From then on every line was followed again, so the same transfer made again is listed "
    "with its exact line"
)
_SEEN = "_jaxmagic_transfer_recorded"  # set on a guard error once it is recorded, so it counts once


def _claimed_tool(report: TransferReport) -> MonitoringTool | None:
    """A sys.monitoring tool id for following the cell, or None (then said in the report)."""
    try:
        return MonitoringTool("jaxmagic transfers")
    except NoFreeToolId:
        report.lines_followed = False
        return None


class _BlockedTransfers:
    """disallow: records each transfer-guard error where it is raised, also those the block catches itself."""

    def __init__(self, report: TransferReport):
        self.report = report
        self._tool: MonitoringTool | None = None
        self._thread = threading.get_ident()

    def __enter__(self) -> _BlockedTransfers:
        self._tool = _claimed_tool(self.report)
        if self._tool is not None:
            self._tool.on(self._tool.events.RAISE, self._on_raise)
            self._tool.watch(self._tool.events.RAISE)
        return self

    def __exit__(self, *exc) -> bool:
        if self._tool is not None:
            self._tool.release()
            self._tool = None
        return False

    def _on_raise(self, code, offset, exception) -> None:
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
            frame = sys._getframe(1)
            line = innermost_user_line(frame)
            provenance = Provenance(
                made_at=line,
                function=line.function if line else "",
                started_by=started_by(frame),
                unknown="" if line else "no frame of your code was on the stack",
            )
            report.transfers.append(Transfer(found[0], found[1], line, provenance=provenance))


class _CaptureFile:
    """The file descriptor 2 points at during the block, and a check for new bytes that costs no system call.

    The file is not in append mode: descriptor 2 shares its offset, so every
    write lands at the end of what was written before. It is sized to
    ``MAPPED_BYTES`` up front (sparse: it reads as zeros) and memory-mapped,
    so "has anything been written since ``read``?" is one byte of memory
    (non-zero: written) instead of an ``fstat`` per user line, which costs
    microseconds. Where mapping fails, every check asks the file instead.
    """

    def __init__(self):
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.fd = self.file.fileno()
        self.read = 0  # bytes handed on so far
        self.mapped = None
        try:
            os.ftruncate(self.fd, MAPPED_BYTES)
            self.mapped = mmap.mmap(self.fd, MAPPED_BYTES)
        except (OSError, ValueError, AttributeError):
            os.ftruncate(self.fd, 0)
        # view[read] is non-zero when something was written since the last take() (a NUL byte written
        # first is seen at the next write); without a mapping, every check asks the file.
        self.view = self.mapped if self.mapped is not None else _ALWAYS_WRITTEN

    def take(self) -> bytes:
        """The bytes written since the last call; the file is emptied again once it has grown large."""
        end = os.lseek(self.fd, 0, os.SEEK_CUR)  # where the next write lands (descriptor 2's offset)
        if end <= self.read:
            return b""
        if self.mapped is not None and end <= MAPPED_BYTES:
            data = self.mapped[self.read : end]
        else:
            data = _read_at(self.fd, end - self.read, self.read)
        self.read = end
        if self.read > TRUNCATE_AT or self.read >= MAPPED_BYTES:  # keep the file small in a long cell
            if self.mapped is not None:
                self.mapped[: min(self.read, MAPPED_BYTES)] = bytes(min(self.read, MAPPED_BYTES))
                with contextlib.suppress(OSError):  # what was written past the mapping
                    os.ftruncate(self.fd, MAPPED_BYTES)
            else:
                os.ftruncate(self.fd, 0)
            os.lseek(self.fd, 0, os.SEEK_SET)
            self.read = 0
        return data

    def close(self) -> None:
        if self.mapped is not None:
            self.mapped.close()
        self.file.close()


class _AlwaysWritten:
    """Stands in for the memory map where there is none: "maybe written" at every offset."""

    def __getitem__(self, offset: int) -> int:
        return 1


_ALWAYS_WRITTEN = _AlwaysWritten()


def _read_at(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    end = os.lseek(fd, 0, os.SEEK_CUR)  # Windows has no pread: descriptor 2 shares this offset, so put it back
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)
    finally:
        os.lseek(fd, end, os.SEEK_SET)


class _GuardLog:
    """Captures descriptor 2 into a file and attributes transfer-guard lines to the user's line running."""

    def __init__(self, report: TransferReport):
        self.report = report
        self._groups: dict[tuple, Transfer] = {}
        # [code object, line number] of the user's line running ([None, 0] before the first), and the
        # user lines in a row without a transfer (-inf: lines never go quiet again in this block): a
        # list the LINE callback writes in place (cheaper there than attributes)
        self._at: list = [None, 0, 0]
        self._runs: dict[tuple[CodeType, int], int] = {}  # (code, line) -> runs after QUIET_LINES clean ones
        self._quiet: list[tuple[CodeType, int]] = []  # (code, line) of the lines whose events are off
        self._pending = b""
        self._user_file: dict[str, bool] = {}
        self._tool: MonitoringTool | None = None
        self._lock = threading.Lock()
        self._thread = threading.get_ident()
        # (id(code), line) of a user line that called into JAX, which ran a user function (a trace)
        # and returned -> what was seen then: the host values the line passed, the function traced
        self._calls: dict[tuple[int, int], _CallSite] = {}
        self._frame_of_line = None  # while check() runs from a LINE event: the frame of the new line
        self._code_state: dict[int, bool] = {}  # id(code) -> the user's code (kept in _codes)
        self._user_codes: set[int] = set()  # the ids in _code_state of the user's code objects
        self._codes: list = []

    # -- descriptor 2 -------------------------------------------------------------

    def __enter__(self) -> _GuardLog:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        self._capture = _CaptureFile()
        self._saved = os.dup(2)
        os.dup2(self._capture.fd, 2)
        try:
            self._start_following()
        except BaseException:
            self._restore_fd()
            raise
        return self

    def __exit__(self, *exc) -> bool:
        try:
            self._stop_following()
            self._frame_of_line = None
            if self._quiet:
                sys.monitoring.restart_events()  # a switched-off line stays off for the next block: see top
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
        return False

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
            sys.monitoring.restart_events()

    def _quieting(self, code, line_number: int):
        """The LINE event of a user line after QUIET_LINES lines without a transfer: DISABLE once the
        line ran QUIET_RUNS times since; a line that ran fewer times while others are quiet switches
        their events on again, so that the line after it is seen (see the top)."""
        key = (code, line_number)
        runs = self._runs[key] = self._runs.get(key, 0) + 1
        if runs >= QUIET_RUNS:
            self._quiet.append(key)
            return sys.monitoring.DISABLE
        if self._quiet:
            self._follow_every_line()
        return None

    def _handle_line(self, raw: bytes, among: list[SourceLine]) -> None:
        found = parse_transfer(raw.decode("utf-8", "replace"))
        if found is None:
            os.write(self._saved, raw)  # not ours: on to the real stderr
            return
        report = self.report
        report.total += 1
        if among:  # lines had gone quiet: one of them made it
            key = (found, tuple((line.filename, line.lineno) for line in among))
            group = self._groups.get(key)
            if group is not None:
                group.count += 1
            elif len(self._groups) < MAX_GROUPS:
                group = self._groups[key] = Transfer(found[0], found[1], None, among=among)
                group.provenance = Provenance(unknown=_QUIET_UNKNOWN)
                report.transfers.append(group)
            return
        if not found[1]:
            # JAX's C++ fast path does not describe the value; on a line with one kind of transfer
            # described earlier (the first, slower call), it is that kind again.
            current = self._current()
            described = [g for (f, line), g in self._groups.items() if line == current and f[0] == found[0] and f[1]]
            if len(described) == 1:
                described[0].count += 1
                return
        current = self._current()
        key = (found, current)
        group = self._groups.get(key)
        if group is not None:
            group.count += 1
        elif len(self._groups) < MAX_GROUPS:
            line = source_line(*current) if current else None
            group = self._groups[key] = Transfer(found[0], found[1], line)
            self._describe(group)
            report.transfers.append(group)

    def _describe(self, group: Transfer) -> None:
        """The argument, traced function and provenance of a new group (at most MAX_GROUPS times)."""
        code, line_number, _ = self._at
        site = self._calls.get((id(code), line_number)) if code is not None else None
        if site is not None:
            group.traced = site.traced
            group.argument, group.candidates = _argument_of(site.arguments, group.value)
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
                group.argument, group.candidates = _argument_of(_host_arguments(frame, group.line.code), group.value)
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
            self._tool.on(self._tool.events.LINE, self._line_callback())
            self._tool.on(self._tool.events.PY_RETURN, self._return_callback())
            self._tool.watch(self._tool.events.LINE)  # PY_RETURN: per code object, see _first_sight

    def _stop_following(self) -> None:
        if self._tool is not None:
            self._tool.release()
            self._tool = None

    def _line_callback(self):
        """The LINE callback. It runs on every line of the user's code, so its usual case - the block's
        thread, a user's line already seen, nothing written since the previous line - does the least
        it can: an identity test (or a set lookup), one byte of the memory map and two stores into a
        list. Each Python operation here is paid on every line: in a two-line loop valgrind counted
        ~3,300 instructions a line with the former callback (a dict lookup per line, a new tuple in
        an attribute), ~1,800 with a callback like this one, ~700 with an empty one."""
        block_thread, get_ident = self._thread, threading.get_ident
        capture, view, at, user_codes = self._capture, self._capture.view, self._at, self._user_codes
        other_line, quieting = self._other_line, self._quieting

        def on_line(code, line_number: int):
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

    def _other_line(self, code, line_number: int):
        """Every other LINE event: another thread's, a code object's first, or after a write."""
        if threading.get_ident() != self._thread:  # another thread's line (a data loader) made none of the
            return None  # block's transfers (the guard is thread-local); not DISABLE: the line may be shared
        user = self._code_state.get(id(code))
        if user is None:
            user = self._first_sight(code)
        if not user:
            return sys.monitoring.DISABLE  # library code: never call back for this line again
        if self._capture.view[self._capture.read]:
            self._frame_of_line = sys._getframe(2)  # 0: here, 1: on_line, 2: the frame of the new line
            try:
                self.check()  # what was written since the previous user line belongs to it
            finally:
                self._frame_of_line = None
        self._at[0], self._at[1] = code, line_number
        return None

    def _first_sight(self, code) -> bool:
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
            caller = sys._getframe(3).f_back  # 0: here, 1: _other_line, 2: on_line, 3: the function's own frame
            if caller is not None and not is_user_file(caller.f_code.co_filename):
                self._tool.watch_code(code, self._tool.events.PY_RETURN)
        return user

    def _return_callback(self):
        """The PY_RETURN callback: when a function of the user's returns, the line that called it
        runs again - also when JAX called it, tracing it for a jitted call: then the host arguments
        of that call are copied after the trace, and belong to the user's line that made the call,
        not to the last line traced inside the function. Switched on per code object by
        ``_first_sight``."""
        block_thread, get_ident = self._thread, threading.get_ident
        user_file = self._user_file
        capture, view, check = self._capture, self._capture.view, self.check
        calls = self._calls

        def on_return(code, _offset: int, _value):  # only for the user's functions a library called
            if get_ident() != block_thread:
                return None
            if view[capture.read]:
                check()  # written by the function's last line: that line's
            caller = sys._getframe(1).f_back
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
                    arguments=_host_arguments(below, _line_text(below)),
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


def _line_text(frame) -> str:
    return source_line(frame.f_code.co_filename, frame.f_lineno, "").code


def _host_type(value) -> str:
    """How the transfer guard writes a host value's type (``f32[8,5]``, ``f32[] weak``); "" for no host value."""
    if isinstance(value, bool):
        return "bool[] weak"
    if isinstance(value, int):
        return "i32[] weak"
    if isinstance(value, float):
        return "f32[] weak"
    if isinstance(value, (np.ndarray, np.generic)):
        import jax  # deferred: importing jaxmagic.probes imports no JAX

        try:
            dtype = jax.dtypes.canonicalize_dtype(value.dtype)
        except Exception:
            dtype = value.dtype
        return f"{short_dtype(str(dtype))}[{','.join(str(d) for d in np.shape(value))}]"
    return ""


def _host_arguments(frame, code: str) -> list[tuple[str, str]]:
    """The arguments of the calls on one line that are host values (NumPy arrays, Python scalars) in
    ``frame``'s variables, as (expression, type). Names, attributes and subscripts with constant
    keys are looked up without running user code; literals are typed as written."""
    try:
        tree = ast.parse(code.strip().rstrip(":") or "0")
    except SyntaxError:
        try:
            tree = ast.parse("(" + code.strip() + ")")
        except SyntaxError:
            return []
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            value = _value_of(arg, frame)
            if value is _NOTHING:
                continue
            typed = _host_type(value)
            if typed:
                found.append((ast.unparse(arg), typed))
    return found


_NOTHING = object()


def _value_of(node, frame):
    """The value of a name (``batch``), attribute (``data.x``) or constant subscript (``d['x']``) in
    ``frame``, read without running user code; a literal number as written; else ``_NOTHING``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name):
        for table in (frame.f_locals, frame.f_globals):
            try:
                if node.id in table:
                    return table[node.id]
            except Exception:
                return _NOTHING
        return _NOTHING
    if isinstance(node, ast.Attribute):
        base = _value_of(node.value, frame)
        if base is _NOTHING:
            return _NOTHING
        try:
            return inspect.getattr_static(base, node.attr)
        except AttributeError:
            return _NOTHING
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _value_of(node.value, frame)
        if isinstance(base, dict):
            return base.get(node.slice.value, _NOTHING)
        if isinstance(base, (list, tuple)) and isinstance(node.slice.value, int):
            try:
                return base[node.slice.value]
            except IndexError:
                return _NOTHING
    return _NOTHING


def _argument_of(arguments: list[tuple[str, str]], value: str) -> tuple[str, list[str]]:
    """(the argument whose type is the transfer's, the arguments of that type when several have it);
    ("", []) when none has, or the transfer's type is not known."""
    if not value:
        return "", []
    matching = list(dict.fromkeys(expression for expression, typed in arguments if typed == value))
    if len(matching) == 1:
        return matching[0], []
    return "", matching
