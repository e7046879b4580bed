"""Values that drift: a pytree that should be the same on every process, compared leaf by leaf.

Replicated parameters or an optimizer's step counter that silently differ between
processes train different models. ``%jax_gather --values EXPR`` evaluates ``EXPR``
once on every engine and compares in two rounds, so only what differs travels:

1. each engine digests every leaf (its path as ``jax.tree_util.keystr``, shape,
   dtype, a hash of its bytes) and keeps the leaves until round 2;
2. the leaves whose digests differ (at most ``MAX_FETCHED``) are fetched from every
   engine, and the largest difference of each from the most common value is
   measured; every engine then forgets the leaves it kept.

What makes processes diverge is said as possibilities, unless the values show it: an
integer leaf that differs is a count (steps) that differs; differences at rounding
size come from the order of arithmetic, larger ones from other inputs.
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxmagic._jax import array_shards, distributed_store
from jaxmagic.probes._gather.engine_exits import EngineExits, engine_left
from jaxmagic.probes._gather.ranges import grouped
from jaxmagic.probes._gather.report import NO_REPORT, STOPPED, GatherFinding, ProcessEntry
from jaxmagic.report import JsonDict
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import running_shell

if TYPE_CHECKING:
    from ipyparallel import AsyncResult, Client

MAX_FETCHED = 16  # differing leaves whose values are fetched to measure the difference
ROUNDING = 1e-5  # a largest difference below this, relative to the values, is rounding

MAX_KEPT = 4  # trees an engine keeps between the rounds (one per comparison under way)
_KEPT: dict[str, dict[str, Any]] = {}  # on an engine: token -> {path: leaf}, between the two rounds


# -- on every engine ---------------------------------------------------------------------


def host_value(leaf: object) -> np.ndarray:
    """A leaf's value on this process: all of it, or this process's first shard of a global array."""
    if hasattr(leaf, "addressable_shards") and not getattr(leaf, "is_fully_addressable", True):
        with array_shards.addressable_shards(leaf) as shards:  # never the leaf's own: jaxlib keeps what it makes
            return np.asarray(shards[0].data)  # replicated: this process's copy
    return np.asarray(leaf)


def split_across_processes(leaf: object) -> bool:
    """A global array whose processes hold different parts of it: their copies are not meant to be equal."""
    if getattr(leaf, "is_fully_addressable", True):
        return False
    return not getattr(getattr(leaf, "sharding", None), "is_fully_replicated", False)


def leaf_digest(path: str, leaf: Any) -> JsonDict:  # a pytree leaf: an array (a global one too), a number, anything
    if split_across_processes(leaf):  # named in the notes, never compared
        return {"path": path, "shape": list(leaf.shape), "dtype": str(leaf.dtype), "digest": "", "split": True}
    value = host_value(leaf)
    digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=8)
    digest.update(f"{value.dtype}{value.shape}".encode())
    return {"path": path, "shape": list(value.shape), "dtype": str(value.dtype), "digest": digest.hexdigest()}


def leaves_of(tree: object) -> list[tuple[str, Any]]:
    """(keystr path, leaf) of every leaf of a pytree."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def digests_here(expression: str, token: str) -> JsonDict:
    """Run on an engine: evaluate ``expression`` (once) in its namespace and digest every leaf."""
    shell = running_shell()
    namespace = shell.user_ns if shell is not None else {}
    process = distributed_store.process_index_and_count()[0] if distributed_store.initialized() else None
    answer: JsonDict = {"process": process, "host": socket.gethostname(), "leaves": [], "error": ""}
    try:
        leaves = leaves_of(eval(expression, namespace))  # the user's expression, as the magic line says
        answer["leaves"] = [leaf_digest(path, leaf) for path, leaf in leaves]
    except Exception as error:  # named in the merged report, as an engine that failed
        answer["error"] = f"`{expression}` failed here: {error_line(error)}"
        return answer
    while len(_KEPT) >= MAX_KEPT:  # trees of comparisons whose second round never came (a client gone)
        _KEPT.pop(next(iter(_KEPT)))
    _KEPT[token] = dict(leaves)
    return answer


