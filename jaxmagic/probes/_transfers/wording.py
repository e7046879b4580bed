"""Why implicit transfers matter, and what to do about each kind, in words shared by every report that finds them.

``%%jax_transfers`` (``report.py``), ``%%jax_doctor`` and ``%jax_watch`` all say it the same way.
"""

WHY = (
    "A NumPy array, a Python scalar or a Python list given to JAX is copied to the device every time it is "
    "used - in a loop, on every iteration - and nothing in the code shows it. Creating a JAX array from host "
    "values (jnp.array(list), jnp.float32(0.5), even jnp.ones, which sends its fill value) is such a copy too."
)

# What to do, by what was copied (``Transfer.what``): the fix line of every report that finds the copy.
HOST_ARRAY_FIX = (
    "Put the data on the device once, before the loop, with `x = jax.device_put(x)` (an explicit transfer, "
    "which the guard allows), and pass that array at every call."
)
SCALAR_FIX = (
    "Pass the number as a JAX array made once (`jnp.asarray(value)`, before the loop), or make it static "
    "(`static_argnames`) if it selects code."
)
CREATION_FIX = (
    "Make such arrays once, before any loop, and keep them on the device: each creation from host values "
    "(`jnp.float32(0.5)`, `jnp.ones(n)`) is a copy - once, it costs next to nothing, in a loop it is made at "
    "every step."
)


def transfer_fix(what: str) -> str:
    """The fix for an implicit transfer of ``what`` (``Transfer.what``: a NumPy array or other host data, a
    Python scalar, or a value JAX did not describe)."""
    if what == "a Python scalar":
        return SCALAR_FIX
    if what.startswith("a NumPy array"):
        return HOST_ARRAY_FIX
    return CREATION_FIX
