"""Running a cell's body the way IPython runs any cell.

``shell.run_cell`` gives the body a real cell filename (so tracebacks and
reports show the cell's lines), runs magics inside it and displays the last
expression - unlike ``exec`` under a made-up filename, which is what ``%%time``
does. IPython would print an exception from the body at once; we capture it
instead, so the magic can show its report first and then raise the very same
exception, which IPython then shows as usual and which makes the cell fail.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

import IPython

from jaxmagic.ipython.user_traceback import raise_users_error

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

_IPYTHON_DIR = os.path.dirname(os.path.abspath(IPython.__file__))


@dataclasses.dataclass
class CellOutcome:
    """How the cell's body ended. ``exception`` is None when it ran through."""

    exception: BaseException | None = None
    # The body's displayed values (its last expression: ``Out[...]``), held to be shown after the report
    values: list[object] = dataclasses.field(default_factory=list)

    def show_values(self, shell: InteractiveShell) -> None:
        """Show the values the body displayed, then let them go: a cell's result comes after its report.
        They were already stored as IPython stores them (``Out[n]``, ``_``) when the body made them, so a
        probe that asks what the cell's result is (``%%jax_live``) sees it there; only the drawing waits.
        The steps are ``DisplayHook.__call__``'s own, minus that storing."""
        values, self.values = self.values, []
        hook = shell.displayhook
        for value in values:
            hook.start_displayhook()
            hook.write_output_prompt()
            format_dict, metadata = hook.compute_format_data(value)
            if format_dict:
                hook.write_format_data(format_dict, metadata)
                hook.log_output(format_dict)
            hook.finish_displayhook()

    def reraise(self) -> None:
        """Raise the body's exception again, its traceback starting in the cell, with no frame of ours."""
        __tracebackhide__ = True
        raise_users_error(self.exception)


def _run_code_depth() -> int:
    """How many of IPython's ``run_code`` frames (one per running cell) are on the stack."""
    depth = 0
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "run_code" and code.co_filename.startswith(_IPYTHON_DIR):
            depth += 1
        frame = frame.f_back
    return depth


@contextlib.contextmanager
def _exceptions_captured(shell: InteractiveShell, outcome: CellOutcome) -> Iterator[None]:
    # run_code hands exceptions matching shell.custom_exceptions to
    # shell.CustomTB instead of printing them. We set both directly rather than
    # through set_custom_exc, whose wrapper would still emit an (empty) error.
    # Only the body's own exception is ours: a cell the body runs itself
    # (get_ipython().run_cell(...)) shows its error at once, as it would
    # without the magic, and the body goes on.
    saved = shell.custom_exceptions, shell.CustomTB
    body_depth = _run_code_depth() + 1

    def capture(
        etype: type[BaseException], value: BaseException, tb: TracebackType | None, tb_offset: int | None = None
    ) -> Any:
        if _run_code_depth() > body_depth:  # a cell run by the body: as IPython would have shown it
            if saved[0] and issubclass(etype, saved[0]):
                return saved[1](etype, value, tb, tb_offset)
            return shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
        outcome.exception = value
        return None

    # IPython prints SystemExit itself, before custom exceptions are asked; the
    # magic raises it again after the report, where IPython prints it once.
    had_own_showtraceback = "showtraceback" in vars(shell)
    saved_showtraceback = shell.showtraceback

    def showtraceback(*args: Any, **kwargs: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, SystemExit) and _run_code_depth() == body_depth:
            outcome.exception = error
            return None
        return saved_showtraceback(*args, **kwargs)

    # An instance's methods replaced for the body's run (and put back): what no static type allows. IPython's
    # attribute types are inferred only under check_untyped_defs, hence "unused-ignore" for the other setting.
    shell.custom_exceptions, shell.CustomTB = (BaseException,), capture  # type: ignore[assignment, unused-ignore]
    shell.showtraceback = showtraceback  # type: ignore[method-assign]
    try:
        yield
    finally:
        shell.custom_exceptions, shell.CustomTB = saved
        if had_own_showtraceback:
            shell.showtraceback = saved_showtraceback  # type: ignore[method-assign]
        else:
            del shell.showtraceback  # the instance attribute; the class method shows through again


