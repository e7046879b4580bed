"""Rewrite the module names and file paths of issue 55.3/55.4's moves in the given files (re-runnable).

    .venv/bin/python tools/rename_modules.py FILE...     # e.g. $(git ls-files '*.py' '*.md' '*.toml')

A branch written before the moves still says ``jaxmagic.probes.nans.probe`` or
``probes/_support/nan/inside.py``; this turns them into the names after the moves. Running it twice
changes nothing. A probe's own public name (``jaxmagic.probes.nans(...)``, ``jaxmagic.probes.nans`` in
prose) is left alone: only a module path is rewritten - a dotted name followed by a further name or a
quote, or after ``from``/``import``, and a file path.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# Helpers with one probe using them, moved into it; the NaN fixes tried on values, into the NaN theme.
MOVES = {
    "_support/buffer_assignment": "memory/buffer_assignment",
    "_support/global_assignment": "hlo/global_assignment",
    "_support/nan/inside": "nans/inside",
    "_support/holders/library_records": "leaks/library_records",
    "_support/fixes/fitters": "explain/line_fixes/fitters",
    "_support/fixes/control_flow": "explain/line_fixes/control_flow",
    "_support/fixes/conversions": "explain/line_fixes/conversions",
    "_support/fixes/indexing": "explain/line_fixes/indexing",
    "_support/fixes/trial": "explain/line_fixes/trial",
    "_support/fixes/library_static": "explain/library_static",
    "_support/fixes/values": "_support/nan/value_fixes",
    "_support/fixes/widened": "_support/nan/widened",
    # what several probes share, by theme: the user's call and its arguments; running the user's code again
    "_support/bound_arguments": "_support/calls/bound_arguments",
    "_support/call_names": "_support/calls/call_names",
    "_support/wrapped": "_support/calls/wrapped",
    "_support/host_arguments": "_support/calls/host_arguments",
    "_support/line_values": "_support/calls/line_values",
    "_support/library_calls": "_support/calls/library_calls",
    "_support/kept_state": "_support/rerun/kept_state",
    "_support/users_python": "_support/rerun/users_python",
    # a module hidden by the function its package binds (`_debug.breakpoints` was the probe function)
    "debug/breakpoints": "debug/breakpoint_probe",
    "gather/merge": "gather/merging",
}

# Every probe module is private: ``jaxmagic.probes`` binds the public names (``probes.nans`` is the
# function), so a subpackage named like its probe was hidden behind it.
PROBES = [
    "bisect",
    "check",
    "compiles",
    "config",
    "debug",
    "devices",
    "doctor",
    "explain",
    "gather",
    "hlo",
    "keys",
    "leaks",
    "live",
    "memory",
    "nans",
    "per_device",
    "prints",
    "profile",
    "sharding",
    "stages",
    "tracebacks",
    "transfers",
    "watch",
]


def _private(path: str) -> str:
    """``nans/inside`` -> ``_nans/inside``: a probe's package or module after the moves."""
    head, _, rest = path.partition("/")
    return "/".join(filter(None, ["_" + head if head in PROBES else head, rest]))


# a move's old path as written before the probes became private, and after (a branch may have either)
MOVED = {written: _private(new) for old, new in MOVES.items() for written in (old, _private(old))}


def _rules() -> list[tuple[re.Pattern[str], str]]:
    rules = []
    for old, new in MOVED.items():
        old_dotted, new_dotted = old.replace("/", "."), new.replace("/", ".")
        rules.append((re.compile(rf"\bjaxmagic\.probes\.{re.escape(old_dotted)}\b"), f"jaxmagic.probes.{new_dotted}"))
        rules.append((re.compile(rf"(?<![\w.])(probes/)?{re.escape(old)}(?=\.py|/|\b)"), f"probes/{new}"))
    names = "|".join(PROBES)
    # a module path: followed by a further name or a quote, or imported
    rules.append((re.compile(rf"\bjaxmagic\.probes\.({names})(?=\.\w|[\"'])"), r"jaxmagic.probes._\1"))
    rules.append((re.compile(rf"\b(from|import) jaxmagic\.probes\.({names})\b"), r"\1 jaxmagic.probes._\2"))
    rules.append((re.compile(rf"(?<![\w.])probes/({names})(?=/|\.py\b)"), r"probes/_\1"))
    return rules


RULES = _rules()


FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from jaxmagic\.probes\.(?P<package>[\w.]+) import (?P<names>[\w ,]+)$", re.M
)


def _split_from_import(match: re.Match[str]) -> str:
    """``from jaxmagic.probes._support import attribution, call_names``: each moved module from its new package."""
    indent, package = match["indent"], match["package"].replace(".", "/")
    by_package: dict[str, list[str]] = {}
    for imported in match["names"].split(","):
        module = imported.split()[0] if imported.strip() else ""
        if not module:
            continue
        moved = MOVED.get(f"{package}/{module}")
        new_package = moved.rpartition("/")[0] if moved else package
        by_package.setdefault(new_package, []).append(imported.strip())
    if list(by_package) == [package]:
        return match[0]
    return "\n".join(
        f"{indent}from jaxmagic.probes.{new.replace('/', '.')} import {', '.join(names)}"
        for new, names in by_package.items()
    )


def rewrite(text: str) -> str:
    text = FROM_IMPORT.sub(_split_from_import, text)
    for pattern, replacement in RULES:
        text = pattern.sub(replacement, text)
    return text


def main(paths: list[str]) -> None:
    for name in paths:
        path = Path(name)
        text = path.read_text()
        new = rewrite(text)
        if new != text:
            path.write_text(new)
            print(f"rewrote {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
