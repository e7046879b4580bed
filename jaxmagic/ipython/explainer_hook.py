"""The tracer-error explainer as an IPython custom exception handler.

IPython hands an exception raised by a cell to ``shell.CustomTB`` instead of
printing it when the exception matches ``shell.custom_exceptions``. The hook
puts itself there: for a tracer-family error (``probes.explain``) it shows the
explanation, then - for every error - it shows the traceback exactly as IPython
would have, through the same IPython method. So an error the explainer does
not know looks as it always did.

Cooperation:

* the handler it replaces is kept and still called for the exceptions it was
  registered for, and is put back on ``uninstall`` (``%jax_explain off``,
  ``%unload_ext jaxmagic``) - unless someone replaced our handler meanwhile,
  in which case theirs stays;
* jaxmagic's cell magics swap ``CustomTB`` while a cell body runs
  (``_cell.py``) and re-raise the body's exception from the magic's own cell;
  that second raise reaches this handler, so the error of a ``%%jax_nans``
  cell is explained too - unless the magic's report already explained it
  (``%%jax_leaks`` on a leak), which the report marks on the exception.

Installing imports nothing from JAX, so ``%load_ext jaxmagic`` still starts
no backend; the handler looks at JAX only when an exception arrives.
"""

from __future__ import annotations

import sys
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any

from IPython.display import display

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

_hooks: weakref.WeakKeyDictionary[InteractiveShell, ExplainerHook] = weakref.WeakKeyDictionary()

# What IPython does itself with an exception from parsing a cell (run_cell_async).
_PARSE_ERRORS = (OverflowError, SyntaxError, ValueError, TypeError, MemoryError)


class ExplainerHook:
    """``shell.CustomTB`` while the explainer is on."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self.previous = (shell.custom_exceptions, shell.CustomTB)

    def __call__(
        self, etype: type[BaseException], value: BaseException, tb: TracebackType | None, tb_offset: int | None = None
    ) -> Any:
        shell = self.shell
        called_from = sys._getframe(1).f_code.co_name  # "run_code", or "run_cell_async" while parsing
        if called_from == "run_code":
            self._explain(value)
        previous_types, previous_handler = self.previous
        if previous_types and isinstance(value, previous_types):
            return previous_handler(etype, value, tb, tb_offset=tb_offset)
        if called_from == "run_cell_async":  # IPython's own handling of a cell that does not parse
            if issubclass(etype, IndentationError):
                return shell.showindentationerror()
            if issubclass(etype, _PARSE_ERRORS):
                return shell.showsyntaxerror()
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)

    def _explain(self, error: BaseException) -> None:
        if "jax" not in sys.modules:
            return  # not JAX's error, and the probes that explain would import JAX
        try:
            # deferred: the probes (and JAX) are imported when an error is explained, not at %load_ext
            from jaxmagic.probes._explain import already_explained, explain_any

            if already_explained(error):
                return
            report = explain_any(error, namespace=self.shell.user_ns)
            if report is None:
                return
            from jaxmagic.render import static_bundle  # deferred: the renderers load on first use

            display(static_bundle(report.document()), raw=True)
        except Exception:  # the explanation is a bonus: never let it cost the user their traceback
            pass


def is_on(shell: InteractiveShell) -> bool:
    hook = _hooks.get(shell)
    return hook is not None and shell.CustomTB is hook


def install(shell: InteractiveShell) -> bool:
    """Put the explainer in place; False if it already was."""
    if is_on(shell):
        return False
    hook = ExplainerHook(shell)
    _hooks[shell] = hook
    # IPython declares CustomTB a bound method (seen under check_untyped_defs only); any callable with its
    # signature is called the same way
    shell.custom_exceptions, shell.CustomTB = (Exception,), hook  # type: ignore[assignment, unused-ignore]
    return True


def uninstall(shell: InteractiveShell) -> bool:
    """Put the previous handler back; False if the explainer was not on."""
    hook = _hooks.pop(shell, None)
    if hook is None:
        return False
    if shell.CustomTB is hook:
        shell.custom_exceptions, shell.CustomTB = hook.previous
        return True
    return False  # another handler replaced ours since: leave it in place
