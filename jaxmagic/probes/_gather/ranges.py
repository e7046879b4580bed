"""Processes written as ranges (``0-511, 513-1023``), and per-process lines grouped by what they say.

A job of 1,024 processes gives a finding 1,024 per-process lines that mostly say the
same thing; grouping them by their text and writing the processes as ranges keeps a
merged report readable at any size. Both are linear in the number of processes
(one pass, one sort of the indices).
"""

from __future__ import annotations

from collections.abc import Iterable


def process_ranges(processes: Iterable[int | None]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"`` (processes of unknown index, None, are left out)."""
    known = sorted({p for p in processes if p is not None})
    parts: list[str] = []
    start = previous = None
    for p in known:
        if previous is not None and p == previous + 1:
            previous = p
            continue
        if start is not None:
            parts.append(_span(start, previous))
        start = previous = p
    if start is not None:
        parts.append(_span(start, previous))
    return ", ".join(parts)


def _span(start: int, end: int | None) -> str:
    return str(start) if end is None or end == start else f"{start}-{end}"


def who(names: list[tuple[int | None, str]]) -> str:
    """ "process 3", "processes 0-511, 513-1023", with engines of unknown process index by name."""
    indices = [p for p, _name in names if p is not None]
    others = [name for p, name in names if p is None]
    parts = []
    if indices:
        parts.append(("process " if len(indices) == 1 else "processes ") + process_ranges(indices))
    parts += others
    return ", ".join(parts)


def grouped(lines: list[tuple[int | None, str, str]]) -> list[str]:
    """Per-process lines ``(process, name, text)`` grouped by text: ``"processes 0-511, 513-1023: text"``.

    Groups keep the order in which their text first appears.
    """
    groups: dict[str, list[tuple[int | None, str]]] = {}
    for process, name, text in lines:
        groups.setdefault(text, []).append((process, name))
    return [f"{who(members)}: {text}" for text, members in groups.items()]
