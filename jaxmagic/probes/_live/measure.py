"""The live-array probe's measuring: snapshot ``jax.live_arrays()``, group the arrays, name their holders.

See ``jaxmagic.probes.live`` for what is looked at; the report is
``jaxmagic.probes._live.report``.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import operator
import os
import tracemalloc
import weakref
from collections.abc import Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import jax

from jaxmagic._jax import array_shards, jaxpr_parts, runtime
from jaxmagic.probes._live.holders.search import (
    KIND_NAME,
    KIND_OUTPUT,
    KIND_TRACEBACK,
    HolderSearch,
    find_holders,
    namespace_roots,
    traceback_roots,
)
from jaxmagic.probes._live.kept_alone import kept_alone
from jaxmagic.probes._live.report import (
    KEEP_ON_HOST,
    KIND_ELSEWHERE,
    KIND_JIT_CACHE,
    ContainerFinding,
    DeviceMemory,
    LiveGroup,
    LiveReport,
    accumulates_from,
)
from jaxmagic.probes._support.attribution import of_allocation
from jaxmagic.report.wording import error_line

if TYPE_CHECKING:
    import numpy as np

PROVENANCE_GROUPS = 20  # groups (largest first) whose making line is looked up when tracemalloc traces

# -- the probe ----------------------------------------------------------------


def live(
    *, namespace: dict[str, object] | None = None, top: int | None = None, profile: str | None = None
) -> LiveReport:
    """Every live JAX array, grouped, with the names that hold each group.

    ``namespace``: the variables to search for holders (a notebook's user
    namespace; IPython's ``Out``/``_`` in it are reported as the output cache).
    ``top``: how many groups the rendered report shows (the report keeps all).
    ``profile``: also save ``jax.profiler.save_device_memory_profile`` there.
    """
    report = LiveReport(mode="snapshot", top=top)
    if not runtime.backend_started():
        # No backend, no arrays: say so rather than start one (XLA_FLAGS may still be on their way).
        report.backend_started = False
        return report
    gc.collect()  # arrays in unreachable cycles are garbage, not live
    arrays = jax.live_arrays()
    try:
        _describe(report, arrays, namespace, excluded=frozenset())
    finally:
        del arrays
    report.devices = _device_memory()
    if profile:
        _save_profile(report, profile)
    return report


@contextlib.contextmanager
def live_diff(
    *, namespace: dict[str, object] | None = None, top: int | None = None, profile: str | None = None
) -> Iterator[LiveReport]:
    """Snapshot the live arrays before and after the block; report the ones it created that are still alive.

    The block's own result, if it lands in IPython's output cache (``Out[n]``,
    ``_``), is not counted as left behind. The block's exception propagates
    unchanged; the report is filled in before it does.
    """
    report = LiveReport(mode="cell", top=top)
    gc.collect()
    arrays = jax.live_arrays() if runtime.backend_started() else []  # no backend yet: nothing alive before
    before = {id(a): weakref.ref(a) for a in arrays}
    report.before_arrays = len(arrays)
    report.before_bytes = _nbytes(arrays)
    before_sizes = {id(a): _nbytes_one(a) for a in arrays}
    del arrays
    out_cache = namespace.get("Out") if namespace else None
    outputs_before = set(out_cache) if isinstance(out_cache, dict) else set()
    try:
        yield report
    except BaseException as error:
        report.other_error = error_line(error)
        raise
    finally:
        # Not a `return` inside `finally`: that would swallow the block's exception.
        _finish_cell_report(report, before, before_sizes, namespace, out_cache, outputs_before, profile)


def _finish_cell_report(
    report: LiveReport,
    before: dict[int, weakref.ref[jax.Array]],
    before_sizes: dict[int, int],
    namespace: dict[str, Any] | None,
    out_cache: object,
    outputs_before: set[object],
    profile: str | None,
) -> None:
    """Fill in what the block left alive (called on the way out of ``live(mode="cell")``)."""
    gc.collect()
    if not runtime.backend_started():  # the block used no JAX array at all
        report.backend_started = False
        return
    arrays = jax.live_arrays()
    try:
        alive_before = {id(a) for a in arrays if (ref := before.get(id(a))) is not None and ref() is a}
        report.freed_arrays = len(before) - len(alive_before)
        report.freed_bytes = sum(size for key, size in before_sizes.items() if key not in alive_before)
        created = [a for a in arrays if id(a) not in alive_before]
        excluded = _result_arrays(report, created, out_cache, outputs_before)
        _describe(report, arrays, namespace, excluded=alive_before | excluded, created=created)
        del created
    finally:
        del arrays
        before.clear()
    report.devices = _device_memory()
    if profile:
        _save_profile(report, profile)


def _result_arrays(
    report: LiveReport, created: list[jax.Array], out_cache: object, outputs_before: set[object]
) -> frozenset[int]:
    """Ids of the created arrays reachable from the output-cache entries the block added (its result)."""
    if not isinstance(out_cache, dict):
        return frozenset()
    new_keys = [k for k in out_cache if k not in outputs_before]
    if not new_keys or not created:
        return frozenset()
    group_of = {id(a): 0 for a in created}
    roots = [(f"Out[{k}]", out_cache[k], KIND_OUTPUT) for k in new_keys]
    search = find_holders(group_of, roots)
    ids = frozenset(search.best_kind)
    report.result_label = ", ".join(f"Out[{k}]" for k in new_keys)
    report.result_arrays = len(ids)
    report.result_bytes = sum(_nbytes_one(a) for a in created if id(a) in ids)
    return ids


def _describe(
    report: LiveReport,
    arrays: list[jax.Array],
    namespace: dict[str, object] | None,
    excluded: frozenset[int] | set[int],
    created: list[jax.Array] | None = None,
) -> None:
    """Fill ``report`` with the totals of ``arrays`` and the groups of ``created`` (default: all) minus ``excluded``."""
    report.total_arrays = len(arrays)
    subject = arrays if created is None else created
    if excluded:
        subject = [a for a in subject if id(a) not in excluded]
    one_device = jax.device_count() == 1 and jax.process_count() == 1
    group_of, groups, group_index, sample_position = _grouped(subject, one_device)
    report.total_bytes = sum(g.total_bytes for g in groups) if created is None else _nbytes(arrays)

    roots = namespace_roots(namespace) + traceback_roots()
    # the holder search only hashes a group's key (here the arrays' aval); holders/search types it int
    search = find_holders(group_of, roots)  # type: ignore[arg-type]
    del roots
    report.searched, report.search_truncated = search.visited, search.truncated
    best = search.best_kind
    unheld = group_of.keys() - best.keys() if len(best) < len(group_of) else set()
    jit_held = _jit_cache_constants(subject, unheld, group_of) if unheld else {}
    _count_holder_kinds(groups, group_index, search, {target: group_of[target] for target in unheld}, jit_held)
    _name_holders(groups, search, group_index)
    ours = [arrays, subject] + ([created] if created is not None else [])
    report.kept_alone = kept_alone(search, groups, group_index, subject, ours)
    # a list that alone keeps its arrays is told with that checked evidence, not twice
    alone = {k.container for k in report.kept_alone}
    report.containers = [
        c
        for c in _container_findings(search, groups, group_index, subject, cell=created is not None)
        if c.container not in alone
    ]
    report.allocations_recorded = tracemalloc.is_tracing()
    if report.allocations_recorded:
        # The line that made one array of each of the largest groups: one traceback lookup per group.
        largest = sorted(range(len(groups)), key=lambda i: -groups[i].total_bytes)[:PROVENANCE_GROUPS]
        for i in largest:
            groups[i].provenance = of_allocation(subject[sample_position[i]])
    del subject
    groups.sort(key=lambda g: (-g.total_bytes, -g.count))
    report.groups = groups


def _grouped(
    subject: list[jax.Array], one_device: bool
) -> tuple[dict[int, Hashable], list[LiveGroup], dict[Hashable, int], list[int]]:
    """The arrays grouped by shape, dtype and placement: (array id -> its tag, the groups with their counts,
    tag -> index of its group, per group the position in ``subject`` of one of its arrays)."""
    # Grouping 100,000 arrays is the hot loop. JAX shares one aval object among arrays of
    # the same shape and dtype, and interns it (hashed and compared by identity, in C), so
    # the aval itself is a cheap first key: no int per array; counting and the id -> key
    # map then run as C loops. Keys that turn out to mean the same (shape, dtype,
    # placement) are merged below.
    group_of: dict[int, Hashable]
    if one_device:
        group_of = dict(zip(map(id, subject), map(operator.attrgetter("aval"), subject)))
    else:
        group_of = dict(zip(map(id, subject), [(id(a.aval), a.sharding) for a in subject]))
    counts = collections.Counter(group_of.values())
    first_position: dict[Hashable, int] = {}
    for position, tag in enumerate(group_of.values()):  # stops once every key has its sample, usually at once
        if tag not in first_position:
            first_position[tag] = position
            if len(first_position) == len(counts):
                break
    groups: list[LiveGroup] = []
    merged: dict[tuple[tuple[int, ...], str, str], int] = {}
    group_index: dict[Hashable, int] = {}
    sample_position: list[int] = []  # per group: the position in ``subject`` of one of its arrays
    for tag, position in first_position.items():
        sample = subject[position]
        key = (tuple(sample.shape), str(sample.dtype), _placement(sample))
        index = merged.get(key)
        if index is None:
            index = merged[key] = len(groups)
            sample_position.append(position)
            groups.append(
                LiveGroup(
                    shape=key[0],
                    dtype=key[1],
                    placement=key[2],
                    bytes_each=_nbytes_one(sample),
                    device_bytes_each=_device_bytes(sample),
                )
            )
        groups[index].count += counts[tag]
        group_index[tag] = index
    # no reference of ours to an array outlives this function: the holder checks count referrers
    return group_of, groups, group_index, sample_position


def _count_holder_kinds(
    groups: list[LiveGroup],
    group_index: dict[Hashable, int],
    search: HolderSearch,
    unheld: dict[int, Hashable],
    jit_held: dict[int, str],
) -> None:
    """Count each group's arrays by their best holder's kind: the search's kinds, then for the arrays it
    found no holder of (``unheld``: id -> tag), the jit cache (``jit_held``: id -> function) or elsewhere."""
    for (tag, kind), count in search.kind_counts.items():
        if count:
            counts_of = groups[group_index[tag]].by_kind
            counts_of[kind] = counts_of.get(kind, 0) + count
    for target, target_tag in unheld.items():
        group = groups[group_index[target_tag]]
        if target in jit_held:
            group.by_kind[KIND_JIT_CACHE] = group.by_kind.get(KIND_JIT_CACHE, 0) + 1
            if jit_held[target] not in group.jit_functions:
                group.jit_functions.append(jit_held[target])
        else:
            group.by_kind[KIND_ELSEWHERE] = group.by_kind.get(KIND_ELSEWHERE, 0) + 1


def _name_holders(groups: list[LiveGroup], search: HolderSearch, group_index: dict[Hashable, int]) -> None:
    """Compressed holder labels per group: ``debug_cache[0..9]``, ``hist['acts'][3]``, ``Out[12]``."""
    order = {KIND_NAME: 0, KIND_OUTPUT: 1, KIND_TRACEBACK: 2}
    runs: dict[tuple[int, str, str], list[int]] = {}
    for (tag, kind, container), (low, high, count) in search.runs.items():
        key = (group_index[tag], kind, container)
        if key in runs:  # two keys of one group (arrays with separate avals): one run
            run = runs[key]
            run[0], run[1], run[2] = min(run[0], low), max(run[1], high), run[2] + count
        else:
            runs[key] = [low, high, count]
    per_group: dict[int, list[tuple[int, str]]] = {}
    for (group, kind, container), (low, high, count) in runs.items():
        per_group.setdefault(group, []).append((order[kind], _run_label(container, "", low, high, count)))
    index_runs: dict[tuple[int, str, tuple[str, str]], list[int]] = {}
    for (tag, kind, parts), (low, high, count) in search.index_runs.items():
        index_key = (group_index[tag], kind, parts)
        if index_key in index_runs:
            run = index_runs[index_key]
            run[0], run[1], run[2] = min(run[0], low), max(run[1], high), run[2] + count
        else:
            index_runs[index_key] = [low, high, count]
    for (group, kind, (before, after)), (low, high, count) in index_runs.items():
        per_group.setdefault(group, []).append((order[kind], _run_label(before, after, low, high, count)))
    for tag, other_labels in search.group_labels.items():
        for kind, label in other_labels:
            per_group.setdefault(group_index[tag], []).append((order[kind], label))
    for group, labelled in per_group.items():
        labelled.sort(key=lambda item: item[0])
        # A traceback names the same array once per frame it passed through: two say enough.
        traceback_labels = [label for kind, label in labelled if kind == order[KIND_TRACEBACK]][:2]
        kept = [label for kind, label in labelled if kind != order[KIND_TRACEBACK]] + traceback_labels
        groups[group].holders = list(dict.fromkeys(kept))


def _container_findings(
    search: HolderSearch,
    groups: list[LiveGroup],
    group_index: dict[Hashable, int],
    subject: list[jax.Array],
    *,
    cell: bool,
) -> list[ContainerFinding]:
    """Containers of the user's holding ``accumulates_from(kind)`` or more arrays of one group (fewer for a list).

    From the counts the holder search kept per container (lists, tuples, deques, dicts,
    objects' attributes) and per run of like containers (``train_metrics[0..39]['preds']``,
    the key data of a list of typed keys): linear in what the search visited. The line that
    made the arrays is read from ``tracemalloc`` for one array of each container.
    """
    # (group, container) -> [count, first id, holders label, kind]: a record changed in place, so Any
    found: dict[tuple[int, str], list[Any]] = {}
    for (tag, kind, container), (count, first) in search.containers.items():
        if kind != KIND_NAME:
            continue
        key = (group_index[tag], container)
        entry = found.get(key)
        if entry is None:
            run = search.runs.get((tag, kind, container))
            shape = "sequence" if run is not None else "mapping or object"
            label = _run_label(container, "", *run) if run is not None else f"{container}[...]"
            found[key] = [count, first, label, shape]
        else:
            entry[0] += count
    for (tag, kind, (before, after)), (low, high, count) in search.index_runs.items():
        if kind != KIND_NAME or not after:
            continue  # an empty rest is a dict's integer key: the dict is counted above
        key = (group_index[tag], f"{before}[i]{after}")
        entry = found.get(key)
        if entry is None:
            first_id = search.index_first.get((tag, kind, (before, after)))
            found[key] = [count, first_id, _run_label(before, after, low, high, count), "nested"]
        else:
            entry[0] += count
    flagged = [(key, entry) for key, entry in found.items() if entry[0] >= accumulates_from(entry[3])]
    if not flagged:
        return []
    samples = {}
    tracing = tracemalloc.is_tracing()
    if tracing:  # else of_allocation says why no line is known, whichever array it is given: no search for one
        wanted = {entry[1] for _key, entry in flagged}
        samples = {id(a): a for a in itertools.compress(subject, map(wanted.__contains__, map(id, subject)))}
    findings = []
    for (group, container), (count, first, label, kind) in flagged:
        g = groups[group]
        key_data = " (key data)" in label
        if kind == "nested":
            container = label.split("[", 1)[0]
        sample = samples.get(first)
        provenance = of_allocation(sample) if sample is not None or not tracing else None
        del sample
        if provenance is not None and provenance.made_at is None and cell:
            provenance.unknown += "; they were made while this cell ran"
        findings.append(
            ContainerFinding(
                container=container,
                holders=label,
                count=count,
                shape=tuple(g.shape),
                dtype=g.dtype,
                bytes_each=g.bytes_each,
                bytes=count * g.bytes_each,
                kind=kind,
                key_data=key_data,
                provenance=provenance,
                fix=_container_fix(container, count, g, key_data),
            )
        )
    samples.clear()
    findings.sort(key=lambda f: (-f.count, -f.bytes))
    return findings


def _container_fix(container: str, count: int, group: LiveGroup, key_data: bool) -> str:
    """What to do about a container of many arrays: a suggestion (nothing was tried)."""
    if key_data or (group.dtype == "uint32" and tuple(group.shape) == (2,)):
        what = "These are PRNG keys; if they come" if key_data else "If these are PRNG keys"
        return (
            f"Suggestion (not tried): {what} from one `jax.random.split(key, {count})`, keep the "
            "one array it returns and index it when you need a key, instead of `list(...)` of it "
            f"({count} arrays, one buffer each); `del {container}` frees them."
        )
    return (
        f"Suggestion (not tried): {KEEP_ON_HOST} (`del {container}` frees them); or stack them into one array "
        "(`jnp.stack(...)`) when you store them."
    )


def _run_label(before: str, after: str, low: int, high: int, count: int) -> str:
    """``train_metrics[0..39]['preds']``: the holders that differ only in one list index, as one range."""
    if count == 1:
        return f"{before}[{low}]{after}"
    if count == high - low + 1:
        return f"{before}[{low}..{high}]{after}"
    return f"{before}[...]{after} ({count} elements between {low} and {high})"


def _jit_cache_constants(
    subject: list[jax.Array], unheld: set[int], group_of: dict[int, Hashable], per_group: int = 2, limit: int = 48
) -> dict[int, str]:
    """Of the ``unheld`` array ids, those held as constants of a traced jaxpr, with the function's name.

    JAX's jit cache keeps the jaxpr of every traced function, and a jaxpr keeps
    the arrays it closed over as its constants (``Jaxpr.consts``; a
    ``ClosedJaxpr`` in older JAX), in a list. We ask the garbage collector who
    refers to a few unheld arrays of each group (a search over the heap whose
    cost grows with the number of arrays asked about, hence the sample), then
    who refers to the lists among them: the jaxprs. Every constant of those
    jaxprs is then known, sampled or not.
    """
    jaxpr_types = jaxpr_parts.jaxpr_types()
    taken: dict[Hashable, int] = {}  # group -> arrays of it sampled
    sample = []
    for a in itertools.compress(subject, map(unheld.__contains__, map(id, subject))):
        group = group_of[id(a)]
        if taken.get(group, 0) < per_group:
            taken[group] = taken.get(group, 0) + 1
            sample.append(a)
            if len(sample) >= limit:
                break
    if not sample:
        return {}
    ours = {id(subject), id(sample)}
    lists = [r for r in gc.get_referrers(*sample) if type(r) is list and id(r) not in ours]
    del sample
    found: dict[int, str] = {}
    if not lists:
        return found
    for owner in gc.get_referrers(*lists):
        if not isinstance(owner, jaxpr_types):
            continue
        try:
            consts = owner.consts  # type: ignore[attr-defined]  # a Jaxpr or ClosedJaxpr, types found at run time
        except Exception:
            continue
        info = getattr(owner, "debug_info", None)
        name = getattr(info, "func_name", None) or "?"
        for value in consts:
            if id(value) in unheld:
                found.setdefault(id(value), name)
    return found


_SIZES: dict[tuple[tuple[int, ...], np.dtype], int] = {}  # (shape, dtype) -> bytes


def _nbytes_one(a: jax.Array) -> int:
    """The array's (global) size in bytes, from its shape and dtype: cheaper than ``a.nbytes``."""
    key = (a.shape, a.dtype)
    size = _SIZES.get(key)
    if size is None:
        size = 1
        for d in a.shape:
            size *= int(d)
        size *= a.dtype.itemsize
        if len(_SIZES) < 4096:
            _SIZES[key] = size
    return size


def _nbytes(arrays: Iterable[jax.Array]) -> int:
    return sum(_nbytes_one(a) for a in arrays)


def _device_bytes(a: jax.Array) -> int:
    """Bytes the array's shards take on this process's devices (from its sharding: asking for its shards
    would leave jaxlib's per-shard arrays alive with it - ``array_shards.addressable_shards``)."""
    try:
        return array_shards.per_device_bytes(a)
    except Exception:
        return _nbytes_one(a)


def _placement(a: jax.Array) -> str:
    try:
        sharding = a.sharding
        # jaxlib's Device has no stubs: its attributes are read as Any
        devices: list[Any] = sorted(sharding.device_set, key=operator.attrgetter("id"))
    except Exception:
        return "?"
    if len(devices) == 1:
        d = devices[0]
        return f"{d.platform}:{d.id}"
    spec = getattr(sharding, "spec", None)
    kind = type(sharding).__name__
    return f"{len(devices)} devices, {kind}" + (f"({spec})" if spec is not None else "")


def _device_memory() -> list[DeviceMemory]:
    out = []
    for device in jax.local_devices()[:8]:
        try:
            stats = device.memory_stats()
        except Exception:
            stats = None
        out.append(
            DeviceMemory(
                f"{device.platform}:{device.id}",
                {k: int(v) for k, v in stats.items() if isinstance(v, (int, float))} if stats else None,
            )
        )
    return out


def _save_profile(report: LiveReport, path: str) -> None:
    jax.profiler.save_device_memory_profile(path)
    report.profile_path = path
    report.profile_bytes = os.path.getsize(path)
