"""``%jax_live`` with 20,000 and 100,000 small live arrays, and how the holder search scales.

The notebook holds 20,000 small arrays in a list (``arrays``) beside a few
ordinary variables, then 100,000. In one in-process IPython shell, taking turns:

* ``magic``:    ``%jax_live -o rep`` - gc, ``jax.live_arrays()``, grouping by
  (shape, dtype, placement), the search for holders in the namespace, the
  report and its display;
* ``baseline``: the hand-written snapshot the goal compares against (<= 1.15x at 20,000 arrays,
  issue 56; <= 1.3x at 100,000, issue 17):
  ``gc.collect()``, ``jax.live_arrays()`` and a ``Counter`` over ``(shape, dtype)``;
* ``probe``:    ``jaxmagic.probes.live(namespace=globals())`` as a plain cell, for
  information: the magic without parsing its line and displaying the report;
* ``chapter``:  the chapter's ``live_summary()`` (``str(a.dtype)`` and ``a.nbytes``
  per array), for information: the way most people write it.

Each look is timed by wall-clock and in the thread's CPU time (steady when the machine is shared;
both include the ``gc.collect()`` every variant makes, most of a look at 20,000 arrays), and the
rows give the milliseconds per look beside the baseline's.

A second measurement times the holder search alone (``find_holders``) for
namespaces of 1,000, 10,000 and 100,000 names each holding one array: linear
growth means the 100,000-name search takes about ten times the 10,000-name one
(a search that compared every name with every array would take a hundred times),
timed as the thread's CPU time, best of 5, with the collector on. A million names is
left out: making a million arrays one dispatch at a time takes longer than the budget
of this benchmark (the search itself takes about 2 s; see docs/overhead.md for the figure).
"""

from __future__ import annotations

import statistics
import time

from harness import Row, alternate_by_both_clocks, make_shell, median, run_cell

SIZES = {20_000: 1.15, 100_000: 1.3}  # live arrays -> goal of %jax_live against the baseline
REPETITIONS = 9

SETUP = """
import gc
from collections import Counter
import jax, jax.numpy as jnp
import jaxmagic.probes
base = jnp.arange(3.0)
arrays = []
params = {"w": jnp.ones((256, 256)), "b": jnp.zeros(256)}
history = [jnp.ones((64, 64)) for _ in range(10)]
"""


def grown_to(arrays: int) -> str:
    """A cell making ``arrays`` hold that many arrays."""
    return f"arrays += [base + 0 for _ in range({arrays} - len(arrays))]\njax.block_until_ready(arrays)"


CELLS = {
    "magic": "%jax_live -o rep",
    "probe": "_rep = jaxmagic.probes.live(namespace=globals())",
    "baseline": "gc.collect()\n_live = jax.live_arrays()\n_groups = Counter((a.shape, a.dtype) for a in _live)\n"
    "del _live",
    "chapter": "gc.collect()\n_live = jax.live_arrays()\n"
    "_summary = Counter((a.shape, str(a.dtype)) for a in _live), sum(a.nbytes for a in _live)\n"
    "del _live",
}


def holder_search_seconds(names: int) -> float:
    import gc

    import jax.numpy as jnp

    from jaxmagic.probes._live.holders.search import find_holders, namespace_roots

    base = jnp.arange(3.0)
    namespace = {f"v{i}": base + 0 for i in range(names)}
    targets = {id(v): 0 for v in namespace.values()}
    best = float("inf")
    for _ in range(5):
        gc.collect()
        # CPU time of this thread: the machine is shared, and a 100,000-name search that waits
        # for a core would look superlinear.
        start = time.thread_time()
        search = find_holders(targets, namespace_roots(namespace))
        best = min(best, time.thread_time() - start)
    assert len(search.best_kind) == names
    del namespace, targets
    return best


def rows_at(shell, arrays: int, goal: float) -> list[Row]:
    """The rows of %jax_live with ``arrays`` arrays in the list (the shell ran SETUP)."""
    run_cell(shell, grown_to(arrays))
    for cell in CELLS.values():  # warm up
        run_cell(shell, cell)
    cpu, wall = alternate_by_both_clocks(shell, CELLS, REPETITIONS)
    report = shell.user_ns["rep"]
    held = report.group((3,))
    assert held is not None and held.count >= arrays and held.holders[0].startswith("arrays[0..")

    def ratios(times: dict[str, list[float]], name: str, baseline: str) -> list[float]:
        return [m / b for m, b in zip(times[name], times[baseline])]

    def per_look(times: dict[str, list[float]], name: str, baseline: str = "baseline") -> str:
        return f"{median(times[name]) * 1e3:.1f} ms a look against {median(times[baseline]) * 1e3:.1f} ms"

    q1, _, q3 = statistics.quantiles(ratios(wall, "magic", "baseline"), n=4)
    return [
        Row(
            f"%jax_live, {arrays:,} live arrays vs live_arrays()+Counter",
            median(wall["magic"]),
            median(wall["baseline"]),
            goal=goal,
            values=ratios(wall, "magic", "baseline"),
            note=f"wall-clock, {REPETITIONS} reps; middle half {q1:.2f}-{q3:.2f}; {per_look(wall, 'magic')}; "
            f"holders named: {held.holders[0]}",
        ),
        Row(
            f"%jax_live, {arrays:,} live arrays vs live_arrays()+Counter, thread CPU",
            median(cpu["magic"]),
            median(cpu["baseline"]),
            goal=goal,
            values=ratios(cpu, "magic", "baseline"),
            note=f"the same runs in the thread's CPU time (steady under load); {per_look(cpu, 'magic')}",
        ),
        Row(
            f"probes.live (no magic, no display) vs live_arrays()+Counter, {arrays:,} arrays",
            median(cpu["probe"]),
            median(cpu["baseline"]),
            values=ratios(cpu, "probe", "baseline"),
            note=f"thread CPU; {per_look(cpu, 'probe')}; for information",
        ),
        Row(
            f"%jax_live vs the chapter's live_summary(), {arrays:,} arrays",
            median(cpu["magic"]),
            median(cpu["chapter"]),
            values=ratios(cpu, "magic", "chapter"),
            note="str(dtype) and nbytes per array; thread CPU; for information",
        ),
    ]


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    rows = [row for arrays, goal in SIZES.items() for row in rows_at(shell, arrays, goal)]
    run_cell(shell, "del arrays, base, history, params, rep, _rep")

    sizes = {n: holder_search_seconds(n) for n in (1_000, 10_000, 100_000)}
    return rows + [
        Row(
            "holder search, 100,000 vs 10,000 names",
            sizes[100_000],
            sizes[10_000],
            note=f"linear = 10x, quadratic = 100x; 1,000 names: {sizes[1_000] * 1e3:.1f} ms",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
