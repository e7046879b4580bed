"""The live-array probe's report: the groups of live arrays, their holders, its wording and ``document()``.

The measuring - snapshots, grouping, the holder search - is
``jaxmagic.probes._live.measure``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxmagic.probes._live.holders.search import KIND_NAME, KIND_OUTPUT, KIND_TRACEBACK
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, Status, act, failed
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, Table, split_headline
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.wording import format_bytes, short_dtype

KIND_JIT_CACHE = "jit cache"  # a constant of a traced program that JAX's caches keep
KIND_ELSEWHERE = "elsewhere"  # nothing we can see holds it
KIND_RESULT = "result"  # the cell's own result (Out[n])

_SHOWN_HOLDERS = 6
CONTAINER_ARRAYS = 100  # arrays of one shape and dtype in one container of the user's from here on: a finding
# ... in one list, tuple or deque of the user's (a sequence, not a dict of parameters): one array appended per
# step (`history.append(J)`, per-step losses) accumulates on the device long before it reaches a hundred
SEQUENCE_ARRAYS = 10
# how to keep what a list accumulates, said wherever arrays pile up (%jax_live, the doctor, the watch)
KEEP_ON_HOST = (
    "keep them on the host as you append them - `float(loss)` for a scalar, `jax.device_get(x)` for an array (a "
    "NumPy copy: the device buffer goes once nothing else holds it) - or drop them"
)


def accumulates_from(kind: str) -> int:
    """How many like arrays in one container of the user's make a finding: fewer for a sequence."""
    return SEQUENCE_ARRAYS if kind == "sequence" else CONTAINER_ARRAYS


@dataclasses.dataclass
class LiveGroup:
    """Live arrays of one shape, dtype and placement."""

    shape: tuple[int, ...]
    dtype: str
    placement: str  # "cpu:0", or the sharding for arrays spread over devices
    count: int = 0
    bytes_each: int = 0  # the array's logical size
    device_bytes_each: int = 0  # what its shards take on the devices (a replicated array: once per device)
    holders: list[str] = dataclasses.field(default_factory=list)  # "debug_cache[0..9]", "Out[12]", ...
    by_kind: dict[str, int] = dataclasses.field(default_factory=dict)  # arrays per best holder kind
    jit_functions: list[str] = dataclasses.field(default_factory=list)  # functions whose cache keeps them
    # the line that made one of them (tracemalloc; only while it traces, for the largest groups)
    provenance: Provenance | None = None

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
class ContainerFinding:
    """One container of the user's (a list, dict, tuple, deque or object) holding many arrays of one
    shape and dtype: ``metrics`` appended in a loop, ``keys = list(jax.random.split(key, 2000))``."""

    container: str  # "metrics", "state.history", "keys"
    holders: str  # how its arrays are named: "metrics[0..1999]", "keys[0..1999] (key data)"
    count: int
    shape: tuple[int, ...]
    dtype: str
    bytes_each: int
    bytes: int  # count * bytes_each
    kind: str = "sequence"  # "sequence" (list, tuple, deque), "mapping or object" (dict values, attributes),
    # "nested" (one array in each element of a list: ``train_metrics[0..39]['loss']``, typed keys' data)
    key_data: bool = False  # the arrays are the data of typed PRNG keys (jax.random.key)
    provenance: Provenance | None = None  # the line that made the arrays (from tracemalloc), or why not
    fix: str = ""

    @property
    def type_text(self) -> str:
        return f"{short_dtype(self.dtype)}[{','.join(str(d) for d in self.shape)}]"

    @property
    def line(self) -> SourceLine | None:
        """The line that made the first array of the container, or None when it could not be told."""
        return self.provenance.made_at if self.provenance is not None else None

    @property
    def sentence(self) -> str:
        return (
            f"`{self.container}` holds {self.count} arrays `{self.type_text}`, arrays of one shape accumulating in one "
            f"container of yours ({format_bytes(self.bytes)} in {self.count} separate buffers)"
        )


