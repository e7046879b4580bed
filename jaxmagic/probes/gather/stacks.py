"""Where a process that does not answer is: its Python stack, dumped by ``faulthandler`` on a signal.

An engine that does not answer ``%jax_gather`` in time is running something: its
cell loops, or it waits in JAX for the others (a collective, ``block_until_ready``).
Python cannot be asked over the network while its main thread is busy, but a signal
handler written in C can dump every thread's stack without the interpreter's help:

- **Engine side** (``listen_for_stack_requests``, called when jaxmagic loads in an
  ipyparallel engine - never in the user's own kernel): ``faulthandler.register``
  on ``STACK_SIGNAL`` writes every thread's stack to a file of its own,
  ``<tmp>/jaxmagic-stacks-<uid>/engine-<id>-<pid>.txt`` (opened for appending, so
  each dump follows the last). Only when nothing handles the signal already.
- **Notebook side** (``dump_stacks``): after the timeout, the signal goes to each
  late engine through ipyparallel (``Client.send_signal``: the engine's nanny
  process delivers it, so it also reaches a busy engine), and the new end of that
  engine's file is read, waiting at most a given time.

The signal is SIGWINCH ("terminal resized"): its default action is to be ignored,
so an engine where jaxmagic was never loaded is left unharmed (SIGUSR1's default
would kill it). The dump file is on the engine's host: for an engine on another
host (no file of it here) the report says so instead of a stack.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import re
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from jaxmagic.report.source import code_kind
from jaxmagic.report.wording import error_line

STACK_SIGNAL = "SIGWINCH"

_listening: dict[str, TextIO] = {}  # the dump file this process registered, kept open for faulthandler


def stack_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"jaxmagic-stacks-{uid}"


def listen_for_stack_requests(engine_id: int) -> Path | None:
    """Dump every thread's stack to this engine's file on ``STACK_SIGNAL``; the file, or None when not set up
    (no such signal here, or a handler of the program's own is there)."""
    sig = getattr(signal, STACK_SIGNAL, None)
    if sig is None or not hasattr(faulthandler, "register"):
        return None
    if "file" in _listening:
        return Path(_listening["file"].name)
    if signal.getsignal(sig) not in (signal.SIG_DFL, None):
        return None  # the program's own handler stays
    directory = stack_dir()
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"engine-{engine_id}-{os.getpid()}.txt"
    file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open: faulthandler writes to its descriptor
    faulthandler.register(sig, file=file, all_threads=True, chain=False)
    _listening["file"] = file
    return path


# -- reading a dump -----------------------------------------------------------------------------

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.MULTILINE)
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<function>.*)$', re.MULTILINE)

# JAX functions that mean "waiting for a device" (the others' collective, a transfer), by name
_WAITS = ("block_until_ready", "_value", "__array__", "_single_device_array_to_np_array", "wait_for_tokens")


def frames_of_dump(text: str) -> list[list[dict[str, Any]]]:
    """Every thread's frames (innermost first, as faulthandler writes them) in a dump."""
    starts = [m.start() for m in _THREAD.finditer(text)] + [len(text)]
    threads = []
    for start, end in zip(starts, starts[1:]):
        frames = [
            {"filename": m["file"], "lineno": int(m["line"]), "function": m["function"], "kind": _kind(m["file"])}
            for m in _FRAME.finditer(text, start, end)
        ]
        threads.append(frames)
    return threads


def _kind(filename: str) -> str:
    """Whose code a frame of another process runs: this process's libraries sit where that one's do on a
    local engine; a path under site-packages is a library's on any host."""
    kind = code_kind(filename)
    if kind == "user" and ("site-packages" in filename or "dist-packages" in filename):
        return "jax" if re.search(r"[/\\]jax(lib)?[/\\]", filename) else "library"
    return kind


