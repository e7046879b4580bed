"""What every jaxmagic magic does around its probe: parse the line, run the cell or call, show, raise.

``MagicRunner`` is the base of ``JaxMagics``: each magic is a module of ``ipython/magic/`` that declares
its options (``@magic_arguments()``), says which probe to build and hands both to the runner given as its
first argument; the registry (``ipython/magic/__init__.py``) names each as a ``Magic`` (its name and the
forms it is typed in), of which ``JaxMagics`` is composed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics
from IPython.core.magic_arguments import parse_argstring

from jaxmagic._jax.exclusive import AlreadyActive
from jaxmagic.ipython.call_expression import (
    CallExpressionError,
    EvaluatedCall,
    evaluate_call,
    split_call_and_options,
)
from jaxmagic.ipython.cell_runner import CellOutcome, run_cell_body, shown_if_unrunnable
from jaxmagic.ipython.user_traceback import raise_users_error
from jaxmagic.report import Report
from jaxmagic.report.wording import first_line, shown

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from jaxmagic.ipython.lazy_arguments import ArgumentMagic
    from jaxmagic.ipython.live_view import LiveView

# A magic (``jax_nans`` of its module, or JaxMagics' bound ``jax_nans``): ``magic_arguments`` gives it the
# ``parser`` it is parsed with at run time and its ``__name__``.
MagicMethod = Any
Probe = TypeVar("Probe", bound=AbstractContextManager[Report])
Form = Literal["line", "cell"]
PREFIX: dict[Form, str] = {"line": "%", "cell": "%%"}


@dataclasses.dataclass(frozen=True)
class Magic:
    """One magic as the registry declares it (``ipython/magic/__init__.py``): its name - the module of
    ``ipython/magic/`` that declares its options and runs it, and the function of that name there - and the
    forms it is typed in (``("line", "cell")``: ``%jax_live`` and ``%%jax_live``)."""

    name: str
    forms: tuple[Form, ...]

    @property
    def module(self) -> str:
        return f"jaxmagic.ipython.magic.{self.name}"

    @property
    def function(self) -> ArgumentMagic:
        """The magic's function (``runner, line[, cell]``; its options and help on it, ``@magic_arguments()``),
        its module imported on first use: ``%load_ext`` imports no magic's module."""
        function: ArgumentMagic = getattr(importlib.import_module(self.module), self.name)
        return function

    @property
    def typed(self) -> list[str]:
        """The forms as typed: ``["%jax_live", "%%jax_live"]``."""
        return [PREFIX[form] + self.name for form in self.forms]


class _ProbesOnFirstUse:
    """``jaxmagic.probes``, imported when a magic first runs rather than at %load_ext.

    The probes import JAX's internals and take a few hundred milliseconds to
    import; loading the extension should cost almost nothing.
    """

    def __getattr__(self, name: str) -> Any:
        from jaxmagic import probes as module  # deferred: this is the deferral

        return getattr(module, name)


probes = _ProbesOnFirstUse()


@contextlib.contextmanager
def expression_checked() -> Iterator[None]:
    """A call or expression that does not parse or evaluate: IPython's UsageError with our message."""
    try:
        yield
    except CallExpressionError as error:
        raise UsageError(str(error)) from None


