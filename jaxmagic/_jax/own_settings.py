"""The trace-context values jaxmagic itself sets, so that a report never blames them.

Some probes run the user's code under settings of their own that are part of
JAX's tracing cache key: ``jax_debug_key_reuse`` (the key-reuse checker that
sees every jitted call) and a ``jax.make_user_context`` token (fresh traces for
the leak check). A function traced under them and traced again afterwards
misses the cache, and ``jax_explain_cache_misses`` then names the difference
("jax_debug_key_reuse differs: now False and before True") - JAX even prefers
such a context difference over any difference of the arguments. That is
jaxmagic's doing, not the user's.

Each place that sets such a value says so here (``note_own_value``); the
compilation probe compares every context difference JAX reports with these
values and with what the user has set (a snapshot taken when its block starts).
"""

from __future__ import annotations

import threading

import jax

_lock = threading.Lock()
_own_values: dict[str, set[str]] = {}  # context name -> str() of the values jaxmagic has set
_own_growth: set[tuple[str, str]] = set()  # (entries after, entries before) jaxmagic's own context was created

# JAX's words when two cache keys hold different numbers of context values (a context was created between)
CONTEXT_COUNT = "number of tracing context values"


def note_own_value(name: str, value: object) -> None:
    """Record that jaxmagic runs code with the trace-context setting ``name`` = ``value``."""
    with _lock:
        _own_values.setdefault(name, set()).add(str(value))


def note_own_context_created(before: int | None, after: int | None) -> None:
    """Record that jaxmagic's own ``make_user_context`` took the context from ``before`` to ``after`` values.

    Every function cached before then misses once afterwards, and JAX explains
    it as "number of tracing context values differs: now <after> and before <before>".
    """
    if before is not None and after is not None and before != after:
        with _lock:
            _own_growth.add((str(after), str(before)))


def own_values(name: str) -> frozenset[str]:
    with _lock:
        return frozenset(_own_values.get(name, ()))


def users_values() -> dict[str, str]:
    """The user's own value of each setting jaxmagic has set, as JAX prints them (taken now, outside our blocks)."""
    values = {}
    with _lock:
        names = list(_own_values)
    # Each read as an attribute, as restore._config_values does: jax.config.values builds a dict of all ~150
    # options (~25 us), paid by every %%jax_compiles block and every cell %jax_watch watches (issue 56).
    every = None
    for name in names:
        try:
            values[name] = str(getattr(jax.config, name))
        except AttributeError:  # an option read only through jax.config.values, or no option at all
            every = jax.config.values if every is None else every
            if name in every:
                values[name] = str(every[name])
    return values


def is_own_difference(name: str, now: str, before: str, user_values: dict[str, str]) -> bool:
    """True when a context difference JAX reports comes from a value jaxmagic set, not from the user.

    One side must be a value jaxmagic has set that is not the user's own value
    of that setting (``user_values``, from ``users_values()``); a setting the
    user changes between two of their own calls is theirs to see.
    """
    if name == CONTEXT_COUNT:
        with _lock:
            return (now, before) in _own_growth
    ours = own_values(name)
    if not ours:
        return False
    user = user_values.get(name)
    return any(side in ours and side != user for side in (now, before))
