"""Bringing one report from every process together: from ipyparallel engines, or through jax.distributed.

Each process turns its report into a ``ProcessEntry`` (the report's ``to_dict()``
data, its headline, the process index and host), so nothing but plain data crosses
processes. ``merge`` sorts the entries by process and lists the differences
(``gather.compare``).

- **Engines** (``%jax_gather NAME``): ``engine_entry(NAME)`` runs on every engine of
  an ipyparallel view (``view.apply_async``); each engine answers on its own, so an
  engine that is still busy (a hang) or died is named after the timeout while the
  others' reports are merged. A busy engine is then asked for its Python stack
  (``gather.stacks``: faulthandler, on a signal sent through ipyparallel), read for
  at most ``STACK_WAIT`` seconds more: where it is, and what the others wait in.
- **A script** on every host (``jaxmagic.gather(report)``): each process puts its entry
  in jax.distributed's key-value store and counts itself in; process 0 polls the
  count until every process is in or the timeout is up, then reads every entry in one
  request (``key_value_dir_get``) - no collective, so a stuck process cannot hang the
  others, and the requests process 0 makes do not grow with the number of processes
  (docs/DESIGN.md: what 4,096 processes cost).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from typing import TYPE_CHECKING, Any

from jaxmagic._jax import distributed_store
from jaxmagic.probes._gather.compare import differences
from jaxmagic.probes._gather.engine_exits import EngineExits, engine_left
from jaxmagic.probes._gather.report import NO_REPORT, STOPPED, GatherReport, ProcessEntry
from jaxmagic.probes._gather.stacks import dump_stacks
from jaxmagic.probes._gather.values import expression_failures, values_from_engines, values_through_store
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import running_shell

if TYPE_CHECKING:
    from ipyparallel import Client, DirectView


def entry_of(report: object, *, process: int | None, engine: int | None = None, name: str = "") -> ProcessEntry:
    """This process's entry for ``report`` (any jaxmagic report, or None when there is none; ``name``: what
    it was looked up by, for the wording)."""
    host = socket.gethostname()
    if report is None or not hasattr(report, "to_dict"):
        if report is None:
            what = f"`{name}` is not bound here" if name else "nothing was given"
        else:
            what = f"{f'`{name}` is ' if name else ''}a {type(report).__name__}, not a jaxmagic report"
        return ProcessEntry(
            process, engine, host, headline=f"no report here: {what}", status=NO_REPORT, error=f"no report: {what}"
        )
    try:
        data = report.to_dict()
    except Exception as error:  # a report that cannot describe itself is named, not fatal
        return ProcessEntry(process, engine, host, status="failed", error=f"its report failed: {error_line(error)}")
    return ProcessEntry(
        process,
        engine,
        host,
        headline=str(data.get("summary", "")),
        status=str(data.get("status", "")),
        kind=str(data.get("kind", "")),
        report=data,
    )


def merge(entries: list[ProcessEntry], name: str = "", notes: list[str] | None = None) -> GatherReport:
    ordered = sorted(entries, key=lambda e: (e.process is None, e.process or 0, e.engine or 0))
    report = GatherReport(name=name, processes=ordered, findings=differences(ordered), notes=list(notes or []))
    kinds = sorted({e.kind for e in ordered if e.kind})
    if len(kinds) > 1:
        report.notes.append(
            f"The processes sent reports of different magics ({', '.join(kinds)}): compared where they overlap."
        )
    return report


# -- ipyparallel engines ------------------------------------------------------------------


def engine_entry(name: str) -> dict[str, Any]:
    """Run on an engine: the entry of the report bound to ``name`` in the engine's namespace."""
    shell = running_shell()  # an engine is an IPython kernel: its namespace holds the report
    namespace = shell.user_ns if shell is not None else {}
    process = distributed_store.process_index_and_count()[0] if distributed_store.initialized() else None
    return dataclasses.asdict(entry_of(namespace.get(name), process=process, name=name))


STACK_WAIT = 1.0  # seconds after the timeout for late engines' stacks (a dump takes milliseconds)

# engine -> its process index, from earlier answers: a busy engine cannot say it (keyed by the client's session)
_process_of_engine: dict[tuple[str, int], int] = {}


