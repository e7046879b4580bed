"""The areas ``%jax_watch`` watches, by the names its log and its ``--only`` option use.

Apart from the watch (``probes/watch``) because importing a probe imports JAX, and
``%jax_watch on`` checks its options before the user has imported JAX (the watch's probes
load only once JAX is imported: ``ipython/watch_hook.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

AREAS = ("NaN", "recompilation", "transfers", "memory", "random keys")
_OTHER_NAMES = {"nans": "NaN", "nan": "NaN", "keys": "random keys", "compiles": "recompilation"}


class UnknownArea(ValueError):
    """``only`` names an area the watch does not have; the message is what is wrong with the option."""


def areas_named(only: Iterable[str] | None) -> list[str]:
    """The areas ``only`` names, in its order without repeats (all of them when empty); UnknownArea otherwise."""
    if not only:
        return list(AREAS)
    wanted = [name for name in (a.strip().strip("'\"").strip() for a in only) if name]
    by_name = {a.lower(): a for a in AREAS} | _OTHER_NAMES
    unknown = [a for a in wanted if a.lower() not in by_name]
    if unknown:
        raise UnknownArea(f"takes areas among {', '.join(AREAS)}; unknown: {', '.join(unknown)}")
    return list(dict.fromkeys(by_name[a.lower()] for a in wanted))