def values_here(token: str, paths: list[str]) -> dict[str, np.ndarray]:
    """Run on an engine: the values of ``paths`` kept in round 1; then forget them all."""
    kept = _KEPT.pop(token, {})
    return {path: host_value(kept[path]) for path in paths if path in kept}


# -- comparing -----------------------------------------------------------------------------


def differing_leaves(rows: list[tuple[ProcessEntry, list[JsonDict]]]) -> dict[str, list[ProcessEntry]]:
    """path -> the processes whose leaf differs from the most common one (all, when none is most common).

    A leaf missing on some processes (another tree structure) counts as differing there.
    """
    by_path: dict[str, dict[int, str]] = {}
    for index, (_e, leaves) in enumerate(rows):
        for leaf in leaves:
            if not leaf.get("split"):
                by_path.setdefault(leaf["path"], {})[index] = leaf["digest"]
    out = {}
    for path, digests in by_path.items():
        keys = [digests.get(index, "missing") for index in range(len(rows))]
        if len(set(keys)) < 2:
            continue
        common = max(set(keys), key=keys.count)
        if keys.count(common) * 2 > len(keys):
            out[path] = [rows[i][0] for i, key in enumerate(keys) if key != common]
        else:
            out[path] = [e for e, _leaves in rows]
    return out


def largest_difference(reference: np.ndarray, other: np.ndarray) -> JsonDict:
    """{difference, relative, index, ours, theirs, differing} of two values of one leaf (same shape)."""
    if reference.shape != other.shape:
        return {"shape": True}
    ours, theirs = reference.astype(np.float64), other.astype(np.float64)
    gaps = np.abs(ours - theirs)
    gaps = np.where(np.isnan(ours) & np.isnan(theirs), 0.0, np.where(np.isnan(gaps), np.inf, gaps))
    at = np.unravel_index(int(np.argmax(gaps)), gaps.shape) if gaps.size else ()
    scale = float(np.max(np.abs(ours[np.isfinite(ours)]), initial=0.0))
    largest = float(gaps[at]) if gaps.size else 0.0
    return {
        "difference": largest,
        "relative": largest / scale if scale else float("inf"),
        "index": [int(i) for i in at],
        "ours": reference[at].item() if gaps.size else None,
        "theirs": other[at].item() if gaps.size else None,
        "differing": int(np.count_nonzero(gaps)),
        "integer": bool(np.issubdtype(reference.dtype, np.integer) or reference.dtype == np.bool_),
    }


