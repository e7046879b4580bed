"""Following each eager jax.random call: every one passes its key through ``random_core._check_prng_key``.

The one place jaxmagic patches JAX's PRNG internals (``jax._src.random.core``,
read through ``compat.random_core``). ``tests/test_jax_structure.py`` checks
that JAX still has the function, its signature and the calls through it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from jaxmagic._jax import compat

CHECK_NAME = "_check_prng_key"  # (name, key, *, allow_batched=False) -> (key, wrapped); looked up at each call


def key_check():
    """JAX's ``_check_prng_key`` (the jax.random functions' key check), or None on another layout."""
    core = compat.random_core()
    return None if core is None else getattr(core, CHECK_NAME, None)


@contextlib.contextmanager
def following_key_checks(follow: Callable[[str, object, object], None]) -> Iterator[bool]:
    """While open, ``follow(name, key, frame)`` sees each eager jax.random call before JAX checks its key.

    ``name`` is the jax.random function's name, ``key`` its key argument and
    ``frame`` that function's frame (its arguments are its locals). An error
    in ``follow`` is dropped: following is ours, never the user's error.
    Yields False (and follows nothing) where this JAX has no such check.
    """
    core = compat.random_core()
    original = key_check()
    if original is None:
        yield False
        return

    def check(name, key, *args, **kwargs):
        try:
            follow(str(name), key, sys._getframe(1))
        except Exception:  # following is ours: never the user's error
            pass
        return original(name, key, *args, **kwargs)

    setattr(core, CHECK_NAME, check)
    try:
        yield True
    finally:
        setattr(core, CHECK_NAME, original)
