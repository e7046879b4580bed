"""Every magic, a module each: its options and help (``@magic_arguments()``) and what it runs, through the runner.

``MAGICS`` is the registry ``JaxMagics`` (``ipython/magics.py``) is composed of, and what the docs enumerate
(``docs/_ext/magic_help.py``). To add a magic: a module here declaring ``MAGIC = Magic(function, forms)``, named
in this list; then its docs page (``tools/write_magic_help.py``) and its examples in tests/test_magics_contract.py.
"""

from __future__ import annotations

from jaxmagic.ipython.magic import (
    jax_bisect,
    jax_check,
    jax_compiles,
    jax_config,
    jax_debug,
    jax_devices,
    jax_doctor,
    jax_env,
    jax_explain,
    jax_gather,
    jax_hlo,
    jax_keys,
    jax_leaks,
    jax_live,
    jax_memory,
    jax_nans,
    jax_per_device,
    jax_print,
    jax_profile,
    jax_sharding,
    jax_stages,
    jax_traceback,
    jax_transfers,
    jax_watch,
)
from jaxmagic.ipython.magic_runner import Magic

# The order IPython lists them in: the cell magics (a probe around a cell), then the line magics (one line).
MAGICS: tuple[Magic, ...] = tuple(
    module.MAGIC
    for module in (
        jax_nans,
        jax_compiles,
        jax_transfers,
        jax_leaks,
        jax_per_device,
        jax_profile,
        jax_live,
        jax_print,
        jax_keys,
        jax_doctor,
        jax_debug,
        jax_memory,
        jax_stages,
        jax_check,
        jax_sharding,
        jax_devices,
        jax_explain,
        jax_config,
        jax_env,
        jax_traceback,
        jax_hlo,
        jax_bisect,
        jax_watch,
        jax_gather,
    )
)
