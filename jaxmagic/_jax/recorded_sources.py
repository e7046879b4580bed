"""The tracebacks JAX records (an equation's, a tracer's): their user frames, and tracing that keeps the
place each equation was traced at.

(see ``runtime.py`` for the rule every module here follows when the private name is gone)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jax._src.source_info_util import Frame

    from jaxmagic._jax.types import Traceback


def user_frames(traceback: Traceback | None) -> list[Frame]:
    """JAX's user frames (innermost first) of a traceback JAX recorded (an equation's
    ``source_info.traceback``, a tracer's line info); [] when there is none."""
    if traceback is None:
        return []
    try:
        from jax._src import source_info_util

        return list(source_info_util.user_frames(traceback))
    except Exception:
        return []


def user_frame(traceback: Any) -> Any:  # source_info_util.Frame, or None
    """The innermost of :func:`user_frames`, or None."""
    frames = user_frames(traceback)
    return frames[0] if frames else None


def traceback_frames(traceback: Any) -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of every frame of a traceback JAX recorded, innermost first; [] if none."""
    try:
        return [(f.file_name, int(f.line_num), str(f.function_name)) for f in traceback.frames]
    except Exception:
        return []


def tracer_line_info(tracer: object) -> Any:  # source_info_util.SourceInfo, or None
    """The source info JAX recorded where a tracer was made (its ``traceback`` is the user's frames), or None."""
    return getattr(tracer, "_line_info", None)


@contextlib.contextmanager
def tracing_where_traced() -> Iterator[dict[int, Traceback]]:
    """While active, every equation traced keeps the traceback of the place it was traced at,
    even where JAX attributes it to another line (the backward pass attributes each transposed
    equation to its forward line, and so loses the line of a user's ``custom_vjp`` rule).

    Yields a dict: ``id(traceback)`` -> the traceback JAX attributed that equation to; the
    tracebacks are kept alive until the block ends. Without the private hook, yields {}.
    """
    try:
        from jax._src import source_info_util
    except ImportError:
        yield {}
        return
    original = source_info_util.current
    get_traceback = source_info_util.xla_client.Traceback.get_traceback
    context = source_info_util._source_info_context
    attributed: dict[int, Traceback] = {}
    kept: list[Traceback] = []

    def current() -> Any:
        info = context.context
        real = get_traceback()
        if info.traceback:
            attributed[id(real)] = info.traceback
            kept.append(real)
        return info.replace(traceback=real)

    source_info_util.current = current
    try:
        yield attributed
    finally:
        source_info_util.current = original
