"""What the compile-size attribution of ``%%jax_compiles`` costs against the compile it explains.

A function with a Python loop of 300 iterations unrolled (jax#2777's shape: ~900 equations) is jitted anew
and compiled in each repetition, alternating plain and under ``probes.compiles()`` (which examines the
block's slowest compilation: equations per line, the loop's period, constants). The figure is the median
of the per-repetition ratios (goal: under 1.25x). The probe's other costs (compile log, cache-miss
explanation) are in it too, so it bounds the attribution's share from above.
"""

from __future__ import annotations

import time

from harness import Row, median, quartiles

REPETITIONS = 7
ITERATIONS = 300


def _compile_once(probe: bool) -> tuple[float, object]:
    import jax  # deferred: the runner imports every benchmark before running any
    import jax.numpy as jnp

    from jaxmagic import probes

    function = jax.jit(_new_unrolled(jnp))  # a new function each time: each repetition compiles
    x = jnp.ones(16)
    start = time.perf_counter()
    if probe:
        with probes.compiles() as report:
            function(x).block_until_ready()
    else:
        report = None
        function(x).block_until_ready()
    return time.perf_counter() - start, report


def _new_unrolled(jnp):
    def unrolled(x):
        for i in range(ITERATIONS):
            x = jnp.sin(x) * 0.5 + i
        return x

    return unrolled


def run() -> list[Row]:
    _compile_once(False)
    _compile_once(True)  # warm up the imports of both paths
    plain, probed, ratios = [], [], []
    report = None
    for _ in range(REPETITIONS):
        p, _ = _compile_once(False)
        m, report = _compile_once(True)
        plain.append(p)
        probed.append(m)
        ratios.append(m / p)
    sizes = getattr(report, "sizes", [])
    examined = bool(sizes) and sizes[0].unrolled is not None
    return [
        Row(
            "%%jax_compiles with compile-size attribution vs the compile it explains",
            median(probed),
            median(plain),
            goal=1.25,
            value=median(ratios),
            note=f"a {ITERATIONS}-iteration unrolled loop compiled anew, {REPETITIONS} reps; "
            f"middle half of the ratios: {quartiles(ratios)}",
        ),
        Row(
            "the unrolled loop is found",
            compare="check",
            goal=True,
            value=examined,
            note=sizes[0].headline if sizes else "no size examined",
        ),
    ]


if __name__ == "__main__":
    from harness import table

    print(table(run()))