@contextlib.contextmanager
def _named_as_current_cell(shell: InteractiveShell) -> Iterator[None]:
    # IPython counted the magic's own cell before running it, so the body would
    # be filed under the next number: tracebacks and reports would say
    # "In [6]" for cell 5. Only the name changes; Out[] numbering is untouched.
    # A magic cell inside a magic cell renames again: each level puts back
    # exactly what it found.
    compiler = shell.compile
    had_own_cache = "cache" in vars(compiler)
    original = compiler.cache

    def cache(transformed_code: str, number: int = 0, raw_code: str | None = None) -> str:
        return original(transformed_code, max(number - 1, 0), raw_code)

    compiler.cache = cache  # type: ignore[method-assign, unused-ignore]  # the instance's, put back below
    try:
        yield
    finally:
        if had_own_cache:
            compiler.cache = original  # type: ignore[method-assign, unused-ignore]
        else:
            del compiler.cache  # the instance attribute; the class method shows through again


# Cell texts (with what their compiling depends on) known to compile, oldest first.
# (cell, compiler flags, input transformers, AST transformers) -> True
_RUNNABLE_CELLS: dict[tuple[str, int, tuple[object, ...], tuple[object, ...], tuple[object, ...]], bool] = {}
_RUNNABLE_CELLS_KEPT = 256


def shown_if_unrunnable(shell: InteractiveShell, cell: str) -> bool:
    """If the body cannot run at all (it does not parse or compile), let IPython show why; return True.

    A body that cannot run needs no probe and no report. IPython shows its
    syntax error as for any cell (line and caret, no stack), once; the
    magic's own cell is then marked failed with that error, as the same cell
    without the magic would be, so "Run All" stops there. ``return 1`` parses
    but does not compile, so both are tried.
    """
    inner = _inner_magic_body(shell, cell)
    if inner is not None:  # `%%jax_compiles` under `%%jax_nans`: its body is the one that must compile
        return shown_if_unrunnable(shell, inner)
    # Whether a text compiles depends on it, the compiler's flags (``from __future__`` in an earlier
    # cell) and the transformers IPython applies first; a cell run again (the loop one re-runs while
    # tuning) is not transformed and compiled a second time before its run.
    key = (
        cell,
        shell.compile.flags,
        tuple(shell.input_transformers_cleanup),
        tuple(shell.input_transformers_post),
        tuple(shell.ast_transformers),
    )
    if key in _RUNNABLE_CELLS:
        return False
    cell = numbered_as_shown(shell, cell)  # the syntax error's line, as the user counts it
    try:
        transformed = shell.transform_cell(cell)
        filename = _cell_filename(shell, transformed, cell)
        tree = shell.compile.ast_parse(transformed, filename=filename)
        assert isinstance(tree, ast.Module)  # ast_parse's "exec" mode: typed as any AST
        compile(tree, filename, "exec", shell.compile.flags | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, True)
        if len(_RUNNABLE_CELLS) >= _RUNNABLE_CELLS_KEPT:
            _RUNNABLE_CELLS.pop(next(iter(_RUNNABLE_CELLS)))  # the oldest
        _RUNNABLE_CELLS[key] = True
        return False
    except (SyntaxError, ValueError, OverflowError, TypeError, MemoryError, RecursionError):
        pass
    # Outside the except block, so IPython's display does not chain our own attempt.
    magic_cell = getattr(shell.displayhook, "exec_result", None)
    result = shell.run_cell(cell, store_history=False)
    shell.displayhook.exec_result = magic_cell  # run_cell cleared it; the magic's cell is still running
    if magic_cell is not None and magic_cell.error_in_exec is None:
        magic_cell.error_in_exec = result.error_before_exec or result.error_in_exec
    return True


