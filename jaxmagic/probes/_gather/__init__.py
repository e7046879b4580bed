"""One report of a magic from every process of a multi-process JAX job, merged (``%jax_gather``).

``report`` holds the merged report, ``compare`` what differs between processes,
``merge`` how the reports are brought together (ipyparallel engines, or
jax.distributed's key-value store for a script), ``ranges`` processes written as
ranges and per-process lines grouped by what they say. Where a process that does not
answer is: ``stack_dump`` (the engine's side: its stack on a signal), ``stacks``
(asking for it and reading it), ``hangs`` (the finding: who runs Python, who waits).
"""

from jaxmagic.probes._gather.merging import engine_entry, entry_of, gather, gather_from_engines, merge
from jaxmagic.probes._gather.report import GatherFinding, GatherReport, ProcessEntry

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
