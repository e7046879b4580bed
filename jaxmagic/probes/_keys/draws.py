"""Eager jax.random calls followed by their key data: legacy uint32 keys, and the same numbers drawn again per line.

Every eager draw is followed and counted (under ``%%jax_keys`` its key compared too: a key reused once in a
300-step loop is a finding), so what one costs is paid at every step of a loop that splits a dropout key per
step. A draw at an instruction of the
user's seen before (``_Spot``), given a typed key outside a trace and plain other arguments (a shape, a dtype,
a number), is counted in a few dictionary reads (``_DrawFollower._counted_quickly``): the place is the
instruction's, the other arguments' words are kept per value (``_plain_word``), the draw is counted there and
its key's data kept with the draw, and asked for ``BATCH`` draws at a time (``_read_quick``: one read of the
key reads, read in batches where looks are deferred, ``key_reads``); everything else - the first
draw of a line, a library between, a legacy key, an array argument read with the key, a draw under ``vmap`` -
goes the whole way. It counts what the whole way counts (``tests/test_watch_key_follower.py``). On the CPU the
keys area added ~29 us to an eager ``split`` (~72 us bare) before, ~22 us since, ``key_reads`` batches included
(the thread's CPU time, the quietest paired run; +-10 us of noise on a shared 2-core machine). On a TPU v5e the
follower cost +44 to +53 us a split (~470 us bare there), of which ~21 us was reading the key data, a read per
draw; asked for a batch of draws at a time, the follower's own time per split on the CPU (timed inside it, the
deferred way) went from ~28 us to ~15 us, the reads' part from ~14 us to ~6 us.

Under ``%jax_watch`` (a ``sampler``) the time following takes is charged to the watch's ``CallSampler``, a
tenth of a millisecond at a time, and the looks at the jitted calls get what is left of the share
(``_jax/call_sampling.py``). There every draw is counted, but a quick draw's key data is compared only for the
first ``FIRST_COMPARED`` draws at its place and then within ``COMPARED_SHARE`` of the block's time (a sampler of
the follower's own): a dropout key split per training step costs the quick path's checks and a count, not a
read, at most steps. The report says how many draws' keys were compared (``RepeatedKeys.compared``); a key
repeated at every step is seen in any two. ``%%jax_keys`` (no sampler) compares every draw's key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from time import perf_counter
from types import CodeType, FrameType
from typing import cast

import jax
import numpy as np

from jaxmagic._jax import jit_calls, key_internals, prng_checks
from jaxmagic._jax.call_sampling import CallSampler
from jaxmagic.probes._keys.findings import KeyReuse, LegacyKeyUse, RepeatedDraw, SharedKeyDraw
from jaxmagic.probes._keys.fixes import shared_key_fix
from jaxmagic.probes._keys.flows import MAX_FLOW_VALUES, data_fingerprint, key_fingerprint, render_key
from jaxmagic.probes._keys.key_reads import BATCH, KeyReads
from jaxmagic.probes._keys.report import KeyReport
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.calls import library_calls
from jaxmagic.probes._support.calls.call_site import user_frame
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import is_user_file, line_of, names_in_scope, outermost_user_frame, source_line

# jax.random functions that read a key without drawing from it
_NOT_DRAWING = frozenset({"key_data", "key_impl"})
# ... and those that derive a new key without consuming theirs (JAX's key-reuse rules: fold_in is a
# Source, not a Sink; a draw or a split consumes)
_NOT_CONSUMING = _NOT_DRAWING | {"fold_in", "clone", "wrap_key_data"}
MAX_DRAW_LINES = 200  # lines followed per block
CHARGED_EVERY = 1e-4  # seconds of following gathered before they are charged to the block's sampler
FIRST_COMPARED = 40  # under the watch: the draws at a place whose key data is always compared, then ...
COMPARED_SHARE = 0.01  # ... those within this share of the block's time (the time following takes)
MAX_CONSUMED_KEYS = 20_000  # legacy key data remembered per block (~200 bytes each), to find one consumed on two lines
_EXTRA_DIGEST = 16  # bytes of a draw's fingerprint that digest its other arguments


# A quick draw waiting for its key's data to be asked for: (its draw and the key data seen there, the other
# arguments' words, the key's data)
_QuickDraw = tuple[tuple[RepeatedDraw, dict[bytes, list[object]]], tuple[str, ...], object]

# Where a draw is counted: (jax.random function, the user's file, line, the library between, the place of
# the user frame the library ran from)
Place = tuple[str, str, int, str, "tuple[str, int] | None"]


def line_of_place(where: Place, function: str) -> SourceLine | None:
    """The SourceLine of a (jax.random function, filename, line number, ...) place of a call in ``function``."""
    _name, filename, lineno = where[:3]
    return source_line(filename, lineno, function.rsplit("<locals>.", 1)[-1]) if filename else None


def handed_over(
    user: FrameType | None, key: object, random_frame: FrameType | None, require_holder: bool = False
) -> tuple[FrameType | None, str, FrameType | None]:
    """Who gave ``key`` to the jax.random function running in ``random_frame``.

    ``(frame, library, inner)``: when the user's innermost frame ``user`` called jax.random itself,
    ``(user, "", None)``. When a library sits between (numpyro's ``seed`` handler, a Flax module),
    ``library`` is its public callable, and ``frame`` is the innermost frame of the user's whose
    variables hold the key - the line that handed it over - with ``inner`` the user frame the
    library ran from when that is another (a model function called by the handler); ``frame`` stays
    ``user`` when no frame of the user's holds the key (a key the library split off itself) - None
    then with ``require_holder``."""
    if user is None:
        return None, "", None
    between = []
    frame = random_frame.f_back if random_frame is not None else None
    while frame is not None and frame is not user:
        between.append((frame.f_code.co_filename, frame.f_code.co_qualname))
        frame = frame.f_back
    library = library_calls.library_called(between[::-1])
    if not library:
        return user, "", None
    digest = None
    holder: FrameType | None = user
    while holder is not None:
        if is_user_file(holder.f_code.co_filename):
            if digest is None:
                digest = key_fingerprint(key)[0]
            if _holds_key(holder, key, digest):
                return holder, library, (user if holder is not user else None)
        holder = holder.f_back
    return (None if require_holder else user), library, None


def _holds_key(frame: FrameType, key: object, digest: bytes) -> bool:
    """Whether a variable of ``frame`` is ``key`` or a key with its data (keys are compared by data:
    a library may convert the array it was given)."""
    values = list(names_in_scope(frame).values())  # a cell's globals too, inside its comprehension
    if any(value is key for value in values):
        return True
    for value in values:
        dtype = getattr(value, "dtype", None)
        if dtype is None or getattr(value, "shape", None) != getattr(key, "shape", ()):
            continue
        if dtype == getattr(key, "dtype", None):
            try:
                if key_fingerprint(value)[0] == digest:
                    return True
            except Exception:
                continue
    return False


def _place(frame: FrameType | None) -> tuple[str, int] | None:
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


# A draw's other arguments, for its fingerprint: "name=text", or (name, index of the array read with the key)
Others = list["str | tuple[str, int]"]
OthersRead = Sequence["str | tuple[str, int]"]  # ... as counted: a list, or the words of plain arguments


def _draw_parts(key: object, frame: FrameType | None, legacy: bool) -> tuple[list[object], Others] | None:
    """What a draw's fingerprint is made of: the arrays to read on the host (the key's data first, then the
    drawing function's small array arguments) and its other arguments; None under a trace."""
    if isinstance(key, jax.core.Tracer):
        return None
    arrays: list[object] = [key if legacy else key_internals.typed_key_data(key)]
    others: Others = []
    if frame is not None:
        local = frame.f_locals  # one view of the frame's variables (each ``f_locals`` makes another)
        for name in _argument_names(frame.f_code):
            value = local.get(name)
            word = _plain_word(name, value)
            if word is not None:
                others.append(word)
            elif _read_with_key(value):
                arrays.append(value)
                others.append((name, len(arrays) - 1))
            else:
                others.append(f"{name}={_argument_fingerprint(value)}")
    return arrays, others


def _plain_words(names: tuple[str, ...], frame: FrameType) -> tuple[str, ...] | None:
    """The words of a draw's other arguments when all are plain (``_plain_word``), else None: the draw's
    fingerprint is then made as ``_draw_parts`` makes it."""
    local = frame.f_locals
    words = []
    for name in names:
        word = _plain_word(name, local.get(name))
        if word is None:
            return None
        words.append(word)
    return tuple(words)


# (argument name, type, value) of a plain argument -> its word in a draw's fingerprint ("shape=(3,)")
_plain_words_of: dict[tuple[str, type, object], str] = {}
_PLAIN_TYPES = frozenset({int, bool, str, type(None)})


def _plain_word(name: str, value: object) -> str | None:
    """``name=fingerprint`` of a plain argument - a number, a string, None, a shape (a tuple of ints), a dtype -
    as ``_argument_fingerprint`` writes it, kept per value: an eager draw in a loop gets the same ones at every
    call (its ``shape``, ``dtype``, ``num``), and its fingerprint is made at every call. None for another value."""
    kind = type(value)
    if not (
        kind in _PLAIN_TYPES
        or (kind is tuple and all(type(v) is int for v in value))  # type: ignore[attr-defined]
        or isinstance(value, (np.dtype, type))
    ):
        return None
    try:
        found = (name, kind, value)
        word = _plain_words_of.get(found)
    except TypeError:  # not hashable after all
        return None
    if word is None:
        word = f"{name}={_argument_fingerprint(value)}"
        if len(_plain_words_of) < 4096:
            _plain_words_of[found] = word
    return word


_names_of_code: dict[int, tuple[CodeType, tuple[str, ...]]] = {}  # id(code) -> (code, its argument names)


def _argument_names(code: CodeType) -> tuple[str, ...]:
    """The arguments of a jax.random function other than its key, by the function's code (kept by id: hashing
    a code object hashes its bytecode)."""
    known = _names_of_code.get(id(code))
    if known is not None and known[0] is code:
        return known[1]
    names = tuple(n for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount] if n != "key")
    if len(_names_of_code) < 1000:
        _names_of_code[id(code)] = (code, names)
    return names


