"""Arrays a container of the user's alone keeps alive, beside like arrays that other names hold.

``bs = jax.live_arrays()`` kept across a loop, ``history.append(x)``, ``snapshots += [params_leaf]``: one list
(or dict, or object) holds the array a name holds now *and* earlier arrays of the same shape that nothing
else refers to. Those are alive only because of the container - a finding, whatever their number (a
container of 100 or more like arrays is the other finding, ``ContainerFinding``). A container whose arrays
nobody else holds (``params``, an Optax state) is data the user keeps, not a copy: no finding.

The evidence is two-fold: the holder search met the array once, in that container, while the container
also holds like arrays the search met elsewhere; then its reference count confirms that the container is
the only object referring to it (a closure, a frame or a cache the search does not walk would count), so
dropping it from the container frees it - said as checked, not as a suggestion. ``gc.get_referrers`` would
say the same, at a heap scan per call whose cost grows with the number of arrays asked about.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Hashable
from typing import TYPE_CHECKING

from jaxmagic.probes._live.holders.search import KIND_NAME, HolderSearch
from jaxmagic.probes._live.report import CONTAINER_ARRAYS, KeptAlone, LiveGroup

if TYPE_CHECKING:
    import jax


def kept_alone(
    search: HolderSearch,
    groups: list[LiveGroup],
    group_index: dict[Hashable, int],
    subject: list[jax.Array],
    ours: list[list[jax.Array]],
) -> list[KeptAlone]:
    """The containers that alone keep arrays alive beside like arrays others hold (``ours``: the probe's
    own lists of the arrays, each holding every array of ``subject``). A container of ``CONTAINER_ARRAYS``
    or more like arrays is the container finding's, not told twice."""
    met_again = search.met_again
    candidates: dict[tuple[int, str], list[int]] = {}
    for (tag, kind, container), targets in search.members.items():
        if kind != KIND_NAME or len(targets) >= CONTAINER_ARRAYS or met_again.isdisjoint(targets):
            continue
        alone = [t for t in targets if t not in met_again]
        if alone:
            candidates.setdefault((group_index[tag], container), []).extend(alone)
    wanted = set(itertools.chain.from_iterable(candidates.values()))
    if not wanted:
        return []
    confirmed = _held_once(subject, wanted, ours)
    found = []
    for (group, container), alone in candidates.items():
        alone = [t for t in alone if t in confirmed]
        if not alone:
            continue
        g = groups[group]
        others = [h for h in g.holders if not h.startswith(container)]
        found.append(
            KeptAlone(
                container=container,
                count=len(alone),
                shape=tuple(g.shape),
                dtype=g.dtype,
                bytes=len(alone) * g.bytes_each,
                others=others[:3],
                fix=(
                    f"Drop the reference: `del {container}` (or rebind it) once you are done with it, or keep only "
                    f"what you need from it - Python numbers (`float(v)`), shapes, or the latest array. Checked: "
                    f"nothing but `{container}` refers to these {len(alone)} arrays (their reference counts), so "
                    "that frees them."
                ),
            )
        )
    found.sort(key=lambda f: (-f.bytes, -f.count))
    return found


def _held_once(subject: list[jax.Array], wanted: set[int], ours: list[list[jax.Array]]) -> set[int]:
    """Of the ``wanted`` array ids, those exactly one object refers to besides ``ours`` (the probe's own
    lists, each holding every array of ``subject``): their reference count, less ours, is that of an
    object one list holds (measured the same way here, so the interpreter's own counting cancels out)."""
    lists = len({id(held) for held in ours})
    one = object()
    box = [one]
    expected = sys.getrefcount(one) + lists
    confirmed = set()
    for array in itertools.compress(subject, map(wanted.__contains__, map(id, subject))):
        if sys.getrefcount(array) == expected:
            confirmed.add(id(array))
    del box
    return confirmed
