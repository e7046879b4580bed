"""One report of a magic from every process of a multi-process JAX job, merged (``%jax_gather``).

``report`` holds the merged report, ``compare`` what differs between processes,
``merge`` how the reports are brought together (ipyparallel engines, or
jax.distributed's key-value store for a script).
"""

from jaxmagic.probes.gather.merge import engine_entry, entry_of, gather, gather_from_engines, merge
from jaxmagic.probes.gather.report import GatherFinding, GatherReport, ProcessEntry

__all__ = [
    "GatherFinding",
    "GatherReport",
    "ProcessEntry",
    "engine_entry",
    "entry_of",
    "gather",
    "gather_from_engines",
    "merge",
]