_others_digests: dict[
    tuple[str | tuple[str, int], ...], bytes
] = {}  # a draw's other arguments, all words (no array read) -> their digest


def _draw_fingerprint(data: list[np.ndarray], others: OthersRead) -> bytes:
    """Digest of a key's data and the drawing function's other arguments (``_draw_parts``), read: ``data``."""
    digest = data_fingerprint(data[0])[0]
    words = tuple(others) if len(data) == 1 else None  # no array read with the key: the same words, the same digest
    extra = _others_digests.get(words) if words is not None else None
    if extra is None:
        texts = [other if isinstance(other, str) else f"{other[0]}={_array_text(data[other[1]])}" for other in others]
        extra = hashlib.blake2b("|".join(texts).encode(), digest_size=_EXTRA_DIGEST).digest()
        if words is not None and len(_others_digests) < 4096:
            _others_digests[words] = extra
    return digest + extra


def _read_with_key(value: object) -> bool:
    """An argument whose values are part of the draw's fingerprint (a small array), read with the key."""
    if isinstance(value, (jax.core.Tracer, type)) or jit_calls.is_typed_key(value):
        return False
    return hasattr(value, "shape") and hasattr(value, "dtype") and getattr(value, "size", 0) <= 4096


def _array_text(array: np.ndarray) -> str:
    return f"{array.dtype}{array.shape}:" + hashlib.blake2b(array.tobytes(), digest_size=8).hexdigest()


