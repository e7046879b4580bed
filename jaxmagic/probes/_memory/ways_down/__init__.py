"""Ways down from a program's peak, each tried by compiling - never by running the user's program.

Every candidate is applied to the traced program or to the call, compiled with XLA's dumps on, and its
peak read as the original's was (``program.program_memory``); a candidate that does not lower the peak is
kept as tried and not offered. Each kind (``records.OFFER_ORDER``) is one module here, tried from what the
buffers at the peak show:

* ``donation`` - an argument an output of the same shape and dtype can be written over, donated (through the
  library's jit when a library made the program: ``nnx.jit(..., donate_argnames=)``, ``eqx.filter_jit(donate=)``);
* ``vmaps`` - per-example gradients replaced by the gradient of the mean; a vmap run in chunks;
* ``checkpoint`` - activations saved for the backward pass: a scan's body (``scan_bodies``), a function, or a
  library module's method recomputes them;
* ``rows`` - the peak exceeds what the device can give: the results a block of an input's rows at a time.
"""

from __future__ import annotations

from jaxmagic.probes._memory.program import CompiledCall
from jaxmagic.probes._memory.records import (
    BATCH_GRADIENT,
    CHECKPOINT,
    CHUNK,
    DONATE,
    FITS_SHARE,
    ROWS,
    Capacity,
    ProgramMemory,
    WayDown,
)
from jaxmagic.probes._memory.ways_down.checkpoint import checkpointed
from jaxmagic.probes._memory.ways_down.donation import donated
from jaxmagic.probes._memory.ways_down.rows import row_blocks
from jaxmagic.probes._memory.ways_down.vmaps import batch_gradient, chunked_vmap
from jaxmagic.report.wording import error_line

__all__ = ["FITS_SHARE", "ways_down"]

_ATTEMPTS = ((DONATE, donated), (BATCH_GRADIENT, batch_gradient), (CHECKPOINT, checkpointed), (CHUNK, chunked_vmap))


def ways_down(call: CompiledCall, program: ProgramMemory, capacity: Capacity | None) -> list[WayDown]:
    """Every candidate that applies, tried; ``program.ways_down`` keeps them (offered: ``program.offered``)."""
    found: list[WayDown] = []
    for kind, attempt in _ATTEMPTS:
        try:
            found += attempt(call, program)
        except Exception as error:  # a candidate we cannot build is one fewer, never a failed report
            found.append(WayDown(kind, "", "", program.peak_bytes, problem=error_line(error)))
    available = capacity.available if capacity is not None else None
    if program.compile_error is not None or (available is not None and program.peak_bytes > available * FITS_SHARE):
        try:
            found += row_blocks(call, program, available)
        except Exception as error:
            found.append(WayDown(ROWS, "", "", program.peak_bytes, problem=error_line(error)))
    for way in found:
        if way.refused:  # the compiler refused the trial: proven not to fit
            way.fits = False
        elif way.peak_after is not None and available is not None:
            way.fits = way.peak_after <= available * FITS_SHARE
    return found
