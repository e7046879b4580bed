"""Where a process that does not answer is: its stack, asked for with a signal and read from its dump.

An engine that does not answer ``%jax_gather`` in time is running something: its
cell loops, or it waits in JAX for the others (a collective, ``block_until_ready``).
``dump_stacks`` sends each late engine ``STACK_SIGNAL`` through ipyparallel
(``Client.send_signal``: the engine's nanny process delivers it, so it reaches a busy
engine) and reads what the engine appends to its file (``stack_dump``: every thread's
stack in faulthandler's format, then the samples that tell waiting from running), waiting at
most a given time. ``where_it_is`` turns a dump into where the process is, the
user's frames first. The file is on the engine's host: for an engine on another host
(no file of it here) the report says so instead of a stack.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxmagic.probes._gather.stack_dump import INFO_MARK, STACK_SIGNAL, stack_dir
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import code_kind

if TYPE_CHECKING:
    from ipyparallel import Client

# -- reading a dump -----------------------------------------------------------------------------

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.MULTILINE)
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<function>.*)$', re.MULTILINE)

# JAX functions that mean "waiting for a device" (the others' collective, a transfer), by name
_WAITS = ("block_until_ready", "_value", "__array__", "_single_device_array_to_np_array", "wait_for_tokens")


def frames_of_dump(text: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """Every thread's id and frames (innermost first, as faulthandler writes them) in a dump."""
    heads = list(_THREAD.finditer(text))
    threads = []
    for head, end in zip(heads, [h.start() for h in heads[1:]] + [len(text)]):
        frames = [
            {"filename": m["file"], "lineno": int(m["line"]), "function": m["function"], "kind": _kind(m["file"])}
            for m in _FRAME.finditer(text, head.end(), end)
        ]
        threads.append((head.group(2), frames))
    return threads


def _kind(filename: str) -> str:
    """Whose code a frame of another process runs: this process's libraries sit where that one's do on a
    local engine; a path under site-packages, or Python's own lib directory, is not the user's on any host."""
    kind = code_kind(filename)
    if kind == "user" and ("site-packages" in filename or "dist-packages" in filename):
        return "jax" if re.search(r"[/\\]jax(lib)?[/\\]", filename) else "library"
    if kind == "user" and re.search(r"[/\\]lib[/\\]python3\.\d+[/\\]", filename):
        return "python"
    return kind


def _info_of(text: str) -> tuple[str, dict[str, Any]]:
    """(the faulthandler dump, the samples the engine added after it) of the last dump in ``text``."""
    head, mark, tail = text.rpartition(INFO_MARK)
    if not mark:
        return text, {}
    if INFO_MARK in head:  # an earlier dump read along: keep the last
        head = head.rpartition(INFO_MARK)[2].split("\n", 1)[-1]
    try:
        return head, json.loads(tail.split("\n", 1)[0])
    except ValueError:
        return head, {}


def where_it_is(text: str) -> dict[str, Any]:
    """Where a dumped process is: {state, where, function, line, code, blocked_in, user_frames, frames}.

    ``state`` is "running" (Python code runs: a loop of the user's, a library's), "waiting" (in a call
    that does not return: a jitted function whose program waits in a collective, ``block_until_ready``)
    or "unknown" (no Python frame of the user's). The user's frames come first."""
    dump, info = _info_of(text)
    threads = frames_of_dump(dump)
    main = f"{info['thread']:#018x}" if isinstance(info.get("thread"), int) else ""
    picked = [frames for ident, frames in threads if ident == main and frames]
    candidates = picked or [frames for _ident, frames in threads if frames]
    if not candidates:
        return {"state": "unknown", "where": "no Python stack in its dump", "frames": [], "user_frames": []}
    # the thread running the cell: the main thread, else the one with the user's frames
    thread = max(candidates, key=lambda t: (any(f["kind"] == "user" for f in t), len(t)))
    lines = info.get("lines") or {}
    for frame in thread:
        frame["code"] = lines.get(_key(frame), "")
    user = [f for f in thread if f["kind"] == "user"]
    if not user:
        return {"state": "unknown", "where": "in no code of yours", "frames": thread[:30], "user_frames": []}
    innermost = user[0]
    inner = thread[: thread.index(innermost)]  # what the user's innermost frame called
    jax_frames = [f for f in inner if f["kind"] == "jax"]
    at = f"`{innermost['function']}` at line {innermost['lineno']}"
    if jax_frames:
        blocked = _blocking_call(jax_frames)
        if isinstance(info.get("cpu"), (int, float)) and not _blocked(info):  # computing: tracing, compiling, running
            state, where = "running", f"is busy in JAX ({blocked}) in {at}"
        else:
            state, where = "waiting", f"waits in JAX ({blocked}) in {at}"
    elif (
        not inner
        and info.get("steady")
        and info.get("call")
        and info.get("at") == _key(innermost)
        and (info.get("jitted") or _blocked(info))
    ):  # the same call in every sample, at the dump's line: in C code (a jitted program, a sleep, a lock)
        if info.get("jitted"):
            doing = (
                "computing"
                if not _blocked(info)
                else "its thread not computing: it waits for the devices, or for a collective every process must join"
            )
            blocked = f"`{info['call']}` (jitted, {doing})"
        else:
            blocked = f"`{info['call']}`"
        state, where = "waiting", f"waits in {blocked} in {at}"
    else:
        blocked = ""
        called = f" (in `{inner[-1]['function']}` of {_short(inner[-1]['filename'])})" if inner else ""
        code = f": `{innermost['code']}`" if innermost.get("code") else ""
        state, where = "running", f"is in {at}{called}{code}"
    return {
        "state": state,
        "where": where,
        "function": innermost["function"],
        "line": innermost["lineno"],
        "code": innermost.get("code", ""),
        "blocked_in": blocked,
        "user_frames": user,
        "frames": thread[:30],
    }


