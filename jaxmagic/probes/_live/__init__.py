"""Live-array probe: which JAX arrays are alive, how much they take, and who holds them.

Usage without IPython::

    report = jaxmagic.probes.live(namespace=globals())
    report.groups[0].holders       # ["debug_cache[0..9]"]

    with jaxmagic.probes.live_diff(namespace=globals()) as report:
        train_for_a_while()
    report.groups                  # arrays the block created that are still alive

``jax.live_arrays()`` lists every array the process still holds. The probe
groups them by (shape, dtype, placement) and names their holders: the user's
variables and what they contain a few levels deep (``hist['acts'][3]``,
``trainer.history[0]``), IPython's output cache (``Out[12]``, ``_``), the frames
of the last error (``sys.last_traceback``), and the jit cache, which keeps the
arrays a traced function closed over as constants of its program (chapter
section 7.5). A container of the user's holding 100 or more arrays of one
shape and dtype (``keys = list(jax.random.split(key, 2000))``, a list of
metrics appended in a loop) is a finding of its own (``report.containers``),
with the line that made the arrays when ``tracemalloc`` recorded it; so are arrays a container alone keeps
alive beside like arrays other names hold (``report.kept_alone``: ``bs = jax.live_arrays()`` kept across a
loop). The probe
keeps no array alive: snapshots are ids and weak references, the report holds
strings and numbers.
"""

from __future__ import annotations

from jaxmagic.probes._live.measure import live, live_diff
from jaxmagic.probes._live.report import (
    KIND_ELSEWHERE,
    KIND_JIT_CACHE,
    KIND_RESULT,
    ContainerFinding,
    DeviceMemory,
    KeptAlone,
    LiveGroup,
    LiveReport,
)

__all__ = [
    "KIND_ELSEWHERE",
    "KIND_JIT_CACHE",
    "KIND_RESULT",
    "ContainerFinding",
    "DeviceMemory",
    "KeptAlone",
    "LiveGroup",
    "LiveReport",
    "live",
    "live_diff",
]