def _argument_fingerprint(value: object) -> str:
    if isinstance(value, jax.core.Tracer):
        return f"tracer {id(value)}"
    if isinstance(value, type):  # a scalar type (dtype=np.float32): its class attributes are no array's
        return repr(value)[:400]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if getattr(value, "size", 0) <= 4096:
            try:
                return _array_text(np.asarray(value))
            except Exception:
                pass
        return f"array id {id(value)}"
    try:
        return repr(value)[:400]
    except Exception:
        return f"{type(value).__name__} id {id(value)}"


@contextlib.contextmanager
def random_calls_followed(report: KeyReport, sampler: CallSampler | None = None) -> Iterator[None]:
    """Follow each eager jax.random call by its key's data (see ``_jax.prng_checks``).

    Lists the calls given a raw uint32 key, and counts per (function, line of
    yours) the distinct key data and other arguments each call was given.
    ``sampler``: the block's ``CallSampler`` (the watch's), charged the time following takes - the looks at the
    block's calls get what is left of its share - and the key data of a place's draws past its first
    ``FIRST_COMPARED`` compared within ``COMPARED_SHARE`` of the block's time (each draw still counted).
    """
    follower = _DrawFollower(report, sampler)
    try:
        with prng_checks.following_key_checks(follower.timed_follow if sampler is not None else follower.follow):
            yield
    finally:
        follower.finish()


