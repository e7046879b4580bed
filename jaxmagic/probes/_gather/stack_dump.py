"""The engine's side of "where is a process that does not answer": its stack, written on a signal.

When jaxmagic loads in an ipyparallel engine (never in the user's own kernel),
``listen_for_stack_requests`` registers ``faulthandler`` on ``STACK_SIGNAL``: the
handler is C code, so it runs even while the main thread is busy in a Python loop or
blocked in a JAX call, and writes the stack of the thread the signal reached into a
pipe - only to wake a daemon thread (blocked on that pipe, costing nothing until then).
That thread writes every thread's stack in faulthandler's format, read with the
interpreter's lock held (faulthandler's own all-threads dump walks the other threads
while they run: it crashed the process about one time in four when a thread ended
meanwhile), adds what a dump cannot know, and appends both to this engine's file
``<tmp>/jaxmagic-stacks-<uid>/engine-<id>-<host>-<pid>.txt``:

- whether the main thread is **waiting in a call** (the same call instruction in ten
  samples 10 ms apart, and - unless the call is a jitted function's - no CPU time used:
  a sleep, a lock) or **running Python** (the instruction moves, or the thread is busy);
  for a jitted call, whether it computes (CPU time) or is blocked (a collective that
  waits for the other processes);
- the call it waits in, as written (``update(w, batch)``), and whether it is jitted;
- the source of the user's lines on the stack (an engine's cells are in its
  ``linecache`` only).

A faulthandler dump shows no C frames: a process blocked in a jitted call and one
spinning on that line look alike without the samples. The signal is SIGWINCH
("terminal resized"), whose default action is to be ignored: an engine where jaxmagic
was never loaded is unharmed (SIGUSR1's default would kill it); a handler the
program installed is left in place (no dump then).
"""

from __future__ import annotations

import dis
import faulthandler
import inspect
import json
import linecache
import os
import re
import select
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from jaxmagic._jax.jit_internals import is_jitted
from jaxmagic.usercode.source import is_user_file

STACK_SIGNAL = "SIGWINCH"
INFO_MARK = "jaxmagic-stack-info: "  # the line after a dump that carries the samples (JSON)

_listening: dict[str, Any] = {}  # the file this process dumps to, once registered


def stack_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"jaxmagic-stacks-{uid}"


def dump_file_name(engine_id: int, host: str, pid: int) -> str:
    return f"engine-{engine_id}-{host.replace('-', '_')}-{pid}.txt"


def listen_for_stack_requests(engine_id: int) -> Path | None:
    """Write this process's stack to its file on ``STACK_SIGNAL``; the file, or None when not set up (no such
    signal on this system, or a handler of the program's own is there)."""
    sig = getattr(signal, STACK_SIGNAL, None)
    if sig is None or not hasattr(faulthandler, "register"):
        return None
    if "path" in _listening:
        return _listening["path"]
    if signal.getsignal(sig) not in (signal.SIG_DFL, None):
        return None  # the program's own handler stays
    directory = stack_dir()
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / dump_file_name(engine_id, socket.gethostname(), os.getpid())
    path.touch()  # the notebook side finds the engine's file before any dump
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # a full pipe drops a wake-up; a blocking write would stop the main thread
    faulthandler.register(sig, file=write_end, all_threads=False, chain=False)  # the wake-up: see the docstring
    threading.Thread(target=_answer_requests, args=(read_end, path), name="jaxmagic-stacks", daemon=True).start()
    _listening.update(path=path, write_end=write_end)
    return path


def stop_listening() -> None:
    """Undo ``listen_for_stack_requests`` (``%unload_ext jaxmagic``): the signal's default back, the thread ended."""
    if "path" not in _listening:
        return
    faulthandler.unregister(getattr(signal, STACK_SIGNAL))
    os.close(_listening["write_end"])  # the answering thread reads the end of the pipe and returns
    _listening.pop("path").unlink(missing_ok=True)
    _listening.clear()


def _answer_requests(read_end: int, path: Path) -> None:
    while True:
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            return
        while select.select([read_end], [], [], 0.05)[0]:  # the rest of this dump (one burst)
            more = os.read(read_end, 1 << 16)
            if not more:
                break
            chunk += more
        try:
            dump = every_thread_stack()
        except Exception:  # the stack of the thread the signal reached: the main thread, on Linux
            dump = chunk.decode("utf-8", "replace")
        try:
            info = json.dumps(main_thread_state())
        except Exception as error:  # the samples are extra: the dump alone still says where it is
            info = json.dumps({"error": f"{type(error).__name__}: {error}"})
        with open(path, "a", encoding="utf-8") as file:
            file.write(dump + INFO_MARK + info + "\n")


