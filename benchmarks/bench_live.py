"""``%jax_live`` with 100,000 small live arrays, and how the holder search scales.

The notebook holds 100,000 small arrays in a list (``arrays``) beside a few
ordinary variables. In one in-process IPython shell, taking turns:

* ``magic``:    ``%jax_live -o rep`` - gc, ``jax.live_arrays()``, grouping by
  (shape, dtype, placement), the search for holders in the namespace, the
  report and its display;
* ``baseline``: the hand-written snapshot the goal compares against (<= 1.3x, issue 17):
  ``gc.collect()``, ``jax.live_arrays()`` and a ``Counter`` over ``(shape, dtype)``;
* ``probe``:    ``jaxmagic.probes.live(namespace=globals())`` as a plain cell, for
  information: the magic without parsing its line and displaying the report;
* ``chapter``:  the chapter's ``live_summary()`` (``str(a.dtype)`` and ``a.nbytes``
  per array), for information: the way most people write it.

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

from harness import Row, make_shell, median, run_cell, timed

ARRAYS = 100_000
REPETITIONS = 9

SETUP = f"""
import gc
from collections import Counter
import jax, jax.numpy as jnp
import jaxmagic.probes
base = jnp.arange(3.0)
arrays = [base + 0 for _ in range({ARRAYS})]
jax.block_until_ready(arrays)
params = {{"w": jnp.ones((256, 256)), "b": jnp.zeros(256)}}
history = [jnp.ones((64, 64)) for _ in range(10)]
"""

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

    from jaxmagic.probes._support.holders.search import find_holders, namespace_roots

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


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for cell in CELLS.values():  # warm up
        run_cell(shell, cell)
    times: dict[str, list[float]] = {name: [] for name in CELLS}
    order = list(CELLS)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=CELLS[name]: run_cell(shell, c)))
    report = shell.user_ns["rep"]
    held = report.group((3,))
    assert held is not None and held.count >= ARRAYS and held.holders[0].startswith("arrays[0..")
    ratios = [m / b for m, b in zip(times["magic"], times["baseline"])]
    chapter = [m / c for m, c in zip(times["magic"], times["chapter"])]
    probe = [p / b for p, b in zip(times["probe"], times["baseline"])]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    run_cell(shell, "del arrays, base, history, params, rep, _rep")

    sizes = {n: holder_search_seconds(n) for n in (1_000, 10_000, 100_000)}
    return [
        Row(
            f"%jax_live, {ARRAYS:,} live arrays vs live_arrays()+Counter",
            median(times["magic"]),
            median(times["baseline"]),
            goal=1.3,
            values=ratios,
            note=f"{REPETITIONS} reps; middle half {q1:.2f}-{q3:.2f}; holders named: {held.holders[0]}",
        ),
        Row(
            "probes.live (no magic, no display) vs live_arrays()+Counter",
            median(times["probe"]),
            median(times["baseline"]),
            values=probe,
            note="for information",
        ),
        Row(
            "%jax_live vs the chapter's live_summary()",
            median(times["magic"]),
            median(times["chapter"]),
            values=chapter,
            note="str(dtype) and nbytes per array; for information",
        ),
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
