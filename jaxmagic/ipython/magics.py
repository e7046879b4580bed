"""The IPython magics: ``JaxMagics``, the one class the extension registers, composed of the magics' registry.

Each magic is a module of ``ipython/magic/`` (its options, its help, the probe it runs); ``MAGICS`` names them.
Here they become the methods and the ``magics`` table IPython registers a ``Magics`` class by - each method a
``MagicOnFirstUse``, which imports the magic's module when the magic first runs or its help is read, so that
``%load_ext`` stays as fast as registering names. No JAX logic, no option of any magic.
"""

from __future__ import annotations

import types
from typing import Any

from IPython.core.magic import magics_class

from jaxmagic.ipython.magic import MAGICS
from jaxmagic.ipython.magic_runner import Magic, MagicRunner


class MagicOnFirstUse:
    """A method of ``JaxMagics`` standing for one magic: binds like a function; calling it, its ``__doc__``
    (what ``%name?`` prints) and any other attribute (``parser``) are the magic's own, its module imported then."""

    def __init__(self, magic: Magic):
        self.magic = magic
        self.__name__ = magic.name
        self.__qualname__ = f"JaxMagics.{magic.name}"
        self.__module__ = magic.module

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return self.magic.function(*args, **kwargs)

    @property
    def __doc__(self) -> str | None:  # type: ignore[override]
        return self.magic.function.__doc__

    def __getattr__(self, name: str) -> Any:
        # Only for names not found on the object itself: the magic's (its parser, IPython's markers).
        if name == "magic":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.magic.function, name)


def magics_table(magics: tuple[Magic, ...]) -> dict[str, dict[str, str]]:
    """IPython's table of a ``Magics`` class: for each kind, each magic's name -> the method that runs it."""
    return {kind: {magic.name: magic.name for magic in magics if kind in magic.forms} for kind in ("line", "cell")}


@magics_class
class JaxMagics(MagicRunner):
    """Every jaxmagic magic: IPython registers a class's magics from its ``magics`` table."""


for _magic in MAGICS:
    setattr(JaxMagics, _magic.name, MagicOnFirstUse(_magic))
JaxMagics.magics = magics_table(MAGICS)
