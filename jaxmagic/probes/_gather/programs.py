"""Programs that differ: a function each process compiled, compared program by program, operation by operation.

Processes of one job that compile different programs for one function wait for each
other in their next collective for ever (openxla/xla#7716; marin#9042: a shape that
depends on the process index). In a multi-process job the compilation probe digests
each program it compiles (``_jax/program_prints.py``); here the digests of one
function's programs are compared in compile order, and for the first program that
differs, its operations: the process that compiled another program is named with the
first operation that differs and the user's line it comes from.
"""

from __future__ import annotations

from typing import Any

from jaxmagic._jax.program_prints import op_name
from jaxmagic.probes._gather.report import GatherFinding, ProcessEntry
from jaxmagic.report import JsonDict

FIX = (
    "Processes that run different programs wait for each other in their next collective (psum, all-gather, a "
    "sharded jit) for ever. The programs part at that operation: make what it depends on the same on every "
    "process - a shape (pad the last batch, give every process as many rows), a Python branch on "
    "jax.process_index() or on per-host configuration (decide it once and broadcast it)."
)


def compiled_programs(report: JsonDict) -> dict[str, list[JsonDict]]:
    """Each function's digested programs (compile order) in a ``%%jax_compiles`` report or the doctor's."""
    parts = [report] if report.get("kind") == "jax_compiles" else [report.get("compiles")]
    out: dict[str, list[JsonDict]] = {}
    for part in parts:
        if not isinstance(part, dict):
            continue
        for function in part.get("functions") or []:
            if function.get("programs") and function.get("kind") == "user":
                out.setdefault(function["name"], []).extend(function["programs"])
    return out


def program_differences(entries: list[ProcessEntry]) -> list[GatherFinding]:
    per_process = [(e, compiled_programs(e.report)) for e in entries]
    names = sorted({name for _e, programs in per_process for name in programs})
    findings = []
    for name in names:
        seen = [(e, programs[name]) for e, programs in per_process if programs.get(name)]
        if len(seen) < 2:
            continue  # compiled (with programs digested) on one process only: nothing to compare
        finding = _function_difference(name, seen)
        if finding is not None:
            findings.append(finding)
    return findings


def joined(findings: list[GatherFinding], programs: list[GatherFinding]) -> list[GatherFinding]:
    """The program findings folded into the divergence finding of the same function (one finding per function)."""
    by_function = {f.function: f for f in findings if f.area == "divergence"}
    out = list(findings)
    for program in programs:
        divergence = by_function.get(program.function)
        if divergence is None:
            out.append(program)
            continue
        divergence.details += program.details
        divergence.line = divergence.line or program.line
        divergence.summary += program.summary[program.summary.index(":") :] if ":" in program.summary else ""
    return out


def _function_difference(name: str, seen: list[tuple[ProcessEntry, list[JsonDict]]]) -> GatherFinding | None:
    """The processes that compiled a program of ``name`` most processes did not, each beside one that did not.

    Compared as sets, not in compile order: a program compiled in an earlier cell is in JAX's
    cache, not in this report, and a ragged last batch adds a program on one process only.
    """
    holders: dict[str, set[int]] = {}
    for index, (_e, programs) in enumerate(seen):
        for program in programs:
            holders.setdefault(program.get("digest", ""), set()).add(index)
    odd = {
        index: [n for n, p in enumerate(programs) if len(holders[p.get("digest", "")]) * 2 <= len(seen)]
        for index, (_e, programs) in enumerate(seen)
    }
    odd = {index: numbers for index, numbers in odd.items() if numbers}
    if not odd:  # every program is held by most processes: they compiled the same ones
        return None
    details, line, first_op = [], "", ""
    for index, numbers in odd.items():
        entry, programs = seen[index]
        others = sorted((i for i in range(len(seen)) if i != index), key=lambda i: len(odd.get(i, [])))
        reference_entry, reference_programs = seen[others[0]]
        number = numbers[0]
        reference = reference_programs[min(number, len(reference_programs) - 1)]
        text, op_line, op = _first_difference(reference_entry.name, reference, programs[number])
        details.append(f"{entry.name}: program {number + 1} of `{name}` is not {reference_entry.name}'s: {text}")
        line, first_op = line or op_line, first_op or op
    named = [seen[index][0] for index in odd]
    where = f"the first differing operation is `{first_op}`" + (f" at {line}" if line else "") if first_op else ""
    return GatherFinding(
        area="program",
        processes=[e.process for e in named],
        function=name,
        line=line,
        details=details,
        summary=f"`{name}` compiled to a different program on {', '.join(e.name for e in named)}"
        + (f": {where}" if where else ""),
        fix=FIX,
    )


def _first_difference(reference_name: str, reference: JsonDict, other: JsonDict) -> tuple[str, str, str]:
    """(how the programs differ, the user's line of the first differing operation, its name).

    A signature that differs (``func.func``: other argument shapes) is said, and the first operation
    of the body that differs is named too: where the other shape enters the user's code.
    """
    ours, theirs = reference.get("ops") or [], other.get("ops") or []
    said: list[str] = []
    constant: tuple[str, str] | None = None
    for index in range(min(len(ours), len(theirs))):
        if ours[index][0] == theirs[index][0]:
            continue
        mine, its = theirs[index][1], ours[index][1]
        if op_name(mine) == "func.func" and not said:
            said.append(f"its arguments differ: `{_signature(mine)}` where {reference_name} has `{_signature(its)}`")
            continue
        line = _line_of(other, theirs[index]) or _line_of(reference, ours[index])
        said.append(
            f"operation {index + 1} is `{mine}` where {reference_name} has `{its}`" + (f", at {line}" if line else "")
        )
        if op_name(mine) == "stablehlo.constant" and not constant:
            # JAX places constants at the jit call's line: the operation that uses it names the user's line
            constant = (line, op_name(mine))
            continue
        return "; ".join(said), line, op_name(mine)
    if constant:
        return "; ".join(said), *constant
    if len(ours) < _count(reference) or len(theirs) < _count(other):
        said.append(f"the first {min(len(ours), len(theirs))} operations compared")
    elif len(ours) != len(theirs):
        said.append(f"{len(theirs)} operations where {reference_name}'s program has {len(ours)}")
    return "; ".join(said) or "the operations compared are the same", "", ""


def _signature(func_line: str) -> str:
    """``func.func public @main(%arg0: tensor<3xf32>) -> (...)`` -> ``(tensor<3xf32>)``: the argument types."""
    inside = func_line.partition("(")[2].partition(") ->")[0]
    return "(" + ", ".join(part.split(": ", 1)[-1].split(" {")[0] for part in inside.split(", %")) + ")"


def _line_of(program: JsonDict, op: list[Any]) -> str:  # op: [digest, text, index into lines], as JSON
    lines = program.get("lines") or []
    return lines[op[2]] if 0 <= op[2] < len(lines) else ""


def _count(program: JsonDict) -> int:
    return int(program.get("op_count") or len(program.get("ops") or []))
