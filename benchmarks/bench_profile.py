"""What ``%%jax_profile`` costs beside the profiler itself, and how fast its report is built.

1. A cell making 1,000 calls of a compiled two-layer MLP step (256x256 matmuls),
   under ``%%jax_profile`` against the same cell inside a bare
   ``with jax.profiler.trace(None, profiler_options=...)`` with the options the
   probe uses (Python tracer off, trace kept in memory); both through
   ``shell.run_cell`` in one in-process IPython shell, alternating; the median of
   the per-repetition ratios (goal <= 1.10x). The magic's extra work: the compile
   probe's listeners, following the user's jitted calls, one Python-path dispatch
   per jitted function, re-lowering the program for its HLO, reading the trace and
   building and showing the report. For information, the same cell under
   ``jax.profiler.trace(dir)`` as a user writes it (Python tracer on, files written),
   and the plain cell without any profiler.
2. Building the report from a 10,000-event trace (Chrome JSON, as ``--save``
   writes it): reading the events, attributing them to lines and scopes through
   the program's HLO, the document, the static HTML and ``to_dict`` (goal <= 0.5 s).
"""

from __future__ import annotations

import gc
import json
import tempfile
import time

from harness import Row, alternate, make_shell, median, quartiles, run_cell

CALLS = 1000
REPETITIONS = 11
EVENTS = 10_000

SETUP = """
import jax, jax.numpy as jnp

def mlp_step(w1, w2, x):
    with jax.named_scope("layer1"):
        h = jnp.tanh(x @ w1)
    with jax.named_scope("layer2"):
        return jnp.tanh(h @ w2)

step = jax.jit(mlp_step)
w1 = jnp.ones((256, 256)) * 0.01
w2 = jnp.ones((256, 256)) * 0.01
x0 = jnp.ones((128, 256))
step(w1, w2, x0).block_until_ready()
options = jax.profiler.ProfileOptions()
options.python_tracer_level = 0
"""

BODY = f"""
x = x0
for _ in range({CALLS}):
    x = step(w1, w2, x)
x.block_until_ready()
""".strip()


def _indented(body: str) -> str:
    return "\n".join("    " + line for line in body.splitlines())


def cells(trace_dir: str) -> dict[str, str]:
    return {
        "profile": "%%jax_profile\n" + BODY,
        "bare_same_options": "with jax.profiler.trace(None, profiler_options=options):\n" + _indented(BODY),
        "bare_default": f"with jax.profiler.trace({trace_dir!r}):\n" + _indented(BODY),
        "plain": BODY,
    }


def instruction_cells(steps: int) -> dict[str, str]:
    """The cells for ``benchmarks/instructions.py``, baseline first: the loop with ``steps`` calls (the
    per-call cost; the fixed cost per cell, the same with any number of steps, cancels out)."""
    variants = cells(tempfile.gettempdir())  # the variant writing there is not counted
    loop = f"range({CALLS})"
    return {name: variants[name].replace(loop, f"range({steps})") for name in ("bare_same_options", "profile")}


EMPTY_CELLS = {
    "profile": "%%jax_profile\nx = x0",
    "bare_same_options": "with jax.profiler.trace(None, profiler_options=options):\n    x = x0",
}


def synthetic_trace(n_events: int):
    """A Chrome-format trace of ``n_events`` events of a two-scope program, and that program."""
    import jax
    import jax.numpy as jnp

    from jaxmagic._jax.jit_programs import CompiledProgram
    from jaxmagic.probes._profile.kernel_sources import program_sources

    def two_scopes(w, x):
        with jax.named_scope("big"):
            y = jnp.tanh(x @ w)
        with jax.named_scope("small"):
            return jnp.sum(y[:4, :4])

    specs = (jax.ShapeDtypeStruct((64, 64), jnp.float32), jax.ShapeDtypeStruct((32, 64), jnp.float32))
    text = jax.jit(two_scopes).lower(*specs).compile().as_text()
    names = list(program_sources(text).kernels)
    events, ts, run = [], 0.0, 0
    while len(events) < n_events:
        run += 1
        events.append({"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": 5.0, "name": "PjitFunction(two_scopes)"})
        for name in names:
            args = {"hlo_module": "jit_two_scopes", "hlo_op": name, "run_id": str(run), "program_id": "1"}
            events.append({"ph": "X", "pid": 1, "tid": 2, "ts": ts + 6, "dur": 20.0, "name": name, "args": args})
            ts += 21
    program = CompiledProgram("two_scopes", "jit_two_scopes", text, {}, None)
    return {"traceEvents": events[:n_events]}, [program]


