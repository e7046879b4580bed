"""Compile a lowered program once more with XLA's dumps on, for what it says about memory.

XLA decides which buffers exist and when each is live while it compiles (buffer assignment over the
scheduled program); JAX's public API gives only the totals of that (``memory_analysis()``). XLA writes
the whole of it when its debug option ``xla_dump_to`` is set, and JAX passes debug options per
compilation (``Lowered.compile(compiler_options=...)``): no global flag is touched, the user's own
executables are not recompiled, and the dumps go to one temporary folder of the process, read and emptied
at once.

What is read (XLA of jaxlib 0.12.0.1, CPU and TPU; file names end in these suffixes, prefixed by
``module_NNNN.<module>.<platform>_after_optimizations`` on CPU, ``module_NNNN.<module>.cl_<id>.after_optimizations``
on TPU):

* ``.txt`` - the optimized module, with its instructions' metadata (``op_name`` and stack frames);
* ``-buffer-assignment.txt`` - every allocation: size, kind (parameter N, maybe-live-out, temp) and values;
* ``-live-range.txt`` - the schedule, each buffer's live range and the buffers live at the peak.

A platform whose XLA writes no live-range file still gives the allocations; the reader says what it lacks.
XLA:TPU writes these three before it raises an out-of-memory error at compile time (and the optimized module
again as ``oom_intermediate_module.txt``): ``compile_with_memory_dumps`` reads them then too.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import hashlib
import os
import shutil
import tempfile
import threading
from typing import Any


@dataclasses.dataclass
class MemoryDumps:
    """The texts XLA wrote for one compilation ("" for a file it did not write)."""

    hlo: str = ""
    buffer_assignment: str = ""
    live_range: str = ""
    platform: str = ""  # what the program was compiled for: "cpu", "tpu", "cuda"


_SUFFIXES = {
    "after_optimizations.txt": "hlo",
    "after_optimizations-buffer-assignment.txt": "buffer_assignment",
    "after_optimizations-live-range.txt": "live_range",
}


class DumpedCompileError(Exception):
    """The compiler raised, and what it had dumped by then: XLA:TPU writes the buffer assignment and live
    ranges of the program it could not fit before it raises ``CompileTimeHbmOom`` - the one account of
    what filled it. ``error`` is the compiler's own exception (the caller words it, or raises it)."""

    def __init__(self, error: BaseException, dumps: MemoryDumps):
        super().__init__(str(error))
        self.error = error
        self.dumps = dumps


# One dump folder for the process. JAX caches an executable per (program, compiler options): a new folder per
# compilation was a new option value each time, so every %%jax_memory run kept one more executable (~0.2 MB a
# compilation, ~1.1 MB a run, never given back). With one folder a program compiled before with it is served from
# that cache and XLA writes nothing: its texts are kept from the compilation that wrote them (a few programs,
# by their text); one not kept any more is compiled once more into a folder of its own.
_FOLDER: list[str] = []
_LOCK = threading.Lock()  # one compilation dumps into the folder at a time: each reads only its own files
_KEPT: collections.OrderedDict[str, MemoryDumps] = collections.OrderedDict()  # program text digest -> its dumps
_KEPT_PROGRAMS = 16
_KEPT_CHARACTERS = 32 << 20  # at most this much text kept (a large program's texts run to megabytes)


def _dump_folder() -> str:
    if not _FOLDER or not os.path.isdir(_FOLDER[0]):
        _FOLDER[:] = [tempfile.mkdtemp(prefix="jaxmagic-xla-")]
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    return _FOLDER[0]


def compile_with_memory_dumps(lowered: Any) -> tuple[Any, MemoryDumps]:
    """``lowered.compile()`` with XLA's dumps written, read and removed: (the Compiled, the texts). When
    compiling raises, the texts are read before the folder is emptied: ``DumpedCompileError``."""
    key = hashlib.blake2b(lowered.as_text().encode(), digest_size=16).hexdigest()
    with _LOCK:
        compiled, dumps = _compiled_into(lowered, _dump_folder())
        if dumps.hlo or dumps.buffer_assignment:
            _KEPT[key] = dumps
            while len(_KEPT) > 1 and (len(_KEPT) > _KEPT_PROGRAMS or _kept_characters() > _KEPT_CHARACTERS):
                _KEPT.popitem(last=False)
        elif key in _KEPT:  # compiled before with these options: JAX's cache answered and XLA wrote nothing
            _KEPT.move_to_end(key)
            dumps = _KEPT[key]
        else:
            own = tempfile.mkdtemp(prefix="jaxmagic-xla-")
            try:
                compiled, dumps = _compiled_into(lowered, own)
            finally:
                shutil.rmtree(own, ignore_errors=True)
    return compiled, dumps


def _kept_characters() -> int:
    return sum(len(d.hlo) + len(d.buffer_assignment) + len(d.live_range) for d in _KEPT.values())


def _compiled_into(lowered: Any, folder: str) -> tuple[Any, MemoryDumps]:
    try:
        platform = _platform(lowered)
        try:
            compiled = lowered.compile(compiler_options={"xla_dump_to": folder, "xla_dump_hlo_as_text": True})
        except Exception as error:
            raise DumpedCompileError(error, read_memory_dumps(folder, platform)) from error
        return compiled, read_memory_dumps(folder, platform)
    finally:
        for name in os.listdir(folder):  # the folder stays; what this compilation wrote goes
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)


def _platform(lowered: Any) -> str:
    """The platform a lowered program is for ("" when this JAX keeps it elsewhere)."""
    lowering = getattr(lowered, "_lowering", None)  # no public name for it (JAX 0.12: a MeshComputation)
    platforms = getattr(lowering, "_platforms", None)
    if platforms:
        return str(platforms[0])
    backend = getattr(lowering, "compile_args", {}).get("backend") if lowering is not None else None
    return str(getattr(backend, "platform", "") or "")


def read_memory_dumps(folder: str, platform: str = "") -> MemoryDumps:
    """The texts of the last module dumped in ``folder`` (one compilation writes one module; a program
    that calls others writes its own module last)."""
    dumps = MemoryDumps(platform=platform)
    names = sorted(os.listdir(folder))
    for name in names:
        for suffix, field in _SUFFIXES.items():
            if name.endswith(suffix):
                setattr(dumps, field, _read(os.path.join(folder, name)))
    if not dumps.hlo:  # XLA:TPU out of memory: the optimized module under the name of its report
        for name in names:
            if name.endswith("oom_intermediate_module.txt"):
                dumps.hlo = _read(os.path.join(folder, name))
    return dumps


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as file:
        return file.read()
