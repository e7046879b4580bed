"""Eager jax.random calls followed by their key data: legacy uint32 keys, and the same numbers drawn again per line."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator

import numpy as np

from jaxmagic._jax import jit_calls, prng_checks
from jaxmagic.probes._keys.flows import MAX_FLOW_VALUES, key_fingerprint, render_key
from jaxmagic.probes._keys.report import KeyReport, KeyReuse, LegacyKeyUse, RepeatedDraw
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.calls import library_calls
from jaxmagic.probes._support.nan.watch import user_frame
from jaxmagic.report.source import is_user_file, line_of, names_in_scope, source_line

# jax.random functions that read a key without drawing from it
_NOT_DRAWING = frozenset({"key_data", "key_impl"})
# ... and those that derive a new key without consuming theirs (JAX's key-reuse rules: fold_in is a
# Source, not a Sink; a draw or a split consumes)
_NOT_CONSUMING = _NOT_DRAWING | {"fold_in", "clone", "wrap_key_data"}
MAX_DRAW_LINES = 200  # lines followed per block
MAX_CONSUMED_KEYS = 20_000  # legacy key data remembered per block (~200 bytes each), to find one consumed on two lines
_EXTRA_DIGEST = 16  # bytes of a draw's fingerprint that digest its other arguments


def line_of_place(where: tuple, function: str):
    """The SourceLine of a (jax.random function, filename, line number, ...) place of a call in ``function``."""
    _name, filename, lineno = where[:3]
    return source_line(filename, lineno, function.rsplit("<locals>.", 1)[-1]) if filename else None


def handed_over(user, key, random_frame, require_holder: bool = False) -> tuple[object, str, object]:
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
    holder = user
    while holder is not None:
        if is_user_file(holder.f_code.co_filename):
            if digest is None:
                digest = key_fingerprint(key)[0]
            if _holds_key(holder, key, digest):
                return holder, library, (user if holder is not user else None)
        holder = holder.f_back
    return (None if require_holder else user), library, None


def _holds_key(frame, key, digest: bytes) -> bool:
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


def _place(frame) -> tuple[str, int] | None:
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def _draw_fingerprint(key, frame) -> tuple[bytes, object] | None:
    """Digest of a concrete key's data and the drawing function's other arguments; None under a trace."""
    import jax  # deferred: importing jaxmagic does not import JAX

    if isinstance(key, jax.core.Tracer):
        return None
    digest, data = key_fingerprint(key)
    code = frame.f_code if frame is not None else None
    others = []
    if code is not None:
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        for name in names:
            if name != "key":
                others.append(f"{name}={_argument_fingerprint(frame.f_locals.get(name))}")
    extra = hashlib.blake2b("|".join(others).encode(), digest_size=_EXTRA_DIGEST).digest()
    return digest + extra, data


def _argument_fingerprint(value) -> str:
    import jax  # deferred: importing jaxmagic does not import JAX

    if isinstance(value, jax.core.Tracer):
        return f"tracer {id(value)}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if getattr(value, "size", 0) <= 4096:
            try:
                array = np.asarray(value)
                return f"{array.dtype}{array.shape}:" + hashlib.blake2b(array.tobytes(), digest_size=8).hexdigest()
            except Exception:
                pass
        return f"array id {id(value)}"
    try:
        return repr(value)[:400]
    except Exception:
        return f"{type(value).__name__} id {id(value)}"


@contextlib.contextmanager
def random_calls_followed(report: KeyReport) -> Iterator[None]:
    """Follow each eager jax.random call by its key's data (see ``_jax.prng_checks``).

    Lists the calls given a raw uint32 key, and counts per (function, line of
    yours) the distinct key data and other arguments each call was given.
    """
    uses: dict[tuple, LegacyKeyUse] = {}
    draws: dict[tuple, tuple[RepeatedDraw, dict]] = {}
    # legacy keys, which JAX's checker cannot follow: key data -> the first line that consumed it
    consumed: dict[bytes, tuple[tuple, str, str]] = {}  # key data -> (place, API, the consuming function)
    reuses: dict[tuple, KeyReuse] = {}
    lock = threading.Lock()

    def _follow(name, key, frame):
        if not hasattr(key, "dtype"):
            return
        legacy = not jit_calls.is_typed_key(key)
        user = user_frame()  # the SourceLine (reading the line's text) is made once per line, not per call
        with jit_calls.reads_allowed():  # reading keys is ours, not one of the user's transfers
            user, library, inner = handed_over(user, key, frame)
        where = (
            (name, user.f_code.co_filename, user.f_lineno, library, _place(inner))
            if user is not None
            else (name, "", 0, "", None)
        )
        if legacy:
            with lock:
                use = uses.get(where)
                if use is None:
                    line = line_of(user)
                    use = uses[where] = LegacyKeyUse(
                        name, line, provenance=attribution.of_source_line(line, attribution.started_by(user))
                    )
                    report.legacy.append(use)
                use.count += 1
        if name in _NOT_DRAWING or user is None:
            return
        with jit_calls.reads_allowed():  # reading the key is ours, not one of the user's transfers
            found = _draw_fingerprint(key, frame)
        if found is None:
            return
        fingerprint, data = found
        with lock:
            if legacy and name not in _NOT_CONSUMING:
                _note_consumed(fingerprint[:-_EXTRA_DIGEST], name, where, user)
            entry = draws.get(where)
            if entry is None:
                if len(draws) >= MAX_DRAW_LINES:
                    return
                line = line_of(user)
                started = attribution.started_by(user)
                provenance = attribution.of_source_line(line, started)
                if provenance is not None and library:
                    provenance.library_function = library
                draw = RepeatedDraw(name, line, legacy=legacy, provenance=provenance, library=library)
                draw.consumed_at = line_of(inner) if inner is not None else None
                entry = draws[where] = (draw, {})
                report.draws.append(entry[0])
            draw, seen = entry
            draw.calls += 1
            if fingerprint in seen:
                seen[fingerprint][1] += 1
            elif len(seen) < MAX_FLOW_VALUES:
                seen[fingerprint] = [data, 1]
            draw.distinct = len(seen)

    def _note_consumed(digest: bytes, name: str, where: tuple, user) -> None:
        """A legacy key's data consumed on a second line: the reuse JAX raises for a typed key, recorded.
        Called with ``lock`` held."""
        first = consumed.get(digest)
        if first is None:
            if len(consumed) < MAX_CONSUMED_KEYS:
                consumed[digest] = (where, name, user.f_code.co_qualname)
                report.legacy_keys_followed = len(consumed)
            else:
                report.legacy_keys_limit = MAX_CONSUMED_KEYS
            return
        if first[0] == where:  # the same line again: a loop, counted per line as a repeated draw
            return
        pair = (first[0], where)
        reuse = reuses.get(pair)
        if reuse is not None:
            reuse.count += 1
            return
        first_line = line_of_place(first[0], first[2])
        line = line_of(user)
        reuses[pair] = reuse = KeyReuse(
            message=f"legacy uint32 key data consumed by jax.random.{first[1]} and again by jax.random.{name}",
            consumer=f"jax.random.{name}",
            reused_at=line,
            first_used_at=first_line,
            provenance=attribution.of_source_line(line, attribution.started_by(user)),
        )
        report.reuse.append(reuse)

    try:
        with prng_checks.following_key_checks(_follow):
            yield
    finally:
        for draw, seen in draws.values():
            if seen:
                data, times = max(seen.values(), key=lambda item: item[1])
                draw.repeated_key, draw.repeated_times = render_key(data), times
        draws.clear()