def _inner_magic_body(shell: InteractiveShell, cell: str) -> str | None:
    """The body of a jaxmagic cell magic that is itself the body (``%%jax_compiles`` under ``%%jax_nans``); None
    for any other body. The outer body always compiles (IPython makes it a ``run_cell_magic`` call): only the
    inner one can fail, and it is shown once, here, as IPython shows a cell's syntax error - not again by the
    inner magic and a third time through the outer magic's frames. Other libraries' cell magics are left to run
    their bodies their way (``%%bash``'s is no Python)."""
    stripped = cell.lstrip()
    if not stripped.startswith("%%"):
        return None
    first, _, rest = stripped.partition("\n")
    name = first[2:].split(maxsplit=1)[0] if first[2:].strip() else ""
    magic = shell.find_cell_magic(name) if name else None
    owner = getattr(magic, "__self__", None)
    if owner is None or not type(owner).__module__.startswith("jaxmagic."):
        return None
    return rest


def _cell_filename(shell: InteractiveShell, transformed: str, cell: str) -> str:
    # The name IPython gives the body when it runs it, and its text in linecache,
    # so the syntax error shows the cell's line.
    number = max(getattr(shell, "execution_count", 1) - 1, 0)
    return shell.compile.cache(transformed, number, cell)


def numbered_as_shown(shell: InteractiveShell, cell: str) -> str:
    """The body with the magic's line(s) above it as comments, so that its lines are numbered as the user
    sees the cell: line 5 of a report or a traceback is the editor's line 5, not the 5th line after
    ``%%jax_nans``. IPython hands a cell magic only the lines below its own; the whole cell is the
    running cell's ``raw_cell``. A body that is itself a cell magic (``%%time`` under ``%%jax_nans``)
    must stay on the first line to be one, and is left as it is."""
    magic_cell = getattr(shell.displayhook, "exec_result", None)
    raw = getattr(getattr(magic_cell, "info", None), "raw_cell", None)
    # IPython ends the body with a newline the cell may not have: compare without trailing ones
    body = cell.rstrip("\n")
    if not isinstance(raw, str) or not body.strip() or body.lstrip().startswith("%%"):
        return cell
    whole = raw.rstrip("\n")
    if not whole.endswith(body):
        return cell
    above = whole[: len(whole) - len(body)].splitlines()
    return "".join(f"# {line}\n" for line in above) + cell


@contextlib.contextmanager
def _displayed_values_held(shell: InteractiveShell, outcome: CellOutcome) -> Iterator[None]:
    # IPython displays an expression statement's value through sys.displayhook while the cell runs; here
    # it is stored at once (Out[n], _, the cell's result) and drawn after the report
    # (``CellOutcome.show_values``) instead of above it.
    saved = sys.displayhook
    hook = shell.displayhook

    def hold(value: object) -> None:
        hook.check_for_underscore()
        if value is not None and not hook.quiet():
            hook.update_user_ns(value)
            hook.fill_exec_result(value)
            outcome.values.append(value)

    sys.displayhook = hold
    try:
        yield
    finally:
        sys.displayhook = saved


def run_cell_body(shell: InteractiveShell, cell: str, hold_values: bool = False) -> CellOutcome:
    """Run ``cell`` in ``shell`` as a normal cell; capture (do not show) its exception. ``hold_values``:
    keep the values it displays (``Out[...]``) in the outcome, to show after the report."""
    outcome = CellOutcome()
    magic_cell = getattr(shell.displayhook, "exec_result", None)
    cell = numbered_as_shown(shell, cell)
    held = _displayed_values_held(shell, outcome) if hold_values else contextlib.nullcontext()
    with _exceptions_captured(shell, outcome), _named_as_current_cell(shell), held:
        result = shell.run_cell(cell, store_history=False)
    shell.displayhook.exec_result = magic_cell  # run_cell cleared it; the magic's cell is still running
    if outcome.exception is None:  # not routed through CustomTB (e.g. rejected input)
        outcome.exception = result.error_in_exec or result.error_before_exec
    return outcome
