"""Shared pieces of the benchmarks: the Row every benchmark returns, and helpers.

A benchmark module is ``benchmarks/bench_<name>.py`` with a ``run() -> list[Row]``
function; ``run_all.py`` finds it by its file name. Every figure in a Row is
measured in the same run as its baseline, so the ratios compare like with like
on whatever machine runs them. Nothing here asserts on timings: goals are
printed next to the figures, for a person to read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator


@dataclasses.dataclass
class Row:
    """One line of the results table.

    ``compare`` says how ``measured`` relates to ``baseline``:

    * ``"ratio"``: measured / baseline (``goal`` is the largest acceptable ratio);
    * ``"difference"``: measured - baseline, in seconds (``goal`` is the largest acceptable difference);
    * ``"check"``: a yes/no fact in ``value`` (``goal`` is the expected value).

    ``value`` overrides the figure computed from ``measured`` and ``baseline``,
    e.g. the median of per-repetition ratios, which is steadier than the ratio
    of medians when the machine's speed drifts during the run; ``values`` (the
    figure of each run) sets it and its min-max (``spread``), printed beside it.
    """

    name: str
    measured: float | None = None  # seconds (median)
    baseline: float | None = None  # seconds (median)
    compare: str = "ratio"
    goal: float | bool | None = None
    value: float | bool | None = None
    note: str = ""
    spread: tuple[float, float] | None = None  # min-max of the figure over the runs (same unit as ``result``)
    values: list[float] | None = None  # the figure of each run: sets ``value`` (their median) and ``spread``

    def __post_init__(self) -> None:
        if self.values:
            self.value = statistics.median(self.values)
            self.spread = (min(self.values), max(self.values))

    @property
    def result(self) -> float | bool | None:
        if self.value is not None:
            return self.value
        if self.measured is None or self.baseline is None:
            return None
        if self.compare == "ratio":
            return self.measured / self.baseline
        if self.compare == "difference":
            return self.measured - self.baseline
        return None

    @property
    def meets_goal(self) -> bool | None:
        result = self.result
        if self.goal is None or result is None:
            return None
        if self.compare == "check":
            return result == self.goal
        return result <= self.goal

    def formatted_result(self) -> str:
        result = self.result
        if result is None:
            return "-"
        if self.compare == "ratio":
            low_high = "" if self.spread is None else f" ({self.spread[0]:.2f}-{self.spread[1]:.2f})"
            return f"{result:.3f}x{low_high}"
        if self.compare == "difference":
            low_high = "" if self.spread is None else f" ({signed(self.spread[0])} to {signed(self.spread[1])})"
            return signed(result) + low_high
        return str(result)

    def formatted_goal(self) -> str:
        if self.goal is None:
            return "(info)"
        if self.compare == "ratio":
            return f"<= {self.goal:.2f}x"
        if self.compare == "difference":
            return f"<= {seconds(self.goal)}"
        return f"== {self.goal}"


def signed(value: float) -> str:
    """A difference in seconds with its sign: "+2.1 us", "-0.3 us"."""
    return ("-" if value < 0 else "+") + seconds(abs(value))


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 1e-5:
        return f"{value * 1e6:.1f} us"
    if abs(value) < 1e-3:
        return f"{value * 1e6:.0f} us"
    if abs(value) < 1:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.3f} s"


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of one call of ``fn`` by ``clock`` (wall-clock unless told), with the garbage collector paused."""
    gc.collect()
    gc.disable()
    try:
        start = clock()
        fn()
        return clock() - start
    finally:
        gc.enable()


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """Swallow what the timed code prints (reports, IPython output)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        yield buffer


def table(rows: list[Row]) -> str:
    """The results as an aligned plain-text table."""
    header = ["benchmark", "measured", "baseline", "result", "goal", "met", "note"]
    lines = [
        [
            row.name,
            seconds(row.measured),
            seconds(row.baseline),
            row.formatted_result(),
            row.formatted_goal(),
            {True: "yes", False: "NO", None: "-"}[row.meets_goal],
            row.note,
        ]
        for row in rows
    ]
    widths = [max(len(str(r[i])) for r in [header] + lines) for i in range(len(header) - 1)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths)) + "  " + cells[-1]

    rule = "  ".join("-" * w for w in widths) + "  " + "-" * 4
    return "\n".join([fmt(header), rule] + [fmt(line).rstrip() for line in lines])


def markdown_table(rows: list[Row]) -> str:
    """The results as the overhead page's table (docs/overhead.md): each figure with its min-max over the runs."""
    lines = ["| benchmark | median (min-max) | goal | met | how measured |", "|---|---|---|---|---|"]
    for row in rows:
        met = {True: "yes", False: "**no**", None: "-"}[row.meets_goal]
        note = row.note.replace("|", "/")
        lines.append(f"| {row.name} | {row.formatted_result()} | {row.formatted_goal()} | {met} | {note} |")
    return "\n".join(lines)