@dataclasses.dataclass(slots=True)
class _Spot:
    """An instruction of the user's code that calls a jax.random function itself: its place, and once a draw of
    a typed key there was counted, the drawing function's other arguments and the draw counted there."""

    code: CodeType  # the user's code (the key is its id: compared, so that a reused id is not taken for it)
    where: Place
    consumes: bool  # the function consumes its key (not fold_in, clone, ...): a vmapped batch's one key matters
    names: tuple[str, ...] = ()
    drawn: tuple[RepeatedDraw, dict[bytes, list[object]]] | None = None


class _DrawFollower:
    """What ``random_calls_followed`` keeps while it follows: legacy key uses and draws per place, and the
    legacy key data consumed (``follow`` may run on several threads: ``lock`` guards them)."""

    def __init__(self, report: KeyReport, sampler: CallSampler | None = None) -> None:
        self.report = report
        self.sampler = sampler
        # under the watch: which quick draws' key data is compared (a share of the time, per place)
        self.compare_due = (
            CallSampler(share=COMPARED_SHARE, credit=0.0, first_calls=FIRST_COMPARED) if sampler is not None else None
        )
        self.unspent = 0.0  # seconds spent following not charged to the samplers yet
        self.uses: dict[Place, LegacyKeyUse] = {}
        self.draws: dict[Place, tuple[RepeatedDraw, dict[bytes, list[object]]]] = {}
        # legacy keys, which JAX's checker cannot follow: key data -> (place, API, the consuming function)
        self.consumed: dict[bytes, tuple[Place, str, str]] = {}
        self.reuses: dict[tuple[Place, Place], KeyReuse] = {}
        self.shared: dict[Place, SharedKeyDraw] = {}  # eager draws under vmap with one key for the batch
        self.lock = threading.Lock()
        self.reads = KeyReads()  # the keys' data being read, counted once there (``key_reads``)
        # quick draws (``_counted_quickly``) whose key data is not asked for yet: (draw, other arguments' words,
        # the key's data), handed to ``reads`` as one read of up to ``BATCH`` arrays (``_read_quick``)
        self._quick: list[_QuickDraw] = []
        # (jax.random function, id(code), instruction) of a user's line calling it itself -> what is known there
        self._places: dict[tuple[str, int, int], _Spot] = {}
        # (id(code), instruction) of the outermost user frame -> (code, its line): a legacy draw's started_by
        self._started: dict[tuple[int, int], tuple[CodeType, SourceLine | None]] = {}

    def timed_follow(self, name: str, key: object, frame_seen: object) -> None:
        """``follow``, its time charged to the block's sampler (``random_calls_followed``): a tenth of a
        millisecond at a time, so that the looks at the calls pay for the draws followed."""
        started = perf_counter()
        try:
            self.follow(name, key, frame_seen)
        finally:
            self.unspent += perf_counter() - started
            if self.unspent >= CHARGED_EVERY and self.sampler is not None and self.compare_due is not None:
                spent, self.unspent = self.unspent, 0.0
                self.sampler.spent_looking(spent)
                self.compare_due.spent_looking(spent)

    def follow(self, name: str, key: object, frame_seen: object) -> None:
        """One eager jax.random call ``name`` given ``key``, running in ``frame_seen``."""
        frame = cast("FrameType | None", frame_seen)
        spot = self._spot(name, frame)
        if spot is not None and spot.drawn is not None and self._counted_quickly(spot, key, frame):
            return
        if not hasattr(key, "dtype"):
            return
        legacy = not jit_calls.is_typed_key(key)  # by dtype: a typed key and a uint32 key are both ArrayImpl
        user: FrameType | None
        if spot is not None:  # a line of the user's seen before, calling jax.random itself: no frame walk
            user, where = cast(FrameType, cast(FrameType, frame).f_back), spot.where
            inner = None
        else:
            user = user_frame()  # its SourceLine (reading the line's text) is made once per line
            with jit_calls.reads_allowed():  # reading keys is ours, not one of the user's transfers
                user, library, inner = handed_over(user, key, frame)
            if user is None:
                if legacy:
                    self._legacy_use((name, "", 0, "", None), None)
                return
            where = (name, user.f_code.co_filename, user.f_lineno, library, _place(inner))
            if not library and frame is not None and frame.f_back is user:
                spot = self._remember_place(name, user, where)
        if legacy:
            self._legacy_use(where, user)
        if name in _NOT_DRAWING:
            return
        if name not in _NOT_CONSUMING and key_internals.one_key_for_a_vmapped_batch(key):
            self._shared_draw(name, where, user)
        parts = _draw_parts(key, frame, legacy)
        if parts is None:
            return
        arrays, others = parts
        with self.lock:
            drawn = self._draw_at(where, user, inner, legacy)
        consumer = None
        if legacy and name not in _NOT_CONSUMING:  # what a reuse found once the data is read names
            started = self._started_by(user, arrays)
            consumer = (name, where, user.f_code.co_qualname, user.f_code.co_name, started)
        elif (
            not legacy and spot is not None and drawn is not None and frame is not None
        ):  # the next draws here: ``_counted_quickly``
            spot.names, spot.drawn = _argument_names(frame.f_code), drawn
        # Read without waiting where looks are deferred (``key_reads``): counted once the data is there.
        self.reads.read(arrays, partial(self._count, drawn, others, consumer))

    def _counted_quickly(self, spot: _Spot, key: object, frame: FrameType | None) -> bool:
        """Count a draw of a typed key at a place where one was counted before (``spot``), when the usual case
        holds - no trace, no vmapped batch, plain other arguments: what ``follow`` does then, in a few
        dictionary reads (an eager draw is followed at every call: a dropout key split per training step).
        False (nothing done) otherwise: ``follow`` goes the whole way."""
        if not jit_calls.is_typed_key(key) or isinstance(key, jax.core.Tracer) or frame is None:
            return False
        if spot.consumes and key_internals.one_key_for_a_vmapped_batch(key):
            return False
        drawn = spot.drawn
        due = self.compare_due
        if drawn is not None and due is not None and not due.take(spot.where):  # counted, its key not compared
            with self.lock:
                drawn[0].calls += 1
            return True
        words = _plain_words(spot.names, frame)
        if words is None or drawn is None:
            return False
        data = key_internals.typed_key_data(key)
        with self.lock:
            drawn[0].calls += 1
            quick = self._quick
            quick.append((drawn, words, data))
            if len(quick) < BATCH:
                return True
            self._quick = []
        self._read_quick(quick)
        return True

    def _read_quick(self, quick: list[_QuickDraw]) -> None:
        """Ask for the key data of a batch of quick draws in one read (one entry of ``reads``, one ``then``: per
        draw only a tuple kept), each counted as ``follow`` counts it once the data is there."""

        def count_each(rows: list[np.ndarray]) -> None:
            # what ``_count`` does per draw, the lock taken once for the batch (~2 us a draw before, on the CPU)
            fingerprints = [_draw_fingerprint([row], words) for (_, words, _), row in zip(quick, rows)]
            with self.lock:
                for (drawn, _, _), fingerprint, row in zip(quick, fingerprints, rows):
                    self._tally(drawn, fingerprint, row)

        self.reads.read([data for _, _, data in quick], count_each)

    def _shared_draw(self, name: str, where: Place, user: FrameType) -> None:
        """An eager draw under ``vmap`` whose key is the same for the whole batch (``nnx.vmap`` with the Module's
        streams not split, a key closed over): found here, where no jitted program holds it (``flows`` finds it in
        a jitted one), and counted per call at its place."""
        with self.lock:
            found = self.shared.get(where)
            if found is None:
                api = where[3] or f"jax.random.{name}"
                line = line_of_place(where, user.f_code.co_name)
                key, fix = shared_key_fix(line, api)
                found = SharedKeyDraw(user.f_code.co_name, api, line, key=key, fix=fix)
                self.shared[where] = found
                self.report.shared.append(found)
            found.calls += 1

    def _spot(self, name: str, frame: FrameType | None) -> _Spot | None:
        """What is known of the place of a draw whose jax.random function (running in ``frame``) was called by a
        line of the user's seen before (``_remember_place``): a loop's draws are placed by a dictionary read, not
        a walk of the stack and a line number (an eager draw is followed at every call)."""
        caller = frame.f_back if frame is not None else None
        if caller is None:
            return None
        code = caller.f_code
        known = self._places.get((name, id(code), caller.f_lasti))
        if known is None or known.code is not code:
            return None
        return known

    def _remember_place(self, name: str, user: FrameType, where: Place) -> _Spot | None:
        """Keep ``where`` for the instruction of the user's code that called jax.random ``name`` itself (no
        library between): the same instruction is the same line, the same place (``_spot``)."""
        if len(self._places) >= MAX_DRAW_LINES * 4:
            return None
        spot = self._places[(name, id(user.f_code), user.f_lasti)] = _Spot(
            user.f_code, where, name not in _NOT_CONSUMING
        )
        return spot

    def _started_by(self, user: FrameType, arrays: list[object]) -> Callable[[], SourceLine | None]:
        """The line that started the draw (a reuse's provenance): taken now where the read is deferred (the frame
        runs on meanwhile); else the read is finished before ``follow`` returns, and it is taken only if asked.
        Taken now, it is the outermost user frame's line, read once per instruction of that frame's code."""
        if not self.reads.deferred(arrays):
            return partial(attribution.started_by, user)
        outer = outermost_user_frame(user)
        if outer is None:
            return lambda: None
        code = outer.f_code
        known = self._started.get((id(code), outer.f_lasti))
        if known is None or known[0] is not code:
            known = (code, line_of(outer))
            if len(self._started) < MAX_DRAW_LINES * 4:
                self._started[(id(code), outer.f_lasti)] = known
        line = known[1]
        return lambda: line

    def _count(
        self,
        drawn: tuple[RepeatedDraw, dict[bytes, list[object]]] | None,
        others: OthersRead,
        consumer: tuple[str, Place, str, str, Callable[[], SourceLine | None]] | None,
        data: list[np.ndarray],
    ) -> None:
        """Count one draw, its key's data (and small array arguments) read on the host: ``data``."""
        fingerprint = _draw_fingerprint(data, others)
        with self.lock:
            if consumer is not None:
                self._note_consumed(fingerprint[:-_EXTRA_DIGEST], *consumer)
            if drawn is not None:
                self._tally(drawn, fingerprint, data[0])

    @staticmethod
    def _tally(drawn: tuple[RepeatedDraw, dict[bytes, list[object]]], fingerprint: bytes, key_data: np.ndarray) -> None:
        """One more key drawn with at a place (``drawn``): the times its data (``fingerprint``) was seen there.
        Called with ``lock`` held."""
        draw, seen = drawn
        draw.compared = (draw.compared or 0) + 1
        found = seen.get(fingerprint)
        if found is not None:
            found[1] = cast(int, found[1]) + 1
        else:  # a new key past the first MAX_FLOW_VALUES is still a distinct one (counted, not kept)
            if len(seen) < MAX_FLOW_VALUES:
                seen[fingerprint] = [key_data, 1]
            draw.distinct += 1

    def _legacy_use(self, where: Place, user: FrameType | None) -> None:
        with self.lock:
            use = self.uses.get(where)
            if use is None:
                line = line_of(user)
                use = self.uses[where] = LegacyKeyUse(
                    where[0], line, provenance=attribution.of_source_line(line, attribution.started_by(user))
                )
                self.report.legacy.append(use)
            use.count += 1

    def _draw_at(
        self, where: Place, user: FrameType, inner: FrameType | None, legacy: bool
    ) -> tuple[RepeatedDraw, dict[bytes, list[object]]] | None:
        """One more call drawing at ``where``: its draw (made at the first, with the line the frame runs now) and
        the key data seen there; None past ``MAX_DRAW_LINES``. Called with ``lock`` held."""
        entry = self.draws.get(where)
        if entry is None:
            if len(self.draws) >= MAX_DRAW_LINES:
                return None
            name, library = where[0], where[3]
            line = line_of(user)
            provenance = attribution.of_source_line(line, attribution.started_by(user))
            if provenance is not None and library:
                provenance.library_function = library
            draw = RepeatedDraw(name, line, legacy=legacy, provenance=provenance, library=library, compared=0)
            draw.consumed_at = line_of(inner) if inner is not None else None
            entry = self.draws[where] = (draw, {})
            self.report.draws.append(draw)
        entry[0].calls += 1
        return entry

    def _note_consumed(
        self,
        digest: bytes,
        name: str,
        where: Place,
        qualname: str,
        function: str,
        started_by: Callable[[], SourceLine | None],
    ) -> None:
        """A legacy key's data consumed on a second line: the reuse JAX raises for a typed key, recorded
        (``where``, ``qualname``, ``function``, ``started_by``: the consuming call's, taken at the call). Called
        with ``lock`` held."""
        first = self.consumed.get(digest)
        if first is None:
            if len(self.consumed) < MAX_CONSUMED_KEYS:
                self.consumed[digest] = (where, name, qualname)
                self.report.legacy_keys_followed = len(self.consumed)
            else:
                self.report.legacy_keys_limit = MAX_CONSUMED_KEYS
            return
        if first[0] == where:  # the same line again: a loop, counted per line as a repeated draw
            return
        pair = (first[0], where)
        reuse = self.reuses.get(pair)
        if reuse is not None:
            reuse.count += 1
            return
        line = source_line(where[1], where[2], function)
        self.reuses[pair] = reuse = KeyReuse(
            message=f"legacy uint32 key data consumed by jax.random.{first[1]} and again by jax.random.{name}",
            consumer=f"jax.random.{name}",
            reused_at=line,
            first_used_at=line_of_place(first[0], first[2]),
            provenance=attribution.of_source_line(line, started_by()),
        )
        self.report.reuse.append(reuse)

    def finish(self) -> None:
        """Count the keys still being read, then each draw's most repeated key, rendered once when the block ends."""
        with self.lock:
            quick, self._quick = self._quick, []
        if quick:
            self._read_quick(quick)
        self.reads.settle(wait=True)
        self._places.clear()  # the user's code objects, kept by id while the block ran
        self._started.clear()
        for draw, seen in self.draws.values():
            if seen:
                data, times = max(seen.values(), key=lambda item: cast(int, item[1]))
                draw.repeated_key, draw.repeated_times = render_key(data), cast(int, times)
        self.draws.clear()
