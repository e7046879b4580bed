"""Name paths: JAX's name stacks as they appear in jaxpr, StableHLO and HLO.

``with jax.named_scope("encoder"):`` puts "encoder" on the name stack of every
operation inside it. The stack travels through all three representations in
the same ``/``-separated form: ``str(eqn.source_info.name_stack)`` in a jaxpr
(``encoder/attn``), the location name of a StableHLO operation and the
``op_name`` of an optimized-HLO instruction (``jit(f)/encoder/attn/mul``).
Along the way JAX adds segments of its own: ``jit(f)`` for each jitted
function, transformations (``jvp()``, ``transpose(jvp())``, or in older
versions ``transpose(jvp(encoder))`` wrapped around the scope), control flow
(``while/body``) and, inside some transformed functions, the user's scopes a
second time (``step/encoder/step/encoder/...``).

This module turns any of those strings into the same two things: the *scope
path* (the user's scopes only, in order, repeats removed) and the name of the
operation, so that the three stages can be compared operation by operation.
"""

from __future__ import annotations

import dataclasses
import functools
import re

_WRAPPED = re.compile(r"^([\w\-]+)\((.*)\)$")
_JIT_NAMES = ("jit", "pjit")


@dataclasses.dataclass(frozen=True)
class NamePath:
    segments: tuple[str, ...]  # transformations unwrapped, in order; jit(...) kept as is
    backward: bool  # under a transpose: part of a gradient's backward pass

    @property
    def op(self) -> str:
        """The last segment: the primitive (``dot_general``) or call (``jit(relu)``)."""
        return self.segments[-1] if self.segments else ""


@functools.lru_cache(maxsize=16384)
def parse_name(text: str) -> NamePath:
    """Split a name stack / op_name into segments, unwrapping transformations."""
    segments: list[str] = []
    backward = False
    for raw in text.split("/"):
        segment = raw.strip()
        while True:
            match = _WRAPPED.match(segment)
            if not match or match.group(1) in _JIT_NAMES:
                break
            backward = backward or match.group(1) == "transpose"
            segment = match.group(2)
        if segment:
            segments.append(segment)
    return NamePath(tuple(segments), backward)


def is_jit_segment(segment: str) -> bool:
    match = _WRAPPED.match(segment)
    return bool(match and match.group(1) in _JIT_NAMES)


def collapse_repeats(path: tuple[str, ...]) -> tuple[str, ...]:
    """``(a, b, a, b, c)`` -> ``(a, b, c)``: JAX repeats a scope block inside some
    transformed calls (custom_jvp functions in a scan body); the user wrote it once."""
    items = list(path)
    changed = True
    while changed:
        changed = False
        for size in range(1, len(items) // 2 + 1):
            for start in range(0, len(items) - 2 * size + 1):
                if items[start : start + size] == items[start + size : start + 2 * size]:
                    del items[start + size : start + 2 * size]
                    changed = True
                    break
            if changed:
                break
    return tuple(items)


def scope_path(path: NamePath, known_scopes: set[str], include_last: bool = False) -> tuple[str, ...]:
    """The user's scopes in ``path``: segments that are known scope names, repeats removed.

    The last segment is the operation itself and is left out unless
    ``include_last`` (a name stack from a jaxpr equation has no operation at
    the end).
    """
    segments = path.segments if include_last else path.segments[:-1]
    return collapse_repeats(tuple(s for s in segments if s in known_scopes))


def split_query(scope: str) -> tuple[str, ...]:
    """``"jit(f)/encoder/attn"`` or ``"encoder/attn"`` -> ``("encoder", "attn")``."""
    return tuple(s for s in parse_name(scope).segments if not is_jit_segment(s))


def find_run(path: tuple[str, ...], query: tuple[str, ...]) -> int:
    """Index just past the last occurrence of ``query`` as a contiguous run in ``path``; -1 if absent."""
    if not query:
        return -1
    for start in range(len(path) - len(query), -1, -1):
        if path[start : start + len(query)] == query:
            return start + len(query)
    return -1
