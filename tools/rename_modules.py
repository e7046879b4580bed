"""Rewrite the module names and file paths of issue 55.3/55.4's moves in the given files (re-runnable).

The moves: every probe module private (``probes.nans`` -> ``probes._nans``), ``probes/_support`` helpers
with one user moved into it (``MOVES``), and ``_jax/compat.py`` split by theme (``COMPAT_SPLIT``).

    .venv/bin/python tools/rename_modules.py FILE...     # e.g. $(git ls-files '*.py' '*.md' '*.toml')

A branch written before the moves still says ``jaxmagic.probes.nans.probe`` or
``probes/_support/nan/inside.py``; this turns them into the names after the moves. Running it twice
changes nothing. A probe's own public name (``jaxmagic.probes.nans(...)``, ``jaxmagic.probes.nans`` in
prose) is left alone: only a module path is rewritten - a dotted name followed by a further name or a
quote, or after ``from``/``import``, and a file path.
"""

from __future__ import annotations

import ast
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

# _jax/compat.py split by theme: each function -> the module of _jax/ that now holds it.
COMPAT_SPLIT = {
    "addressable_shards": "array_shards",
    "per_device_bytes": "array_shards",
    "bind_equation": "jaxpr_parts",
    "called_function": "jaxpr_parts",
    "closed_parts": "jaxpr_parts",
    "inspect_sharding_primitive": "jaxpr_parts",
    "is_literal": "jaxpr_parts",
    "jaxpr_equation_printer": "jaxpr_parts",
    "jaxpr_function": "jaxpr_parts",
    "jaxpr_types": "jaxpr_parts",
    "mlir_ir": "jaxpr_parts",
    "name_stack_text": "jaxpr_parts",
    "program_source": "jaxpr_parts",
    "scan_operands": "jaxpr_parts",
    "scope_entry_type": "jaxpr_parts",
    "sub_jaxprs": "jaxpr_parts",
    "user_context": "jaxpr_parts",
    "while_operands": "jaxpr_parts",
    "with_params": "jaxpr_parts",
    "abstract_value": "jit_internals",
    "clear_dispatch_cache": "jit_internals",
    "compiled_call": "jit_internals",
    "function_being_traced": "jit_internals",
    "has_abstract_value": "jit_internals",
    "is_eager_operation": "jit_internals",
    "is_jitted": "jit_internals",
    "jit_arguments": "jit_internals",
    "jit_cache_miss_code": "jit_internals",
    "jit_options": "jit_internals",
    "jit_program": "jit_internals",
    "jit_type": "jit_internals",
    "post_hook_state": "jit_internals",
    "transformed_function": "jit_internals",
    "call_with_key_reuse_checks": "key_internals",
    "random_core": "key_internals",
    "typed_key_data": "key_internals",
    "traceback_frames": "recorded_sources",
    "tracer_line_info": "recorded_sources",
    "tracing_where_traced": "recorded_sources",
    "user_frame": "recorded_sources",
    "user_frames": "recorded_sources",
    "backend_started": "runtime",
    "profiler_session_active": "runtime",
    "top_level_check": "runtime",
    "trace_context_size": "runtime",
    "traceback_filtering_mode": "runtime",
    "unregister_duration_listener": "runtime",
}
_COMPAT_USE = re.compile(r"(?:(?<=_jax\.)|(?<![\w.]))compat\.(\w+)\b")
_COMPAT_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from jaxmagic\._jax import (?P<names>[\w ,]+?)(?P<comment>[ \t]*#.*)?$", re.M
)
_COMPAT_FROM = re.compile(
    r"^(?P<indent>[ \t]*)from jaxmagic\._jax\.compat import (?P<names>[\w ,]+?)(?P<comment>[ \t]*#.*)?$", re.M
)


def _split_compat(text: str) -> str:
    """``compat.bind_equation`` -> ``jaxpr_parts.bind_equation``, and each import of ``compat`` -> the
    theme modules its scope uses (a function's own import: that function's; the module's: the rest)."""
    if "compat" not in text:
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:  # not Python (a page): names in prose only
        return _COMPAT_USE.sub(lambda m: f"{COMPAT_SPLIT[m[1]]}.{m[1]}" if m[1] in COMPAT_SPLIT else m[0], text)
    lines = text.split("\n")
    local_scopes = []  # (first line, last line) of functions importing compat themselves
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if inner is not node and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if (
                    isinstance(inner, ast.ImportFrom)
                    and inner.module == "jaxmagic._jax"
                    and any(a.name == "compat" for a in inner.names)
                ):
                    local_scopes.append((node.lineno, node.end_lineno or node.lineno))

    uses = [
        (node.lineno, COMPAT_SPLIT[node.attr])
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "compat"
        and node.attr in COMPAT_SPLIT
    ]

    def themes_in(first: int, last: int, exclude: list[tuple[int, int]]) -> list[str]:
        """The theme modules the code (not the prose) of lines ``first``..``last`` uses, but in ``exclude``."""
        return sorted(
            {
                theme
                for number, theme in uses
                if first <= number <= last and not any(a <= number <= b for a, b in exclude)
            }
        )

    def scope_of(number: int) -> tuple[int, int, list[tuple[int, int]]]:
        inner = [s for s in local_scopes if s[0] <= number <= s[1]]
        if inner:
            a, b = max(inner)
            return a, b, []
        return 1, len(lines), local_scopes

    def imports(match: re.Match[str]) -> str:
        names = [n.strip() for n in match["names"].split(",") if n.strip()]
        if "compat" not in names:
            return match[0]
        number = text.count("\n", 0, match.start()) + 1
        themes = themes_in(*scope_of(number))
        kept = sorted(set(names) - {"compat"} | set(themes))
        if not kept:
            return ""
        return f"{match['indent']}from jaxmagic._jax import {', '.join(kept)}{match['comment'] or ''}"

    def from_compat(match: re.Match[str]) -> str:
        by_theme: dict[str, list[str]] = {}
        for name in (n.strip() for n in match["names"].split(",") if n.strip()):
            by_theme.setdefault(COMPAT_SPLIT.get(name.split()[0], "compat"), []).append(name)
        return "\n".join(
            f"{match['indent']}from jaxmagic._jax.{theme} import {', '.join(names)}{match['comment'] or ''}"
            for theme, names in sorted(by_theme.items())
        )

    text = _COMPAT_IMPORT.sub(imports, text)
    text = _COMPAT_FROM.sub(from_compat, text)
    return _COMPAT_USE.sub(lambda m: f"{COMPAT_SPLIT[m[1]]}.{m[1]}" if m[1] in COMPAT_SPLIT else m[0], text)


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
    text = _split_compat(text)
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
