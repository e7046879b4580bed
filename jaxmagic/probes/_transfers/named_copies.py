"""The transfer log's copies named by what the jitted calls were given (``_support.host_arguments``).

The guard's log says a line copied an ``f32[32,8]`` - and on JAX's C++ fast path not even that
("" for the value) - never which argument. The call observer (``HostArguments``, the one
``%%jax_doctor`` and ``%jax_watch`` use) saw each NumPy leaf a jitted call on that line was given,
with its path (``batch['x']``) and its count. Each such leaf was copied at each of those calls,
so that many of the line's copies of its type (or undescribed) are that leaf's: they become one
row naming it, and the line keeps only the copies no leaf accounts for. The total is unchanged.
A sampled observer (``%%jax_transfers`` looks at a share of a fast loop's calls, as ``%jax_watch``
does) may first see an array after calls it did not look at: the line's further copies of that
very type are then its calls' too, when no other array of the line has that type.
"""

from __future__ import annotations

from jaxmagic.probes._support.calls.host_arguments import HostArgumentUse
from jaxmagic.probes._transfers.report import Transfer, TransferReport


def name_copies(report: TransferReport, uses: list[HostArgumentUse]) -> None:
    """Give the log's copies on each line the NumPy leaves the line's jitted calls were given."""
    report.host_arguments = list(uses)
    by_line: dict[tuple[str, int], list[HostArgumentUse]] = {}
    for use in uses:
        if use.line is not None:
            by_line.setdefault((use.line.filename, use.line.lineno), []).append(use)
    for where, line_uses in by_line.items():
        groups = [t for t in report.transfers if t.line is not None and (t.line.filename, t.line.lineno) == where]
        if not groups:
            continue  # the log saw no copy on this line (not followed): nothing of its to name
        named = []
        for use in line_uses:
            same_type = [g for g in groups if g.value == use.value]
            taken = _take(use.calls, same_type + [g for g in groups if not g.value])
            # Calls of the function not looked at before the array was first seen (a sampled loop) may
            # have held it too: the line's further copies of its very type, if any, are those calls'.
            more = _take(use.not_looked_at, same_type) if len({u.value for u in line_uses}) == len(line_uses) else 0
            if more:
                use.calls += more
                use.not_looked_at = 0
            if taken + more:
                first = groups[0]
                named.append(
                    Transfer(
                        first.direction,
                        use.value,
                        first.line,
                        count=taken + more,
                        argument=use.argument,
                        function=use.function,
                        traced=first.traced,
                        provenance=first.provenance,
                    )
                )
        at = report.transfers.index(groups[0])
        kept = [t for t in report.transfers if t not in groups or t.count]
        position = sum(1 for t in report.transfers[:at] if t in kept)
        report.transfers = kept[:position] + named + kept[position:]


def _take(wanted: int, groups: list[Transfer]) -> int:
    """Take up to ``wanted`` copies from ``groups`` in order (their counts go down); how many were taken."""
    taken = 0
    for group in groups:
        step = min(wanted - taken, group.count)
        group.count -= step
        taken += step
    return taken
