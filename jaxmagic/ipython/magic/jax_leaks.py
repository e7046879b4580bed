"""``%%jax_leaks``: run the cell with tracer-leak checking; name the variable that holds each leaked tracer."""

from __future__ import annotations

from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@output_option
def jax_leaks(runner: MagicRunner, line: str, cell: str) -> None:
    """Run the cell with tracer-leak checking; name the variable that holds each leaked tracer.

    Every function in the cell traces afresh (a function whose trace is
    cached would otherwise not be checked), without clearing your caches.
    On a leak the cell fails with JAX's "Leaked trace" error; above it the
    report names the traced function, each leaked tracer's shape and dtype,
    and where it is stored in your terms - leaked[0], cache.store['h'],
    m.last_hidden, box[0] (closed over by f) - with the fix. An
    UnexpectedTracerError in the cell is explained too: where the old
    tracer was used, where it was made, which variable still holds it.
    """
    __tracebackhide__ = True
    runner.run_cell_magic(jax_leaks, line, cell, lambda args: probes.leaks(namespace=runner.user_ns))
