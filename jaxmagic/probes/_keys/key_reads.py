"""Keys read on the host without waiting for them: what depends on a key's data is done once the data is there.

The keys area fingerprints the data of each key a looked-at jitted call of the
user's gets (``flows.KeyWatch``) and of each key an eager ``jax.random`` call gets
(``draws``). Read at once on the host, the read waits for the key: on an
accelerator a key an eager ``split`` made is queued behind the training step
before it, so each read waited for that step - a watched 300-step MLP loop with a
dropout key split per step ran 1.86x its unwatched time on a TPU v5e (issue 60
item 3). Where looks are deferred (``call_sampling.looks_deferred``: anywhere but
the CPU, or forced), a read is started instead (``copy_to_host_async``) and kept,
with what is to be done with the data, until ``is_ready()`` says it is there: it
is finished at a later read (oldest first, never waiting), or when the block ends
(``settle(wait=True)``). On the CPU every read is finished at once, as before.

What is done with the data must not depend on when it runs: whatever it needs of
the moment of the call (the user's line, the call's arguments) is taken when the
read is started. A pending read holds those, and the key, until it is finished.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from jaxmagic._jax import call_sampling, jit_calls

MAX_PENDING = 64  # reads started and not finished; then the oldest is finished, waiting for it
# Reads started between two looks for finished ones: an eager draw is followed at every call (not a share), so
# asking after each whether the last key is there was a lock, a readiness check and a transfer-guard context
# per call; 16 at a time they are finished together.
SETTLE_EVERY = 16

# What is done with the data read: called with each array of the read as a NumPy array.
Then = Callable[[list[np.ndarray]], None]


class KeyReads:
    """The reads of one follower (one block), finished in the order they were started."""

    def __init__(self) -> None:
        self._pending: deque[tuple[Sequence[object], Then]] = deque()
        self._deferred: bool | None = None  # decided at the first read, by where its arrays live
        self._lock = threading.Lock()  # eager draws may be followed on several threads

    def read(self, arrays: Sequence[object], then: Then) -> None:
        """Call ``then`` with ``arrays`` read on the host: now where looks are not deferred, else once they are
        all there (at a later read or at ``settle(wait=True)``)."""
        if not self.deferred(arrays):
            with jit_calls.reads_allowed():  # reading the key is ours, not one of the user's transfers
                _finish(arrays, then)
            return
        for array in arrays:
            start = getattr(array, "copy_to_host_async", None)
            if start is not None:
                try:
                    start()
                except Exception:  # a transfer guard of the user's, deleted: read (under reads_allowed) when finished
                    pass
        with self._lock:
            self._pending.append((arrays, then))
            due = len(self._pending) >= SETTLE_EVERY
        if due:
            self.settle(wait=False)

    def deferred(self, arrays: Sequence[object]) -> bool:
        """Whether reads are deferred here: decided at the first read, by where its ``arrays`` live."""
        if self._deferred is None:
            self._deferred = call_sampling.looks_deferred(call_sampling.platform_of(arrays))
        return self._deferred

    def settle(self, wait: bool) -> None:
        """Finish the reads whose data is there, oldest first, up to the first that is not (over ``MAX_PENDING``
        the oldest is finished anyway, waiting for it); with ``wait``, every one."""
        if not self._pending:
            return
        with jit_calls.reads_allowed():  # reading the keys is ours, not one of the user's transfers
            while (oldest := self._next(wait)) is not None:
                _finish(*oldest)

    def _next(self, wait: bool) -> tuple[Sequence[object], Then] | None:
        with self._lock:
            pending = self._pending
            if not pending or not (wait or len(pending) > MAX_PENDING or _ready(pending[0][0])):
                return None
            return pending.popleft()

    def __len__(self) -> int:
        return len(self._pending)


def _ready(arrays: Sequence[object]) -> bool:
    for array in arrays:
        is_ready = getattr(array, "is_ready", None)
        if is_ready is None:
            continue  # a host value
        try:
            if not is_ready():
                return False
        except Exception:  # deleted: read (and found failed) now
            continue
    return True


def _finish(arrays: Sequence[object], then: Then) -> None:
    """Read ``arrays`` on the host and call ``then`` (under ``jit_calls.reads_allowed``); a failure is ours, never
    the user's error."""
    try:
        then([host_array(array) for array in arrays])
    except Exception:
        pass


def host_array(value: object) -> np.ndarray:
    """``value`` read on the host (waiting for it): every read of a key's data the keys area makes goes through
    here."""
    return np.asarray(value)
