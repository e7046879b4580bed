"""A hang named as such: which process runs Python code while the others wait in JAX for it.

Reads the stacks ``stacks.dump_stacks`` brought back from the processes that did not
answer (``ProcessEntry.stack``) and says where each one is, grouped: "process 2 is in
`train_step` at line 9; processes 0, 1, 3 wait in JAX (...) in `update` at line 14".
A process in Python (a loop of the user's, a library's code) while others wait in
JAX is where the job is stuck; processes that all wait in JAX wait for each other (a
collective some never join: another program on some, or a process that left).
"""

from __future__ import annotations

from jaxmagic.probes._gather.ranges import grouped, who
from jaxmagic.probes._gather.report import NO_REPORT, STOPPED, GatherFinding, ProcessEntry
from jaxmagic.probes._gather.stacks import user_stack_text


def not_finished(entries: list[ProcessEntry]) -> list[GatherFinding]:
    """The finding for processes that sent no report: a hang with where each one is, or who failed and why.
    A process that answered without a report (``NO_REPORT``: the name unbound there) is no hang: see
    ``without_report``."""
    stuck = [e for e in entries if e.error and e.status != NO_REPORT]
    if not stuck:
        return []
    late = [e for e in stuck if e.stack]
    if not late:
        return [_without_stacks(stuck, len(entries))]
    running = [e for e in late if e.stack.get("state") == "running"]
    waiting = [e for e in late if e.stack.get("state") == "waiting"]
    unknown = [e for e in late if e not in running and e not in waiting]
    failed = [e for e in stuck if not e.stack]  # answered without a report, or died: no stack asked
    said = [_at(group) for group in _by_place(running)] + [_at(group) for group in _by_place(waiting)]
    idle = [e for e in unknown if e.stack.get("frames")]  # a stack, none of it the user's: between cells
    if idle:
        said.append(f"{who(_names(idle))}: in none of your code (idle, or in the kernel's own)")
    said += [
        f"{who(_names(group))}: no stack ({group[0].stack.get('where')})"
        for group in _by_place([e for e in unknown if e not in idle])
    ]
    said += [f"{text} (sent no report)" for text in grouped([(e.process, e.name, e.error) for e in failed])]
    finished = [e for e in entries if not e.error or e.status == NO_REPORT]
    if finished:
        said.append(f"{who(_names(finished))} finished")
    if running:
        first = running[0].stack
        engines = [e.engine for e in running if e.engine is not None]
        fix = (
            f"{who(_names(running))} never left your Python code (`{first.get('function')}`, line "
            f"{first.get('line')}): a loop that does not end there, or a branch the others did not take, so "
            "they wait in a collective it does not reach. Make every process take the same path through the "
            "collectives" + (f"; interrupt it with `rc.send_signal('SIGINT', targets={engines})`." if engines else ".")
        )
    elif waiting and all("JAX" in str(e.stack.get("where")) or "jitted" in str(e.stack.get("where")) for e in waiting):
        fix = (
            "Every process that did not answer waits in JAX and none runs Python: if they wait for each other, "
            "it is a collective that not all processes join (another program on some - see 'divergence' - or a "
            "process that left or died). Make every process run the same programs in the same order."
        )
    elif waiting:
        fix = "Each process that did not answer waits in the call named: what it waits for (a lock, a file, a sleep) is why."
    else:
        fix = "Look at that engine's output (%%px --targets N) or its log."
    kind = "A hang: " if running or waiting else ""
    return [
        GatherFinding(
            area="not finished",
            processes=[e.process if e.process is not None else e.engine for e in stuck],
            function=", ".join(sorted({str(e.stack.get("function")) for e in running + waiting})),
            line=" / ".join(dict.fromkeys(f"line {e.stack.get('line')}" for e in running)),
            summary=kind + "; ".join(said),
            details=grouped([(e.process, e.name, _frames(e)) for e in late if e.stack.get("user_frames")]),
            fix=fix,
        )
    ]


def _without_stacks(stuck: list[ProcessEntry], total: int) -> GatherFinding:
    stopped = [e for e in stuck if e.status == STOPPED]
    if len(stopped) == len(stuck):  # their processes ended: said as such, not as a hang of their own
        summary = f"{len(stopped)} of {total} engine process(es) ended: "
        fix = (
            "The processes of a jax.distributed job wait for every other in their collectives: with one ended, "
            "the others hang at their next one. Restart the job (the cluster's engines), then run the cell again."
        )
    else:
        summary = f"{len(stuck)} of {total} process(es) sent no report: "
        fix = (
            "A process that did not finish while the others did is where a job hangs: the others wait for it "
            "in their next collective. Look at that engine's output (%%px --targets N) or its log."
        )
    return GatherFinding(
        area="not finished",
        processes=[e.process if e.process is not None else e.engine for e in stuck],
        summary=summary + "; ".join(grouped([(e.process, e.name, e.error) for e in stuck])),
        fix=fix,
    )


def without_report(entries: list[ProcessEntry]) -> list[GatherFinding]:
    """Processes that answered with nothing to merge: the name is unbound there, or the --values expression
    failed there - what failed, never a hang."""
    # an engine whose --values expression raised is told by values.expression_failures, with its error
    empty = [e for e in entries if e.status == NO_REPORT and e.kind != "values"]
    if not empty:
        return []
    return [
        GatherFinding(
            area="no report",
            processes=[e.process if e.process is not None else e.engine for e in empty],
            summary=f"{len(empty)} of {len(entries)} process(es) answered without a report: "
            + "; ".join(grouped([(e.process, e.name, e.error.removeprefix("no report: ")) for e in empty])),
            fix="These engines answered: nothing hangs there. Bind the report on every engine (run the magic "
            "under %%px with -o NAME, then %jax_gather NAME), or give --values an expression each engine can "
            "evaluate in its own namespace.",
        )
    ]


def _names(entries: list[ProcessEntry]) -> list[tuple[int | None, str]]:
    return [(e.process, e.name) for e in entries]


def _by_place(entries: list[ProcessEntry]) -> list[list[ProcessEntry]]:
    groups: dict[str, list[ProcessEntry]] = {}
    for entry in entries:
        groups.setdefault(str(entry.stack.get("where")), []).append(entry)
    return list(groups.values())


def _at(group: list[ProcessEntry]) -> str:
    where = str(group[0].stack.get("where"))
    if len(group) > 1:  # "processes 0, 1 wait in" - the verb agrees with the subject
        where = where.replace("waits in", "wait in", 1).replace("is in", "are in", 1)
    return f"{who(_names(group))} {where}"


def _frames(entry: ProcessEntry) -> str:
    return f"your frames {user_stack_text(entry.stack)}"