def gather_from_engines(view: DirectView, name: str, timeout: float, values: str = "") -> GatherReport:
    """Ask every engine of ``view`` for its report ``name``; wait at most ``timeout`` seconds for the reports,
    then at most ``min(timeout, STACK_WAIT)`` more for the stacks of engines that did not answer.

    With ``values`` (an expression), also compare its pytree's leaves across engines (``values.py``);
    without ``name``, only that.
    """
    client = view.client
    targets = list(view.targets) if isinstance(view.targets, (list, tuple, range)) else list(client.ids)
    if values:
        return _with_values(view, name, timeout, values, client, targets)
    pending = {}
    for engine in targets:
        try:
            pending[engine] = client[engine].apply_async(engine_entry, name)
        except Exception as error:  # the engine is gone (its process died): named below
            pending[engine] = error
    deadline = time.monotonic() + timeout
    entries = []
    exits = EngineExits(client)
    for engine, result in pending.items():
        try:
            if isinstance(result, Exception):
                raise result
            data = result.get(timeout=max(0.0, deadline - time.monotonic()))
            entry = ProcessEntry(**data)
            entry.engine = engine
        except Exception as error:  # busy past the deadline (a hang), died, or raised
            late = type(error).__name__ == "TimeoutError"
            why = f"did not answer within {timeout:g} s (still running its cell?)" if late else error_line(error)
            status = "missing" if late else "failed"
            if engine_left(error):
                why, status = exits.why(engine, error), STOPPED
            process = _process_of_engine.get((_session_of(client), engine))
            entry = ProcessEntry(process, engine, status=status, headline=why, error=why)
        if entry.process is not None:
            _process_of_engine[(_session_of(client), engine)] = entry.process
        entries.append(entry)
    notes = [f"Gathered `{name}` from {len(targets)} engine(s) of the ipyparallel view."]
    busy = [e for e in entries if e.status == "missing"]
    if busy:
        wait = min(timeout, STACK_WAIT)
        stacks = dump_stacks(client, [e.engine for e in busy if e.engine is not None], wait)
        for entry in busy:
            entry.stack = stacks.get(entry.engine, {}) if entry.engine is not None else {}
        notes.append(
            f"{len(busy)} engine(s) did not answer within {timeout:g} s: each was sent a signal through "
            f"ipyparallel for its Python stack, read for at most {wait:g} s more."
        )
    return merge(entries, name, notes)


def _session_of(client: Client) -> str:
    return str(getattr(getattr(client, "session", None), "session", "") or id(client))


def _with_values(
    view: DirectView, name: str, timeout: float, expression: str, client: Client, targets: list[int]
) -> GatherReport:
    started = time.monotonic()
    entries, finding, notes = values_from_engines(client, targets, expression, timeout)
    if name:
        # --timeout bounds both rounds: an engine busy in the first is still busy, and named again
        left = max(1.0, timeout - (time.monotonic() - started))
        report = gather_from_engines(view, name, left)
        report.notes += [f"{e.name}: `{expression}` - {e.error}" for e in entries if e.error]
    else:
        report = merge(entries, expression)
    report.findings[:0] = expression_failures(entries, expression)  # first: why nothing was compared there
    if finding is not None:
        report.findings.append(finding)
    report.notes += notes
    return report


# -- a script on every process --------------------------------------------------------------

_rounds = {"n": 0}  # every process calls gather the same number of times: the n-th calls meet


def gather(
    report: object, timeout: float = 60.0, values: object = None, values_name: str = "values"
) -> GatherReport | None:
    """Bring ``report`` from every process of a ``jax.distributed`` job to process 0, merged.

    Returns the merged report on process 0 and None on the others. Processes whose
    report did not arrive within ``timeout`` seconds are named in it. ``values`` (a
    pytree that should be the same everywhere) is compared leaf by leaf (``values.py``);
    ``report`` may then be None.
    """
    if not distributed_store.initialized():
        return merge([entry_of(report, process=0)], notes=["jax.distributed is not initialised: one process only."])
    process, count = distributed_store.process_index_and_count()
    _rounds["n"] += 1
    prefix = f"jaxmagic/gather/{_rounds['n']}/"
    entry = entry_of(report, process=process)
    if report is None and values is not None:  # only the values are compared: this process answered
        entry = ProcessEntry(process, host=entry.host, headline=f"`{values_name}`", status="ok", kind="values")
    distributed_store.put(f"{prefix}entries/{process}", json.dumps(dataclasses.asdict(entry)).encode())
    distributed_store.count_up(prefix + "count")
    compared = (
        values_through_store(values, values_name, prefix, process, count, timeout) if values is not None else None
    )
    if process != 0:
        return None
    arrived = _wait_for_count(prefix + "count", count, time.monotonic() + timeout)
    sent = distributed_store.all_under(prefix + "entries/")  # one request for every process's entry
    distributed_store.delete(prefix)
    entries = []
    for other in range(count):
        data = sent.get(f"{prefix}entries/{other}")
        if data is None:
            why = f"sent no report within {timeout:g} s"
            entries.append(ProcessEntry(other, status="missing", headline=why, error=why))
        else:
            entries.append(ProcessEntry(**json.loads(data)))
    notes = [f"Gathered through jax.distributed's key-value store from {count} process(es)."]
    if arrived < count:
        notes.append(f"{count - arrived} process(es) had not sent their report when {timeout:g} s were up.")
    merged = merge(entries, entry.kind if report is not None else values_name, notes)
    if compared is not None:
        finding, value_notes = compared
        merged.findings += [finding] if finding is not None else []
        merged.notes += value_notes
    return merged


def _wait_for_count(key: str, count: int, deadline: float) -> int:
    """Poll the arrival counter until ``count`` processes sent their entry or the deadline passed: one small
    request a poll (every 5 ms at first, then every 100 ms), whatever the number of processes."""
    pause = 0.005
    while True:
        arrived = distributed_store.count_of(key)
        if arrived >= count or time.monotonic() >= deadline:
            return arrived
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(0.1, pause * 2)
