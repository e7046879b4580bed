"""The fix every key finding offers when no more specific one was written, and the note on legacy keys."""

FIX = (
    "Split before every use and carry the new key forward: `key, sub = jax.random.split(key)`, then use "
    "`sub` and keep `key` for the next step. Or derive one key per step from a base key with "
    "`jax.random.fold_in(key, step)`."
)
LEGACY_NOTE = (
    "`jax.random.PRNGKey` makes a raw uint32 array. JAX's key-reuse checker cannot follow such keys; "
    "jaxmagic followed them by their key data. Creating keys with `jax.random.key(seed)` lets JAX "
    "itself raise at a reuse."
)
