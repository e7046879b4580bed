"""Memory and cost of the compiled program (``memory_analysis()``, ``cost_analysis()``), and the sweep
that compiles the call once per value of one size."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jaxmagic.probes._hlo.records import MemoryFigures, SweepPoint
from jaxmagic.probes._support.calls.library_wrappers import jitted_program, library_tracing
from jaxmagic.report.wording import error_line

if TYPE_CHECKING:
    from jax.stages import Compiled


@dataclasses.dataclass
class Sweep:
    """``--sweep B=64,256,1024``: ``build(value)`` returns ``(fn, args, kwargs)`` for one value."""

    name: str
    values: list[object]
    build: Callable[[object], tuple[Callable[..., object], Sequence[object], dict[str, object]]]


def memory_figures(compiled: Compiled) -> MemoryFigures | None:
    try:
        stats = compiled.memory_analysis()
    except Exception:
        return None
    if stats is None:
        return None

    def get(name: str) -> int:
        return int(getattr(stats, name, 0) or 0)

    return MemoryFigures(
        argument_bytes=get("argument_size_in_bytes"),
        output_bytes=get("output_size_in_bytes"),
        alias_bytes=get("alias_size_in_bytes"),
        temp_bytes=get("temp_size_in_bytes"),
        generated_code_bytes=get("generated_code_size_in_bytes"),
        peak_bytes=get("peak_memory_in_bytes"),
    )


def cost_figures(compiled: Compiled) -> dict[str, float]:
    try:
        cost = compiled.cost_analysis()
    except Exception:
        return {}
    if isinstance(cost, (list, tuple)):  # older JAX: one dict per device program
        cost = cost[0] if cost else {}
    if not isinstance(cost, dict):
        return {}
    return {k: float(v) for k, v in cost.items() if k in ("flops", "transcendentals", "bytes accessed")}


def sweep_point(sweep: Sweep, value: object) -> SweepPoint:

    point = SweepPoint(value=repr(value))
    try:
        fn, args, kwargs = sweep.build(value)
        jitted, args, kwargs = jitted_program(fn, args, kwargs)  # a library's jit opened
        with library_tracing(jitted):
            lowered = jitted.lower(*args, **kwargs)
        compiled = lowered.compile()
    except Exception as error:
        point.failure = error_line(error)
        return point
    point.memory = memory_figures(compiled)
    point.flops = cost_figures(compiled).get("flops")
    return point
