"""``@magic_arguments()`` whose parser - and the help it writes into the magic's docstring - is built on first use.

IPython's own ``magic_arguments()`` builds each magic's ``argparse`` parser while the class body
runs and formats the parser's help into the magic's ``__doc__`` (argparse's formatter, textwrap and
a ``gettext`` look-up per heading): for jaxmagic's 24 magics that was half of what ``%load_ext
jaxmagic`` cost (12 ms of 25 ms of the thread's CPU time, 2026-12-06; issue 56). This decorator
takes the same ``@argument`` decorators and builds the parser with IPython's own
``construct_parser`` the first time anything asks for it: the magic parsing its line
(``parse_argstring(magic, line)`` reads ``magic.parser``), ``magic.parser`` itself (the docs'
``{jaxmagic-help}`` directive, the usage-error mapping), or the magic's ``__doc__`` - what ``%name?``,
``%magic`` and a front end's inspector print, so the help they show is the parser's, as before.

Help that enumerates what the code declares (``%%jax_compiles``' causes, from ``_compiles/cause.py``) is written
into the docstring at that first build too: ``magic_arguments(filled=...)`` takes the function that fills it, so
the declarations are read (and their modules imported) only when the help is asked for.

The magic becomes an ``ArgumentMagic``, a descriptor that binds like a function
(``JaxMagics().jax_nans`` is a bound method IPython registers and calls); other attributes are the
function's (IPython's markers such as ``needs_local_scope``, ``has_arguments``).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

from IPython.core.magic_arguments import MagicArgumentParser, construct_parser


class ArgumentMagic:
    """A magic method with ``@argument`` decorators; its parser and full docstring are made on first use."""

    def __init__(self, function: Callable[..., Any], filled: Callable[[str], str] | None = None):
        self.__wrapped__ = function
        self._filled = filled
        self.__name__: str = function.__name__
        self.__qualname__: str = function.__qualname__
        self.__module__: str = function.__module__
        self._parser: MagicArgumentParser | None = None
        self._lock = threading.Lock()  # built once: a second build would take the help as the description

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return self.__wrapped__(*args, **kwargs)

    @property
    def parser(self) -> MagicArgumentParser:
        parser = self._parser
        if parser is None:
            with self._lock:
                if self._parser is None:
                    if self._filled is not None:
                        self.__wrapped__.__doc__ = self._filled(self.__wrapped__.__doc__ or "")
                    self._parser = construct_parser(self.__wrapped__)  # also sets the function's __doc__
                parser = self._parser
        return parser

    # A data descriptor, so that every reader of ``__doc__`` (IPython's inspector, ``%magic``) builds the help.
    @property
    def __doc__(self) -> str | None:  # type: ignore[override]
        _ = self.parser
        return self.__wrapped__.__doc__

    def __getattr__(self, name: str) -> Any:
        # Only for names not found on the object itself: what other decorators set on the function.
        if name == "__wrapped__":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)


def magic_arguments(
    name: str | None = None, filled: Callable[[str], str] | None = None
) -> Callable[[Callable[..., Any]], ArgumentMagic]:
    """In place of ``IPython.core.magic_arguments.magic_arguments``: the outermost decorator of a magic
    whose ``@argument``s follow; ``name`` as IPython's (the name the usage line gives). ``filled(doc)``, when
    given, returns the docstring with what it enumerates written in, before the help is first built."""

    def decorate(function: Callable[..., Any]) -> ArgumentMagic:
        if not getattr(function, "has_arguments", False):
            function.has_arguments = True  # type: ignore[attr-defined]
            function.decorators = []  # type: ignore[attr-defined]
        if name is not None:
            function.argcmd_name = name  # type: ignore[attr-defined]
        return ArgumentMagic(function, filled)

    return decorate
