"""Transfer probe: every implicit host-to-device transfer of a block, with the user's line that made it.

Usage without IPython::

    with jaxmagic.probes.transfers() as report:          # mode="log": the block runs to the end
        for _ in range(100):
            y = f(np_x, 1.0)                             # a NumPy array and a Python scalar: 2 transfers a call
    report.transfers[0].line.code, report.transfers[0].count

    with jaxmagic.probes.transfers(mode="disallow"):     # the first implicit transfer raises
        f(np_x)

It runs the block under ``jax.transfer_guard`` (chapter section 5.5): passing a
NumPy array or a Python scalar to a jitted function, ``jnp.array(list)`` or
``x + 1`` copies host data to the device implicitly, on every call; an explicit
``jax.device_put`` is allowed. ``"disallow"`` stops the block at the first
implicit transfer (JAX's error, whose traceback gives the line); ``"log"`` lets
it run and names the line of each transfer.

On the CPU backend arrays already live in host memory, so device-to-host reads
(``float(x)``, ``np.asarray(x)``) are not intercepted; on GPU/TPU the guard
catches them too.

Modules: ``probe`` (``transfers()``: the guard, and following the user's lines
with ``sys.monitoring``), ``capture_file`` (where descriptor 2 points meanwhile),
``host_values`` (the host values a line passed, to name a copy's argument),
``named_copies`` (the log's copies named by the NumPy arrays the jitted calls were given, as
``_support.host_arguments`` - the doctor's and the watch's observer - saw them),
``report`` (the report and its wording), ``wording`` (why implicit transfers
matter, shared with ``%%jax_doctor`` and ``%jax_watch``).
"""

from jaxmagic.probes._transfers.probe import CONFIG_NAMES, MODES, parse_transfer, transfers
from jaxmagic.probes._transfers.report import Transfer, TransferReport
from jaxmagic.probes._transfers.wording import WHY

__all__ = ["CONFIG_NAMES", "MODES", "WHY", "Transfer", "TransferReport", "parse_transfer", "transfers"]
