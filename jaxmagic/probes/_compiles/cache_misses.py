"""The persistent compilation cache: a compilation that missed it, and why it will miss again.

With ``jax_compilation_cache_dir`` set, JAX logs (at WARNING while ``%%jax_compiles`` explains cache
misses) each miss, each hit, and why an entry was not written: the compilation took less than
``jax_persistent_cache_min_compile_time_secs`` (1 s by default - the most common reason "it recompiles
every time I restart"), the entry is smaller than ``jax_persistent_cache_min_entry_size_bytes``, or this
is not process 0. Which part of the key differed JAX does not log (the key is one hash of the program,
its compile options, the devices, the JAX and jaxlib versions and XLA flags); the cache directory's file
names say whether the function had entries under other keys.
"""

from __future__ import annotations

import dataclasses

from jaxmagic._jax.compile_log import PersistentCacheLine, bare_name
from jaxmagic._jax.persistent_cache import cache_state, entries_of
from jaxmagic.report import SourceLine

KEPT = 20


@dataclasses.dataclass
class CacheMiss:
    """One compilation that missed the persistent cache."""

    module: str  # "jit_step"
    function: str  # "step"
    key: str
    written: bool | None = None  # None: JAX said neither that it wrote the entry nor why not
    why_not_written: str = ""
    other_keys: int = 0  # entries the directory holds for this function under other keys
    why: str = ""  # why it missed, as far as can be told
    fix: str = ""
    line: SourceLine | None = None  # the call that compiled

    @property
    def headline(self) -> str:
        return f"`{self.function}` missed the persistent compilation cache: {self.why}"


def function_of_module(module: str) -> str:
    """ "jit_step" -> "step" (the module name JAX gives a jitted function's program)."""
    name = bare_name(module[4:] if module.startswith("jit_") else module)
    return "<lambda>" if name == "_lambda" else name  # JAX makes "<lambda>" a safe module name


class CacheMisses:
    """Collects the persistent-cache log lines of a block into ``CacheMiss`` records."""

    def __init__(self, found: list[CacheMiss]):
        self.found = found
        self.hits = 0
        self._by_key: dict[str, CacheMiss] = {}
        self._last: CacheMiss | None = None

    def read(self, line: PersistentCacheLine, call: SourceLine | None = None) -> None:
        if line.event == "hit":
            self.hits += 1
            return
        if line.event == "miss":
            if len(self.found) >= KEPT:
                self._last = None
                return
            miss = CacheMiss(module=line.module, function=function_of_module(line.module), key=line.key, line=call)
            self.found.append(miss)
            self._by_key[line.key] = miss
            self._last = miss
            return
        found = self._by_key.get(line.key) if line.key else self._last
        if found is None:
            return
        miss = found
        if line.event == "written":
            miss.written = True
        elif line.event == "too_fast":
            miss.written = False
            miss.why_not_written = (
                f"it compiled in {line.seconds:.2f} s, under jax_persistent_cache_min_compile_time_secs "
                f"({line.limit:.2f} s), so JAX did not write it"
            )
        elif line.event == "too_small":
            miss.written = False
            miss.why_not_written = (
                f"its entry ({line.size} bytes) is under jax_persistent_cache_min_entry_size_bytes "
                f"({int(line.limit or 0)} bytes), so JAX did not write it"
            )
        elif line.event == "other_process":
            miss.written = False
            miss.why_not_written = "only process 0 writes the cache, and this is another process"
        elif line.event == "disabled":
            miss.written = False
            miss.why_not_written = "the cache is disabled or was not initialized"

    def finish(self) -> None:
        """Say why each miss missed, from the cache directory's entries and JAX's thresholds."""
        if not self.found:
            return
        state = cache_state()
        directory = state.used_dir or state.configured_dir
        for miss in self.found:
            others = [key for key in entries_of(directory, miss.module) if key != miss.key] if directory else []
            miss.other_keys = len(others)
            if others:
                miss.why = (
                    f"the cache holds {len(others)} entr{'y' if len(others) == 1 else 'ies'} for `{miss.function}` "
                    "under other keys: the program or what its key hashes changed since (argument shapes or dtypes, "
                    "a baked-in constant, compile options, devices, XLA flags or the JAX version). JAX does not "
                    "say which part differed."
                )
            else:
                miss.why = f"the cache holds no entry for `{miss.function}` (first compilation, or never written)"
            if miss.why_not_written:
                miss.why += f"; and it will miss again: {miss.why_not_written}."
                if "min_compile_time" in miss.why_not_written:
                    miss.fix = (
                        "To cache quick compilations too, lower the threshold before the first compilation: "
                        'jax.config.update("jax_persistent_cache_min_compile_time_secs", 0) (JAX caches only '
                        "compilations over 1 s by default, so a small program recompiles at every restart)."
                    )
                elif "min_entry_size" in miss.why_not_written:
                    miss.fix = 'Lower it: jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0).'
            elif miss.written:
                miss.why += "; JAX wrote it now, so the next run with the same key hits."
            else:
                miss.why += "."
            if state.used_dir and state.configured_dir and state.used_dir != state.configured_dir:
                miss.why += (
                    f" JAX opened the cache at {state.used_dir} and does not reopen it: jax_compilation_cache_dir "
                    f"is now {state.configured_dir}, set after the first compilation."
                )
                miss.fix = miss.fix or "Set jax_compilation_cache_dir before the process compiles anything."
