"""Live-array probe: which JAX arrays are alive, how much they take, and who holds them.

Usage without IPython::

    report = jaxmagic.probes.live(namespace=globals())
    report.groups[0].holders       # ["debug_cache[0..9]"]

    with jaxmagic.probes.live_diff(namespace=globals()) as report:
        train_for_a_while()
    report.groups                  # arrays the block created that are still alive

``jax.live_arrays()`` lists every array the process still holds. The probe
groups them by (shape, dtype, placement) and names their holders: the user's
variables and what they contain a few levels deep (``hist['acts'][3]``,
``trainer.history[0]``), IPython's output cache (``Out[12]``, ``_``), the frames
of the last error (``sys.last_traceback``), and the jit cache, which keeps the
arrays a traced function closed over as constants of its program (chapter
section 7.5). The probe keeps no array alive: snapshots are ids and weak
references, the report holds strings and numbers.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import itertools
import operator
import os
import weakref
from collections.abc import Iterator
from typing import Any

from jaxmagic._jax import compat
from jaxmagic.probes._support.holder_search import (
    KIND_NAME,
    KIND_OUTPUT,
    KIND_TRACEBACK,
    find_holders,
    namespace_roots,
    traceback_roots,
)
from jaxmagic.report import Report, Status
from jaxmagic.report.wording import error_line, format_bytes, short_dtype

KIND_JIT_CACHE = "jit cache"  # a constant of a traced program that JAX's caches keep
KIND_ELSEWHERE = "elsewhere"  # nothing we can see holds it
KIND_RESULT = "result"  # the cell's own result (Out[n])

_SHOWN_HOLDERS = 6


@dataclasses.dataclass
class LiveGroup:
    """Live arrays of one shape, dtype and placement."""

    shape: tuple
    dtype: str
    placement: str  # "cpu:0", or the sharding for arrays spread over devices
    count: int = 0
    bytes_each: int = 0  # the array's logical size
    device_bytes_each: int = 0  # what its shards take on the devices (a replicated array: once per device)
    holders: list[str] = dataclasses.field(default_factory=list)  # "debug_cache[0..9]", "Out[12]", ...
    by_kind: dict[str, int] = dataclasses.field(default_factory=dict)  # arrays per best holder kind
    jit_functions: list[str] = dataclasses.field(default_factory=list)  # functions whose cache keeps them

    @property
    def total_bytes(self) -> int:
        return self.count * self.bytes_each

    @property
    def held_by_names(self) -> int:
        return self.by_kind.get(KIND_NAME, 0)

    @property
    def in_output_cache(self) -> int:
        return self.by_kind.get(KIND_OUTPUT, 0)

    @property
    def in_jit_cache(self) -> int:
        return self.by_kind.get(KIND_JIT_CACHE, 0)

    @property
    def elsewhere(self) -> int:
        return self.by_kind.get(KIND_ELSEWHERE, 0)

    @property
    def type_text(self) -> str:
        return f"{short_dtype(self.dtype)}[{','.join(str(d) for d in self.shape)}]"


@dataclasses.dataclass
class DeviceMemory:
    device: str
    stats: dict[str, int] | None  # Device.memory_stats(); None where the backend has none (CPU)


@dataclasses.dataclass
class LiveReport(Report):
    """What ``%jax_live`` / ``%%jax_live`` found."""

    kind = "jax_live"

    mode: str = "snapshot"  # "snapshot" (line magic) or "cell" (arrays a cell left alive)
    total_arrays: int = 0  # all live arrays at the end
    total_bytes: int = 0
    groups: list[LiveGroup] = dataclasses.field(default_factory=list)  # largest total first
    top: int | None = None  # groups shown (None: all)
    devices: list[DeviceMemory] = dataclasses.field(default_factory=list)
    profile_path: str = ""
    profile_bytes: int = 0
    searched: int = 0  # values looked at while naming holders
    search_truncated: bool = False
    # cell mode
    before_arrays: int = 0
    before_bytes: int = 0
    freed_arrays: int = 0  # alive before the cell, gone after it
    freed_bytes: int = 0
    result_arrays: int = 0  # arrays of the cell's own result (Out[n]): not counted as left behind
    result_bytes: int = 0
    result_label: str = ""
    other_error: str = ""  # the cell raised: "ValueError: ..."
    backend_started: bool = True  # False: no JAX backend existed, so no array did (none was started)

    # -- derived --------------------------------------------------------------

    @property
    def arrays(self) -> int:
        """Arrays in the groups: live arrays (snapshot) or arrays the cell left alive (cell)."""
        return sum(g.count for g in self.groups)

    @property
    def bytes(self) -> int:
        return sum(g.total_bytes for g in self.groups)

    def count_by_kind(self, kind: str) -> int:
        return sum(g.by_kind.get(kind, 0) for g in self.groups)

    def group(self, shape, dtype: str | None = None) -> LiveGroup | None:
        """The first group of this shape (and dtype, e.g. "float32"), or None."""
        for g in self.groups:
            if tuple(g.shape) == tuple(shape) and (dtype is None or g.dtype == dtype):
                return g
        return None

    @property
    def holders(self) -> list[str]:
        """Every holder label of every group, in group order."""
        return [h for g in self.groups for h in g.holders]

    @property
    def _worrying(self) -> int:
        """Arrays no variable of the user holds directly: in containers aside, the ones that surprise."""
        return sum(self.count_by_kind(k) for k in (KIND_OUTPUT, KIND_TRACEBACK, KIND_JIT_CACHE, KIND_ELSEWHERE))

    @property
    def status(self) -> Status:
        if self.mode == "cell":
            return Status.PROBLEM if self.groups else (Status.ERROR if self.other_error else Status.OK)
        return (
            Status.PROBLEM
            if (
                self.count_by_kind(KIND_JIT_CACHE)
                or self.count_by_kind(KIND_OUTPUT)
                or self.count_by_kind(KIND_TRACEBACK)
            )
            else Status.OK
        )

    @property
    def summary(self) -> str:
        if not self.backend_started:
            return (
                "No JAX backend has started yet, so there is no live array; jaxmagic did not start one "
                "(XLA_FLAGS and jax.config device settings still take effect)."
            )
        if self.mode == "cell":
            return self._cell_summary()
        text = f"{self.total_arrays} live array(s), {format_bytes(self.total_bytes)} in {len(self.groups)} group(s)"
        if self.groups:
            g = self.groups[0]
            text += f"; largest: {g.count} \u00d7 `{g.type_text}` ({format_bytes(g.total_bytes)})"
            if g.holders:
                text += f" held by {_join_holders(g.holders, 2)}"
        text += "."
        return text + self._kind_sentence()

    def _cell_summary(self) -> str:
        failed = f" The cell failed ({self.other_error})." if self.other_error else ""
        if not self.groups:
            result = (
                f" Its result {self.result_label} holds {self.result_arrays} array(s)." if self.result_arrays else ""
            )
            return f"No array created by this cell is still alive.{result}{failed}"
        parts = []
        for g in self.groups[:2]:
            held = f" held by {_join_holders(g.holders, 2)}" if g.holders else ""
            parts.append(f"{g.count} \u00d7 `{g.type_text}`{held}")
        more = f" and {len(self.groups) - 2} more group(s)" if len(self.groups) > 2 else ""
        return (
            f"{self.arrays} array(s) ({format_bytes(self.bytes)}) created by this cell are still alive: "
            f"{'; '.join(parts)}{more}.{self._kind_sentence()}{failed}"
        )

    def _kind_sentence(self) -> str:
        parts = []
        jit = self.count_by_kind(KIND_JIT_CACHE)
        if jit:
            parts.append(f"{jit} kept only by the jit cache as constants (`jax.clear_caches()` frees them)")
        out = self.count_by_kind(KIND_OUTPUT)
        if out:
            parts.append(f"{out} kept by IPython's output cache (Out[...], _)")
        tb = self.count_by_kind(KIND_TRACEBACK)
        if tb:
            parts.append(f"{tb} kept by the last error's traceback")
        return (" " + "; ".join(parts) + ".") if parts else ""

    # -- rendering ------------------------------------------------------------

    def document(self):
        from jaxmagic.report.document import Document, Facts, Paragraph, Section, Table

        sections = []
        shown = self.groups if self.top is None else self.groups[: self.top]
        if self.groups:
            rows = []
            sharded = any(g.device_bytes_each != g.bytes_each for g in shown)
            for g in shown:
                row = [
                    f"`{g.type_text}`",
                    g.placement,
                    str(g.count),
                    format_bytes(g.bytes_each),
                    format_bytes(g.total_bytes),
                ]
                if sharded:
                    row.append(format_bytes(g.device_bytes_each * g.count))
                rows.append(row + [self._held_text(g)])
            columns = ["array", "placement", "count", "each", "total"] + (["on devices"] if sharded else [])
            blocks = [Table(columns + ["held by"], rows)]
            if sharded:
                blocks.append(
                    Paragraph(
                        "Sizes are the arrays' own; `on devices` adds up their shards on this "
                        "process's devices, so a replicated array counts once per device."
                    )
                )
            if len(shown) < len(self.groups):
                rest = self.groups[len(shown) :]
                blocks.append(
                    Paragraph(
                        f"... and {len(rest)} smaller group(s): {sum(g.count for g in rest)} "
                        f"array(s), {format_bytes(sum(g.total_bytes for g in rest))} (--top to see more)."
                    )
                )
            title = "Left alive by the cell" if self.mode == "cell" else "Live arrays"
            sections.append(Section(title, blocks))
        advice = self._advice()
        if advice:
            sections.append(Section("What holds them", [Paragraph(a) for a in advice]))
        facts = []
        if self.mode == "cell":
            facts += [
                ("before the cell", f"{self.before_arrays} arrays, {format_bytes(self.before_bytes)}"),
                ("after the cell", f"{self.total_arrays} arrays, {format_bytes(self.total_bytes)}"),
                ("created and still alive", f"{self.arrays} arrays, {format_bytes(self.bytes)}"),
                ("freed by the cell", f"{self.freed_arrays} arrays, {format_bytes(self.freed_bytes)}"),
            ]
            if self.result_arrays:
                facts.append(
                    (
                        f"the cell's result {self.result_label}",
                        f"{self.result_arrays} arrays, {format_bytes(self.result_bytes)} (not counted above)",
                    )
                )
        else:
            facts.append(("live arrays", f"{self.total_arrays}, {format_bytes(self.total_bytes)}"))
        missing = [d.device for d in self.devices if d.stats is None]
        if missing:
            where = missing[0] if len(missing) == 1 else f"{len(missing)} devices ({missing[0]}...)"
            facts.append(
                (
                    f"{where} memory_stats()",
                    "None (this backend reports no device memory figures; the sizes above are the arrays' own)",
                )
            )
        for device in [d for d in self.devices if d.stats is not None][:8]:
            keys = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")
            text = ", ".join(f"{k} {format_bytes(device.stats[k])}" for k in keys if k in device.stats)
            facts.append((f"{device.device} memory_stats()", text or str(device.stats)))
        if self.search_truncated:
            facts.append(("holder search", f"stopped after {self.searched} values; some holders may be missing"))
        sections.append(Section("Memory", [Facts(facts)]))
        if self.profile_path:
            sections.append(
                Section(
                    "Device memory profile",
                    [
                        Paragraph(
                            f"Saved `{self.profile_path}` ({format_bytes(self.profile_bytes)}, pprof format: gzip-compressed "
                            "protobuf) with `jax.profiler.save_device_memory_profile`. It sums the live buffers by the "
                            f"Python stack that allocated them. Open it with `pprof -http=:8080 {self.profile_path}` "
                            "(pprof: `go install github.com/google/pprof@latest`) for a flame graph by allocating line."
                        )
                    ],
                )
            )
        return Document("%%jax_live" if self.mode == "cell" else "%jax_live", self.status, self.summary, sections)

    def _held_text(self, g: LiveGroup) -> str:
        parts = []
        if g.holders:
            parts.append(_join_holders(g.holders, _SHOWN_HOLDERS))
        if g.in_output_cache and not g.held_by_names:
            parts.append("IPython's output cache")
        if g.in_jit_cache:
            functions = ", ".join(f"jit({f})" for f in g.jit_functions[:3])
            parts.append(f"jit cache: constant of {functions}" if functions else "jit cache")
        if g.elsewhere:
            parts.append(f"{g.elsewhere} held elsewhere" if g.elsewhere < g.count else "held elsewhere")
        return "; ".join(parts) or "-"

    def _advice(self) -> list[str]:
        advice = []
        if self.count_by_kind(KIND_JIT_CACHE):
            advice.append(
                "Jit cache: a jitted function that reads a global array keeps it as a constant of its "
                "compiled program for as long as the function lives, even after the name is rebound. "
                "`jax.clear_caches()` frees them; pass large arrays as arguments instead."
            )
        if self.count_by_kind(KIND_OUTPUT):
            advice.append(
                "IPython's output cache keeps every displayed result (`Out[n]`, `_`, `__`, `___`). "
                "`%reset -f out` empties it; end a cell with `;` to keep its result out of it."
            )
        if self.count_by_kind(KIND_TRACEBACK):
            advice.append(
                "The last error's traceback keeps the failing frames and their local arrays "
                "(`sys.last_traceback`, and IPython's traceback printer keeps the last one it showed). "
                "They go when the next error replaces them, or with "
                "`sys.last_traceback = sys.last_value = sys.last_exc = None` and "
                "`get_ipython().InteractiveTB.tb = None`."
            )
        if self.count_by_kind(KIND_ELSEWHERE):
            advice.append(
                "Held elsewhere: no variable, output, traceback or jit cache reaches these within three "
                "steps - a deeper structure, a closure of a library, or a reference outside the "
                "notebook's namespace. `gc.get_referrers(x)` on one of them shows who."
            )
        if self.mode == "cell" and any(g.held_by_names for g in self.groups):
            advice.append(
                "Arrays kept in lists or dicts grow with every step: store what you need as Python "
                "numbers (`float(loss)`) and drop the arrays, or `del` the container. `x.delete()` frees "
                "an array's buffer at once, whatever still refers to it."
            )
        return advice


def _join_holders(holders: list[str], limit: int) -> str:
    shown = ", ".join(f"`{h}`" for h in holders[:limit])
    return shown + (f" (+{len(holders) - limit} more)" if len(holders) > limit else "")


# -- the probe ----------------------------------------------------------------


def live(*, namespace: dict | None = None, top: int | None = None, profile: str | None = None) -> LiveReport:
    """Every live JAX array, grouped, with the names that hold each group.

    ``namespace``: the variables to search for holders (a notebook's user
    namespace; IPython's ``Out``/``_`` in it are reported as the output cache).
    ``top``: how many groups the rendered report shows (the report keeps all).
    ``profile``: also save ``jax.profiler.save_device_memory_profile`` there.
    """
    import jax

    report = LiveReport(mode="snapshot", top=top)
    if not compat.backend_started():
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
    *, namespace: dict | None = None, top: int | None = None, profile: str | None = None
) -> Iterator[LiveReport]:
    """Snapshot the live arrays before and after the block; report the ones it created that are still alive.

    The block's own result, if it lands in IPython's output cache (``Out[n]``,
    ``_``), is not counted as left behind. The block's exception propagates
    unchanged; the report is filled in before it does.
    """
    import jax

    report = LiveReport(mode="cell", top=top)
    gc.collect()
    arrays = jax.live_arrays() if compat.backend_started() else []  # no backend yet: nothing alive before
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


def _finish_cell_report(report, before, before_sizes, namespace, out_cache, outputs_before, profile) -> None:
    """Fill in what the block left alive (called on the way out of ``live(mode="cell")``)."""
    import jax

    gc.collect()
    if not compat.backend_started():  # the block used no JAX array at all
        report.backend_started = False
        return
    arrays = jax.live_arrays()
    try:
        alive_before = {id(a) for a in arrays if (ref := before.get(id(a))) is not None and ref() is a}
        report.freed_arrays = len(before) - len(alive_before)
        report.freed_bytes = sum(size for key, size in before_sizes.items() if key not in alive_before)
        created = [a for a in arrays if id(a) not in alive_before]
        excluded = _result_arrays(report, created, namespace, out_cache, outputs_before)
        _describe(report, arrays, namespace, excluded=alive_before | excluded, created=created)
        del created
    finally:
        del arrays
        before.clear()
    report.devices = _device_memory()
    if profile:
        _save_profile(report, profile)


def _result_arrays(report: LiveReport, created: list, namespace, out_cache, outputs_before: set) -> frozenset:
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
    report: LiveReport, arrays: list, namespace: dict | None, excluded: frozenset | set, created: list | None = None
) -> None:
    """Fill ``report`` with the totals of ``arrays`` and the groups of ``created`` (default: all) minus ``excluded``."""
    import jax

    report.total_arrays = len(arrays)
    subject = arrays if created is None else created
    if excluded:
        subject = [a for a in subject if id(a) not in excluded]
    one_device = jax.device_count() == 1 and jax.process_count() == 1
    # Grouping 100,000 arrays is the hot loop. JAX shares one aval object among arrays of
    # the same shape and dtype, so the aval's identity is a cheap first key (a plain
    # attribute and an int); counting and the id -> key map then run as C loops. Keys
    # that turn out to mean the same (shape, dtype, placement) are merged below.
    if one_device:
        group_of = dict(zip(map(id, subject), map(id, map(operator.attrgetter("aval"), subject))))
    else:
        group_of = dict(zip(map(id, subject), [(id(a.aval), a.sharding) for a in subject]))
    counts = collections.Counter(group_of.values())
    first_position: dict[Any, int] = {}
    for position, tag in enumerate(group_of.values()):  # stops once every key has its sample, usually at once
        if tag not in first_position:
            first_position[tag] = position
            if len(first_position) == len(counts):
                break
    groups: list[LiveGroup] = []
    merged: dict[tuple, int] = {}
    group_index: dict[Any, int] = {}
    for tag, position in first_position.items():
        sample = subject[position]
        key = (tuple(sample.shape), str(sample.dtype), _placement(sample))
        index = merged.get(key)
        if index is None:
            index = merged[key] = len(groups)
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
    del first_position
    report.total_bytes = sum(g.total_bytes for g in groups) if created is None else _nbytes(arrays)

    roots = namespace_roots(namespace) + traceback_roots()
    search = find_holders(group_of, roots)
    del roots
    report.searched, report.search_truncated = search.visited, search.truncated
    best = search.best_kind
    unheld = group_of.keys() - best.keys() if len(best) < len(group_of) else set()
    jit_held = _jit_cache_constants(subject, unheld, group_of) if unheld else {}
    for (tag, kind), count in search.kind_counts.items():
        if count:
            counts_of = groups[group_index[tag]].by_kind
            counts_of[kind] = counts_of.get(kind, 0) + count
    for target in unheld:
        group = groups[group_index[group_of[target]]]
        if target in jit_held:
            group.by_kind[KIND_JIT_CACHE] = group.by_kind.get(KIND_JIT_CACHE, 0) + 1
            if jit_held[target] not in group.jit_functions:
                group.jit_functions.append(jit_held[target])
        else:
            group.by_kind[KIND_ELSEWHERE] = group.by_kind.get(KIND_ELSEWHERE, 0) + 1
    _name_holders(groups, search, group_index)
    del subject
    groups.sort(key=lambda g: (-g.total_bytes, -g.count))
    report.groups = groups


def _name_holders(groups: list[LiveGroup], search, group_index: dict) -> None:
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
        key = (group_index[tag], kind, parts)
        if key in index_runs:
            run = index_runs[key]
            run[0], run[1], run[2] = min(run[0], low), max(run[1], high), run[2] + count
        else:
            index_runs[key] = [low, high, count]
    for (group, kind, (before, after)), (low, high, count) in index_runs.items():
        per_group.setdefault(group, []).append((order[kind], _run_label(before, after, low, high, count)))
    for tag, labelled in search.group_labels.items():
        for kind, label in labelled:
            per_group.setdefault(group_index[tag], []).append((order[kind], label))
    for group, labelled in per_group.items():
        labelled.sort(key=lambda item: item[0])
        # A traceback names the same array once per frame it passed through: two say enough.
        traceback_labels = [label for kind, label in labelled if kind == order[KIND_TRACEBACK]][:2]
        kept = [label for kind, label in labelled if kind != order[KIND_TRACEBACK]] + traceback_labels
        groups[group].holders = list(dict.fromkeys(kept))


def _run_label(before: str, after: str, low: int, high: int, count: int) -> str:
    """``train_metrics[0..39]['preds']``: the holders that differ only in one list index, as one range."""
    if count == 1:
        return f"{before}[{low}]{after}"
    if count == high - low + 1:
        return f"{before}[{low}..{high}]{after}"
    return f"{before}[...]{after} ({count} elements between {low} and {high})"


def _jit_cache_constants(
    subject: list, unheld: set[int], group_of: dict[int, int], per_group: int = 2, limit: int = 48
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
    jaxpr_types = compat.jaxpr_types()
    taken: dict[int, int] = {}
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
            consts = owner.consts
        except Exception:
            continue
        info = getattr(owner, "debug_info", None)
        name = getattr(info, "func_name", None) or "?"
        for value in consts:
            if id(value) in unheld:
                found.setdefault(id(value), name)
    return found


_SIZES: dict[tuple, int] = {}


def _nbytes_one(a) -> int:
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


def _nbytes(arrays) -> int:
    return sum(_nbytes_one(a) for a in arrays)


def _device_bytes(a) -> int:
    """Bytes the array's shards take on this process's devices."""
    try:
        shards = a.addressable_shards
        if len(shards) <= 1:
            return _nbytes_one(a)
        return sum(_nbytes_one(shard.data) for shard in shards)
    except Exception:
        return _nbytes_one(a)


def _placement(a) -> str:
    try:
        sharding = a.sharding
        devices = sorted(sharding.device_set, key=lambda d: d.id)
    except Exception:
        return "?"
    if len(devices) == 1:
        d = devices[0]
        return f"{d.platform}:{d.id}"
    spec = getattr(sharding, "spec", None)
    kind = type(sharding).__name__
    return f"{len(devices)} devices, {kind}" + (f"({spec})" if spec is not None else "")


def _device_memory() -> list[DeviceMemory]:
    import jax

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
    import jax

    jax.profiler.save_device_memory_profile(path)
    report.profile_path = path
    report.profile_bytes = os.path.getsize(path)
