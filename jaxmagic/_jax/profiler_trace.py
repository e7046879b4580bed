"""JAX's profiler started and stopped with the trace read back as ``ProfileData``, whichever JAX.

JAX 0.12's ``stop_trace()`` returns the trace (``ProfileData``) and its ``start_trace(None)`` means "no
folder": the trace stays in memory. JAX 0.10's returns None and writes the trace to ``str(log_dir)`` - with
None, a folder named ``None`` in the user's working directory. There the trace goes to a temporary folder
(or the one the user asked to save it in), whose ``.xplane.pb`` is read back and the temporary folder
removed, so the profile probe gets the same ``ProfileData`` from both.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jax

_temporary: list[str] = []  # the temporary folder of the trace running, when this JAX needs one


def returns_trace() -> bool:
    """Whether ``stop_trace()`` returns the trace (JAX 0.12: annotated ``-> ProfileData | None``)."""
    try:
        return "ProfileData" in str(inspect.signature(jax.profiler.stop_trace).return_annotation)
    except (TypeError, ValueError):
        return False


def start(save: str | None, options: Any) -> None:
    """``jax.profiler.start_trace`` into ``save`` (a Perfetto trace written there too), or kept in memory."""
    folder = save
    if save is None and not returns_trace():
        folder = tempfile.mkdtemp(prefix="jaxmagic-profile-")
        _temporary.append(folder)
    try:
        # start_trace is annotated without None, which the ProfilerSession behind it takes (JAX 0.12): no
        # folder, the trace stays in memory
        jax.profiler.start_trace(folder, create_perfetto_trace=save is not None, profiler_options=options)  # type: ignore[arg-type]
    except BaseException:
        _drop_temporary()
        raise


def stop(save: str | None) -> Any:
    """``jax.profiler.stop_trace()``; the trace as ``ProfileData`` (None if none can be read)."""
    temporary = _temporary[-1] if _temporary else None
    try:
        data = jax.profiler.stop_trace()
        if data is None and (temporary or save):
            data = _read_back(Path(temporary or str(save)))
        return data
    finally:
        _drop_temporary()


def _read_back(folder: Path) -> Any:
    """The newest ``.xplane.pb`` JAX wrote under ``folder`` (``plugins/profile/<run>/``), as ``ProfileData``."""
    written = sorted(folder.glob("plugins/profile/*/*.xplane.pb"), key=lambda path: path.stat().st_mtime)
    if not written:
        return None
    return jax.profiler.ProfileData.from_file(str(written[-1]))


def _drop_temporary() -> None:
    while _temporary:
        shutil.rmtree(_temporary.pop(), ignore_errors=True)
