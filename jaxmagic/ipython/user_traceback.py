"""The user's exception as the user would see it without jaxmagic: no frame of ours in its traceback.

A magic catches the user's exception (to show the report first) and raises
it again. Its traceback then holds frames that the same code run without the
magic does not: the probe that made the call, jaxmagic's hooks inside JAX's
dispatch, and - in the stacks JAX records for chained errors such as
``KeyReuseError`` or ``JaxStackTraceBeforeTransformation`` - the whole path
from the kernel's event loop through IPython and the magic into the cell.
IPython hides real frames marked ``__tracebackhide__``, but the stacks JAX
records are rebuilt frames without locals, which no marker can hide.

:func:`without_our_frames` relinks each traceback of the exception and of its
causes and contexts so that it starts in the user's cell (after IPython's
``run_code``, as IPython's own display does) and holds no frame of jaxmagic
or of IPython's magic machinery. Frames of JAX and of the user's code stay
(JAX's own traceback filtering decides about JAX's frames).
"""

from __future__ import annotations

import os
from types import TracebackType

import IPython

from jaxmagic.report.wording import exception_chain

_OUR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_IPYTHON_DIR = os.path.dirname(os.path.abspath(IPython.__file__)) + os.sep


def _filename(tb: TracebackType) -> str:
    return os.path.abspath(tb.tb_frame.f_code.co_filename)


def _is_run_code(tb: TracebackType) -> bool:
    # IPython's run_code executes each cell; a rebuilt frame has its code object but no locals,
    # so it is recognised by name and file rather than by its __tracebackhide__ marker.
    code = tb.tb_frame.f_code
    return code.co_name == "run_code" and _filename(tb).startswith(_IPYTHON_DIR)


def _cleaned(tb: TracebackType | None) -> TracebackType | None:
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    starts = [i for i, entry in enumerate(entries) if _is_run_code(entry)]
    if starts:
        entries = entries[starts[-1] + 1 :]
    kept = [entry for entry in entries if not _filename(entry).startswith((_OUR_DIR, _IPYTHON_DIR))]
    if not kept:  # raised by jaxmagic on purpose (an exceeded compile budget): no frame to show
        return None
    for entry, following in zip(kept, kept[1:]):
        entry.tb_next = following
    kept[-1].tb_next = None
    return kept[0]


def without_our_frames(error: BaseException) -> BaseException:
    """``error`` with jaxmagic's (and IPython's magic-running) frames removed from its tracebacks and
    those of its ``__cause__`` / ``__context__`` chain. Returns ``error`` itself, changed in place."""
    for current in list(exception_chain(error)):
        try:
            current.with_traceback(_cleaned(current.__traceback__))
        except (TypeError, ValueError):  # an exception type that refuses a new traceback: leave it
            pass
    return error


def raise_users_error(error: BaseException | None) -> None:
    """Raise the user's own exception (if any) unchanged but for the frames of ours."""
    __tracebackhide__ = True
    if error is not None:
        raise without_our_frames(error)