def measured_with_devices(script: str, devices: int) -> dict:
    """Run ``script --child`` in a fresh process that sees ``devices`` fake CPU devices (XLA reads the
    flag once, at start-up) and return the JSON its last line prints: the sharding benchmarks' measurements."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    done = subprocess.run(
        [sys.executable, script, "--child"], capture_output=True, text=True, env=env, timeout=1800, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def make_shell():
    """An in-process IPython shell with jaxmagic loaded."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jaxmagic")
    return shell


def run_cell(shell, cell: str) -> None:
    """Run a benchmark cell quietly; a failing cell is a broken benchmark, not a timing."""
    with quiet():
        result = shell.run_cell(cell, store_history=False)
    if not result.success:
        raise RuntimeError(f"benchmark cell failed: {result.error_before_exec or result.error_in_exec!r}\n{cell}")


def alternate(
    shell, cells: dict[str, str], repetitions: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, list[float]]:
    """Seconds per run of each cell (by ``clock``); the cells take turns, in a rotating order."""
    times: dict[str, list[float]] = {name: [] for name in cells}
    order = list(cells)
    for rep in range(repetitions):
        # Rotate the order so no variant always runs right after the same one.
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=cells[name]: run_cell(shell, c), clock))
    return times


def alternate_by_both_clocks(
    shell, cells: dict[str, str], repetitions: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """As ``alternate``: seconds per run of each cell in CPU time of the cell's thread, and by wall-clock."""
    cpu: dict[str, list[float]] = {name: [] for name in cells}
    wall: dict[str, list[float]] = {name: [] for name in cells}
    order = list(cells)
    for rep in range(repetitions):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            gc.collect()
            gc.disable()
            try:
                start_cpu, start_wall = time.thread_time(), time.perf_counter()
                run_cell(shell, cells[name])
                cpu[name].append(time.thread_time() - start_cpu)
                wall[name].append(time.perf_counter() - start_wall)
            finally:
                gc.enable()
    return cpu, wall


def quartiles(values: list[float], digits: int = 3) -> str:
    """The middle half of ``values``, as "q1-q3"."""
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.{digits}f}-{q3:.{digits}f}"


# -- what a per-call mechanism adds to each jitted call ----------------------------------------

# Two jitted steps every per-call benchmark loops over (``per_call_rows``): a tiny one (~10 us a call
# on CPU: RL environments, samplers, ODE steps) and one of ~300 us (a small model's training step),
# plus the floor: JAX's C++ jit calling an empty Python post hook after each call - what anything
# that counts calls costs at least (``_jax/fast_path_calls`` puts its hook in the same place).
PER_CALL_SETUP = """
import jax, jax.numpy as jnp
from jaxmagic._jax.jit_internals import post_hook_state as _bench_post_hook_state
_bench_small_step = jax.jit(lambda s, x: s * 0.999 + x)
_bench_small_arg = jnp.ones(8)
_bench_large_step = jax.jit(lambda s, w: jnp.tanh(s @ w) @ w.T * 0.5)
_bench_large_arg = 0.01 * jax.random.normal(jax.random.key(0), (160, 160))
def _bench_empty_hook(jitted, args, kwargs, output):
    pass
"""

