"""What ``%%jax_compiles`` costs, and that its report stays bounded.

1. Overhead on a cell that makes 10,000 calls of an already compiled jitted
   function: ``%%jax_compiles`` + body against the plain body, both through
   ``shell.run_cell`` in one in-process IPython shell, alternating; the median
   of the per-repetition ratios (goal <= 1.05x). Nothing compiles in that cell,
   so this is the price of the listeners and the switched-on log settings.
   The same for ``%%jax_transfers`` (its sys.monitoring LINE events run on
   every line of the user's code; goal <= 1.20x) and, for information, the
   fixed cost per cell.
   The same on a long loop of a small jitted step (20,000 calls of a
   two-parameter SGD step, ~2x more calls per cell at a cheaper call): what
   a training loop left running under the magic pays per call (goal <= 1.05x).
   The clean loops give no finding: the long loop no compilation (status ok),
   the 10,000-call loop no implicit transfer.
2. A block compiling 1,000 distinct shapes of one function, under the probe:
   the report is built (document, static HTML, ``to_dict``) and measured
   against the same block with 100 shapes. What is kept per compilation is
   bounded, so the report's size should barely grow (a ratio near 1, not 10),
   and building it should stay in milliseconds. The block itself is also timed
   with and without the probe, in CPU time of the process (JAX's cache-miss
   explanations, which cost more with every compilation, are switched off
   after the first few).
"""

from __future__ import annotations

import importlib
import json
import time

from harness import Row, alternate, make_shell, median, per_call_benchmark, quartiles, quiet, run_cell

EXPLAIN_LIMIT = importlib.import_module("jaxmagic.probes._compiles").EXPLAIN_LIMIT

CALLS = 10_000
REPETITIONS = 15

SETUP = """
import jax, jax.numpy as jnp, numpy as np

@jax.jit
def step(x):
    return x * 0.5 + 1.0

x = jnp.ones(8)
step(x).block_until_ready()

@jax.jit
def small_step(w, b, xb, yb):
    err = w * xb + b - yb
    return w - 0.1 * jnp.mean(err * xb), b - 0.1 * jnp.mean(err)

xb = jnp.linspace(-1.0, 1.0, 16)
yb = 2.0 * xb + 0.5
w0, b0 = jnp.float32(0.0), jnp.float32(0.0)
jax.block_until_ready(small_step(w0, b0, xb, yb))
"""

BODY = f"""
y = x
for _ in range({CALLS}):
    y = step(y)
y.block_until_ready()
""".strip()

LONG_CALLS = 20_000
LONG_BODY = f"""
w, b = w0, b0
for _ in range({LONG_CALLS}):
    w, b = small_step(w, b, xb, yb)
w.block_until_ready()
""".strip()

CELLS = {
    "compiles": "%%jax_compiles\n" + BODY,
    "transfers": "%%jax_transfers\n" + BODY,
    "plain": BODY,
}
LONG_CELLS = {"compiles": "%%jax_compiles\n" + LONG_BODY, "plain": LONG_BODY}
EMPTY_CELLS = {"compiles": "%%jax_compiles\ny = x", "plain": "y = x"}


def instruction_cells(steps: int) -> dict[str, str]:
    """The cells for ``benchmarks/instructions.py``, baseline first: the loop with ``steps`` calls."""
    body = BODY.replace(f"range({CALLS})", f"range({steps})")
    guarded = 'with jax.transfer_guard("log"):\n' + "".join(f"    {line}\n" for line in body.splitlines())
    return {
        "plain": body,
        "compiles": "%%jax_compiles\n" + body,
        "transfers": "%%jax_transfers\n" + body,
        "guard": guarded,  # the bare tool %%jax_transfers switches on, for comparison
    }


def compile_shapes(n: int, probe: bool):
    """Compile a small function for ``n`` new shapes; return (seconds, report or None)."""
    import jax
    import jax.numpy as jnp

    from jaxmagic import probes

    def total(v):  # a new function object per run: its cache starts empty
        return jnp.sum(v * 2.0)

    jitted = jax.jit(total)
    shapes = [jax.ShapeDtypeStruct((k + 1,), jnp.float32) for k in range(n)]
    # CPU time of this process (XLA's threads included): steadier than wall time on a shared machine.
    start = time.process_time()
    if probe:
        with quiet(), probes.compiles() as report:
            for s in shapes:
                jitted.lower(s).compile()
    else:
        report = None
        for s in shapes:
            jitted.lower(s).compile()
    return time.process_time() - start, report


def build(report) -> tuple[float, int, int]:
    """Seconds to build the report's document, HTML and dict; sizes of the HTML and the JSON."""
    from jaxmagic.render import static_bundle

    start = time.perf_counter()
    html = static_bundle(report.document())["text/html"]
    data = json.dumps(report.to_dict())
    return time.perf_counter() - start, len(html), len(data)


