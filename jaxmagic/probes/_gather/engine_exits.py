"""How an ipyparallel engine that left ended: stopped by a signal, killed, or exited with a status.

An engine whose process ended is no longer registered: ``client[i]`` raises ``IndexError``
(``NoEnginesRegistered`` when none is left) and the controller says nothing about why. The
process that started the engines knows: ``ipp.Cluster(...)`` (``client.cluster``) keeps one
launcher per engine process, with the process (its exit status: ``-9`` when killed by SIGKILL) and
the engine's log file, where the engine writes "Completed registration with id N" (which engine it
was) and, on SIGTERM, "received signal 15, stopping" before it exits with status 1 - and, once it
noticed the end, the exit code and the log's text in the engine set. A client that
connected to engines started elsewhere (``ipp.Client()``) has no cluster: the answer is then that
the engine left the controller, without why.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from typing import TYPE_CHECKING, Any

from jaxmagic.report.wording import error_line

if TYPE_CHECKING:
    from ipyparallel import Client

_REGISTERED = re.compile(r"Completed registration with id (\d+)")
_SIGNALLED = re.compile(r"received signal (\d+), stopping")
_LOG_TAIL = 256 * 1024  # bytes of an engine's log read: the registration line and its last lines


def engine_left(error: BaseException) -> bool:
    """ipyparallel's way of saying an engine's process ended: it is no longer listed (``IndexError``), none
    is (``NoEnginesRegistered``), or it died while running the request (``EngineError``)."""
    return isinstance(error, IndexError) or type(error).__name__ in ("NoEnginesRegistered", "EngineError")


class EngineExits:
    """Why engines that left are gone, read from the cluster once, when the first one is met."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._ended: dict[int, str] | None = None

    def why(self, engine: int, error: BaseException) -> str:
        if self._ended is None:
            self._ended = how_engines_ended(self._client)
        how = self._ended.get(engine)
        return f"its engine {how}" if how else f"its engine left the controller ({error_line(error)})"


def how_engines_ended(client: Client) -> dict[int, str]:
    """Engine id -> how its process ended ("was killed by SIGKILL", "was stopped by SIGTERM", "exited with
    status 3"), for the engines of ``client.cluster`` whose process ended; {} without a cluster."""
    cluster = getattr(client, "cluster", None)
    engine_sets = getattr(cluster, "engines", None)
    ended: dict[int, str] = {}
    if not isinstance(engine_sets, dict):
        return ended
    for engine_set in engine_sets.values():
        for status, log in _ended_processes(engine_set):
            engine = _REGISTERED.search(log)
            if engine is not None:
                ended[int(engine.group(1))] = _how(status, log)
    return ended


def _ended_processes(engine_set: Any) -> list[tuple[object, str]]:
    """(exit status, log) of each ended engine process of one engine set. Once the set's waiting thread has
    noticed an end, ipyparallel drops that launcher from ``launchers`` and keeps what it knew elsewhere: the exit
    code in ``stop_data["engines"][identifier]``, the log's text in ``outputs[identifier]`` (the file itself is
    removed). Both places are read: which one holds a process depends on a race with that thread."""
    found: list[tuple[object, str]] = []
    launchers = getattr(engine_set, "launchers", None)
    for launcher in list(launchers.values()) if isinstance(launchers, dict) else ():
        with contextlib.suppress(Exception):  # a launcher of another kind (MPI, SSH): not told
            status = _exit_status(getattr(launcher, "process", None))
            if status is not _RUNNING:
                found.append((status, _log_tail(str(getattr(launcher, "output_file", "") or ""))))
    stopped = getattr(engine_set, "stop_data", None)
    stopped = stopped.get("engines") if isinstance(stopped, dict) else None
    outputs = getattr(engine_set, "outputs", None)
    for identifier, data in list(stopped.items()) if isinstance(stopped, dict) else ():
        output = outputs.get(identifier) if isinstance(outputs, dict) else None
        status = data.get("exit_code") if isinstance(data, dict) else None
        found.append((status, _text_ends(output) if isinstance(output, str) else ""))
    return found


_RUNNING = object()


def _exit_status(process: Any) -> object:  # a launcher's subprocess.Popen or psutil.Process, or None
    """The process's exit status (negative: the signal that killed it), None if unknown, ``_RUNNING``."""
    if process is None:
        return None
    poll = getattr(process, "poll", None)  # subprocess.Popen
    if poll is not None:
        status = poll()
        return _RUNNING if status is None else status
    try:  # psutil.Process, as ipyparallel's local launcher keeps it
        return process.wait(0)
    except Exception as error:
        return _RUNNING if type(error).__name__ == "TimeoutExpired" else None


def _log_tail(path: str) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as log:
            head = log.read(_LOG_TAIL)  # the registration line is near the top
            log.seek(max(0, os.path.getsize(path) - _LOG_TAIL))
            return (head + b"\n" + log.read()).decode("utf-8", "replace")
    except OSError:
        return ""


def _text_ends(text: str) -> str:
    """A kept log's start (the registration line) and end (how it stopped), as ``_log_tail`` reads a file."""
    return text if len(text) <= 2 * _LOG_TAIL else text[:_LOG_TAIL] + "\n" + text[-_LOG_TAIL:]


def _how(status: object, log: str) -> str:

    signalled = _SIGNALLED.findall(log)
    if signalled:
        name = _signal_name(int(signalled[-1]))
        after = f", then exited with status {status}" if isinstance(status, int) and status >= 0 else ""
        return f"was stopped by {name}{after}"
    if isinstance(status, int) and status < 0:
        return f"was killed by {_signal_name(-status)}"
    if isinstance(status, int):
        return f"exited with status {status}"
    return "ended (its exit status is unknown here)"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
