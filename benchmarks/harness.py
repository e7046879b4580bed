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
import statistics
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
    of medians when the machine's speed drifts during the run.
    """

    name: str
    measured: float | None = None  # seconds (median)
    baseline: float | None = None  # seconds (median)
    compare: str = "ratio"
    goal: float | bool | None = None
    value: float | bool | None = None
    note: str = ""

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
            return f"{result:.3f}x"
        if self.compare == "difference":
            return ("-" if result < 0 else "+") + seconds(abs(result))
        return str(result)

    def formatted_goal(self) -> str:
        if self.goal is None:
            return "(info)"
        if self.compare == "ratio":
            return f"<= {self.goal:.2f}x"
        if self.compare == "difference":
            return f"<= {seconds(self.goal)}"
        return f"== {self.goal}"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 1e-3:
        return f"{value * 1e6:.0f} us"
    if abs(value) < 1:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.3f} s"


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call of ``fn``, with the garbage collector paused."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
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


def alternate(shell, cells: dict[str, str], repetitions: int) -> dict[str, list[float]]:
    """Seconds per run of each cell; the cells take turns, in a rotating order."""
    times: dict[str, list[float]] = {name: [] for name in cells}
    order = list(cells)
    for rep in range(repetitions):
        # Rotate the order so no variant always runs right after the same one.
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            times[name].append(timed(lambda c=cells[name]: run_cell(shell, c)))
    return times


def quartiles(values: list[float], digits: int = 3) -> str:
    """The middle half of ``values``, as "q1-q3"."""
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.{digits}f}-{q3:.{digits}f}"