@dataclasses.dataclass
class KeptAlone:
    """Arrays that only one container of the user's keeps alive, beside like arrays other names hold:
    ``bs = jax.live_arrays()`` kept across a loop, ``history.append(x)`` (``live/kept_alone.py``)."""

    container: str  # "bs", "state.history"
    count: int  # arrays nothing but the container refers to (checked with the garbage collector)
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    others: list[str] = dataclasses.field(default_factory=list)  # other holders of like arrays: "x"
    fix: str = ""

    @property
    def type_text(self) -> str:
        return f"{short_dtype(self.dtype)}[{','.join(str(d) for d in self.shape)}]"

    @property
    def sentence(self) -> str:
        beside = (
            f" beside the one(s) {_join_holders(self.others, 3)} hold{'s' if len(self.others) == 1 else ''}"
            if self.others
            else ""
        )
        return (
            f"`{self.container}` alone keeps {self.count} array(s) `{self.type_text}` alive "
            f"({format_bytes(self.bytes)}){beside}: nothing else refers to them"
        )


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
    # containers of the user's holding CONTAINER_ARRAYS or more arrays of one shape and dtype, most first
    containers: list[ContainerFinding] = dataclasses.field(default_factory=list)
    # containers of the user's that alone keep arrays alive beside like arrays others hold (any number)
    kept_alone: list[KeptAlone] = dataclasses.field(default_factory=list)
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
    allocations_recorded: bool = False  # tracemalloc traced: the groups' provenance gives the lines that made them

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

    def group(self, shape: Sequence[int], dtype: str | None = None) -> LiveGroup | None:
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

    def concerns(self) -> list[Concern]:
        if self.mode == "cell":
            found = [act(f"{g.type_text} grew") for g in self.groups]
            return found or ([failed(self.other_error)] if self.other_error else [])
        found = [act("a container holding arrays") for _ in self.containers]
        found += [act(f"`{k.container}` alone keeps {k.count} array(s) alive") for k in self.kept_alone]
        found += [
            act(f"arrays held by {kind}")
            for kind in (KIND_JIT_CACHE, KIND_OUTPUT, KIND_TRACEBACK)
            if self.count_by_kind(kind)
        ]
        return found

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
        return self._told([text])

    def _container_sentence(self) -> str:
        if not self.containers:
            return ""
        first = self.containers[0]
        made = f", made at {first.line.where}" if first.line is not None else ""
        more = f" ({len(self.containers) - 1} more container(s) below)" if len(self.containers) > 1 else ""
        return f" {first.sentence}{made}{more}."

    def _kept_alone_sentence(self) -> str:
        if not self.kept_alone:
            return ""
        more = f" ({len(self.kept_alone) - 1} more below)" if len(self.kept_alone) > 1 else ""
        return f" {self.kept_alone[0].sentence}{more}."

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
        lead = (
            f"{self.arrays} array(s) ({format_bytes(self.bytes)}) created by this cell are still alive: "
            f"{'; '.join(parts)}{more}."
        )
        return self._told([lead]) + failed

    def _sentences(self, lead: list[str]) -> list[str]:
        """The summary's sentences: what is alive, then the containers, the arrays kept alone, who else holds.
        A snapshot's count of what is alive is no finding: its first finding goes before it, so a headline with
        room for one sentence says what to act on."""
        more = [self._container_sentence(), self._kept_alone_sentence(), self._kind_sentence()]
        found = [sentence.strip() for sentence in more if sentence.strip()]
        if self.mode != "cell" and found:
            return found[:1] + lead + found[1:]
        return lead + found

    def _told(self, lead: list[str]) -> str:
        return split_headline(self._sentences(lead), noun="detail")[0]

    @property
    def also_found(self) -> list[str]:
        """What the headline had no room for (``split_headline``): said first below it."""
        if not self.backend_started or (self.mode == "cell" and not self.groups):
            return []
        summary = self.summary
        return [sentence for sentence in self._sentences([]) if sentence not in summary]

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

    def document(self) -> Document:
        # the summary's sentences its headline had no room for, right below it: a container's or an array kept
        # alone is said by its own section, then drawn open
        also = self.also_found
        told_apart = {self._container_sentence().strip(), self._kept_alone_sentence().strip()}
        rest = [t for t in also if t not in told_apart]
        sections = [Section("Also found", [Paragraph(t) for t in rest], pinned=True)] if rest else []
        if self.groups:
            sections.append(live_arrays_section(self))
        if self.containers:
            pinned = self._container_sentence().strip() in also
            sections.append(dataclasses.replace(containers_section(self.containers), pinned=pinned))
        fix = self.fix
        if self.kept_alone:
            pinned = self._kept_alone_sentence().strip() in also
            sections.append(dataclasses.replace(kept_alone_section(self.kept_alone, fix), pinned=pinned))
        advice = [a for a in self._advice() if a != fix]  # the fix is the document's own line
        if advice:
            sections.append(Section("What holds them", [Paragraph(a) for a in advice]))
        sections.append(Section("Memory", [Facts(memory_facts(self))]))
        if self.profile_path:
            sections.append(device_memory_profile_section(self.profile_path, self.profile_bytes))
        title = "%%jax_live" if self.mode == "cell" else "%jax_live"
        return Document(title, self.status, self.summary, sections, fix=fix, nothing_to_do=self.unexplained())

    @property
    def fix(self) -> str:
        """What to do about what the summary leads with: the first container's fix, else the advice on what
        holds the arrays (lists filled by the cell; the jit cache, the output cache, the last traceback, in
        the order the summary tells them); "" when nothing was found."""
        if self.status is not Status.PROBLEM:
            return ""
        if self.containers and self.containers[0].fix:
            return self.containers[0].fix
        if self.kept_alone and self.kept_alone[0].fix:  # told right after the containers, as the summary does
            return self.kept_alone[0].fix
        advice = self._advice()
        if self.mode == "cell" and any(g.held_by_names for g in self.groups):
            return advice[-1]  # the cell's own names hold them: the advice on containers filled in a loop
        return advice[0] if advice else ""

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
                "steps (a library's pytree - an Optax state, a Flax or Equinox module - counts as one step, "
                "down to its leaves) - a deeper structure of your own, a closure of a library, or a reference "
                "outside the notebook's namespace. `gc.get_referrers(x)` on one of them shows who."
            )
        if self.mode == "cell" and any(g.held_by_names for g in self.groups):
            advice.append(
                "Arrays kept in lists or dicts grow with every step: store what you need as Python "
                "numbers (`float(loss)`) and drop the arrays, or `del` the container. `x.delete()` frees "
                "an array's buffer at once, whatever still refers to it."
            )
        return advice


