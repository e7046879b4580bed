"""The NaN watch's looks at calls' results, each read when its answer is ready instead of when it is asked.

A look asks whether a call's float results hold NaN or inf. Read on the host,
the question waits for the call to finish: on an accelerator every look stalled
the dispatch queue - a 300-step MLP loop watched ran 2.45-2.49x its unwatched
time on a TPU v5e, where the watch looks at each function's first 40 calls
(issue 60.3). So a look on an accelerator asks the device instead: one small
compiled reduction over the call's float results (``finite_flags.
nonfinite_codes``: a code per result), dispatched behind the call, its copy to
the host started. The look keeps that verdict and who made the call - function,
call number, the user's line - and not the results; it is read at a later look
once ``is_ready()`` says it is there (no wait), or when the cell ends. The
program computes what the user's call computed, and its own int8 codes only.

Two kinds of look are read on the host as before, at the next look (the call
has usually finished by then) or when the cell ends:

* on the CPU, where NumPy reads a result in place: ~2 us a look for a small
  result against ~15 us to dispatch and read a compiled check (a large one costs
  about as much either way: 0.4-0.7 ms of the thread's CPU time for the 2.7 MB of
  an MLP's parameters), and the check would compile per new signature on top
  (0.08-1.2 s here under load; ``benchmarks/bench_watch.py mlp``);
* the first look of a signature no verdict program was compiled for yet: a
  function called once (an evaluation, a last partial batch) costs no
  compilation; from its second call on, the verdict is the device's.

A pending look keeps the call's arguments (and the copies of donated ones) until
it is read: a NaN-making call is replayed from them, and its arguments tell a NaN
made by the call from one that came in. While the call is queued the device
holds those arguments anyway; a look that stays unread long after (the last one
before a stretch of calls not looked at) holds them as the host-read look always
held its call's arguments and results. At most ``MAX_PENDING`` looks wait, and
at most ``MAX_PENDING_COPIES`` of them with copies of donated arguments (device
memory the size of the arguments each). Over either limit, the verdicts already
there are read first, in any order (``read_ready``): a look whose results were
all finite finds nothing and needs nothing it held, so it leaves the queue; any
other keeps its place with its verdict, so looks are still told oldest first.
Only if that frees no place is the oldest read, waiting for it (the device still
has the others queued). A donating loop looked at call after call once held 4
looks with copies, then waited for the device at every look: on a TPU v5e, 2.2 ms
a look, 2.46x the loop (issue 60 item 3).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, TypedDict

import numpy as np

from jaxmagic._jax import finite_flags, jit_calls
from jaxmagic._jax.types import Value
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import source_line

# (function, jit options, args, kwargs) of a jitted call, read from JAX's dispatch frame: to replay the call
JitLocals: TypeAlias = tuple[Callable[..., object] | None, object, Sequence[object] | None, dict[str, object] | None]


class KeptCopies(TypedDict):
    """The watch's copies of what a donating call gave away, and of its results."""

    arguments: dict[int, object]  # id(donated argument) -> its copy
    missing: list[str]  # the donated arguments deleted before a copy was made ("argument 0", "lr=")
    results: dict[int, object]  # id(result) -> its copy (the next call's donated arguments)
    why: str  # why some were not copied


MAX_PENDING = 16
MAX_PENDING_COPIES = 4


