"""On an ipyparallel engine, jaxmagic makes the engine dump its Python stack on a signal (``%jax_gather``).

Only on an engine: the kernel is ipyparallel's (``IPythonParallelKernel``, with an
``engine_id``). The user's own kernel's signal handling is never changed. See
``probes/_gather/stack_dump.py`` for the signal, the file and why. The probes import JAX, so the
engine listens once its ``import jax`` has run (``early_context.when_jax_imported``): a hang
``%jax_gather`` is asked about is in JAX, and ``%load_ext`` imports no JAX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmagic.ipython import early_context

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

_listening: set[int] = set()  # the engine id this process listens for, once it does


def engine_id(ipython: InteractiveShell) -> int | None:
    """This engine's id when ``ipython`` is the shell of an ipyparallel engine, else None."""
    kernel = getattr(ipython, "kernel", None)
    if kernel is None or not type(kernel).__module__.startswith("ipyparallel."):
        return None
    number = getattr(kernel, "engine_id", -1)
    return number if isinstance(number, int) and number >= 0 else None


def install(ipython: InteractiveShell) -> None:
    number = engine_id(ipython)
    if number is not None:
        early_context.when_jax_imported(ipython, lambda: _listen(number))


def _listen(number: int) -> None:
    # deferred: importing a probe imports JAX, which the user has just imported (see install)
    from jaxmagic.probes._gather.stack_dump import listen_for_stack_requests

    try:
        listen_for_stack_requests(number)
    except OSError:  # no writable temporary directory: %jax_gather says it got no stack
        return
    _listening.add(number)


def uninstall(ipython: InteractiveShell) -> None:
    if engine_id(ipython) is None or not _listening:
        return
    from jaxmagic.probes._gather.stack_dump import stop_listening  # deferred: see _listen

    stop_listening()
    _listening.clear()
