"""Keep JAX's own progress prints out of the user's output.

With ``jax_debug_nans`` on, JAX ``print``s lines such as "Invalid nan value
encountered in the output of a jax.jit function. Calling the de-optimized
version." to stdout. Probes collect them as evidence; everything else the cell
prints goes through untouched and unbuffered.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TextIO

JAX_PRINT_PREFIXES = ("Invalid nan value encountered in the",)


class _FilteredStdout:
    def __init__(self, target: TextIO, collected: list[str]) -> None:
        self._target = target
        self._collected = collected
        self._swallow_newline = False

    def write(self, text: str) -> int:
        # print() writes its message and then its end ("\n") in two calls.
        if self._swallow_newline and text == "\n":
            self._swallow_newline = False
            return len(text)
        self._swallow_newline = False
        if text.startswith(JAX_PRINT_PREFIXES):
            self._collected.append(text.rstrip("\n"))
            self._swallow_newline = not text.endswith("\n")
            return len(text)
        return self._target.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._target, name)


@contextlib.contextmanager
def jax_prints_collected(collected: list[str]) -> Iterator[None]:
    """Collect JAX's debug prints into ``collected`` while the block runs."""
    original = sys.stdout
    sys.stdout = _FilteredStdout(original, collected)
    try:
        yield
    finally:
        # Put back what we replaced, unless the block replaced it itself since.
        if isinstance(sys.stdout, _FilteredStdout):
            sys.stdout = original
