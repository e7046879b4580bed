"""The IPython magics: argument parsing and wiring only, no JAX logic.

Each magic parses its line with ``magic_arguments`` (so ``%jax_nans?`` prints
real help), runs the cell or the call inside a probe, stores the report under
``-o NAME`` and displays it. The magics are declared in ``cell_magics.py`` and
``line_magics.py``; ``JaxMagics`` is the one class the extension registers.
"""

from __future__ import annotations

from IPython.core.magic import magics_class

from jaxmagic.ipython.cell_magics import CellMagics
from jaxmagic.ipython.line_magics import LineMagics


@magics_class
class JaxMagics(CellMagics, LineMagics):
    """Every jaxmagic magic: IPython registers a class's magics from its ``magics`` table."""


JaxMagics.magics = {kind: {**CellMagics.magics[kind], **LineMagics.magics[kind]} for kind in ("line", "cell")}
