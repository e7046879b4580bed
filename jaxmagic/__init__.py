"""jaxmagic: IPython magics that switch on the right JAX debugging tool for one cell.

``%load_ext jaxmagic`` registers the magics and the tracer-error explainer
(an IPython custom exception handler; ``%jax_explain off``, ``%unload_ext``
remove it). Loading does not start a JAX
backend, so ``XLA_FLAGS`` or ``jax_num_cpu_devices`` set afterwards still take
effect. The probes (``jaxmagic.probes``) work without IPython.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from jaxmagic.probes._gather.report import GatherReport

__version__ = "0.1.0"


def gather(
    report: object, timeout: float = 60.0, values: object = None, values_name: str = "values"
) -> GatherReport | None:
    """Merge ``report`` from every process of a ``jax.distributed`` job on process 0 (None elsewhere).

    For scripts launched on every host: each process calls it with its own report
    (``with jaxmagic.probes.doctor() as rep: ...`` then ``jaxmagic.gather(rep)``). The
    reports travel through jax.distributed's key-value store, not a collective, so a
    process that hangs or died is named after ``timeout`` seconds instead of hanging
    the others. ``values`` (a pytree that should be the same on every process, named
    ``values_name`` in the report) is compared leaf by leaf: digests first, then only the
    values of the leaves that differ.
    """
    from jaxmagic.probes._gather import gather as gather_reports  # deferred: importing jaxmagic imports no probe

    return gather_reports(report, timeout=timeout, values=values, values_name=values_name)


def load_ipython_extension(ipython: InteractiveShell) -> None:
    # deferred: `import jaxmagic.probes` runs this package's __init__ and must not import IPython
    from jaxmagic.ipython.magics import JaxMagics

    ipython.register_magics(JaxMagics)
    # The tracer-error explainer is on by default (%jax_explain off turns it off).
    from jaxmagic.ipython import explainer_hook  # deferred: IPython layer (see above)

    explainer_hook.install(ipython)
    # jaxmagic's cache-key context, made before the user has compiled anything (see early_context).
    from jaxmagic.ipython import early_context  # deferred: IPython layer (see above)

    early_context.install(ipython)
    # On an ipyparallel engine (never in the user's own kernel): a stack dump on a signal, for %jax_gather.
    from jaxmagic.ipython import engine_stacks  # deferred: IPython layer (see above)

    engine_stacks.install(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    from jaxmagic.ipython.magics import JaxMagics  # deferred: IPython layer (see load_ipython_extension)

    manager = ipython.magics_manager
    for kind, names in JaxMagics.magics.items():
        for name in names:
            manager.magics[kind].pop(name, None)
    manager.registry.pop(JaxMagics.__name__, None)
    from jaxmagic.ipython import explainer_hook  # deferred: IPython layer

    explainer_hook.uninstall(ipython)
    from jaxmagic.ipython import watch_hook  # deferred: IPython layer

    watch_hook.uninstall(ipython)
    from jaxmagic.ipython import early_context  # deferred: IPython layer

    early_context.uninstall(ipython)
    from jaxmagic.ipython import engine_stacks  # deferred: IPython layer

    engine_stacks.uninstall(ipython)