def live_arrays_section(report: LiveReport) -> Section:
    """ "Live arrays" ("Left alive by the cell"): the groups of arrays, the largest first, with who holds them
    and the line that made one of them."""
    shown = report.groups if report.top is None else report.groups[: report.top]
    sharded = any(g.device_bytes_each != g.bytes_each for g in shown)
    made = any(g.provenance is not None and g.provenance.made_at is not None for g in shown)
    rows = []
    for g in shown:
        row = [f"`{g.type_text}`", g.placement, str(g.count), format_bytes(g.bytes_each), format_bytes(g.total_bytes)]
        if sharded:
            row.append(format_bytes(g.device_bytes_each * g.count))
        row.append(_held_text(g))
        if made:
            line = g.provenance.made_at if g.provenance is not None else None
            row.append(f"{line.label or line.filename}:{line.lineno}" if line else "-")
        rows.append(row)
    columns = ["array", "placement", "count", "each", "total"] + (["on devices"] if sharded else [])
    blocks: list[Block] = [Table(columns + ["held by"] + (["made at (one of them)"] if made else []), rows)]
    if sharded:
        blocks.append(
            Paragraph(
                "Sizes are the arrays' own; `on devices` adds up their shards on this "
                "process's devices, so a replicated array counts once per device."
            )
        )
    if len(shown) < len(report.groups):
        rest = report.groups[len(shown) :]
        blocks.append(
            Paragraph(
                f"... and {len(rest)} smaller group(s): {sum(g.count for g in rest)} "
                f"array(s), {format_bytes(sum(g.total_bytes for g in rest))} (--top to see more)."
            )
        )
    return Section("Left alive by the cell" if report.mode == "cell" else "Live arrays", blocks)


