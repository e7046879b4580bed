"""Programs jaxmagic itself runs inside the user's block, so that no report counts them as the user's.

The NaN watch runs small programs of its own while the user's cell runs: a
verdict over a call's results (``finite_flags.nonfinite_codes``) and copies of
what a donating call gives away (``jnp.copy``). Each compiles once per shape,
in the cell's thread, while the compilation probe listens there: without a mark
it would count them among the cell's compilations (a program of jaxmagic's
"compiled in your cell"). Code that runs such a program does it inside
``OWN_PROGRAMS`` (a context manager, reused: no generator per use), and the
compilation probe passes over what JAX logs and times meanwhile (``running``).
"""

from __future__ import annotations

import threading


class _Depth(threading.local):
    depth = 0  # a class default: reading a missing attribute of a threading.local raises and catches (~1 us)


class _OwnPrograms:
    """``with OWN_PROGRAMS:`` around a program of jaxmagic's own (nests; per thread)."""

    def __init__(self) -> None:
        self._state = _Depth()

    def __enter__(self) -> None:
        self._state.depth += 1

    def __exit__(self, *exc: object) -> None:
        self._state.depth -= 1

    def running(self) -> bool:
        return self._state.depth > 0


OWN_PROGRAMS = _OwnPrograms()


def running() -> bool:
    """Whether this thread is running (dispatching, tracing, compiling) a program of jaxmagic's own."""
    return OWN_PROGRAMS.running()
