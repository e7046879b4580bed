"""The IPython magics: ``JaxMagics``, the one class the extension registers, composed of the magics' registry.

Each magic is a module of ``ipython/magic/`` (its options, its help, the probe it runs); ``MAGICS`` lists them.
Here they become the methods and the ``magics`` table IPython registers a ``Magics`` class by: no JAX logic,
no option of any magic.
"""

from __future__ import annotations

from IPython.core.magic import magics_class

from jaxmagic.ipython.magic import MAGICS
from jaxmagic.ipython.magic_runner import Magic, MagicRunner


def magics_table(magics: tuple[Magic, ...]) -> dict[str, dict[str, str]]:
    """IPython's table of a ``Magics`` class: for each kind, each magic's name -> the method that runs it."""
    return {kind: {magic.name: magic.name for magic in magics if kind in magic.forms} for kind in ("line", "cell")}


@magics_class
class JaxMagics(MagicRunner):
    """Every jaxmagic magic: IPython registers a class's magics from its ``magics`` table."""


for _magic in MAGICS:
    setattr(JaxMagics, _magic.name, _magic.function)
JaxMagics.magics = magics_table(MAGICS)
