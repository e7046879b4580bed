"""``%jax_gather`` at 1,024 (and 4,096) processes: the merge and the report the notebook shows.

The engines are stand-ins that answer at once (``view.client[engine].apply_async(...)``
returns a ready result), each with the data of one real ``%%jax_doctor`` report made
here (~11 KB): process 512 compiled the step again for a ragged batch, processes 100-199
piled arrays up. What is timed is what ``%jax_gather`` does after the engines answer:
``gather_from_engines`` (the entries, the merge, the comparison) plus the text and the
HTML of the merged report. ``to_dict()`` copies every process's report (11 MB at 1,024
processes) and is timed apart: the magic does not call it.

* ``gather 1,024``: goal under 1 s;
* ``4,096 / 1,024``: the growth from 1,024 to 4,096 processes (linear: about 4x);
* ``readable``: the merged report at 1,024 processes fits in 40 lines of text.
"""

from __future__ import annotations

import copy
import statistics

from harness import Row, median, timed

REPETITIONS = 5


def doctor_data() -> dict:
    import jax  # deferred: the benchmark makes one real report
    import jax.numpy as jnp

    import jaxmagic.probes as probes

    @jax.jit
    def step(w, x):
        return w - 0.01 * (x.T @ (x @ w))

    with probes.doctor() as report:
        w = jnp.ones(3)
        w = step(step(w, jnp.ones((8, 3))), jnp.ones((8, 3)))
    return report.to_dict()


class Ready:
    def __init__(self, value):
        self.value = value

    def get(self, timeout=None):
        return self.value


class StandInView:
    """An ipyparallel view whose engines answer at once with prepared entries."""

    def __init__(self, answers: list[dict]):
        self.answers = answers
        self.targets = list(range(len(answers)))
        self.client = self

    def __getitem__(self, engine):
        answer = self.answers[engine]
        return type("Engine", (), {"apply_async": lambda _self, fn, name: Ready(answer)})()


def answers(data: dict, processes: int) -> list[dict]:
    ragged = copy.deepcopy(data)
    for function in ragged["compiles"]["functions"]:
        if function["name"] == "step":
            function["count"], function["last_argument_types"] = 2, "f32[3], f32[4,3]"
    growing = copy.deepcopy(data)
    growing["live_growth"] = {"float32[3]": 4}
    out = []
    for p in range(processes):
        report = ragged if p == 512 else growing if 100 <= p < 200 else data
        out.append(
            {
                "process": p,
                "engine": p,
                "host": f"host{p // 8}",
                "headline": report["summary"],
                "status": report["status"],
                "kind": "jax_doctor",
                "report": report,
            }
        )
    return out


def run() -> list[Row]:
    from jaxmagic.probes._gather import gather_from_engines

    data = doctor_data()
    views = {n: StandInView(answers(data, n)) for n in (1024, 4096)}

    def shown(n: int):
        merged = gather_from_engines(views[n], "rep", timeout=30)
        return str(merged), merged._repr_mimebundle_()["text/html"], merged

    times: dict[int, list[float]] = {1024: [], 4096: []}
    for _ in range(REPETITIONS):
        for n in times:
            times[n].append(timed(lambda n=n: shown(n)))
    text, _html, merged = shown(1024)
    to_dict = [timed(merged.to_dict) for _ in range(3)]
    growth = [b / a for a, b in zip(times[1024], times[4096])]
    divergence = [f for f in merged.findings if f.area == "divergence"]
    return [
        Row(
            "%jax_gather of 1,024 processes (merge + text + HTML)",
            median(times[1024]),
            0.0,
            compare="difference",
            goal=1.0,
            note=f"{REPETITIONS} reps, min {min(times[1024]) * 1e3:.1f} ms, max {max(times[1024]) * 1e3:.1f} ms; "
            f"to_dict() apart: {median(to_dict) * 1e3:.0f} ms (copies 1,024 reports)",
        ),
        Row(
            "%jax_gather 4,096 vs 1,024 processes",
            median(times[4096]),
            median(times[1024]),
            goal=5.0,
            value=statistics.median(growth),
            note=f"linear is 4x; per rep {', '.join(f'{g:.1f}' for g in growth)}",
        ),
        Row(
            "1,024 processes readable: ranges, <= 40 lines",
            compare="check",
            goal=True,
            value=len(text.splitlines()) <= 40
            and bool(divergence)
            and "processes 0-511, 513-1023" in " ".join(divergence[0].details),
            note=f"{len(text.splitlines())} lines",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
