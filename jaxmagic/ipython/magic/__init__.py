"""Every magic, a module each: its options and help (``@magic_arguments()``) and what it runs, through the runner.

``MAGICS`` is the registry: each magic's name - its module here, and the function of that name in it - and the forms
it is typed in. ``JaxMagics`` (``ipython/magics.py``) is composed of it, and the docs enumerate it
(``docs/_ext/magic_help.py``). A magic's module is imported when the magic first runs or its help is first read,
so ``%load_ext`` imports none of them. To add a magic: a module here defining the function, a line in ``MAGICS``,
its docs page (``tools/write_magic_help.py``) and its examples in tests/test_magics_contract.py.
"""

from __future__ import annotations

from jaxmagic.ipython.magic_runner import Form, Magic

CELL: tuple[Form, ...] = ("cell",)
LINE: tuple[Form, ...] = ("line",)
LINE_AND_CELL: tuple[Form, ...] = ("line", "cell")

# The order IPython lists them in: the cell magics (a probe around a cell), then the line magics (one line).
MAGICS: tuple[Magic, ...] = (
    Magic("jax_nans", CELL),
    Magic("jax_compiles", CELL),
    Magic("jax_transfers", CELL),
    Magic("jax_leaks", CELL),
    Magic("jax_per_device", CELL),
    Magic("jax_profile", CELL),
    Magic("jax_live", LINE_AND_CELL),
    Magic("jax_print", CELL),
    Magic("jax_keys", CELL),
    Magic("jax_doctor", CELL),
    Magic("jax_debug", LINE_AND_CELL),
    Magic("jax_memory", LINE_AND_CELL),
    Magic("jax_stages", LINE),
    Magic("jax_check", LINE),
    Magic("jax_sharding", LINE),
    Magic("jax_devices", LINE),
    Magic("jax_explain", LINE),
    Magic("jax_config", LINE),
    Magic("jax_env", LINE),
    Magic("jax_traceback", LINE),
    Magic("jax_hlo", LINE),
    Magic("jax_bisect", LINE),
    Magic("jax_watch", LINE),
    Magic("jax_gather", LINE),
)
