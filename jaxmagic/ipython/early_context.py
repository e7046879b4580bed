"""Create jaxmagic's cache-key context right after the cell that imports JAX.

``%%jax_leaks``, ``%%jax_keys``, ``%%jax_print`` and ``%%jax_doctor`` trace the
cell afresh under a ``jax.make_user_context`` of jaxmagic's own
(``_jax/retrace.py``). Creating that context adds an entry to every cache key,
so everything compiled before it traces and compiles once more. Made when JAX
has just been imported, it costs the user nothing: no function of theirs is
cached yet (or only what that one cell compiled). ``%load_ext`` itself never
imports JAX, so it waits for the user's import instead of doing it.
"""

from __future__ import annotations

import sys

from jaxmagic._jax import retrace

_EVENT = "post_run_cell"


def install(ipython) -> None:
    if "jax" in sys.modules:
        retrace.create_context()
        return
    if _after_cell not in ipython.events.callbacks[_EVENT]:
        ipython.events.register(_EVENT, _after_cell)


def uninstall(ipython) -> None:
    if _after_cell in ipython.events.callbacks[_EVENT]:
        ipython.events.unregister(_EVENT, _after_cell)


def _after_cell(result) -> None:
    if "jax" not in sys.modules:
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        uninstall(shell)
    try:
        retrace.create_context()
    except Exception:  # a broken JAX install: the magics say so when used; never fail the user's cell here
        pass
