"""The user's line that made an observed call: the innermost frame of the user's code on the stack, or the
site the fast path recorded (``_jax.jit_calls``). Every observer of the user's calls (the NaN watch, host
arguments, keys) asks here."""

from __future__ import annotations

import sys
from types import FrameType

from jaxmagic._jax import jit_calls
from jaxmagic.usercode.source import innermost_user_frame


def user_frame() -> FrameType | None:
    """The innermost frame of the user's code that led to the caller of this function."""
    return innermost_user_frame(sys._getframe(2))


def call_site() -> tuple[FrameType | None, int]:
    """``(frame, line number)`` of the user's code that made the observed call (the innermost user frame
    that led to the caller of this function, unless the fast path recorded it); ``(None, 0)`` if none."""
    site = jit_calls.call_site()
    if site is not None:
        return site
    frame = innermost_user_frame(sys._getframe(2))
    return frame, frame.f_lineno if frame is not None else 0