PER_CALL_STEPS = {  # step -> (the jitted function, its argument, its initial state, calls per cell)
    "small": ("_bench_small_step", "_bench_small_arg", "jnp.zeros(8)", 4000),
    "large": ("_bench_large_step", "_bench_large_arg", "jnp.ones((160, 160))", 300),
}


def per_call_loop(step: str, calls: int | None = None) -> str:
    """A cell body: ``calls`` calls of the benchmark's ``step`` ("small" or "large") in a loop."""
    function, argument, initial, default_calls = PER_CALL_STEPS[step]
    n = default_calls if calls is None else calls
    return f"s = {initial}\nfor _ in range({n}):\n    s = {function}(s, {argument})\ns.block_until_ready()"


def with_empty_hook(body: str) -> str:
    """``body`` run with an empty Python post hook after each fast-path call: the floor."""
    import textwrap

    return (
        "_bench_previous = _bench_post_hook_state().swap_local(_bench_empty_hook)\ntry:\n"
        + textwrap.indent(body, "    ")
        + "\nfinally:\n    _bench_post_hook_state().set_local(_bench_previous)"
    )


@dataclasses.dataclass
class PerCall:
    """One per-call mechanism to measure: ``cell(body)`` the cell with it, ``baseline(body)`` the same
    body with the bare tool it replaces (the plain body when it replaces none)."""

    name: str
    cell: Callable[[str], str]
    baseline: Callable[[str], str] = lambda body: body
    baseline_name: str = "the plain cell"
    goal_us: float | None = None  # microseconds added per call on the small step


def per_call_rows(shell, mechanisms: list[PerCall], repetitions: int = 9) -> list[Row]:
    """Microseconds each mechanism adds per call, beside the ratio (1 + added / the step's wall-clock
    time), on the small and the large step,
    and the floor (an empty Python post hook, against the plain cell) measured in the same run.

    Every variant runs the loop with its calls and with none, taking turns with the others
    (``alternate``), timed in CPU time of the cell's thread (the figure: steady under load) and by
    wall-clock (in the note: what a user waits, which also counts waits the mechanism causes). Added per call, per repetition: ((cell - baseline) with the calls - the same
    with none) / calls, so what the mechanism costs once per cell (shown in the note) is not spread
    over the calls; the figure is the median over the repetitions, with their min-max.
    ``shell`` must have run ``PER_CALL_SETUP``.
    """
    rows: list[Row] = []
    for step in PER_CALL_STEPS:
        calls = PER_CALL_STEPS[step][3]
        variants = {"plain": lambda body: body, "floor": with_empty_hook}
        for mechanism in mechanisms:
            variants[mechanism.name] = mechanism.cell
            if mechanism.baseline(".") != ".":
                variants[f"{mechanism.name} baseline"] = mechanism.baseline
        cells = {}
        for name, wrap in variants.items():
            cells[name] = wrap(per_call_loop(step))
            cells[f"{name} 0"] = wrap(per_call_loop(step, 0))
        for _ in range(2):  # compiled under every variant's config, caches warm
            for cell in cells.values():
                run_cell(shell, cell)
        # CPU time of the cell's thread: what a per-call mechanism adds is the Python it runs in that
        # thread; wall-clock adds whatever else the machine runs meanwhile (5x the figure under load),
        # the thread's CPU time barely (XLA's own threads, where a large step computes, are left out).
        # Wall-clock is kept beside it: a mechanism that makes the thread wait (reading a result before
        # XLA computed it) costs wall-clock time and no CPU time.
        times, wall = alternate_by_both_clocks(shell, cells, repetitions)
        # The step's own time, as a user's clock shows it (the matmul of the large step runs in XLA's threads).
        plain_call = median([timed(lambda c=cells["plain"]: run_cell(shell, c)) for _ in range(3)]) / calls
        pairs = [("floor: an empty Python post hook", "floor", "plain", None, "the plain cell")] + [
            (m.name, m.name, f"{m.name} baseline" if f"{m.name} baseline" in cells else "plain",
             m.goal_us if step == "small" else None, m.baseline_name)
            for m in mechanisms
        ]  # fmt: skip
        for label, measured, baseline, goal_us, baseline_name in pairs:
            fixed = [m - b for m, b in zip(times[f"{measured} 0"], times[f"{baseline} 0"])]
            added = [(m - b - f) / calls for m, b, f in zip(times[measured], times[baseline], fixed)]
            wall_fixed = [m - b for m, b in zip(wall[f"{measured} 0"], wall[f"{baseline} 0"])]
            wall_added = [(m - b - f) / calls for m, b, f in zip(wall[measured], wall[baseline], wall_fixed)]
            rows.append(
                Row(
                    f"{label}, added per call, {step} step (~{plain_call * 1e6:.0f} us)",
                    median(times[measured]) / calls,
                    median(times[baseline]) / calls,
                    compare="difference",
                    goal=None if goal_us is None else goal_us * 1e-6,
                    value=median(added),
                    spread=(min(added), max(added)),
                    # As a ratio, against the step's own wall-clock time (a ratio of the thread's CPU
                    # times would not be one: the large step computes in XLA's threads).
                    note=f"ratio {1 + median(added) / plain_call:.3f}x ({1 + min(added) / plain_call:.2f}-"
                    f"{1 + max(added) / plain_call:.2f}) of the step's time, vs {baseline_name}; "
                    f"{signed(median(fixed))} per cell besides; the cell's thread's CPU time (wall-clock: "
                    f"{signed(median(wall_added))} per call, {signed(min(wall_added))} to {signed(max(wall_added))}); "
                    f"{calls} calls/cell, median (min-max) of {repetitions} runs",
                )
            )
    return rows


