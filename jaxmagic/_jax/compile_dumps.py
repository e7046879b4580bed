"""Compile a lowered program once more with XLA's dumps on, for what it says about memory.

XLA decides which buffers exist and when each is live while it compiles (buffer assignment over the
scheduled program); JAX's public API gives only the totals of that (``memory_analysis()``). XLA writes
the whole of it when its debug option ``xla_dump_to`` is set, and JAX passes debug options per
compilation (``Lowered.compile(compiler_options=...)``): no global flag is touched, the user's own
executables are not recompiled, and the dumps go to a temporary folder read and removed at once.

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

import dataclasses
import os
import shutil
import tempfile
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


def compile_with_memory_dumps(lowered: Any) -> tuple[Any, MemoryDumps]:
    """``lowered.compile()`` with XLA's dumps written, read and removed: (the Compiled, the texts). When
    compiling raises, the texts are read before the folder goes: ``DumpedCompileError``."""
    folder = tempfile.mkdtemp(prefix="jaxmagic-xla-")
    try:
        platform = _platform(lowered)
        try:
            compiled = lowered.compile(compiler_options={"xla_dump_to": folder, "xla_dump_hlo_as_text": True})
        except Exception as error:
            raise DumpedCompileError(error, read_memory_dumps(folder, platform)) from error
        return compiled, read_memory_dumps(folder, platform)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
