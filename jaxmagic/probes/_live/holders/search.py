"""Who holds an object: the names that reach it from a namespace.

One breadth-first walk, used two ways. It starts from *roots* (a namespace's
variables, IPython's output cache, the frames of the last traceback) and
follows the references a person could name - list and tuple elements, dict
values, attributes, ``__slots__``, closure cells, default arguments,
``jax.jit`` wrappers, the key data of a typed PRNG key - so the first path that
reaches an object is the shortest name for it.

* ``find_holders`` (``%jax_live``): many target arrays at once, given as ids
  mapped to a group; three levels; per target the best kind of holder and per
  group the paths, list indices merged into runs: ``debug_cache[0..9]``,
  ``hist['acts'][0]``, ``trainer.history[2]``, ``Out[12]``.
* ``find_held`` (``%jax_leaks``, ``%jax_explain``): targets found by a test
  (is it a tracer?), deeper, through user classes, modules, methods and default
  arguments too; up to three paths per target: ``leaked[0]``,
  ``cache.store['h']``, ``box[0] (closed over by g)``, ``memo[0] (default
  argument of f)``.

The walk only reads: it looks at ``__dict__``/``__slots__``/closure cells
directly and never calls a property, ``__getattr__``, ``__repr__`` or any
other user code. It does not descend into arrays, library modules and classes
or IPython's own objects. A library's pytree (an Optax state, a Flax or Equinox
module) is flattened as JAX flattens it, its leaves one step below it and named
by ``keystr`` (``opt_state.inner_opt_state[0].mu['w1']``): ``holders.library_pytrees``. It costs time in proportion to the number of values
within reach (each container is visited once, whatever the number of targets),
bounded by depth and a budget, and holds references to nothing after it
returns: results are ids, strings and numbers.

Modules: ``roots`` (where the walk starts), ``walk`` (the walk itself),
``library_pytrees`` (libraries' pytrees met on the way), ``library_records`` (a
tracer a library keeps in its record of the user's module: nnx.jit's graph
definition); this one turns what the walk reaches into holders.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from jaxmagic.probes._live.holders.roots import (
    KIND_NAME,
    KIND_ORDER,
    KIND_OUTPUT,
    KIND_TRACEBACK,
    namespace_roots,
    traceback_roots,
    user_roots,
)
from jaxmagic.probes._live.holders.walk import (
    BUDGET,
    CLASSES,
    CLOSURES,
    DEFAULTS,
    KEY_DATA,
    LEAK_EDGES,
    LIVE_EDGES,
    METHODS,
    SETS,
    RootHits,
    walk,
)

__all__ = [
    "BUDGET",
    "CLASSES",
    "CLOSURES",
    "DEFAULTS",
    "KEY_DATA",
    "KIND_NAME",
    "KIND_ORDER",
    "KIND_OUTPUT",
    "KIND_TRACEBACK",
    "LEAK_EDGES",
    "LIVE_EDGES",
    "METHODS",
    "SETS",
    "Held",
    "HolderSearch",
    "find_held",
    "find_holders",
    "namespace_roots",
    "traceback_roots",
    "user_roots",
    "walk",
]


@dataclasses.dataclass
class HolderSearch:
    """What ``find_holders`` found: per target id its best holder kind; per group the paths to them."""

    best_kind: dict[int, str]  # target id -> KIND_* of its best holder
    runs: dict[tuple[int, str, str], list[int]]  # (group, kind, container) -> [min, max, count] of int indices
    group_labels: dict[int, list[tuple[str, str]]]  # group -> [(kind, path)] of other holders, first few
    label_counts: dict[int, int] = dataclasses.field(default_factory=dict)  # group -> all such paths found
    # (group, kind, (path before, path after) its first integer index) -> [min, max, count]: the holders
    # ``train_metrics[0]['preds']`` ... ``train_metrics[39]['preds']`` as one run
    index_runs: dict[tuple[int, str, tuple[str, str]], list[int]] = dataclasses.field(default_factory=dict)
    kind_counts: dict[tuple[int, str], int] = dataclasses.field(default_factory=dict)  # (group, best kind) -> targets
    # (group, kind, container path) -> [targets it holds directly, id of the first]: a list, dict, deque,
    # tuple or object holding arrays itself (``metrics``, ``state.history``, ``hist['acts']``)
    containers: dict[tuple[int, str, str], list[int]] = dataclasses.field(default_factory=dict)
    index_first: dict[tuple[int, str, tuple[str, str]], int] = dataclasses.field(
        default_factory=dict
    )  # index_runs key -> its first target
    # (group, kind, container path) -> the targets it holds directly (the keys of ``containers``), and the
    # targets the search met more than once (two names, a name and an element, a library pytree's leaf and
    # an attribute): an array one container holds beside like arrays that others hold too is a copy it
    # alone may keep. A set of the few met again, not a count per target: counting each of 100,000 arrays
    # held once by one list cost more than grouping them (issue 56).
    members: dict[tuple[int, str, str], list[int]] = dataclasses.field(default_factory=dict)
    met_again: set[int] = dataclasses.field(default_factory=set)
    visited: int = 0  # containers and values looked at
    truncated: bool = False  # the budget ran out before the search was complete


def find_holders(
    group_of: dict[int, int],
    roots: Iterable[tuple[str, Any, str]],
    *,
    max_depth: int = 3,
    labels_per_group: int = 12,
    budget: int = BUDGET,
) -> HolderSearch:
    """Search from ``roots`` for the objects whose ids are keys of ``group_of``.

    ``group_of`` maps each target id to a group number (the caller's grouping
    of arrays). Results are kept per target (the best kind of holder) and per
    group (the paths, with list indices merged into runs such as
    ``debug_cache[0..9]``). ``max_depth`` is how many steps below a root are
    followed (3 reaches ``trainer.history[0]`` and ``hist['acts'][3]``).
    ``budget`` bounds the number of values looked at.
    """
    recorder = _HolderRecorder(HolderSearch(best_kind={}, runs={}, group_labels={}), labels_per_group)
    result = recorder.result
    result.visited, result.truncated, root_hits = walk(
        roots,
        on_items=recorder.on_items,
        on_hit=recorder.on_hit,
        target_ids=group_of,
        max_depth=max_depth,
        edges=LIVE_EDGES,
        budget=budget,
    )
    # Arrays bound to names directly are recorded last, so that the bulk of a big list lands in
    # an empty dict (no copy); the order does not change the result.
    _record_root_hits(result, root_hits, labels_per_group)
    return result


class _HolderRecorder:
    """The walk's callbacks for ``find_holders``: each hit written into one ``HolderSearch``.

    The walk calls them once per target found (a list of like arrays at once), so they read the
    result's dicts directly and make no text for a target beyond its path.
    """

    def __init__(self, result: HolderSearch, labels_per_group: int):
        self.result = result
        self.labels_per_group = labels_per_group

    def mark(self, target: int, group: int, kind: str) -> None:
        """``target`` held by a holder of ``kind``: kept if it is the best kind seen for it."""
        best_kind, kind_counts = self.result.best_kind, self.result.kind_counts
        current = best_kind.get(target)
        if current is None:
            best_kind[target] = kind
            kind_counts[(group, kind)] = kind_counts.get((group, kind), 0) + 1
            return
        self.result.met_again.add(target)
        if KIND_ORDER[kind] < KIND_ORDER[current]:
            best_kind[target] = kind
            kind_counts[(group, current)] -= 1
            kind_counts[(group, kind)] = kind_counts.get((group, kind), 0) + 1

    def hold(self, group: int, kind: str, container: str, targets: list[int]) -> None:
        """``container`` (a path) holds ``targets`` of ``group`` itself."""
        key = (group, kind, container)
        held = self.result.containers.get(key)
        if held is None:
            self.result.containers[key] = [len(targets), targets[0]]
            self.result.members[key] = list(targets)
        else:
            held[0] += len(targets)
            self.result.members[key].extend(targets)

    def on_hit(self, target: int, group: int, kind: str, path: str, _depth: int, container: str = "") -> None:
        result = self.result
        self.mark(target, group, kind)
        if container:
            self.hold(group, kind, container, [target])
        result.label_counts[group] = result.label_counts.get(group, 0) + 1
        index = _FIRST_INDEX.search(path)
        if index is not None:  # an element of a list of containers: merged into a run with its siblings
            number = int(index.group(1))
            key = (group, kind, (path[: index.start()], path[index.end() :]))
            run = result.index_runs.get(key)
            if run is None:
                result.index_runs[key] = [number, number, 1]
                result.index_first[key] = target
            else:
                run[0], run[1], run[2] = min(run[0], number), max(run[1], number), run[2] + 1
            return
        listed = result.group_labels.setdefault(group, [])
        if len(listed) < self.labels_per_group:
            listed.append((kind, path))

    def on_items(
        self,
        indices: Sequence[int],
        targets: list[int],
        groups: list[int],
        kind: str,
        container: str,
        _note: str,
        _depth: int,
    ) -> None:
        """The elements of one list/tuple that are targets, in index order."""
        one_group = groups.count(groups[0]) == len(groups)
        if one_group:
            self.hold(groups[0], kind, container, targets)
        else:
            for target, group in zip(targets, groups):
                self.hold(group, kind, container, [target])
        if one_group and self.result.best_kind.keys().isdisjoint(targets):
            self._record_like_arrays(indices, targets, groups[0], kind, container)
            return
        runs = self.result.runs
        for index, target, group in zip(indices, targets, groups):
            self.mark(target, group, kind)
            _extend_run(runs, (group, kind, container), index, index, 1)

    def _record_like_arrays(
        self, indices: Sequence[int], targets: list[int], group: int, kind: str, container: str
    ) -> None:
        """One group, none seen before (a list of like arrays): the run and the counts at once."""
        result = self.result
        best_kind = result.best_kind
        known = len(best_kind)
        if best_kind:
            best_kind.update(zip(targets, itertools.repeat(kind)))
        else:  # the first hits: the dict itself, not a copy
            result.best_kind = best_kind = dict.fromkeys(targets, kind)
        if len(best_kind) - known < len(targets):  # one array at two indices of the list: met again
            result.met_again.update(t for t, n in collections.Counter(targets).items() if n > 1)
        result.kind_counts[(group, kind)] = result.kind_counts.get((group, kind), 0) + len(targets)
        _extend_run(result.runs, (group, kind, container), indices[0], indices[-1], len(indices))


def _extend_run(
    runs: dict[tuple[int, str, str], list[int]], key: tuple[int, str, str], low: int, high: int, count: int
) -> None:
    """A run of list indices ``[min, max, count]`` grown by ``count`` indices from ``low`` to ``high``."""
    run = runs.get(key)
    if run is None:
        runs[key] = [low, high, count]
    else:
        run[0], run[1], run[2] = min(run[0], low), max(run[1], high), run[2] + count


def _record_root_hits(result: HolderSearch, root_hits: RootHits, labels_per_group: int) -> None:
    """The roots that are targets (arrays bound to names, ``Out[n]`` entries), in root order.

    The names of a namespace come first and are of the best kind: while they name distinct
    arrays not reached otherwise (a namespace of a million names, each bound to an array),
    they are recorded by C loops (a dict, a Counter) and only the first labels of each group
    are looked at one by one; the rest, one hit at a time.
    """
    ids, groups, kinds, labels = root_hits
    if not ids:
        return
    best_kind, kind_counts, label_counts, group_labels = (
        result.best_kind,
        result.kind_counts,
        result.label_counts,
        result.group_labels,
    )
    names = len(kinds)
    for kind in KIND_ORDER:
        if kind != KIND_NAME and kind in kinds:
            names = min(names, kinds.index(kind))
    fresh = dict.fromkeys(ids[:names] if names < len(ids) else ids, KIND_NAME)
    if names and len(fresh) == names and best_kind.keys().isdisjoint(fresh):
        if best_kind:
            best_kind.update(fresh)
        else:
            result.best_kind = best_kind = fresh
        per_group = collections.Counter(groups[:names] if names < len(groups) else groups)
        unlisted = 0  # groups with room for more labels
        for group, count in per_group.items():
            kind_counts[(group, KIND_NAME)] = kind_counts.get((group, KIND_NAME), 0) + count
            label_counts[group] = label_counts.get(group, 0) + count
            if len(group_labels.setdefault(group, [])) < labels_per_group:
                unlisted += 1
        for group, label in zip(groups, labels[:names] if names < len(labels) else labels):
            if not unlisted:
                break
            listed = group_labels[group]
            if len(listed) < labels_per_group:
                listed.append((KIND_NAME, label))
                unlisted -= len(listed) == labels_per_group
        start = names
    else:
        start = 0
    del fresh
    met_again = result.met_again
    for target, group, kind, label in zip(ids[start:], groups[start:], kinds[start:], labels[start:]):
        current = best_kind.get(target)
        if current is not None:
            met_again.add(target)
        if current is None or KIND_ORDER[kind] < KIND_ORDER[current]:
            best_kind[target] = kind
            if current is not None:
                kind_counts[(group, current)] -= 1
            kind_counts[(group, kind)] = kind_counts.get((group, kind), 0) + 1
        label_counts[group] = label_counts.get(group, 0) + 1
        already = group_labels.get(group)
        if already is None:
            group_labels[group] = [(kind, label)]
        elif len(already) < labels_per_group:
            already.append((kind, label))


_FIRST_INDEX = re.compile(r"\[(\d+)\]")


# -- %jax_leaks: tracers, found by a test -----------------------------------------


@dataclasses.dataclass(frozen=True)
class Held:
    """One place where a target object is held."""

    path: str  # "cache.store['h']", "box[0] (closed over by g)"
    depth: int  # steps from the namespace


def find_held(
    roots: Iterable[tuple[str, Any, str]],
    is_target: Callable[[Any], bool],
    *,
    max_depth: int = 8,
    max_items: int = 10_000,
    budget: int = BUDGET,
) -> dict[int, list[Held]]:
    """``{id(target): [Held, ...]}`` for every object reachable from ``roots`` for which
    ``is_target`` is true (it is called on every object reached, and should keep the
    targets it accepts: their ids are only unique while they live).

    Paths are shortest first (breadth-first search); each target gets at most
    three. Deep: through user classes, modules, methods and default arguments,
    with closure variables and defaults named on their own
    (``box[0] (closed over by g)``).
    """
    found: dict[int, dict[str, int]] = {}

    def on_hit(target: int, _key: Any, _kind: str, path: str, depth: int, _container: str = "") -> None:
        found.setdefault(target, {}).setdefault(path, depth)

    def on_items(
        indices: Sequence[int], targets: list[int], _keys: list[Any], _kind: str, label: str, note: str, depth: int
    ) -> None:
        for index, target in zip(indices, targets):
            found.setdefault(target, {}).setdefault(f"{label}[{index}]{note}", depth)

    _visited, _truncated, root_hits = walk(
        roots,
        on_items=on_items,
        on_hit=on_hit,
        is_target=is_target,
        max_depth=max_depth,
        edges=LEAK_EDGES,
        max_items=max_items,
        restart_names=True,
        budget=budget,
    )
    # Targets in the order a breadth-first search meets them: names first.
    places: dict[int, dict[str, int]] = {}
    for target, label in zip(root_hits.ids, root_hits.labels):
        places.setdefault(target, {}).setdefault(label, 0)
    for target, paths in found.items():
        listed = places.setdefault(target, {})
        for path, depth in paths.items():
            listed.setdefault(path, depth)
    return {
        target: [Held(path, depth) for path, depth in sorted(paths.items(), key=lambda item: item[1])[:3]]
        for target, paths in places.items()
    }
