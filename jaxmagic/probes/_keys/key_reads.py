"""Keys read on the host without waiting for them: what depends on a key's data is done once the data is there.

The keys area fingerprints the data of each key a looked-at jitted call of the
user's gets (``flows.KeyWatch``) and of each key an eager ``jax.random`` call gets
(``draws``). Read at once on the host, the read waits for the key: on an
accelerator a key an eager ``split`` made is queued behind the training step
before it, so each read waited for that step - a watched 300-step MLP loop with a
dropout key split per step ran 1.86x its unwatched time on a TPU v5e (issue 60
item 3). Where looks are deferred (``call_sampling.looks_deferred``: anywhere but
the CPU, or forced), a read is kept, with what is to be done with the data, and
finished later, oldest first, never waiting (``settle``), or when the block ends
(``settle(wait=True)``). On the CPU every read is finished at once, as before.

A copy to the host per key was still ~150 us of the host's time per eager draw
on a TPU v5e (+186 us a ``split``, 1.28x the dropout loop, issue 60 item 3), as
eager draws are followed at every call, not a share. So deferred reads are
gathered, ``BATCH`` at a time, and the arrays of one shape, dtype and placement
among them are stacked on their device by one program of jaxmagic's own
(``own_programs.stacked``, padded to a multiple of ``BATCH``: one compilation per
key shape in the process) whose result alone is copied to the host: one
dispatch and one copy for 128 draws (a key is 8 bytes: 128 held are nothing). The batch is finished once its copies are
there (``is_ready``), at a later read or at the block's end; every read gets the
rows of its own arrays, as if read one by one. Fewer than ``MIN_BATCH`` reads
left at the block's end are copied one by one (no program compiled for a few).
An array the stack cannot take (deleted, placed apart) is copied alone.

What is done with the data must not depend on when it runs: whatever it needs of
the moment of the call (the user's line, the call's arguments) is taken when the
read is asked for. A pending read holds those, and the key's data, until it is
finished (at most ``BATCH`` gathered and ``MAX_IN_FLIGHT`` batches of keys' data).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from jaxmagic._jax import call_sampling, jit_calls, own_programs

if TYPE_CHECKING:
    from jax.sharding import Sharding

# What arrays stacked together share: (shape, dtype, placement).
_Signature: TypeAlias = "tuple[tuple[int, ...], np.dtype, Sharding]"

BATCH = 128  # arrays of deferred reads gathered into one batch: one program of jaxmagic's own and one copy to the host
MIN_BATCH = 8  # fewer arrays than this left at the block's end are copied one by one
MAX_IN_FLIGHT = 4  # batches dispatched and not finished; over it the oldest is finished, waiting for it

# What is done with the data read: called with each array of the read as a NumPy array.
Then = Callable[[list[np.ndarray]], None]
Read = tuple[Sequence[object], Then]


class KeyReads:
    """The reads of one follower (one block), finished in the order they were asked for."""

    def __init__(self) -> None:
        self._gathering: list[Read] = []  # deferred reads not dispatched yet
        self._gathered = 0  # the arrays of those reads (a read may hold a batch of draws' keys)
        self._in_flight: deque[Batch] = deque()  # dispatched, oldest first
        self._deferred: bool | None = None  # decided at the first read, by where its arrays live
        self._lock = threading.Lock()  # eager draws may be followed on several threads
        self.batches = 0  # batches dispatched in the block (the bench and the tests read it)

    def read(self, arrays: Sequence[object], then: Then) -> None:
        """Call ``then`` with ``arrays`` read on the host: now where looks are not deferred, else once they are
        all there (at a later read or at ``settle(wait=True)``)."""
        if not self.deferred(arrays):
            with jit_calls.reads_allowed():  # reading the key is ours, not one of the user's transfers
                _finish(arrays, then)
            return
        with self._lock:
            # a batch of draws asked for at once (``draws._read_quick``) goes into a batch of its own: stacked with
            # the few gathered before it, it would be padded to twice BATCH, another compilation of the stack
            first = self._gathered if self._gathering and self._gathered + len(arrays) > BATCH else 0
        if first:
            self._dispatch(stack=first >= MIN_BATCH)
        with self._lock:
            self._gathering.append((arrays, then))
            self._gathered += len(arrays)
            due = self._gathered >= BATCH
        if due:
            self._dispatch(stack=True)
            self.settle(wait=False)

    def deferred(self, arrays: Sequence[object]) -> bool:
        """Whether reads are deferred here: decided at the first read, by where its ``arrays`` live."""
        if self._deferred is None:
            self._deferred = call_sampling.looks_deferred(call_sampling.platform_of(arrays))
        return self._deferred

    def _dispatch(self, stack: bool) -> None:
        """Start the copies of the reads gathered so far to the host (stacked where ``stack``): one batch."""
        with self._lock:
            reads, self._gathering, self._gathered = self._gathering, [], 0
        if reads:
            batch = Batch(reads, stack)
            with self._lock:
                self._in_flight.append(batch)
                self.batches += 1

    def settle(self, wait: bool) -> None:
        """Finish the batches whose data is there, oldest first, up to the first that is not (over
        ``MAX_IN_FLIGHT`` the oldest is finished anyway, waiting for it); with ``wait``, every read."""
        if wait and self._gathering:
            self._dispatch(stack=self._gathered >= MIN_BATCH)
        if not self._in_flight:
            return
        with jit_calls.reads_allowed():  # reading the keys is ours, not one of the user's transfers
            while (oldest := self._next(wait)) is not None:
                oldest.finish()

    def _next(self, wait: bool) -> Batch | None:
        with self._lock:
            flight = self._in_flight
            if not flight or not (wait or len(flight) > MAX_IN_FLIGHT or flight[0].ready()):
                return None
            return flight.popleft()

    def __len__(self) -> int:
        """Reads asked for and not finished."""
        return len(self._gathering) + sum(len(batch.reads) for batch in list(self._in_flight))


class Batch:
    """Reads whose copies to the host were started together: where each array's data will be read from."""

    def __init__(self, reads: list[Read], stack: bool) -> None:
        self.reads = reads
        self.outputs: list[object] = []  # what is copied to the host: a stacked array, or one array alone
        # per read, per array: (index in outputs, row of a stacked output or None for one alone)
        self.places: list[list[tuple[int, int | None]]] = [[] for _ in reads]
        groups: dict[_Signature, list[tuple[int, object]]] = {}
        for i, (arrays, _) in enumerate(reads):
            for array in arrays:
                signature = _signature(array) if stack else None
                if signature is None:
                    self.places[i].append((self._alone(array), None))
                else:
                    groups.setdefault(signature, []).append((i, array))
        for members in groups.values():
            self._stacked(members)

    def _alone(self, array: object) -> int:
        """Start the copy of one array to the host; its index in ``outputs``."""
        start = getattr(array, "copy_to_host_async", None)
        if start is not None:
            try:
                start()
            except Exception:  # a transfer guard of the user's, deleted: read (under reads_allowed) when finished
                pass
        self.outputs.append(array)
        return len(self.outputs) - 1

    def _stacked(self, members: list[tuple[int, object]]) -> None:
        """Stack arrays of one signature (padded to a multiple of ``BATCH``: one compilation per shape) and
        start the copy of the stack; each alone where one program cannot take them."""
        arrays = [array for _, array in members]
        padded = arrays + [arrays[0]] * (-len(arrays) % BATCH)
        try:
            if len(arrays) < 2:
                raise ValueError("one array: copied alone")
            index = self._alone(own_programs.stacked(padded))
        except Exception:
            for i, array in members:
                self.places[i].append((self._alone(array), None))
            return
        for row, (i, _) in enumerate(members):
            self.places[i].append((index, row))

    def ready(self) -> bool:
        """Whether finishing it now waits for nothing."""
        return _ready(self.outputs)

    def finish(self) -> None:
        """Read the copies on the host and call each read's ``then`` with its own arrays, in order (a failure
        is ours, never the user's error; a read with an array that could not be read is dropped)."""
        host: list[np.ndarray | None] = []
        for output in self.outputs:
            try:
                host.append(host_array(output))
            except Exception:  # deleted since: its reads are not counted
                host.append(None)
        for (_, then), places in zip(self.reads, self.places):
            data = [host[index] if row is None else _row(host[index], row) for index, row in places]
            if any(d is None for d in data):
                continue
            try:
                then(data)  # type: ignore[arg-type]
            except Exception:
                pass


def _row(stack: np.ndarray | None, row: int) -> np.ndarray | None:
    return None if stack is None else stack[row]


def _signature(array: object) -> _Signature | None:
    """What arrays stacked together share (shape, dtype, placement); None for a value that is not a JAX array
    (read as it is) or one already deleted."""
    try:
        if array.is_deleted():  # type: ignore[attr-defined]
            return None
        return (array.shape, array.dtype, array.sharding)  # type: ignore[attr-defined]
    except Exception:  # not a JAX array (no is_deleted)
        return None


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
