"""The notebook's side of ``%jax_debug``: can input be read here, and IPython's debugger on the user's frames.

In a kernel, ``input()`` (and so IPython's ``Pdb``, as ``%debug`` uses it) asks the front
end through the stdin channel - only when the execute request allowed it (JupyterLab
does; nbclient does not, and ``input`` then raises ``StdinNotImplementedError``). In a
terminal IPython, stdin is the terminal.
"""

from __future__ import annotations

import builtins
import contextvars
import re
import sys
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

from jaxmagic.usercode.source import cell_label

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


def stdin_available(shell: InteractiveShell | None) -> bool:
    """Whether a debugger can read commands here (so it stops instead of recording)."""
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        return bool(getattr(kernel, "_allow_stdin", False))
    try:
        return bool(sys.stdin is not None and sys.stdin.isatty())
    except (ValueError, OSError):  # a closed or replaced stdin (pytest's capture)
        return False


def reader() -> Callable[[str], str]:
    """The ``input`` of this cell: in a kernel, the one ipykernel routes to the front end.

    A breakpoint's callback may run on a thread of XLA's (a large program runs there after the call
    returned): it reads and writes in a copy of the cell's context, so ipykernel routes both to this cell.
    """
    context = contextvars.copy_context()

    def ask(prompt: str) -> str:
        return context.run(builtins.input, prompt)

    return ask


def writer() -> Callable[[str], None]:
    """``print`` to this cell from whichever thread a breakpoint's callback runs on (see ``reader``)."""
    context = contextvars.copy_context()

    def say(text: str) -> None:
        context.run(print, text)

    return say


_ANSI = r"(?:\x1b\[[0-9;]*m)*"


def cell_places(entry: str, filename: str, label: str) -> str:
    """A debugger's frame line (``/tmp/ipykernel_1/123.py(4)drain_body()``, colours and all) with a notebook
    cell's file named as the notebook does: ``In [2], line 4, in drain_body()``."""
    if not label:
        return entry
    pattern = re.compile(re.escape(filename) + rf"{_ANSI}\({_ANSI}(\d+){_ANSI}\){_ANSI}")
    return pattern.sub(lambda m: f"{label}, line {m.group(1)}, in ", entry, count=1)


def post_mortem(traceback: TracebackType, header: str) -> None:
    """IPython's debugger, post-mortem, in the last frame of ``traceback`` (the user's frames only, so ``u`` and
    ``d`` move through the user's code and nothing else); a frame of a notebook cell is named as the notebook
    does (``In [2], line 4``), not by the kernel's file for it."""
    # deferred: IPython's debugger imports pdb and its completer machinery; most sessions never debug
    from IPython.core.debugger import Pdb

    class CellPdb(Pdb):
        def format_stack_entry(self, frame_lineno: tuple[FrameType, int], lprefix: str = ": ") -> str:
            entry = super().format_stack_entry(frame_lineno, lprefix)
            filename = self.canonic(frame_lineno[0].f_code.co_filename)
            return cell_places(entry, filename, cell_label(filename))

    print(header)
    debugger = CellPdb()
    debugger.reset()
    debugger.interaction(None, traceback)
