"""Whose code a file is - JAX's, an installed library's, Python's or the user's - by what its module
is, not by where the file lies.

JAX, jaxlib and the libraries built on them are imported from site-packages, but as often from a
folder on ``PYTHONPATH``: an HPC module tree, a ``pip install --target`` folder, one Nix store path
per package (NixOS/nixpkgs#511567), a container's ``/opt`` checkouts (NVIDIA/JAX-Toolbox#1416:
``jax.__path__ == ['/opt/jax/jax']``). So:

- **JAX** is the directories of the imported ``jax`` and ``jaxlib`` packages, read from
  ``sys.modules`` (nothing is imported here), wherever they are and however they were installed.
- **A library** is an installed distribution's code: everything under the interpreter's own library
  folders (``sysconfig``), and in any other folder on ``sys.path`` that holds installed distributions'
  metadata (``*.dist-info``; a versioned ``name-1.0.egg-info``) the top-level modules their ``RECORD``
  (else ``top_level.txt``) lists - all of the folder when one of them lists nothing.
- **The user's** is the rest: notebook cells, scripts and the modules beside them, a package on
  ``sys.path`` that no distribution installed (a project's ``src/``; a source checkout of a library
  counts as the user's until it is installed), and a project installed editable (``pip install -e``):
  its code stays in the project folder, outside every folder above - pip's development mode is a
  working copy its owner edits. An unversioned ``name.egg-info`` is setuptools' build metadata in such
  a project folder (legacy ``setup.py develop``), not an installation.

Cheap by construction: callers cache per file name (``usercode.source``); a miss costs prefix tests
against the folders, and each folder's metadata is read once.
"""

from __future__ import annotations

import csv
import functools
import os
import sys
import sysconfig

# jaxmagic's own files (this file is jaxmagic/usercode/code_owner.py)
JAXMAGIC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def kind_of_file(filename: str) -> str:
    """Whose code ``filename`` is: "user", "jaxmagic", "jax" (jax and jaxlib), "python" (frozen and
    generated code) or "library" (any installed package, Python's standard library included)."""
    if not filename or filename.startswith("<frozen") or filename in ("<string>", "<decorator-gen>"):
        return "python"
    if filename.startswith("<"):  # "<ipython-input-3-...>" in terminal IPython, "<stdin>", ...
        return "user" if filename.startswith(("<ipython-input", "<stdin>")) else "python"
    path = os.path.abspath(filename)
    if path.startswith(JAXMAGIC_DIR):
        return "jaxmagic"
    if path.startswith(jax_dirs()):
        return "jax"
    if path.startswith(_interpreter_dirs()):
        return "library"
    folder = import_folder(path)
    if folder and _installed_here(folder, path[len(folder) :].split(os.sep, 1)[0]):
        return "library"
    return "user"


@functools.lru_cache(maxsize=8_192)  # asked per library frame walked
def module_of_file(filename: str) -> str:
    """The dotted module name of an installed package's file (JAX's or a library's), relative to the
    ``sys.path`` folder it was imported from: ``.../optax/losses/_classification.py`` ->
    ``optax.losses._classification``; "" for the user's files, Python's standard library and files
    outside ``sys.path``."""
    if not filename.endswith(".py") or kind_of_file(filename) not in ("jax", "library"):
        return ""
    path = os.path.abspath(filename)
    folder = import_folder(path)
    if not folder or folder in _standard_library():
        return ""
    parts = path[len(folder) : -len(".py")].split(os.sep)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(part for part in parts if part)


def jax_dirs() -> tuple[str, ...]:
    """The directories of the imported ``jax`` and ``jaxlib`` packages (none before the user imports
    them: then no frame can run their code)."""
    dirs: list[str] = []
    for name in ("jax", "jaxlib"):
        for directory in getattr(sys.modules.get(name), "__path__", None) or ():
            dirs.append(os.path.abspath(directory) + os.sep)
    return tuple(dirs)


@functools.cache
def _interpreter_dirs() -> tuple[str, ...]:
    """The running interpreter's library folders: its site-packages, its standard library, and its
    prefixes' ``lib`` (a distribution's ``/usr/lib/python3/dist-packages`` lies there)."""
    paths = sysconfig.get_paths()
    dirs = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= {os.path.join(sys.base_prefix, "lib"), os.path.join(sys.prefix, "lib")}
    return tuple(sorted(os.path.abspath(d) + os.sep for d in dirs if d))


@functools.cache
def _standard_library() -> frozenset[str]:
    paths = sysconfig.get_paths()
    return frozenset(os.path.abspath(paths[key]) + os.sep for key in ("stdlib", "platstdlib") if paths.get(key))


_folders: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (sys.path as last seen, its folders)


def import_folder(path: str) -> str:
    """The deepest folder on ``sys.path`` holding ``path`` (with a trailing separator): where its
    module was imported from; "" when none holds it."""
    global _folders
    key = tuple(entry for entry in sys.path if isinstance(entry, str))
    if key != _folders[0]:
        folders = {os.path.abspath(entry or os.curdir) + os.sep for entry in key}
        _folders = (key, tuple(sorted(folders, key=len, reverse=True)))
    return next((folder for folder in _folders[1] if path.startswith(folder)), "")


def _installed_here(folder: str, top: str) -> bool:
    """Whether ``top`` (a top-level package's directory or a module's file name) in ``folder`` is an
    installed distribution's. The folder's metadata is read again when the folder changed (an install
    into it while the kernel runs): one ``stat`` per file name judged."""
    try:
        changed = os.stat(folder).st_mtime_ns
    except OSError:
        return False
    listed = _installed_in(folder, changed)
    return listed is not None and (not listed or top in listed)


@functools.lru_cache(maxsize=256)
def _installed_in(folder: str, changed: int = 0) -> frozenset[str] | None:
    """The top-level names the distributions installed in ``folder`` list (a package's directory
    name, a module's file name); None when the folder holds no distribution; empty when one of them
    lists no files (then all of the folder is installed code). ``changed``: the folder's modification
    time, part of the cache key only."""
    try:
        with os.scandir(folder) as listing:
            entries = [entry.name for entry in listing if entry.is_dir()]
    except OSError:
        return None
    metadata = [
        name
        for name in entries
        if name.endswith(".dist-info") or (name.endswith(".egg-info") and "-" in name[: -len(".egg-info")])
    ]
    if not metadata:
        return None
    listed: set[str] = set()
    for name in metadata:
        names = _listed_by(os.path.join(folder, name))
        if not names:
            return frozenset()
        listed |= names
    return frozenset(listed)


def _listed_by(metadata: str) -> set[str]:
    """The top-level names one distribution's metadata directory lists: the first component of each
    path in its ``RECORD`` (what the installer wrote), else its ``top_level.txt``; empty if neither."""
    names: set[str] = set()
    try:
        with open(os.path.join(metadata, "RECORD"), newline="", encoding="utf-8") as record:
            for row in csv.reader(record):
                top = row[0].replace("\\", "/").split("/", 1)[0] if row else ""
                if top and top != ".." and not top.endswith((".dist-info", ".data")) and top != "__pycache__":
                    names.add(top)
        if names:
            return names
    except OSError:
        pass
    try:
        with open(os.path.join(metadata, "top_level.txt"), encoding="utf-8") as top_level:
            for line in top_level:
                if line.strip():
                    names |= {line.strip(), line.strip() + ".py"}
    except OSError:
        pass
    return names