def _blocked(info: dict[str, Any]) -> bool:
    """The main thread used (almost) no CPU while sampled: it waits. Unknown CPU time counts as not blocked."""
    cpu = info.get("cpu")
    return isinstance(cpu, (int, float)) and cpu < BUSY


BUSY = 0.1  # a thread using a tenth of a core or more runs; one blocked in a wait uses ~0


def _key(frame: dict[str, Any]) -> str:
    return f"{frame['filename']}:{frame['lineno']}"


def _blocking_call(jax_frames: list[dict[str, Any]]) -> str:
    """The JAX call a process waits in: a named wait, or the compiled program it runs."""
    for frame in jax_frames:
        if frame["function"] in _WAITS:
            return f"`{frame['function'].strip('_') or frame['function']}`"
    if any("pxla" in f["filename"] or f["function"] in ("__call__", "call_impl_cache_miss") for f in jax_frames):
        return "running a compiled program"
    return f"`{jax_frames[0]['function']}` of {_short(jax_frames[0]['filename'])}"


def _short(filename: str) -> str:
    parts = Path(filename).parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1 :])
    return Path(filename).name


def user_stack_text(stack: dict[str, Any]) -> str:
    """ "`spin` line 8 <- `main` line 14 <- line 15": the user's frames, innermost first."""
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


def dump_stacks(client: Client, engines: list[int], wait: float) -> dict[int, dict[str, Any]]:
    """Ask each engine for its stack; at most ``wait`` seconds in all. engine -> ``where_it_is``'s dict,
    or {"state": "unknown", "where": why there is none}."""
    directory = stack_dir()
    out: dict[int, dict[str, Any]] = {}
    watched: dict[int, _Watched] = {}
    for engine in engines:
        paths = {p: _size(p) for p in _live_files(directory, engine)}
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
            if size != seen.last_size:
                seen.text = "".join(_tail(p, before) for p, before in seen.paths.items())
                seen.last_size = size
            if INFO_MARK in seen.text and seen.text.endswith("\n"):  # the dump and the samples after it
                out[engine] = where_it_is(seen.text)
                del watched[engine]
        if not watched or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    for engine, seen in watched.items():  # no dump, or one cut short, when the time was up
        found = where_it_is(seen.text) if seen.text else {}
        out[engine] = (
            found
            if found.get("user_frames")
            else _none(
                f"it sent no stack within {wait:g} s (the process died, or the signal did not reach it: "
                "ipyparallel delivers it through the engine's nanny process)"
            )
        )
    return out


def _live_files(directory: Path, engine: int) -> list[Path]:
    """The engine's dump files here, without those of this host's engines that have exited (left behind)."""
    if not directory.is_dir():
        return []
    here = socket.gethostname().replace("-", "_")
    files = []
    for path in directory.glob(f"engine-{engine}-*.txt"):
        _engine, host, pid = path.stem.rsplit("-", 2)
        if host == here and pid.isdigit() and not _alive(int(pid)):
            continue
        files.append(path)
    return files


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


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