def value_finding(
    expression: str,
    rows: list[tuple[ProcessEntry, list[JsonDict]]],
    differing: dict[str, list[ProcessEntry]],
    values: dict[int, dict[str, np.ndarray]],
) -> GatherFinding | None:
    """The finding for the leaves that differ; ``values`` holds fetched values by row index."""
    if not differing:
        return None
    total = len({leaf["path"] for _e, leaves in rows for leaf in leaves})
    index_of = {id(e): i for i, (e, _l) in enumerate(rows)}
    details, measured = [], []
    for path, odd in differing.items():
        odd_ids = {id(e) for e in odd}
        reference = next((i for i, (e, _l) in enumerate(rows) if id(e) not in odd_ids), 0)
        ours = values.get(reference, {}).get(path)
        for entry in odd:
            if index_of[id(entry)] == reference:
                continue
            theirs = values.get(index_of[id(entry)], {}).get(path)
            name = f"{expression}{path}"
            if ours is None or theirs is None:
                shapes = _shape_text(rows, reference, path), _shape_text(rows, index_of[id(entry)], path)
                why = (
                    f"{shapes[1]} where {rows[reference][0].name} has {shapes[0]}"
                    if shapes[0] != shapes[1]
                    else "its bytes differ (values not fetched)"
                )
                details.append(f"`{name}` on {entry.name}: {why}")
                continue
            gap = largest_difference(ours, theirs)
            if gap.get("shape"):
                details.append(f"`{name}` on {entry.name}: shape {list(theirs.shape)} where it is {list(ours.shape)}")
                continue
            measured.append((gap, name, entry))
            where = f" at {gap['index']}" if gap["index"] else ""
            details.append(
                f"`{name}` on {entry.name}: largest difference {_gap(gap['difference'])}{where} "
                f"({_number(gap['theirs'])} where {rows[reference][0].name} has {_number(gap['ours'])}; "
                f"{gap['differing']} of {theirs.size} element(s) differ)"
            )
    processes = sorted({e.process if e.process is not None else -1 for odd in differing.values() for e in odd})
    names = sorted({e.name for odd in differing.values() for e in odd})
    largest = max(measured, key=lambda m: m[0]["difference"], default=None)
    which = "its only leaf differs" if total == 1 else f"{len(differing)} of {total} leaves differ"
    summary = f"`{expression}`: {which} on {', '.join(names)}"
    if largest is not None:
        summary += f" - largest difference {_gap(largest[0]['difference'])} in `{largest[1]}`"
    return GatherFinding(
        area="values",
        processes=[None if p == -1 else p for p in processes],
        function="",
        details=details,
        summary=summary,
        fix=_why_they_drift([m[0] for m in measured]),
    )


def _gap(difference: float) -> str:
    return f"{difference:.3g}" if np.isfinite(difference) else "NaN or inf on one side"


