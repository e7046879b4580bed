"""A call observer noting NumPy arrays among the arguments of the user's jitted calls (copied every call).

Shared by the probes that watch calls on JAX's fast path (``%%jax_doctor``, ``%jax_watch``).
"""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np

from jaxmagic._jax import compat, jit_calls
from jaxmagic.probes._support.nan.watch import call_site
from jaxmagic.report import SourceLine
from jaxmagic.report.source import source_line
from jaxmagic.report.wording import short_dtype


@dataclasses.dataclass
class HostArgumentUse:
    """A NumPy array (more than one element) given to a jitted function: copied to the device at each call."""

    function: str
    argument: str  # the parameter's name, or "argument 2"
    value: str  # "f32[512,16]"
    line: SourceLine | None = None
    calls: int = 0


class HostArguments(jit_calls.CallObserver):
    """Counts, per (function, argument, shape, dtype), the calls that were given a NumPy array."""

    def __init__(self):
        self.seen: dict[tuple, HostArgumentUse] = {}

    def before(self, name, is_jit, args, params) -> None:
        if not is_jit:
            return
        local = jit_calls.call_locals()
        if local is None:
            return
        for index, value in enumerate(local.get("args") or ()):
            if isinstance(value, np.ndarray) and value.size > 1:
                key = (name, index, value.shape, value.dtype)
                entry = self.seen.get(key)
                if entry is None:
                    user, lineno = call_site()
                    entry = self.seen[key] = HostArgumentUse(
                        name,
                        parameter_name(local.get("fun"), index) or f"argument {index}",
                        f"{short_dtype(str(value.dtype))}[{','.join(map(str, value.shape))}]",
                        line=source_line(user.f_code.co_filename, lineno, user.f_code.co_name) if user else None,
                    )
                entry.calls += 1

    def after(self, *args) -> None:
        pass


def parameter_name(fun, index: int) -> str:
    """The name of the ``index``-th positional parameter of ``fun`` ("" when it has none)."""
    try:
        names = [
            p.name
            for p in inspect.signature(fun).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return ""
    return names[index] if index < len(names) else ""


def live_counts(skip_ids: frozenset = frozenset()) -> tuple[dict[tuple, int], int]:
    """Live JAX arrays counted by (shape, dtype), and their bytes; ({}, 0) before the backend starts.

    Arrays whose ``id`` is in ``skip_ids`` (e.g. those IPython's ``Out`` holds) are not counted.
    The dtype is NumPy's object (equal to its name: ``np.dtype("float32") == "float32"``): naming
    it costs microseconds of Python per array, which a count of 100,000 arrays after every cell
    cannot pay.
    """

    if not compat.backend_started():
        return {}, 0
    import jax

    counts: dict[tuple, int] = {}
    total = 0
    for array in jax.live_arrays():
        if skip_ids and id(array) in skip_ids:
            continue
        key = (array.shape, array.dtype)
        counts[key] = counts.get(key, 0) + 1
        try:
            total += array.nbytes
        except Exception:
            pass
    return counts, total