@dataclasses.dataclass(slots=True)  # one made per look: slots make it cheaper
class PendingLook:
    """One look not read yet: who made the call, what the verdict is about, and the verdict itself."""

    name: str  # the jitted function ("train_step") or the eager primitive
    is_jit: bool
    number: int  # the call's number among the function's calls in the block
    previous: int  # the number of the function's call looked at before this one
    site: tuple[str, int, str] | None  # (file, line, function) of the user's line that made the call
    indices: list[int]  # the outputs the verdict is about (the float ones), in its order
    args: Sequence[Value]  # the call's flat arguments: whether a NaN came in, read only when the call returned one
    jit_locals: JitLocals | None  # (function, jit options, args, kwargs) to replay the call
    kept: KeptCopies | None  # the watch's copies of what the call donated, and of its results
    codes: Any = None  # the device's verdict (finite_flags.nonfinite_codes); None: read ``outputs`` on the host
    outputs: list[Value] | None = None  # the float outputs themselves, for a look read on the host
    shapes: list[tuple[int, ...]] | None = None  # the float outputs' shapes, for a verdict (outputs not kept)
    found: list[str] | None = None  # the verdict once read out of turn (``PendingLooks.read_ready``)

    @property
    def line(self) -> SourceLine | None:
        return source_line(*self.site) if self.site is not None else None

    def shape(self, i: int) -> tuple[int, ...]:
        """The shape of the ``i``-th float output (the verdict's order)."""
        if self.shapes is not None:
            return self.shapes[i]
        return tuple(getattr((self.outputs or [])[i], "shape", ()))

    def ready(self) -> bool:
        """Whether reading it now waits for nothing (a look read on the host is read at the next look)."""
        if self.codes is None or self.found is not None:
            return True
        try:
            return bool(self.codes.is_ready())
        except Exception:  # read, and found failed, below
            return True

    def kinds(self) -> list[str]:
        """Per float output: "nan", "inf" or "" (finite, or not readable here)."""
        if self.found is not None:
            return self.found
        if self.codes is not None:
            with jit_calls.reads_allowed():  # our reads are not the user's transfers
                found = finite_flags.read_codes(self.codes)
            if found is not None:
                return found
            return [""] * len(self.indices)  # the verdict failed to run: nothing seen, as a failed read
        with jit_calls.reads_allowed():
            return [float_nonfinite(out) for out in self.outputs or ()]


class PendingLooks:
    """The looks not read yet, oldest first (see the module docstring)."""

    def __init__(self) -> None:
        self._looks: deque[PendingLook] = deque()
        self._with_copies = 0

    def __len__(self) -> int:
        return len(self._looks)

    def add(self, look: PendingLook) -> None:
        self._looks.append(look)
        self._with_copies += holds_copies(look)

    def over_limit(self) -> bool:
        return len(self._looks) > MAX_PENDING or self._with_copies > MAX_PENDING_COPIES

    def read_ready(self) -> None:
        """Read every device verdict that is there already, in any order, without waiting: a look whose results
        were all finite leaves the queue (with what it held); any other keeps its place and its verdict."""
        left: deque[PendingLook] = deque()
        for look in self._looks:
            if look.found is None and look.codes is not None and look.ready():
                look.found = look.kinds()
                if not any(look.found):
                    self._with_copies -= holds_copies(look)
                    continue
            left.append(look)
        self._looks = left

    def take(self, wait: bool) -> PendingLook | None:
        """The oldest look, when it is ready or ``wait``; else None (the later ones wait behind it, so
        that the first NaN-making call is found first)."""
        if not self._looks or not (wait or self._looks[0].ready()):
            return None
        look = self._looks.popleft()
        self._with_copies -= holds_copies(look)
        return look

    def clear(self) -> None:
        self._looks.clear()
        self._with_copies = 0


def holds_copies(look: PendingLook) -> bool:
    """Whether ``look`` holds the watch's copies of donated arguments or results (device memory the size of
    the params): a look at a donating call copies only what a later replay will use."""
    kept = look.kept
    return kept is not None and bool(kept.get("arguments") or kept.get("results"))


def float_nonfinite(value: object) -> str:
    """ "nan" when a float array holds a NaN, "inf" when it holds inf and no NaN, "" when finite or not
    readable here; one pass over a finite array, as a NaN test alone costs. Waits for the array."""
    try:
        array = host_array(value)
        if np.isfinite(array).all():
            return ""
        return "nan" if np.isnan(array).any() else "inf"
    except Exception:  # not readable here (deleted, on another process)
        return ""


def host_array(value: object) -> np.ndarray:
    """``value`` read on the host (waiting for it): every read of a call's values the NaN watch makes goes
    through here."""
    return np.asarray(value)