def _indented(prefix: str, suffix: str = ""):
    import textwrap

    return lambda body: prefix + textwrap.indent(body, "    ") + suffix


# The per-call mechanisms of issue 44, each against the bare tool it replaces. The watch is measured
# as ``%jax_watch`` runs it around a cell (``probes.Watch``: begin_cell / end_cell), in the cell.
PER_CALL = {
    "nans": PerCall(
        "%%jax_nans",
        lambda body: "%%jax_nans\n" + body,
        _indented("with jax.debug_nans(True):\n"),
        "with jax.debug_nans(True)",
        goal_us=2.0,
    ),
    "compiles": PerCall("%%jax_compiles", lambda body: "%%jax_compiles\n" + body, goal_us=2.0),
    "transfers": PerCall("%%jax_transfers", lambda body: "%%jax_transfers\n" + body),
    "keys": PerCall(
        "%%jax_keys",
        lambda body: "%%jax_keys\n" + body,
        _indented("with jax.debug_key_reuse(True):\n"),
        "with jax.debug_key_reuse(True)",
    ),
    "watch": PerCall(
        "%jax_watch",
        _indented(
            "from jaxmagic.probes import Watch as _BenchWatch\n_bench_watch = _BenchWatch()\n"
            "_bench_watch.begin_cell('In [0]')\ntry:\n",
            "\nfinally:\n    _bench_watch.end_cell()",
        ),
        goal_us=2.0,
    ),
    "doctor": PerCall("%%jax_doctor", lambda body: "%%jax_doctor\n" + body),
}


def per_call_benchmark(*names: str, repetitions: int = 9) -> list[Row]:
    """The per-call rows of the mechanisms ``names`` (keys of ``PER_CALL``), in a shell of their own."""
    shell = make_shell()
    run_cell(shell, PER_CALL_SETUP)
    return per_call_rows(shell, [PER_CALL[name] for name in names], repetitions)
