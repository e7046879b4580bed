"""Running a cell's body the way IPython runs any cell.

``shell.run_cell`` gives the body a real cell filename (so tracebacks and
reports show the cell's lines), runs magics inside it and displays the last
expression - unlike ``exec`` under a made-up filename, which is what ``%%time``
does. IPython would print an exception from the body at once; we capture it
instead, so the magic can show its report first and then raise the very same
exception, which IPython then shows as usual and which makes the cell fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from types import TracebackType

import IPython


@dataclasses.dataclass
class CellOutcome:
    """How the cell's body ended. ``exception`` is None when it ran through."""

    exception: BaseException | None = None

    def reraise(self) -> None:
        """Raise the body's exception again, with the traceback starting in the cell."""
        __tracebackhide__ = True
        if self.exception is not None:
            _trim_jax_source_stack(self.exception)
            raise self.exception.with_traceback(_skip_runner_frames(self.exception.__traceback__))


def _skip_runner_frames(tb: TracebackType | None) -> TracebackType | None:
    # The traceback starts in IPython's run_code, which marks itself hidden.
    while tb is not None and tb.tb_frame.f_locals.get("__tracebackhide__") == "__ipython_bottom__":
        tb = tb.tb_next
    return tb


def _trim_jax_source_stack(error: BaseException) -> None:
    # For errors in transformed code JAX chains a JaxStackTraceBeforeTransformation
    # whose stack starts at the process entry (runpy, the kernel's event loop,
    # IPython, jaxmagic). Start it at the cell instead, as the main traceback does.
    cause = error.__cause__
    if cause is None or type(cause).__name__ != "JaxStackTraceBeforeTransformation":
        return
    runner_dirs = (
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        os.path.dirname(os.path.abspath(IPython.__file__)),
    )
    start, tb = cause.__traceback__, cause.__traceback__
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(runner_dirs):
            start = tb.tb_next
        tb = tb.tb_next
    if start is not None:
        cause.with_traceback(start)


@contextlib.contextmanager
def _exceptions_captured(shell, outcome: CellOutcome):
    # run_code hands exceptions matching shell.custom_exceptions to
    # shell.CustomTB instead of printing them. We set both directly rather than
    # through set_custom_exc, whose wrapper would still emit an (empty) error.
    saved = shell.custom_exceptions, shell.CustomTB

    def capture(etype, value, tb, tb_offset=None):
        outcome.exception = value

    shell.custom_exceptions, shell.CustomTB = (BaseException,), capture
    try:
        yield
    finally:
        shell.custom_exceptions, shell.CustomTB = saved


@contextlib.contextmanager
def _named_as_current_cell(shell):
    # IPython counted the magic's own cell before running it, so the body would
    # be filed under the next number: tracebacks and reports would say
    # "In [6]" for cell 5. Only the name changes; Out[] numbering is untouched.
    compiler = shell.compile
    original = compiler.cache

    def cache(transformed_code, number=0, raw_code=None):
        return original(transformed_code, max(number - 1, 0), raw_code)

    compiler.cache = cache
    try:
        yield
    finally:
        del compiler.cache  # the instance attribute; the class method shows through again


def shown_if_unparsable(shell, cell: str) -> bool:
    """If the body does not parse, let IPython show the error as usual and return True.

    A body that cannot run needs no probe and no report, and IPython's own
    syntax-error display (line and caret, no stack) is the one users know.
    """
    try:
        shell.compile.ast_parse(shell.transform_cell(cell))
        return False
    except (SyntaxError, ValueError, OverflowError, TypeError, MemoryError):
        pass
    # Outside the except block, so IPython's display does not chain our own parse attempt.
    shell.run_cell(cell, store_history=False)
    return True


def run_cell_body(shell, cell: str) -> CellOutcome:
    """Run ``cell`` in ``shell`` as a normal cell; capture (do not show) its exception."""
    outcome = CellOutcome()
    with _exceptions_captured(shell, outcome), _named_as_current_cell(shell):
        result = shell.run_cell(cell, store_history=False)
    if outcome.exception is None:  # not routed through CustomTB (e.g. rejected input)
        outcome.exception = result.error_in_exec or result.error_before_exec
    return outcome
