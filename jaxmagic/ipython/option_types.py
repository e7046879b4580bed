"""argparse ``type=`` converters for magic options, so a bad value is IPython's own UsageError.

``parse_argstring`` turns an ``argparse.ArgumentTypeError`` raised here into a
one-line ``UsageError`` that names the option (``argument --dims: ...``). Only
the text of the command line is parsed here; what a value means is checked by
the probe, which raises ``ProbeArgumentError`` naming its parameter.
"""

from __future__ import annotations

import argparse
import ast
import os
from collections.abc import Callable

from IPython.core.magic_arguments import argument

from jaxmagic.report.wording import shown

OUTPUT_HELP = "Store the report object in the user namespace under NAME, for the next cell to assert on."

# A number of runs, groups or devices beyond this is a typo, not a request: we say so
# instead of running until the user interrupts (or the backend fails to start).
LARGEST_COUNT = 100_000


def bounded_int(low: int, high: int = LARGEST_COUNT) -> Callable[[str], int]:
    """A converter accepting whole numbers from ``low`` to ``high``."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes a whole number, got {shown(text)}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"takes a number from {low} to {high:,}, got {value:,}")
        return value

    convert.__name__ = "number"  # argparse names the type in its own messages
    return convert


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a positive number, got {shown(text)}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"takes a positive number, got {shown(text)}")
    return value


def comma_list(text: str) -> list[str]:
    """``"leaks, live"`` -> ``["leaks", "live"]``."""
    return [word.strip() for word in text.split(",") if word.strip()]


def dimension_pair(text: str) -> list[int]:
    """``"0,2"`` -> ``[0, 2]``."""
    try:
        dims = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes two dimensions such as 0,2, got {shown(text)}") from None
    if len(dims) != 2:
        raise argparse.ArgumentTypeError(f"takes two dimensions such as 0,2, got {shown(text)}")
    return dims


def vmap_axes(text: str) -> int | None | tuple[int | None, ...]:
    """``"0"`` -> 0, ``"0,None"`` -> (0, None): vmap's in_axes."""
    try:
        axes = tuple(None if part.strip() == "None" else int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes in_axes such as 0 or 0,None, got {shown(text)}") from None
    return axes[0] if len(axes) == 1 else axes


def sweep(text: str) -> tuple[str, list[object]]:
    """``"B=64,256,1024"`` -> ``("B", [64, 256, 1024])``."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier() or not values.strip():
        raise argparse.ArgumentTypeError(f"takes NAME=V1,V2,... such as B=64,256,1024, got {shown(text)}")
    parsed: list[object] = []
    for raw in values.split(","):
        try:
            parsed.append(ast.literal_eval(raw.strip()))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise argparse.ArgumentTypeError(
                f"value {shown(raw.strip())} is not a Python literal (a number such as 64)"
            ) from None
    return name, parsed


def profile_path(path: str) -> str:
    """A file a memory profile can be written to: a file name in a folder that exists and is writable."""
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(full):
        raise argparse.ArgumentTypeError(
            f"takes a file name, and {shown(path)} is a folder; give e.g. {shown(os.path.join(path, 'memory.prof'))}"
        )
    folder, name = os.path.split(full)
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the folder of {shown(path)} does not exist; create it or give another path")
    try:
        longest = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        longest = 255
    if len(name.encode()) > longest:
        raise argparse.ArgumentTypeError(
            f"the file name {shown(name)} is longer than this file system allows ({longest} bytes)"
        )
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"the folder of {shown(path)} is not writable")
    return path


def variable_name(text: str) -> str:
    """A name ``-o`` can bind in the user namespace."""
    if not text.isidentifier():
        raise argparse.ArgumentTypeError(f"needs a Python variable name, got {shown(text)}")
    return text


# The option every magic takes, declared once: ``@output_option`` under ``@magic_arguments()``.
output_option = argument("-o", "--output", type=variable_name, metavar="NAME", help=OUTPUT_HELP)
