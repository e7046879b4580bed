"""Which of the user's fast-path jitted calls get looked at, so that looking costs a bounded share of the time.

Looking at a call (reading its results for NaN, its keys, its arguments) costs
a few microseconds to tens of microseconds of Python, however small the call:
on a loop of a 7 us jitted step, looking at every call makes it several times
slower. ``%jax_watch`` must cost at most a few percent, so it looks at every
call while the time it spent looking stays within ``share`` of the time since
the block began (plus a fixed ``credit``), and only counts the others. On steps
that take long against the look (a training step of a model), every call is
looked at; on tiny steps, a regular sample.

The first ``first_calls`` calls of each function are always looked at; how many,
and the ``credit``, depend on whether the looks are *deferred* (``looks_deferred``),
decided here once per block from where the first call looked at left its results:

* read on the host (the CPU): ``FIRST_CALLS`` (40). A look there is ~20-50 us
  (NumPy reads a result in place), so a NaN at call 37 of a loop is seen at
  call 37, whatever the machine's load, for about a millisecond;
* deferred (an accelerator: the look dispatches a verdict program and reads it
  later, ``probes/_nans/pending_looks.py``): ``FIRST_CALLS_DEFERRED``
  (1), then the time budget alone, with no credit (``CREDIT_DEFERRED``). There a
  look's host cost is about one dispatch of the step itself: on a TPU v5e a
  300-step MLP loop (~266 us a step, 76 ms) paid +437 us a look, so the first 40
  calls alone cost 17 ms - 1.29x the loop (2.46x with donated params, 1.86x with a
  key per step; issue 60 item 3). With the first two calls and a 1 ms credit that
  loop got 4-9 looks and ran 1.056x its bare time (1.03-1.12); each look there is
  most of a percent of the cell, so the budget is the share alone from the first
  look on: the first call, a look about every hundred dispatches' worth of the
  cell (~1 in the 76 ms loop), and the last call's when the cell ends. The report
  says how many calls were looked at; a NaN made by a call not looked at is told
  with those calls named.

The keys area counts every eager draw; where the watch runs it, it compares the keys of a line's first 40 draws
and then of those within a share of its own (``probes/_keys/draws.py``), and the time following takes is charged
here too (``spent_looking``), so that the looks get what is left of the share.

Every call is counted, so the call numbers observers are given stay exact;
``skipped`` says, per function, how many calls were not looked at (the calls less
those ``looked`` counts: a skipped call, the hook's usual case, writes nothing more); an
observer given the number of each call it sees can tell "the arguments held a
NaN" apart from "an earlier call, not looked at, made it".
"""

from __future__ import annotations

from collections.abc import Iterable
from time import perf_counter

# Of the block's time spent looking at calls (the rest of the watch's cost is the hook itself: ~1 us a call
# in a loop, 5% of a 20 us step). A look costs more than the time it is charged (the step's caches are
# cold after it): at 3% a loop of a 5 us step ran 1.31x its unwatched time, at 1% 1.25x (issue 56).
SHARE = 0.01
CREDIT = 0.002  # seconds of looking every block may spend first, whatever its length (looks read on the host)
CREDIT_DEFERRED = 0.0  # ... where looks are deferred (see the module docstring)
FIRST_CALLS = 40  # the first calls of each function in a block always looked at, where looks are read on the host
FIRST_CALLS_DEFERRED = 1  # ... where looks are deferred (see the module docstring)

# Whether looks are deferred: None decides by where the results live (anywhere but the CPU); True or False
# forces it - the tests check the accelerator's mechanism on the CPU with True. Read by every look that
# defers a read (the NaN watch's verdicts, the keys' data) and by the sampler, so that they agree.
LOOKS_DEFERRED: bool | None = None


def looks_deferred(platform: str) -> bool:
    """Whether looks at arrays living on ``platform`` ("cpu", "tpu", "gpu") are read later (``LOOKS_DEFERRED``)."""
    return LOOKS_DEFERRED if LOOKS_DEFERRED is not None else platform != "cpu"


def platform_of(values: Iterable[object]) -> str:
    """Where the first array among ``values`` lives ("cpu", "tpu", ...); "cpu" when none says (no array)."""
    for value in values:
        devices = getattr(value, "devices", None)
        if devices is not None:
            try:
                return str(next(iter(devices())).platform)
            except Exception:  # deleted, or not a JAX array after all
                continue
    return "cpu"


