"""On an ipyparallel engine, jaxmagic makes the engine dump its Python stack on a signal (``%jax_gather``).

Only on an engine: the kernel is ipyparallel's (``IPythonParallelKernel``, with an
``engine_id``). The user's own kernel's signal handling is never changed. See
``probes/_gather/stack_dump.py`` for the signal, the file and why.
"""

from __future__ import annotations


def engine_id(ipython) -> int | None:
    """This engine's id when ``ipython`` is the shell of an ipyparallel engine, else None."""
    kernel = getattr(ipython, "kernel", None)
    if kernel is None or not type(kernel).__module__.startswith("ipyparallel."):
        return None
    number = getattr(kernel, "engine_id", -1)
    return number if isinstance(number, int) and number >= 0 else None


def install(ipython) -> None:
    number = engine_id(ipython)
    if number is None:
        return
    # deferred: the probes are imported on first use (%load_ext stays light), and only on an engine
    from jaxmagic.probes._gather.stack_dump import listen_for_stack_requests

    try:
        listen_for_stack_requests(number)
    except OSError:  # no writable temporary directory: %jax_gather says it got no stack
        pass


def uninstall(ipython) -> None:
    if engine_id(ipython) is None:
        return
    from jaxmagic.probes._gather.stack_dump import stop_listening  # deferred: see install

    stop_listening()