def ratio_rows() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    for _ in range(2):  # warm everything up, including the first use of each magic
        for cell in list(CELLS.values()) + list(LONG_CELLS.values()) + list(EMPTY_CELLS.values()):
            run_cell(shell, cell)
    # The findings on the clean loops, once, outside the timings: nothing compiled, nothing transferred.
    run_cell(shell, "%%jax_compiles -o _long_check\n" + LONG_BODY)
    run_cell(shell, "%%jax_transfers -o _transfers_check\n" + BODY)
    long_check, transfers_check = shell.user_ns["_long_check"], shell.user_ns["_transfers_check"]
    times = alternate(shell, CELLS, REPETITIONS)
    long_times = alternate(shell, LONG_CELLS, REPETITIONS)
    empty = alternate(shell, EMPTY_CELLS, REPETITIONS)
    compiles_vs_plain = [m / p for m, p in zip(times["compiles"], times["plain"])]
    transfers_vs_plain = [m / p for m, p in zip(times["transfers"], times["plain"])]
    long_vs_plain = [m / p for m, p in zip(long_times["compiles"], long_times["plain"])]

    _, small_report = compile_shapes(100, probe=True)
    plain_seconds, _ = compile_shapes(1000, probe=False)
    big_seconds, big_report = compile_shapes(1000, probe=True)
    build(small_report)  # the first build imports the renderers: not part of the figure
    small_build, small_html, small_json = build(small_report)
    big_build, big_html, big_json = build(big_report)
    assert big_report.count("total") == 1000, big_report.summary  # the count itself is exact

    per = f"{CALLS} calls of a compiled jitted function/cell, {REPETITIONS} reps"
    return [
        Row(
            "%%jax_compiles vs plain cell",
            median(times["compiles"]),
            median(times["plain"]),
            goal=1.05,
            values=compiles_vs_plain,
            note=f"{per}; middle half of the ratios: {quartiles(compiles_vs_plain)}",
        ),
        Row(
            "%%jax_compiles vs plain cell, long loop of a small step",
            median(long_times["compiles"]),
            median(long_times["plain"]),
            goal=1.05,
            values=long_vs_plain,
            note=f"{LONG_CALLS} calls of a small jitted SGD step/cell, {REPETITIONS} reps; "
            f"middle half of the ratios: {quartiles(long_vs_plain)}",
        ),
        Row(
            "the clean long loop gives no finding",
            compare="check",
            goal=True,
            value=long_check.total_compilations == 0 and long_check.status.value == "ok",
            note=f"{long_check.total_compilations} compilation(s), status {long_check.status.value}",
        ),
        Row(
            "%%jax_compiles fixed cost per cell",
            median(empty["compiles"]),
            median(empty["plain"]),
            compare="difference",
            values=[m - p for m, p in zip(empty["compiles"], empty["plain"])],
            note="a one-line cell (y = x), magic minus plain; for information",
        ),
        Row(
            "%%jax_transfers vs plain cell",
            median(times["transfers"]),
            median(times["plain"]),
            goal=1.20,
            values=transfers_vs_plain,
            note=f"{per}; sys.monitoring LINE events on the cell's lines; "
            f"middle half of the ratios: {quartiles(transfers_vs_plain)}",
        ),
        Row(
            "%%jax_transfers: the clean loop gives no finding",
            compare="check",
            goal=True,
            value=transfers_check.total == 0 and transfers_check.status.value == "ok",
            note=f"{transfers_check.total} implicit transfer(s), status {transfers_check.status.value}",
        ),
        Row(
            "1,000 shapes: report HTML size vs 100 shapes",
            compare="ratio",
            goal=1.5,
            value=big_html / small_html,
            note=f"{big_html:,} vs {small_html:,} characters of HTML",
        ),
        Row(
            "1,000 shapes: report JSON size vs 100 shapes",
            compare="ratio",
            goal=1.5,
            value=big_json / small_json,
            note=f"{big_json:,} vs {small_json:,} characters of to_dict() JSON",
        ),
        Row(
            "1,000 shapes: building the report",
            big_build,
            small_build,
            compare="difference",
            goal=0.1,
            note="document + static HTML + to_dict, 1,000 shapes minus 100 shapes",
        ),
        Row(
            "1,000 shapes compiled under the probe vs without (CPU time)",
            big_seconds,
            plain_seconds,
            note=f"{len(big_report.compilations)} compilations kept in full; JAX's explanations asked for the "
            f"first {EXPLAIN_LIMIT} only; for information",
        ),
    ]


def run() -> list[Row]:
    """The ratios above, then the microseconds added per call (``harness.per_call_rows``)."""
    return ratio_rows() + per_call_benchmark("compiles", "transfers")


if __name__ == "__main__":
    from harness import table

    print(table(run()))
