"""The persistent compilation cache's state: where JAX writes, where it was asked to, and its thresholds.

Reads ``jax._src.compilation_cache``'s module state (private; checked by tests/test_jax_structure.py) and
the directory's file names, which JAX makes "<module name>-<hash>" (plus a suffix per stored part).
"""

from __future__ import annotations

import dataclasses
import os

import jax
from jax._src import compilation_cache


@dataclasses.dataclass
class CacheState:
    configured_dir: str  # jax_compilation_cache_dir ("" when unset)
    enabled: bool  # jax_enable_compilation_cache
    initialized: bool  # JAX opened a cache (once per process: a later change of the directory is not seen)
    used_dir: str  # the directory JAX opened, "" when none
    min_compile_seconds: float  # jax_persistent_cache_min_compile_time_secs: faster compilations are not written
    min_entry_bytes: int  # jax_persistent_cache_min_entry_size_bytes: smaller entries are not written


def cache_state() -> CacheState:
    cache = getattr(compilation_cache, "_cache", None)
    used = getattr(cache, "_path", None) if cache is not None else None
    base = getattr(used, "path", None) or used  # an LRUCache keeps an epath.Path
    return CacheState(
        configured_dir=str(jax.config.values.get("jax_compilation_cache_dir") or ""),
        enabled=bool(jax.config.values.get("jax_enable_compilation_cache", True)),
        initialized=bool(getattr(compilation_cache, "_cache_initialized", False)),
        used_dir=str(base) if base else "",
        min_compile_seconds=float(jax.config.values.get("jax_persistent_cache_min_compile_time_secs", 1.0)),
        min_entry_bytes=int(jax.config.values.get("jax_persistent_cache_min_entry_size_bytes", 0)),
    )


def entries_of(directory: str, module: str) -> list[str]:
    """The keys the cache directory holds for ``module`` ("jit_step"): file names "<module>-<hash>..."."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    prefix = f"{module}-"
    keys = {name.split("-atime")[0].split("-cache")[0] for name in names if name.startswith(prefix)}
    return sorted(keys)