def every_thread_stack(limit: int = 100) -> str:
    """Every other thread's stack, the main thread first, as faulthandler writes one (``stacks`` reads that)."""
    me, main = threading.get_ident(), threading.main_thread().ident
    frames = sys._current_frames()
    parts = []
    for ident in sorted(frames, key=lambda i: i != main):
        if ident == me:
            continue
        lines = [f"Thread {ident:#018x} (most recent call first):"]
        frame: FrameType | None = frames[ident]
        while frame is not None and len(lines) <= limit:
            code = frame.f_code
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno or 0} in {code.co_name}')
            frame = frame.f_back
        parts.append("\n".join(lines) + "\n")
    del frames
    return "\n".join(parts)


def main_thread_state(samples: int = 10, interval: float = 0.01) -> dict[str, Any]:
    """What the main thread does: {thread, at, steady, call, jitted, cpu, lines}. Runs in the answering thread.

    ``steady``: the same instruction in every sample. Not enough alone: in a tight Python loop this thread
    gets the GIL back at the same instruction each time (a call to ``time.monotonic()``), so ``cpu`` - the
    main thread's CPU time over the samples per second of wall time, None where the system cannot say -
    tells a loop (busy) from a wait (blocked, ~0)."""
    main = threading.main_thread().ident or 0
    clock = _cpu_clock(main)
    cpu_start, wall_start = _cpu_seconds(clock), time.monotonic()
    seen = []
    for _ in range(samples):
        frame = sys._current_frames().get(main)
        if frame is None:
            return {"thread": main, "steady": False, "call": "", "jitted": False, "cpu": None, "lines": {}}
        seen.append((id(frame.f_code), frame.f_lasti, frame.f_lineno))
        del frame
        time.sleep(interval)
    cpu_end, wall_end = _cpu_seconds(clock), time.monotonic()
    cpu = None if cpu_start is None or cpu_end is None else (cpu_end - cpu_start) / max(1e-6, wall_end - wall_start)
    frame = sys._current_frames().get(main)
    if frame is None:
        return {"thread": main, "steady": False, "call": "", "jitted": False, "cpu": cpu, "lines": {}}
    steady = len(set(seen)) == 1 and (id(frame.f_code), frame.f_lasti, frame.f_lineno) == seen[0]
    call, callee = _call_at(frame) if steady else ("", None)
    state = {
        "thread": main,
        "at": f"{frame.f_code.co_filename}:{frame.f_lineno}",  # where the samples were: the dump's line, or not
        "steady": steady,
        "call": call,
        "jitted": _is_jitted(callee),
        "cpu": cpu,
        "lines": _lines(frame),
    }
    del frame
    return state


def _cpu_clock(thread_ident: int) -> int | None:
    try:
        return time.pthread_getcpuclockid(thread_ident)  # Unix: a clock of that thread's CPU time
    except (AttributeError, OSError, OverflowError):
        return None


def _cpu_seconds(clock: int | None) -> float | None:
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None


def _call_at(frame: FrameType) -> tuple[str, Any]:
    """The call the frame's current instruction makes, as written (``update(w, batch)``), and the callee when it
    is a plain name; ("", None) when the instruction is not a call."""
    code = frame.f_code
    instruction = next((i for i in dis.get_instructions(code) if i.offset == frame.f_lasti), None)
    if instruction is None or not instruction.opname.startswith("CALL"):
        return "", None
    where = instruction.positions
    if where is None or where.lineno is None or where.lineno != where.end_lineno:
        return "a call", None
    line = linecache.getline(code.co_filename, where.lineno)
    text = line[where.col_offset : where.end_col_offset] if where.col_offset is not None else ""
    name = re.match(r"\s*([A-Za-z_][\w.]*)\s*\(", text)
    callee = _static_lookup(frame, name.group(1)) if name else None
    return " ".join(text.split()) or "a call", callee


def _static_lookup(frame: FrameType, dotted: str) -> Any:
    """The object a dotted name names in the frame, read without running any of the user's code."""
    first, *rest = dotted.split(".")
    value = None
    for scope in (frame.f_locals, frame.f_globals):  # f_locals: a read-only view of the frame's variables
        try:
            if first in scope:
                value = scope[first]
                break
        except Exception:
            continue
    for attribute in rest:
        if value is None:
            return None
        try:
            value = inspect.getattr_static(value, attribute)
        except AttributeError:
            return None
    return value


def _is_jitted(callee: Any) -> bool:
    if callee is None or not type(callee).__module__.startswith(("jax", "jaxlib")):
        return False  # only JAX's own wrapper types are asked (no attribute of the user's objects is run)
    try:
        return bool(is_jitted(callee))
    except Exception:
        return False


def _lines(frame: FrameType | None) -> dict[str, str]:
    """ "file:line" -> source, for the user's frames of the stack (the notebook side cannot read an engine's cells)."""
    out: dict[str, str] = {}
    while frame is not None and len(out) < 30:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            out[f"{filename}:{frame.f_lineno}"] = linecache.getline(filename, frame.f_lineno).strip()
        frame = frame.f_back
    return out
