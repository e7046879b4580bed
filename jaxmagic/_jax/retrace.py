"""Make every function trace afresh inside a block, without throwing caches away.

JAX checks for leaked tracers when a trace ends (``jax.checking_leaks()``), so
a function whose trace is already cached is not checked at all (chapter
section 4.6). The chapter's remedy, ``jax.clear_caches()``, empties every cache
of the process: after it, every jitted function and every eager operation is
traced and compiled again, in this cell and in all later ones.

JAX has a documented tool for a narrower effect: ``jax.make_user_context``
makes a value that is part of every tracing, lowering and compilation cache
key. Inside ``context(token)`` nothing the user cached matches, so everything
traces again (once per token: a later block with the same token reuses those
traces); after the block the key is as before and the user's cached traces are
hit again, untouched. The one price:
creating the context adds an entry to every cache key, so each function
cached before it was created traces and compiles once more at its next call.
We create the context once per process: in a notebook as soon as JAX is
imported (``create_context``, called by the extension, when the user has
cached nothing yet); otherwise on first use, and say so.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator

import jax

from jaxmagic._jax import runtime
from jaxmagic._jax.own_settings import note_own_context_created, note_own_value

# One token for every block that names none: a token per block would make an identical
# cell trace and compile everything again at every run, and each of those compilations
# stays in JAX's caches (memory grew by ~430 KB per %%jax_leaks run, without bound).
DEFAULT_TOKEN = "jaxmagic"

_context: Callable[[str], contextlib.AbstractContextManager[None]] | None = None  # jax.make_user_context's


@dataclasses.dataclass
class Retrace:
    """How the block was made to trace afresh."""

    method: str  # "user_context" or "clear_caches"
    first_use: bool  # the cache-key context was created for this block

    @property
    def description(self) -> str:
        if self.method == "clear_caches":
            return (
                "This JAX has no jax.make_user_context, so jax.clear_caches() was called before the cell: "
                "every function traced again, and later cells compile their functions once more."
            )
        text = (
            "Every function in the cell was traced afresh, under a cache key of jaxmagic's own "
            "(jax.make_user_context), so your cached traces could not hide a leak (a function an "
            "earlier cell traced under that key reuses that trace, checked when it was made); your "
            "cached traces and compiled functions are untouched and used again after the cell."
        )
        if self.first_use:
            text += (
                " This was the first %%jax_leaks in this process: creating that cache key makes each "
                "function compiled before now trace and compile once more at its next call."
            )
        return text


def create_context() -> bool:
    """Create jaxmagic's cache-key context if this JAX has one and it does not exist yet.

    True when it was created now: every function cached before this call
    traces and compiles once more at its next call (never again after).
    Importing JAX is the caller's decision: this imports it.
    """
    global _context

    make = getattr(jax, "make_user_context", None)
    if make is None or _context is not None:
        return False
    size = runtime.trace_context_size()
    _context = make(None)
    note_own_context_created(size, runtime.trace_context_size())  # never the user's cause (own_settings)
    return True


@contextlib.contextmanager
def fresh_traces(token: str | None = None) -> Iterator[Retrace]:
    """Run the block so that jit, scan, cond, ... trace again instead of using the user's cached traces.

    Every block run with the same ``token`` (a name of the caller's own, e.g.
    "jaxmagic-print"; None: DEFAULT_TOKEN) shares one cache key: what a block
    traced is reused by the next block with that token (and only by it), so an
    identical cell run again compiles nothing new. A trace reused that way was
    made - and checked, for a probe that checks traces - in an earlier block.
    """
    make = getattr(jax, "make_user_context", None)
    if make is None:  # older JAX: the blunt tool
        jax.clear_caches()
        yield Retrace("clear_caches", first_use=False)
        return
    first_use = create_context()
    value = DEFAULT_TOKEN if token is None else token
    note_own_value("user_context", value)  # part of the cache key: never the user's cause (own_settings)
    context = _context
    assert context is not None  # create_context made it: this JAX has user contexts
    with context(value):
        yield Retrace("user_context", first_use)