def _number(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _shape_text(rows: list[tuple[ProcessEntry, list[JsonDict]]], index: int, path: str) -> str:
    leaf = next((leaf for leaf in rows[index][1] if leaf["path"] == path), None)
    return "no such leaf" if leaf is None else f"{leaf['dtype']}{leaf['shape']}"


def _why_they_drift(gaps: list[JsonDict]) -> str:
    """What makes processes diverge: what the measured differences show, the rest as possibilities."""
    said = []
    if any(g["integer"] for g in gaps):
        said.append(
            "An integer leaf differs (a step counter, a count): the processes did not run the same number of "
            "updates - possibly one skipped or repeated a step (a data loader of another length, an error "
            "caught on one process, a condition on jax.process_index())."
        )
    broken = [g for g in gaps if not np.isfinite(g["difference"])]
    if broken:
        said.append(
            "A NaN or inf on some processes only: their values went non-finite (see the NaN finding, or run "
            "%%jax_nans on those processes), and every step after spreads it."
        )
    floats = [g for g in gaps if not g["integer"] and np.isfinite(g["difference"])]
    if floats and all(g["relative"] <= ROUNDING for g in floats):
        said.append(
            "The floating-point differences are at rounding size: the same arithmetic in another order - "
            "possibly a reduction whose order depends on the host (another device order or count in a psum, "
            "a non-deterministic GPU reduction, other XLA flags); such differences grow as training goes on."
        )
    elif floats:
        said.append(
            "The differences are larger than rounding: the processes computed on different inputs - possibly a "
            "per-process random key (a key folded with jax.process_index() used for an update that should be "
            "the same everywhere), data read in another order, gradients not averaged across processes, or "
            "parameters loaded or initialised on one host only."
        )
    if not gaps:
        said.append(
            "Possible causes: a per-process random key, a host-dependent reduction order, data read in another "
            "order, a step skipped on some processes."
        )
    said.append(
        "Compare after every step to find the first where they part; "
        "jax.experimental.multihost_utils.broadcast_one_to_all puts every process back on process 0's values."
    )
    return " ".join(said)


# -- from ipyparallel engines ----------------------------------------------------------------


def values_from_engines(
    client: Client, targets: list[int], expression: str, timeout: float
) -> tuple[list[ProcessEntry], GatherFinding | None, list[str]]:
    """(one entry per engine, the values finding or None, notes): ``expression`` compared across engines."""
    token = uuid.uuid4().hex
    deadline = time.monotonic() + timeout
    asked = {engine: _ask(client, engine, digests_here, expression, f"{token}/{engine}") for engine in targets}
    rows: list[tuple[ProcessEntry, list[JsonDict]]] = []
    entries = []
    exits = EngineExits(client)
    for engine, result in asked.items():
        answer, why, error = _answer(result, deadline, timeout)
        if answer is None or answer.get("error"):
            why = why or answer["error"]
            process = answer.get("process") if answer else None
            late = "did not answer" in why
            status = "missing" if late else NO_REPORT if answer else "failed"  # the expression failed there
            if error is not None and engine_left(error):
                why, status = exits.why(engine, error), STOPPED
            kind = "values" if status == NO_REPORT else ""  # the expression raised: ``expression_failures``
            entries.append(ProcessEntry(process, engine, status=status, headline=why, error=why, kind=kind))
            continue
        leaves = answer["leaves"]
        entry = ProcessEntry(
            answer["process"],
            engine,
            answer["host"],
            headline=f"{len(leaves)} leaf(s) of `{expression}`",
            status="ok",
            kind="values",
        )
        entries.append(entry)
        rows.append((entry, leaves))
    rows.sort(key=lambda row: (row[0].process is None, row[0].process or 0, row[0].engine or 0))
    differing = differing_leaves(rows) if len(rows) > 1 else {}
    fetch = sorted(differing)[:MAX_FETCHED]
    # every engine is asked (for no leaf when nothing differs), so each forgets what it kept
    fetched = {
        i: _ask(client, int(e.engine or 0), values_here, f"{token}/{e.engine}", fetch) for i, (e, _l) in enumerate(rows)
    }
    values = {}
    for index, result in fetched.items():
        answer, _why, _error = _answer(result, deadline, timeout)
        if answer is not None:
            values[index] = answer
    notes = [
        f"Compared `{expression}` leaf by leaf on {len(rows)} engine(s): digests of every leaf, then the "
        f"values of the {len(fetch)} that differ"
        + (f" (the first {MAX_FETCHED})" if len(differing) > len(fetch) else "")
        + ". The expression was evaluated once on each engine."
    ]
    if len(rows) < 2:
        notes.append(f"Fewer than two engines gave `{expression}`: nothing to compare.")
    notes += split_note(expression, rows)
    return entries, value_finding(expression, rows, {p: differing[p] for p in sorted(differing)}, values), notes


def expression_failures(entries: list[ProcessEntry], expression: str) -> list[GatherFinding]:
    """The finding for the engines on which ``--values EXPR`` raised (they answered: no hang), with each one's
    error; none when it raised nowhere. Whatever else was gathered (``NAME``'s reports agreeing), the values were
    not compared there - never "agree"."""
    failed = [e for e in entries if e.status == NO_REPORT and e.kind == "values"]
    if not failed:
        return []
    where = "every process" if len(failed) == len(entries) else f"{len(failed)} of {len(entries)} process(es)"
    errors = grouped([(e.process, e.name, e.error.removeprefix(f"`{expression}` failed here: ")) for e in failed])
    return [
        GatherFinding(
            area="values",
            processes=[e.process if e.process is not None else e.engine for e in failed],
            summary=f"`{expression}` raised on {where}, so its values were not compared there: " + "; ".join(errors),
            details=[f"{e.name}: {e.error}" for e in failed],
            fix="Give --values an expression each engine can evaluate in its own namespace (the name bound "
            "there, e.g. by a %%px cell), then gather again.",
        )
    ]


def split_note(expression: str, rows: list[tuple[ProcessEntry, list[JsonDict]]]) -> list[str]:
    split = sorted({leaf["path"] for _e, leaves in rows for leaf in leaves if leaf.get("split")})
    if not split:
        return []
    return [
        f"Not compared: {len(split)} leaf(s) of `{expression}` split across processes (each holds other rows): "
        + ", ".join(f"`{expression}{path}`" for path in split[:5])
        + (" ..." if len(split) > 5 else "")
    ]


def _ask(client: Client, engine: int, function: Callable[..., object], *args: object) -> AsyncResult | Exception:
    try:
        return client[engine].apply_async(function, *args)
    except Exception as error:  # the engine is gone: named as failed
        return error


def _answer(result: AsyncResult | Exception, deadline: float, timeout: float) -> tuple[Any, str, BaseException | None]:
    """(the engine's answer, or None and why not, and the error that said so)."""
    try:
        if isinstance(result, Exception):
            raise result
        return result.get(timeout=max(0.0, deadline - time.monotonic())), "", None
    except Exception as error:
        if type(error).__name__ == "TimeoutError":
            return None, f"did not answer within {timeout:g} s (still running its cell?)", error
        return None, error_line(error), error


# -- a script on every process, through jax.distributed's key-value store -------------------------


def values_through_store(
    tree: object, name: str, prefix: str, process: int, count: int, timeout: float
) -> tuple[GatherFinding | None, list[str]] | None:
    """Compare ``tree`` across the job's processes; on process 0 (finding or None, notes), None elsewhere.

    Every process puts its digests; process 0 names the leaves that differ under ``ask``;
    every process puts the values of those leaves (none: an empty answer); no collective,
    so a process that does not answer is waited for ``timeout`` seconds, then left out.
    """
    deadline = time.monotonic() + timeout
    leaves = leaves_of(tree)
    digests = [leaf_digest(path, leaf) for path, leaf in leaves]
    distributed_store.put(f"{prefix}values/digests/{process}", json.dumps(digests).encode())
    if process != 0:
        asked = distributed_store.wait_for(f"{prefix}values/ask", timeout)
        paths = json.loads(asked) if asked is not None else []
        kept = dict(leaves)
        distributed_store.put(f"{prefix}values/data/{process}", _packed({p: host_value(kept[p]) for p in paths}))
        return None
    rows: list[tuple[ProcessEntry, list[JsonDict]]] = []
    for other in range(count):
        data = distributed_store.wait_for(f"{prefix}values/digests/{other}", max(0.001, deadline - time.monotonic()))
        if data is not None:
            rows.append((ProcessEntry(other), json.loads(data)))
            distributed_store.delete(f"{prefix}values/digests/{other}")
    differing = differing_leaves(rows) if len(rows) > 1 else {}
    fetch = sorted(differing)[:MAX_FETCHED]
    distributed_store.put(f"{prefix}values/ask", json.dumps(fetch).encode())
    values: dict[int, dict[str, np.ndarray]] = {}
    for index, (entry, _digests) in enumerate(rows):
        if entry.process == process:
            kept = dict(leaves)
            values[index] = {p: host_value(kept[p]) for p in fetch}
            continue
        data = distributed_store.wait_for(
            f"{prefix}values/data/{entry.process}", max(0.001, deadline - time.monotonic())
        )
        if data is not None:
            values[index] = _unpacked(data)
            distributed_store.delete(f"{prefix}values/data/{entry.process}")
    notes = [
        f"Compared `{name}` leaf by leaf on {len(rows)} of {count} process(es) through the key-value store: "
        f"digests of every leaf, then the values of the {len(fetch)} that differ."
    ] + split_note(name, rows)
    return value_finding(name, rows, {p: differing[p] for p in sorted(differing)}, values), notes


def _packed(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    named: dict[str, Any] = {f"leaf{i}": value for i, value in enumerate(arrays.values())}
    np.savez(buffer, paths=np.array(list(arrays)), **named)
    return buffer.getvalue()


def _unpacked(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
        paths = [str(p) for p in loaded["paths"]]
        return {path: loaded[f"leaf{i}"] for i, path in enumerate(paths)}
