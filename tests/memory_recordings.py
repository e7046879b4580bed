"""Replaying compilations recorded on a TPU (``tools/accelerator/record_memory.py``) through the memory probe.

Every compilation the probe makes goes through ``program.compile_with_memory_dumps``. ``replaying(folders)``
puts in its place a function that answers from recordings: a compilation of the same module name and input
shapes (and ordinal, in the order they came) gets what XLA wrote for it on the device - its dumps, read by
the live path's own ``read_memory_dumps``, and its ``memory_analysis()`` or the compiler's error. A
compilation nobody recorded raises, as a compiler without a TPU would: the probe says it could not try it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from types import SimpleNamespace

import jax

from jaxmagic._jax.compile_dumps import DumpedCompileError, MemoryDumps, read_memory_dumps
from jaxmagic.probes._memory import program as program_module

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "accelerator", "tpu-v5e-jax0.12")


class RecordedCompiled:
    """What the probe reads of a ``Compiled``: its ``memory_analysis()`` as recorded (None when not)."""

    def __init__(self, figures: dict | None, hlo: str):
        self._figures, self._hlo = figures, hlo

    def memory_analysis(self):
        return SimpleNamespace(**self._figures) if self._figures else None

    def as_text(self) -> str:
        return self._hlo


def key_of(lowered, seen: dict) -> str:
    """The recorder's key: module name, input shapes, and how many compilations of that pair came before."""
    first = lowered.as_text().splitlines()[0]
    module = re.search(r"module @([\w.\-]+)", first)
    shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in jax.tree.leaves(lowered.args_info))
    base = f"{module.group(1) if module else 'module'}({shapes})"
    seen[base] = seen.get(base, -1) + 1
    return f"{base}#{seen[base]}"


def recordings(*folders: str) -> dict[str, tuple[str, dict]]:
    found: dict[str, tuple[str, dict]] = {}
    for folder in folders:
        with open(os.path.join(folder, "index.json")) as file:
            for entry in json.load(file):
                found[entry["key"]] = (folder, entry)
    return found


def relocated(hlo: str, sources: dict[str, str]) -> str:
    """The module's frames read from this checkout: a recorded file path ending in a key of ``sources``
    (``tools/accelerator/record_memory.py``, wherever the device's checkout was) becomes its value, so the
    user's lines are this checkout's and a trial that retraces the program meets the recorded line."""

    def local(match: re.Match) -> str:
        path = match.group(2)
        here = next((local for suffix, local in sources.items() if path.endswith(suffix)), path)
        return f'{match.group(1)}"{here}"'

    return re.sub(r'(?m)^(\d+ )"([^"]*)"$', local, hlo) if sources else hlo


@contextlib.contextmanager
def replaying(*folders: str, sources: dict[str, str] | None = None) -> Iterator[list[str]]:
    """Compilations answered from ``folders``' recordings; yields the keys asked for, in order. ``sources``:
    recorded file paths (by their end) read from this checkout's files (``relocated``)."""
    known = recordings(*folders)
    asked: list[str] = []
    seen: dict = {}

    def compile_from_recording(lowered):
        key = key_of(lowered, seen)
        asked.append(key)
        if key not in known:
            error = RuntimeError(f"no recording of {key}: nothing here compiles for the TPU")
            raise DumpedCompileError(error, MemoryDumps())
        folder, entry = known[key]
        where = os.path.join(folder, entry["dir"])
        dumps = read_memory_dumps(where, entry.get("platform", ""))
        dumps.hlo = relocated(dumps.hlo, sources or {})
        error_text = entry.get("error")
        if error_text is None and entry.get("error_file"):
            with open(os.path.join(where, entry["error_file"])) as file:
                error_text = file.read()
        if error_text:
            raise DumpedCompileError(RuntimeError(error_text.strip()), dumps)
        return RecordedCompiled(entry.get("memory_analysis"), dumps.hlo), dumps

    real = program_module.compile_with_memory_dumps
    program_module.compile_with_memory_dumps = compile_from_recording
    try:
        yield asked
    finally:
        program_module.compile_with_memory_dumps = real