def build_from_trace(trace, programs) -> tuple[float, object]:
    from jaxmagic.probes._profile import build_report
    from jaxmagic.probes._profile.trace_events import events_from_trace_json
    from jaxmagic.render import static_bundle

    start = time.perf_counter()
    report = build_report(events_from_trace_json(trace), programs)
    static_bundle(report.document())
    json.dumps(report.to_dict())
    return time.perf_counter() - start, report


def cpu_seconds_alternating(shell, variants: dict[str, str], repetitions: int) -> dict[str, list[float]]:
    """Process CPU seconds (all threads) per run of each cell, taking turns: steadier than wall time
    on a machine shared with other jobs, since waiting for a core is not counted."""
    found: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    for rep in range(repetitions):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            gc.collect()
            start = time.process_time()
            run_cell(shell, variants[name])
            found[name].append(time.process_time() - start)
    return found


def run() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    with tempfile.TemporaryDirectory() as trace_dir:
        variants = cells(trace_dir)
        for cell in variants.values():  # warm up: first use of the magic, the profiler, the renderers
            run_cell(shell, cell)
        times = alternate(shell, variants, REPETITIONS)
        pair = {name: variants[name] for name in ("profile", "bare_same_options")}
        cpu = cpu_seconds_alternating(shell, pair, REPETITIONS)
        for cell in EMPTY_CELLS.values():
            run_cell(shell, cell)
        empty = alternate(shell, EMPTY_CELLS, REPETITIONS)
    profile_vs_bare = [p / b for p, b in zip(times["profile"], times["bare_same_options"])]
    default_vs_plain = [d / p for d, p in zip(times["bare_default"], times["plain"])]
    profile_vs_default = [p / d for p, d in zip(times["profile"], times["bare_default"])]

    trace, programs = synthetic_trace(EVENTS)
    build_from_trace(trace, programs)  # imports and first-use costs are not part of the figure
    builds = [build_from_trace(trace, programs)[0] for _ in range(5)]
    _, report = build_from_trace(trace, programs)
    assert report.kernel_events > EVENTS // 2 and report.lines, report.summary

    per = f"{CALLS} calls of a compiled MLP step per cell, {REPETITIONS} reps"
    return [
        Row(
            "%%jax_profile vs bare jax.profiler.trace (same options)",
            median(times["profile"]),
            median(times["bare_same_options"]),
            goal=1.10,
            values=profile_vs_bare,
            note=f"{per}; middle half of the ratios: {quartiles(profile_vs_bare)}",
        ),
        Row(
            "same, in process CPU time",
            median(cpu["profile"]),
            median(cpu["bare_same_options"]),
            values=[p / b for p, b in zip(cpu["profile"], cpu["bare_same_options"])],
            note="CPU seconds of all threads: not inflated by waiting for a core on a loaded machine",
        ),
        Row(
            "%%jax_profile fixed cost per cell",
            median(empty["profile"]),
            median(empty["bare_same_options"]),
            compare="difference",
            values=[p - b for p, b in zip(empty["profile"], empty["bare_same_options"])],
            note="a one-line cell (x = x0), magic minus bare trace: probe set-up, report, display; for information",
        ),
        Row(
            "%%jax_profile vs jax.profiler.trace(dir) as users write it",
            median(times["profile"]),
            median(times["bare_default"]),
            values=profile_vs_default,
            note="the default trace has the Python tracer on and writes files; for information",
        ),
        Row(
            "jax.profiler.trace(dir) vs no profiler",
            median(times["bare_default"]),
            median(times["plain"]),
            values=default_vs_plain,
            note="the profiler's own cost on this cell; for information",
        ),
        Row(
            f"report from a {EVENTS:,}-event trace",
            median(builds),
            compare="difference",
            baseline=0.0,
            goal=0.5,
            note="read JSON events, attribute via HLO, document + static HTML + to_dict",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
