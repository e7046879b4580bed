"""Key probe: PRNG keys used twice, the keys each jitted function received, and legacy uint32 keys.

Usage without IPython::

    with jaxmagic.probes.keys() as report:          # raises jax.errors.KeyReuseError at a reused key
        train(step_fn, params, X, Y, 5)
    report.reuse.consumer, report.reuse.reused_at, report.reuse.first_used_at
    report.flow("train_step").distinct, report.flow("train_step").calls

Chapter section 9.3: a dropout key that never advances (``split(key)[0]`` on
the same ``key`` every step) raises nothing and gives every step the same
mask. Three views on it, all for the block only:

* ``jax.debug_key_reuse(True)``: a typed key (``jax.random.key``) consumed
  twice raises ``KeyReuseError``. JAX's message says which function got it and
  at which index; the probe adds the argument's name, your line of the second
  use and of the first one (JAX keeps it on the key), and the fix.
* The keys that reached each of your jitted functions (the chapter's
  ``key_data`` spy, without changing your code): at every call of a jitted
  function the probe reads the raw data of each typed-key argument - reading
  consumes nothing and changes no result - and counts the distinct keys per
  function. "train_step got the same key in all 5 calls" shows up even where
  nothing raises (a key rebuilt from the same seed every step).
* Legacy raw keys (``jax.random.PRNGKey``, uint32 arrays) are invisible to the
  checker, so they are followed by their key data: a jitted function of yours
  whose program wraps an argument as a key (``random_wrap``) has that
  argument's data counted like a typed key's.
* Every eager jax.random call (typed or legacy key) is followed the same way:
  the key's data and the call's other arguments, per line of yours. The same
  key data with the same arguments at one line in N of N calls draws the same
  numbers N times (``perm = jax.random.permutation(key, n)`` every epoch with
  ``key`` never advanced).

* Draws that give the same numbers where they should differ, read from each
  jitted program once (``prng_checks``): one key for a whole ``vmap`` batch,
  a key that does not change between a loop's passes, and a key that depends
  on none of the function's arguments (``PRNGKey(0)`` inside the step, or a
  key closed over) - the same numbers at every call of the function.

``record=True`` (used by ``%%jax_doctor``) reports reused keys instead of
raising, and lets the block run as it would without the checker.

Modules: ``probe`` (``keys()``), ``reuse`` (explaining a ``KeyReuseError``),
``flows`` (keys per jitted function), ``draws`` (eager jax.random calls),
``findings`` (each kind of finding, declared and worded once for ``%%jax_keys``, the doctor
and the watch), ``report`` (the report, ``key_findings`` and the document's sections).
"""

from jaxmagic.probes._keys.draws import MAX_DRAW_LINES
from jaxmagic.probes._keys.findings import KeyFinding, KeyFlow, KeyReuse, LegacyKeyUse, RepeatedDraw, SharedKeyDraw
from jaxmagic.probes._keys.flows import MAX_FLOW_VALUES
from jaxmagic.probes._keys.probe import CONFIG_NAMES, keys
from jaxmagic.probes._keys.report import KeyReport, key_findings
from jaxmagic.probes._keys.reuse import explain_key_reuse
from jaxmagic.probes._keys.wording import FIX, LEGACY_NOTE

__all__ = [
    "CONFIG_NAMES",
    "FIX",
    "LEGACY_NOTE",
    "MAX_DRAW_LINES",
    "MAX_FLOW_VALUES",
    "KeyFinding",
    "KeyFlow",
    "KeyReport",
    "KeyReuse",
    "LegacyKeyUse",
    "RepeatedDraw",
    "SharedKeyDraw",
    "explain_key_reuse",
    "key_findings",
    "keys",
]
