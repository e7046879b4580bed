"""Small pieces of wording every report shares: a message's first line, byte sizes, dtypes.

One definition each, so two reports never say the same thing two ways.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """Text without terminal colour codes (ipykernel sets FORCE_COLOR, so jaxprs may carry them)."""
    return _ANSI.sub("", text)


def message_of(error: BaseException | str) -> str:
    """``str(error)`` without colour codes; never raises, even when the exception's ``__str__`` does.

    A user's exception class may have a broken ``__str__``: the report then names
    the type and says so, and the user's exception itself is raised unchanged.
    """
    if isinstance(error, str):
        text = error
    else:
        try:
            text = str(error)
        except Exception as problem:  # the user's __str__ raised: describe, never propagate
            try:
                detail = type(problem).__name__
            except Exception:
                detail = "an error"
            text = f"<{type(error).__name__}: its message could not be read ({detail} in __str__)>"
    return _ANSI.sub("", text)


def exception_chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every exception in its ``__cause__`` / ``__context__`` chain, each once."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [current.__cause__, current.__context__]


def first_line(error: BaseException | str) -> str:
    """The first non-empty line of an exception's message (or of a text); "" when there is none.

    A first line that ends announcing the next ("... The error was:", as jit's non-hashable static argument
    error ends) takes that next line with it: a one-line account never stops at a colon."""
    lines = [line.strip() for line in message_of(error).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def error_line(error: BaseException) -> str:
    """``"TypeError: first line of the message"``, for a report's one-line account of an exception; the type
    alone when it has no message (``KeyboardInterrupt``, not "KeyboardInterrupt: ")."""
    line = first_line(error)
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def ended(text: str) -> str:
    """``text`` as the end of a sentence: a full stop added unless it already ends with one
    (an error message quoted inside a report's sentence, "The cell failed with ValueError: bad.")."""
    return text if text.rstrip().endswith((".", "!", "?", "…")) else text + "."


def shown(value: object, limit: int = 60, quoted: bool = True) -> str:
    """A value of the user's in a message, on one line and cut short, so a UsageError stays readable.

    ``str(value)`` (or its repr when ``str`` raises), its whitespace runs made one space, at most
    ``limit`` characters (the cut marked with "…"), quoted like a repr unless ``quoted`` is False.
    """
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:
        text = f"<a {type(value).__name__}>"
    text = " ".join(text.split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(text) if quoted else text


def format_bytes(n: int | float) -> str:
    """1.25 MiB, 128 KiB, 4 B: binary units, three significant figures."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" or abs(n) >= 100 else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} GiB"  # unreachable: the loop returns at GiB


_DTYPE_SHORT = {"float": "f", "int": "i", "uint": "u", "complex": "c", "bfloat": "bf"}


def short_dtype(dtype: str) -> str:
    """``float32`` -> ``f32``, ``bfloat16`` -> ``bf16``; other names (bool, key<fry>) unchanged."""
    match = re.fullmatch(r"([a-z]+?)(\d+)", str(dtype))
    if match and match.group(1) in _DTYPE_SHORT:
        return _DTYPE_SHORT[match.group(1)] + match.group(2)
    return str(dtype)


def counted(n: int, noun: str, plural: str = "") -> str:
    """``n`` and its noun, singular for one: "1 line", "3 lines", "2 processes" (``plural`` when it is not
    ``noun + "s"``). Every count a report writes out in words goes through here: never "1 lines"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def times(n: int) -> str:
    """How often, in words: "once", "twice", "3 times"."""
    return {1: "once", 2: "twice"}.get(n, f"{n:,} times")