def where_it_is(text: str) -> dict[str, Any]:
    """Where a dumped process is: {state, where, function, line, blocked_in, user_frames, frames}.

    ``state`` is "running" (its innermost frame is Python code: a loop of the user's, a library's),
    "waiting" (in JAX: a compiled program, ``block_until_ready`` - for the other processes) or
    "unknown" (no Python frame of the user's). The user's frames come first."""
    threads = [t for t in frames_of_dump(text) if t]
    if not threads:
        return {"state": "unknown", "where": "no Python stack in its dump", "frames": [], "user_frames": []}
    # the thread running the cell: the one with the user's frames (the kernel's own threads have none)
    thread = max(threads, key=lambda t: (any(f["kind"] == "user" for f in t), len(t)))
    user = [f for f in thread if f["kind"] == "user"]
    if not user:
        return {"state": "unknown", "where": "in no code of yours", "frames": thread[:30], "user_frames": []}
    innermost = user[0]
    inner = thread[: thread.index(innermost)]  # what the user's innermost frame called
    jax_frames = [f for f in inner if f["kind"] == "jax"]
    at = f"`{innermost['function']}` at line {innermost['lineno']}"
    if jax_frames:
        blocked = _blocking_call(jax_frames)
        state, where = "waiting", f"waits in JAX ({blocked}) in {at}"
    else:
        blocked = ""
        called = f" (in `{inner[-1]['function']}` of {_short(inner[-1]['filename'])})" if inner else ""
        state, where = "running", f"is in {at}{called}"
    return {
        "state": state,
        "where": where,
        "function": innermost["function"],
        "line": innermost["lineno"],
        "blocked_in": blocked,
        "user_frames": user,
        "frames": thread[:30],
    }


def _blocking_call(jax_frames: list[dict[str, Any]]) -> str:
    """The JAX call a process waits in: a named wait, or the compiled program it runs."""
    for frame in jax_frames:
        if frame["function"] in _WAITS:
            return f"`{frame['function'].strip('_') or frame['function']}`"
    if any("pxla" in f["filename"] or f["function"] in ("__call__", "call_impl_cache_miss") for f in jax_frames):
        return "running a compiled program: a collective waits for every process"
    return f"`{jax_frames[0]['function']}` of {_short(jax_frames[0]['filename'])}"


def _short(filename: str) -> str:
    parts = Path(filename).parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1 :])
    return Path(filename).name


def user_stack_text(stack: dict[str, Any]) -> str:
    """"`spin` line 8 <- `main` line 14 <- line 15": the user's frames, innermost first."""
    return " <- ".join(
        f"`{f['function']}` line {f['lineno']}" if f["function"] != "<module>" else f"line {f['lineno']}"
        for f in stack.get("user_frames") or []
    )


# -- asking engines for their stacks ---------------------------------------------------------------


@dataclasses.dataclass
class _Watched:
    paths: dict[Path, int]  # this engine's dump files here, with their size before the signal
    text: str = ""
    last_size: int = -1


def dump_stacks(client, engines: list[int], wait: float) -> dict[int, dict[str, Any]]:
    """Ask each engine for its stack; at most ``wait`` seconds in all. engine -> ``where_it_is``'s dict,
    or {"state": "unknown", "where": why there is none}."""
    directory = stack_dir()
    out: dict[int, dict[str, Any]] = {}
    watched: dict[int, _Watched] = {}
    for engine in engines:
        paths = {p: _size(p) for p in directory.glob(f"engine-{engine}-*.txt")} if directory.is_dir() else {}
        if not paths:
            out[engine] = _none(
                "its stack dump is not set up here: jaxmagic is not loaded on it (`%px %load_ext jaxmagic`), "
                f"or it runs on another host (its stack would be in {directory} there)"
            )
            continue
        try:
            client.send_signal(STACK_SIGNAL, targets=[engine], block=False)  # through the engine's nanny
        except Exception as error:  # the engine is gone
            out[engine] = _none(f"the signal for its stack could not be sent ({error_line(error)})")
            continue
        watched[engine] = _Watched(paths)
    deadline = time.monotonic() + wait
    while watched:
        for engine, seen in list(watched.items()):
            size = sum(_size(p) for p in seen.paths)
            if size > sum(seen.paths.values()) and size == seen.last_size:  # grew, then stopped growing: done
                seen.text = "".join(_tail(p, before) for p, before in seen.paths.items())
                out[engine] = where_it_is(seen.text)
                del watched[engine]
            seen.last_size = size
        if not watched or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    for engine, seen in watched.items():  # no dump, or one still being written, when the time was up
        text = "".join(_tail(p, before) for p, before in seen.paths.items())
        found = where_it_is(text) if text else {}
        out[engine] = (
            found
            if found.get("user_frames")
            else _none(
                f"it sent no stack within {wait:g} s (the process died, or the signal did not reach it: "
                "ipyparallel delivers it through the engine's nanny process)"
            )
        )
    return out


def _none(why: str) -> dict[str, Any]:
    return {"state": "unknown", "where": why, "frames": [], "user_frames": []}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path, start: int) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(start)
            return file.read().decode("utf-8", "replace")
    except OSError:
        return ""
