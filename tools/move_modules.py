"""Move modules of the package and rewrite every reference to them: ``git mv``, then imports and paths.

    .venv/bin/python tools/move_modules.py OLD=NEW [OLD=NEW ...]

OLD and NEW are dotted module names (``jaxmagic.probes._support.nan.producer=jaxmagic.probes._nans.search.producer``);
a package moves whole when OLD names a folder. Each move is made with ``git mv`` (a new package gets an empty
``__init__.py``), then the references are rewritten in every file git tracks (Python, Markdown, notebooks,
text): the dotted name, the ``from PARENT import NAME`` form, and the path (``probes/_support/nan/producer.py``,
also the short ``_support/nan/producer`` of the docs). Run again after a merge, it moves nothing that has moved
already and rewrites the references the merged work still makes to the old names (a NEW inside OLD, as
``_nans.fixes`` -> ``_nans.fixes.rules``, is never rewritten twice). Nothing else is changed: the formatter and
the import sorter run after it (``ruff check --fix --select I``, ``ruff format``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".py", ".md", ".txt", ".ipynb", ".toml", ".cfg", ".rst", ".sh", ".json"}
PROBES = "jaxmagic/probes/"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def _ensure_package(folder: Path) -> None:
    """Every folder from ``jaxmagic`` down to ``folder`` is a package."""
    for parent in [folder, *folder.parents]:
        if parent == Path("jaxmagic") or not str(parent).startswith("jaxmagic"):
            break
        init = ROOT / parent / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text("")
            _git("add", str(parent / "__init__.py"))


def _move(old: str, new: str) -> None:
    """``git mv`` the module (a ``.py`` file) or package (a folder) ``old`` to ``new``; nothing when ``new`` is
    there already (moved by an earlier run)."""
    source, target = Path(*old.split(".")), Path(*new.split("."))
    if (ROOT / target.with_suffix(".py")).exists() or (ROOT / target).is_dir():
        print(f"moved already: {old}")
        return
    if (ROOT / source.with_suffix(".py")).exists():
        source, target = source.with_suffix(".py"), target.with_suffix(".py")
    elif not (ROOT / source).is_dir():
        print(f"not found: {old}")
        return
    _ensure_package(target.parent)
    _git("mv", str(source), str(target))
    print(f"git mv {source} {target}")


def _drop_if_empty(folder: Path) -> None:
    """A package the moves emptied (its ``__init__.py`` alone left, and empty) is removed."""
    init = ROOT / folder / "__init__.py"
    rest = (
        [p for p in (ROOT / folder).iterdir() if p.name not in ("__init__.py", "__pycache__")] if init.exists() else [1]
    )
    if not rest and not init.read_text().strip():
        _git("rm", "-q", str(folder / "__init__.py"))
        print(f"git rm {folder / '__init__.py'}")


def _guarded(old: str, new: str, sep: str, after: str) -> str:
    """A pattern for ``old`` as a whole name (``after``: what may not follow it). Where ``new`` extends ``old``
    (``_nans.fixes`` -> ``_nans.fixes.rules``), ``old`` followed by a module of the new package is that module,
    not ``old``: the text already reads the new name, and is left alone."""
    guard = ""
    if new.startswith(old + sep):
        folder = ROOT / Path(*new.replace("/", ".").split(".")).parent
        names = sorted({p.stem for p in folder.iterdir()} if folder.is_dir() else {new[len(old) + 1 :].split(sep)[0]})
        alternatives = "|".join(map(re.escape, names))
        guard = f"(?!{re.escape(sep)}(?:{alternatives})(?![\\w]))"
        if sep == ".":  # `from old import submodule`: the package, not the module that moved into it
            guard += f"(?! import \\(?\\s*(?:{alternatives})\\b)"
    return f"(?<![\\w.]){re.escape(old)}{guard}(?!{after})"


def _rewrites(old: str, new: str) -> list[tuple[re.Pattern[str], str]]:
    """(pattern, replacement) pairs for one move: dotted names, ``from PARENT import NAME``, paths."""
    pairs = []
    package = (ROOT / Path(*new.split("."))).is_dir()  # a folder moved: its paths go on with "/"
    pairs.append((re.compile(_guarded(old, new, ".", r"\w")), new))
    if old.startswith("jaxmagic.probes.") and new.startswith("jaxmagic.probes."):  # the docs' ``probes._x.y``
        pairs.append((re.compile(_guarded(old[len("jaxmagic.") :], new[len("jaxmagic.") :], ".", r"\w")), new[9:]))
    old_path, new_path = old.replace(".", "/"), new.replace(".", "/")
    after = r"\w" if package else r"[\w/]"
    pairs.append((re.compile(_guarded(old_path, new_path, "/", after)), new_path))
    # the docs' short forms, from below probes/: `_support/nan/producer.py`, `_support/holders/`
    if old_path.startswith(PROBES) and new_path.startswith(PROBES):
        short_old, short_new = old_path[len(PROBES) :], new_path[len(PROBES) :]
        pairs.append((re.compile(_guarded(short_old, short_new, "/", after)), short_new))
    return pairs


_FROM_IMPORT = re.compile(r"^([ \t]*)from ([\w.]+) import (\(([^)]*)\)|([^\n(]+))[ \t]*$", re.M)


def _from_imports(text: str, modules: dict[str, str]) -> str:
    """``from PARENT import a, b as c`` where a module named moved: each name imported from its new parent,
    one statement per parent (the import sorter joins and orders them after)."""

    def rewrite(match: re.Match[str]) -> str:
        indent, parent = match[1], match[2]
        names = match[4] if match[4] is not None else match[5]
        if "#" in names:
            return match[0]
        entries = [n.strip() for n in names.replace("\n", " ").split(",") if n.strip()]
        groups: dict[str, list[str]] = {}
        for entry in entries:
            name, _, alias = entry.partition(" as ")
            moved = modules.get(f"{parent}.{name.strip()}")
            if moved is None:
                groups.setdefault(parent, []).append(entry)
                continue
            new_parent, _, new_name = moved.rpartition(".")
            alias = alias.strip() or (name.strip() if new_name != name.strip() else "")
            groups.setdefault(new_parent, []).append(new_name + (f" as {alias}" if alias else ""))
        if list(groups) == [parent]:
            return match[0]
        return "\n".join(f"{indent}from {p} import {', '.join(n)}" for p, n in groups.items())

    return _FROM_IMPORT.sub(rewrite, text)


def _tracked_text_files() -> list[Path]:
    names = _git("ls-files").splitlines()
    skip = ("jaxmagic.egg-info/", "tools/move_modules.py", "tools/structure5_moves.sh", "tools/structure5b_moves.sh")
    return [ROOT / n for n in names if Path(n).suffix in TEXT_SUFFIXES and not n.startswith(skip)]


def main(argv: list[str]) -> int:
    moves = [(old, new) for old, _, new in (arg.partition("=") for arg in argv)]
    if not moves or not all(old and new for old, new in moves):
        print(__doc__)
        return 2
    for old, new in moves:
        _move(old, new)
        _drop_if_empty(Path(*old.split(".")).parent)
    rewrites = [pair for old, new in moves for pair in _rewrites(old, new)]
    changed = 0
    for path in _tracked_text_files():
        if not path.exists():
            continue
        text = path.read_text()
        updated = _from_imports(text, dict(moves)) if path.suffix in (".py", ".ipynb") else text
        for pattern, replacement in rewrites:
            updated = pattern.sub(replacement, updated)
        if updated != text:
            path.write_text(updated)
            changed += 1
    print(f"rewrote references in {changed} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