class MagicRunner(Magics):
    @property
    def ipython(self) -> InteractiveShell:
        """The shell the magics run in (a registered Magics always has its shell)."""
        assert self.shell is not None
        return self.shell

    @property
    def user_ns(self) -> dict[str, object]:
        """The namespace the user's cells run in."""
        return self.ipython.user_ns

    def parse(self, magic: MagicMethod, line: str) -> argparse.Namespace:
        try:
            args = parse_argstring(magic, line)
        except UsageError as error:  # argparse's message echoes the words it rejects: keep it one short line
            raise UsageError(shown(str(error), limit=240, quoted=False)) from None
        except ValueError as error:  # shlex: "No closing quotation", "No escaped character"
            raise UsageError(
                f"%{magic.__name__}: the options {shown(line)} do not split into words ({first_line(error)}); "
                "close the quote, or put a quote character inside the other kind of quotes."
            ) from None
        return args

    @staticmethod
    @contextlib.contextmanager
    def options_checked(magic: MagicMethod, **flag_of: str) -> Iterator[None]:
        """Turn a probe's ProbeArgumentError into a UsageError that names the magic's option.

        A parameter maps to the option whose argparse ``dest`` it equals, unless
        ``flag_of`` names the option for it (``vmap_axes="--vmap"``).
        """
        try:
            yield
        except Exception as error:
            # deferred: importing any probe module imports them all (and JAX), which %load_ext must not do.
            from jaxmagic.probes._support.arguments import ProbeArgumentError

            if not isinstance(error, ProbeArgumentError):
                raise
            flag = flag_of.get(error.parameter)
            if flag is None:
                options = [a.option_strings for a in magic.parser._actions if a.dest == error.parameter]
                # An option is named by its flag; a positional argument by the magic and its name.
                flag = max(options[0], key=len) if options and options[0] else f"%{magic.__name__}: {error.parameter}"
            raise UsageError(f"{flag} {error.problem}.") from None

    @property
    def in_kernel(self) -> bool:
        return getattr(self.shell, "kernel", None) is not None

    def publish(
        self,
        report: Report,
        args: argparse.Namespace,
        live_view: LiveView | None = None,
        explorer: Callable[[Report], None] | None = None,
    ) -> None:
        """Store (-o NAME) and show the report; then ``explorer(report)`` shows its explorer (--explore)."""
        if getattr(args, "output", None):
            self.user_ns[args.output] = report
        from jaxmagic.ipython.show_report import display_report  # deferred: the renderers load on first use

        display_report(report, in_kernel=self.in_kernel, live_view=live_view)
        if explorer is not None:
            explorer(report)

    def run_cell_magic(
        self,
        magic: MagicMethod,
        line: str,
        cell: str,
        build_probe: Callable[[argparse.Namespace], Probe],
    ) -> Probe:
        """The shape of every cell magic: parse the options, build the probe from them, run the cell in it.

        ``build_probe(args)`` returns the probe (a ProbeArgumentError it raises
        names the magic's option); the probe is returned for what the magic
        does after the report (``%%jax_compiles --budget``).
        """
        __tracebackhide__ = True
        args = self.parse(magic, line)
        with self.options_checked(magic):
            probe = build_probe(args)
        self.run_cell_in_probe(magic, probe, args, cell)
        return probe

    def run_cell_in_probe(
        self,
        magic: MagicMethod,
        probe: AbstractContextManager[Report],
        args: argparse.Namespace,
        cell: str,
        explorer: Callable[[Report], None] | None = None,
    ) -> None:
        """Run the cell inside ``probe``; show the report (and ``explorer``'s); then raise the cell's own exception."""
        __tracebackhide__ = True
        if shown_if_unrunnable(self.ipython, cell):
            return
        # deferred: the probes are imported when a magic first runs, never at %load_ext
        from jaxmagic.ipython.live_view import LiveView  # deferred: the renderers load on first use
        from jaxmagic.probes._support.progress import collecting

        outcome = CellOutcome()
        with collecting() as board, LiveView(f"%%{magic.__name__}", board, in_kernel=self.in_kernel) as view:
            try:
                with probe as report:
                    outcome = run_cell_body(self.ipython, cell, hold_values=True)
                    outcome.reraise()
            except AlreadyActive as error:
                if error is outcome.exception:  # a magic inside the cell said so: the cell's own error
                    raise
                raise UsageError(f"%%{magic.__name__} {error.problem}.") from None
            except BaseException as error:
                if error is not outcome.exception:
                    told = isinstance(error, KeyboardInterrupt) and error.__context__ is outcome.exception
                    if outcome.exception is None or not told:
                        raise
                    # The probe told the cell's error for what it was (%%jax_debug: JAX's "CpuCallback error"
                    # of an interrupt at its prompt is a KeyboardInterrupt): the report, then that error.
                    outcome.exception = error
            self.publish(report, args, live_view=view, explorer=explorer)
        outcome.show_values(self.ipython)
        outcome.reraise()

    def split(self, magic: MagicMethod, line: str) -> tuple[str, str]:
        """The expression and the options of a line magic's line (options may come first or last)."""
        flags = {option for action in magic.parser._actions if action.nargs == 0 for option in action.option_strings}
        return split_call_and_options(line, flags | {"-h", "--help"})

    def evaluate(self, call_text: str, namespace: dict[str, object] | None = None) -> EvaluatedCall:
        with expression_checked():
            return evaluate_call(call_text, self.user_ns if namespace is None else namespace)

    def given_or_last_error(self, text: str, magic: str, takes: str, none_left: str) -> BaseException:
        """The exception ``text`` names (``%jax_explain err``), else the last failed cell's (IPython keeps it)."""
        if text:
            error = self.evaluate_value(text)
            if not isinstance(error, BaseException):
                raise UsageError(f"%{magic} takes {takes}; {text!r} is a {type(error).__name__}.")
            return error
        error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if error is None:
            raise UsageError(none_left)
        return error

    def evaluate_value(self, text: str) -> Any:
        from jaxmagic.ipython.expression import evaluate_expression  # deferred: reads JAX's jit type

        with expression_checked():
            return evaluate_expression(text, self.user_ns)

    def run_call_magic(
        self,
        magic: MagicMethod,
        line: str,
        *,
        needs: str,
        run: Callable[[Any, argparse.Namespace], tuple[Report, BaseException | None]],
        evaluate: Callable[[str, argparse.Namespace], Any] | None = None,
        flag_of: dict[str, str] | None = None,
        explorer: Callable[[Report, Any, argparse.Namespace], Callable[[], None] | None] | None = None,
    ) -> None:
        """The shape of every line magic that takes a call: parse, evaluate, probe, show, raise.

        ``evaluate(text, args)`` turns the expression into the probe's inputs
        (default: the call); ``run(inputs, args)`` returns ``(report, error)``.
        The inputs are dropped before the user's error is raised, so its
        traceback keeps no user array alive. ``explorer(report, inputs, args)``
        (``--explore``) reads what it needs of the inputs and returns what shows
        the explorer after the report (or None): it keeps plain data only.
        """
        __tracebackhide__ = True
        text, option_text = self.split(magic, line)
        args = self.parse(magic, option_text)
        if not text:
            raise UsageError(f"%{magic.__name__} needs {needs}")
        inputs = evaluate(text, args) if evaluate is not None else self.evaluate(text)
        with self.options_checked(magic, **(flag_of or {})):
            report, error = run(inputs, args)
        show_explorer = explorer(report, inputs, args) if explorer is not None else None
        del inputs  # keep no user array alive
        self.publish(report, args)
        if show_explorer is not None:
            show_explorer()  # its own output, after the report; the user's error still follows
        raise_users_error(error)