def containers_section(containers: list[ContainerFinding]) -> Section:
    """ "Containers holding 100 or more arrays of one shape": each container, where its arrays were made, its fix."""
    blocks: list[Block] = []
    for finding in containers[:8]:
        blocks.append(
            Paragraph(
                f"{finding.sentence}: `{finding.holders}`. Each is an array of its own, with its own buffer "
                "and Python object; a container filled in a loop keeps growing with it."
            )
        )
        if finding.provenance is not None:
            blocks += provenance_blocks(finding.provenance, f"the arrays in `{finding.container}`")
        if finding.fix:
            blocks.append(Paragraph(finding.fix))
    if len(containers) > 8:
        blocks.append(Paragraph(f"... and {len(containers) - 8} more container(s) (see `to_dict()`)."))
    return Section(
        f"Containers of yours accumulating arrays of one shape ({SEQUENCE_ARRAYS} or more in a list, tuple or deque; "
        f"{CONTAINER_ARRAYS} or more in a dict or object)",
        blocks,
    )


def kept_alone_section(kept_alone: list[KeptAlone], fix: str) -> Section:
    """ "Kept alive only by a container of yours": each such container and its fix (unless it is ``fix``, the
    document's own line)."""
    blocks: list[Block] = []
    for kept in kept_alone[:8]:
        blocks += [Paragraph(kept.sentence + ".")] + ([Paragraph(kept.fix)] if kept.fix != fix else [])
    return Section("Kept alive only by a container of yours", blocks)


def memory_facts(report: LiveReport) -> list[tuple[str, str]]:
    """The facts of the "Memory" section: the arrays before and after (a cell) or alive (a snapshot), each
    device's memory_stats(), and what could not be told."""
    facts = []
    if report.mode == "cell":
        facts += [
            ("before the cell", f"{report.before_arrays} arrays, {format_bytes(report.before_bytes)}"),
            ("after the cell", f"{report.total_arrays} arrays, {format_bytes(report.total_bytes)}"),
            ("created and still alive", f"{report.arrays} arrays, {format_bytes(report.bytes)}"),
            ("freed by the cell", f"{report.freed_arrays} arrays, {format_bytes(report.freed_bytes)}"),
        ]
        if report.result_arrays:
            result = f"{report.result_arrays} arrays, {format_bytes(report.result_bytes)} (not counted above)"
            facts.append((f"the cell's result {report.result_label}", result))
    else:
        facts.append(("live arrays", f"{report.total_arrays}, {format_bytes(report.total_bytes)}"))
    missing = [d.device for d in report.devices if d.stats is None]
    if missing:
        where = missing[0] if len(missing) == 1 else f"{len(missing)} devices ({missing[0]}...)"
        facts.append(
            (
                f"{where} memory_stats()",
                "None (this backend reports no device memory figures; the sizes above are the arrays' own)",
            )
        )
    for device, stats in [(d.device, d.stats) for d in report.devices if d.stats is not None][:8]:
        keys = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")
        text = ", ".join(f"{k} {format_bytes(stats[k])}" for k in keys if k in stats)
        facts.append((f"{device} memory_stats()", text or str(stats)))
    if report.groups and not report.allocations_recorded:
        facts.append(
            (
                "lines that made them",
                "not recorded: tracemalloc was not tracing (`import tracemalloc; tracemalloc.start(25)` "
                "before the code that makes the arrays records them)",
            )
        )
    if report.search_truncated:
        facts.append(("holder search", f"stopped after {report.searched} values; some holders may be missing"))
    return facts


def device_memory_profile_section(path: str, size: int) -> Section:
    """ "Device memory profile": where the pprof profile was saved and how to open it."""
    return Section(
        "Device memory profile",
        [
            Paragraph(
                f"Saved `{path}` ({format_bytes(size)}, pprof format: gzip-compressed "
                "protobuf) with `jax.profiler.save_device_memory_profile`. It sums the live buffers by the "
                f"Python stack that allocated them. Open it with `pprof -http=:8080 {path}` "
                "(pprof: `go install github.com/google/pprof@latest`) for a flame graph by allocating line."
            )
        ],
    )


def _held_text(g: LiveGroup) -> str:
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


def _join_holders(holders: list[str], limit: int) -> str:
    shown = ", ".join(f"`{h}`" for h in holders[:limit])
    return shown + (f" (+{len(holders) - limit} more)" if len(holders) > limit else "")