class CallSampler:
    """Count the user's calls per function and say which to look at (``due``); see the module docstring.

    ``first_calls``, ``credit``: the calls of each function always looked at, the seconds of looking
    every block may spend first; None (the default) decides them from whether looks are deferred, told
    by ``saw_results`` at the first call looked at.
    """

    def __init__(
        self, share: float | None = SHARE, credit: float | None = None, first_calls: int | None = None
    ) -> None:
        self.share = share
        self.credit = CREDIT if credit is None else credit
        self._credit_by_deferral = credit is None
        self._by_deferral = first_calls is None
        # Before the first call is looked at (always: it is the first), the host's count: a call's number
        # is compared with it only from the second call on, after ``saw_results``.
        self.first_calls = FIRST_CALLS if first_calls is None else first_calls
        self.deferred: bool | None = None  # whether looks are deferred; None until the first call looked at
        self.start = perf_counter()
        self.spent = 0.0  # seconds spent looking at calls
        # The first moment at which spent <= credit + share * (now - start) holds again: one
        # comparison a call (``take`` runs at every call of the loop), moved on by ``spent_looking``.
        self.next_look = float("-inf")
        self.calls: dict[object, int] = {}  # the called function (the Python one jit wraps) -> calls counted
        self.looked: dict[object, int] = {}  # the same key -> calls looked at (due when made)
        self.look_began: float | None = None  # when the look in progress (or the last one) began

    def saw_results(self, results: Iterable[object]) -> None:
        """Decide, once per block, whether looks are deferred from where a call's ``results`` live, and so
        how many first calls of each function are always looked at, and the credit."""
        if self.deferred is None:
            self.deferred = looks_deferred(platform_of(results))
            if self._by_deferral:
                self.first_calls = FIRST_CALLS_DEFERRED if self.deferred else FIRST_CALLS
            if self._credit_by_deferral:
                self.credit = CREDIT_DEFERRED if self.deferred else CREDIT

    def count(self, function: object) -> int:
        """Count one call of ``function``, looked at whatever the share (a call on jit's Python path); its
        number (1 for the first call in the block)."""
        number = self.calls[function] = self.calls.get(function, 0) + 1
        self.looked[function] = self.looked.get(function, 0) + 1
        return number

    def take(self, function: object) -> int:
        """Count one call of ``function``: its number when it is due to be looked at within the share
        (always, with no share), else 0 (counted as skipped). ``fast_path_calls``' post hook does the
        same inline (a method call there is ~0.2 us a call)."""
        calls = self.calls
        number = calls[function] = calls.get(function, 0) + 1
        if number <= self.first_calls or perf_counter() >= self.next_look:
            self.looked[function] = self.looked.get(function, 0) + 1
            return number
        return 0

    def spent_looking(self, seconds: float) -> None:
        """Add the time one look took to the time spent, and move the next look on accordingly."""
        self.spent += seconds
        over = self.spent - self.credit
        if self.share is None or over <= 0:
            self.next_look = float("-inf")  # every call (no share), or still within the credit
        elif self.share > 0:
            self.next_look = self.start + over / self.share
        else:
            self.next_look = float("inf")

    def next_call_due(self, number: int) -> bool:
        """Whether the call after call ``number`` of a function will be looked at, as far as a look at call
        ``number`` can tell: one of the first calls, every call (no share), or the next look due within the
        block's mean interval between the function's calls, this look counted at the mean cost of a look so
        far, and at least at what it took so far (``look_began``: at the block's first look nothing is spent
        yet - counted at nothing, it was always "due", and a donating step's results were copied at every
        watched cell's first call on an accelerator, for a next call not looked at). The NaN watch copies a
        donating call's results for the next call's replay only then (a copy the next look does not use was a
        program and a device copy of the params for nothing)."""
        if number < self.first_calls or self.share is None:
            return True
        if self.share <= 0:
            return False
        looks = sum(list(self.looked.values())) or 1
        so_far = perf_counter() - self.look_began if self.look_began is not None else 0.0
        over = self.spent + max(self.spent / looks, so_far) - self.credit
        if over <= 0:
            return True
        now = perf_counter()
        interval = (now - self.start) / max(number, 1)
        return now + interval >= self.start + over / self.share

    @property
    def total_calls(self) -> int:
        return sum(list(self.calls.values()))

    @property
    def skipped(self) -> dict[object, int]:
        """Per function, the calls not looked at (only functions with some)."""
        looked = self.looked
        return {f: n - looked.get(f, 0) for f, n in list(self.calls.items()) if n > looked.get(f, 0)}

    @property
    def total_skipped(self) -> int:
        return self.total_calls - sum(list(self.looked.values()))
