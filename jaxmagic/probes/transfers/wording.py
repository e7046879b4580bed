"""Why implicit transfers matter, in words shared by every report that finds them.

``%%jax_transfers`` (``report.py``), ``%%jax_doctor`` and ``%jax_watch`` all say it the same way.
"""

WHY = (
    "A NumPy array, a Python scalar or a Python list given to JAX is copied to the device every time it is "
    "used - in a loop, on every iteration - and nothing in the code shows it. Creating a JAX array from host "
    "values (jnp.array(list), jnp.float32(0.5), even jnp.ones, which sends its fill value) is such a copy "
    "too. Move the data to the device once, before the loop, with jax.device_put(x) (an explicit transfer, "
    "which the guard allows), and keep it there; make scalars that select code static instead."
)
