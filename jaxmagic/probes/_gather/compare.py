"""The differences between processes' reports of one magic: what the merged report finds.

Each process sends its report as ``to_dict()`` data, so the comparison reads the
fields every report kind keeps (a ``%%jax_nans``, ``%%jax_compiles``,
``%%jax_doctor``, ``%jax_live``, ``%%jax_keys`` report or a ``%jax_watch`` log) and
never needs the process's objects. Per area:

- **NaN**: a NaN found on some processes only (a bad shard of the data), with each
  one's producing line and call;
- **divergence**: a function compiled a different number of times, or for other
  argument types or static values, on some processes: they run different programs,
  and a collective between them waits for ever; with the first operation that
  differs when the programs were digested (``programs.py``, area **program** when
  nothing else differs);
- **memory**: arrays piling up on some processes only;
- **random keys**: the same key data on every process where each process should draw
  its own (dropout, shuffling);
- **not finished**: a process whose magic failed or did not answer in time - where a
  hang is - or whose engine process ended (stopped by a signal, killed: ``engine_exits``);
- **no report**: a process that answered with nothing to merge (the name unbound there, the
  ``--values`` expression failed there): what failed, never a hang.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from jaxmagic.probes._gather.hangs import not_finished, without_report
from jaxmagic.probes._gather.programs import joined, program_differences
from jaxmagic.probes._gather.ranges import grouped, who
from jaxmagic.probes._gather.report import GatherFinding, ProcessEntry
from jaxmagic.report import JsonDict


def differences(entries: list[ProcessEntry]) -> list[GatherFinding]:
    answered = [e for e in entries if not e.error]
    findings = not_finished(entries) + without_report(entries)  # where a hang is, what failed (gather.hangs)
    for compare in (_nan_differences, _compile_differences, _memory_differences, _key_sameness):
        findings += compare(answered)
    return joined(findings, program_differences(answered))


# -- reading one report -----------------------------------------------------------------


def _parts(report: JsonDict, kind: str) -> list[JsonDict]:
    """The sub-reports of ``kind`` in a report: itself, or the doctor's sub-report of that probe."""
    if report.get("kind") == kind:
        return [report]
    nested = report.get({"jax_nans": "nans", "jax_compiles": "compiles", "jax_keys": "keys", "jax_live": "live"}[kind])
    return [nested] if isinstance(nested, dict) else []


def _where(line: JsonDict | None) -> str:
    if not line:
        return ""
    place = f"{line.get('label') or line.get('filename')}, line {line.get('lineno')}"
    code = " ".join(str(line.get("code", "")).split())
    return f"{place}: {code}" if code else place


def nan_of(report: JsonDict) -> JsonDict | None:
    """{function, line, call, summary} of the first NaN a report found; None when it found none."""
    for nans in _parts(report, "jax_nans"):
        if nans.get("found"):
            producer = nans.get("producer") or {}
            origin = (nans.get("origin_lines") or [None])[-1] or producer.get("line")
            path = nans.get("call_path") or []
            line = origin or (path[-1] if path else None)
            made_by = nans.get("primitive") or producer.get("primitive") or ""
            return {
                "function": (line or {}).get("function", ""),
                "line": _where(line),
                "call": nans.get("call_number") or None,
                # a report nested in the doctor's carries its fields, not its summary
                "summary": nans.get("summary") or (f"NaN made by `{made_by}`" if made_by else "NaN"),
            }
    sighting = report.get("nan_sighting")
    if isinstance(sighting, dict):
        return {
            "function": sighting.get("function", ""),
            "line": _where(sighting.get("line")),
            "call": sighting.get("call_number"),
            "summary": f"NaN in the results of call {sighting.get('call_number')} of `{sighting.get('function')}`",
        }
    for finding in report.get("findings") or []:  # a %jax_watch log
        if isinstance(finding, dict) and finding.get("area") == "NaN":
            return {
                "function": finding.get("function", ""),
                "line": _where(finding.get("line")),
                "call": finding.get("call"),
                "summary": finding.get("headline") or finding.get("summary", ""),
            }
    return None


def compiled_functions(report: JsonDict) -> dict[str, JsonDict]:
    """Your functions' compilations: name -> {count, types, statics}."""
    out: dict[str, JsonDict] = {}
    for compiles in _parts(report, "jax_compiles"):
        for function in compiles.get("functions") or []:
            if function.get("kind") == "user":
                out[function["name"]] = {
                    "count": function.get("count", 0),
                    "types": function.get("last_argument_types", ""),
                    "statics": function.get("static_values") or {},
                }
    for finding in report.get("findings") or []:  # a %jax_watch log
        if isinstance(finding, dict) and finding.get("area") == "recompilation" and finding.get("function"):
            out.setdefault(finding["function"], {"count": finding.get("count", 0), "types": "", "statics": {}})
    return out


def memory_growth(report: JsonDict) -> int:
    """Arrays the report saw pile up (the doctor's growth, a cell's arrays left behind, a watch finding)."""
    growth = sum(int(v) for v in (report.get("live_growth") or {}).values())
    if report.get("kind") == "jax_live" and report.get("mode") == "cell":
        growth += max(0, int(report.get("total_arrays", 0)) - int(report.get("before_arrays", 0)))
    for finding in report.get("findings") or []:
        if isinstance(finding, dict) and finding.get("area") == "memory":
            growth += max(1, int(finding.get("count", 1)))
    return growth


def key_data(report: JsonDict) -> dict[str, str]:
    """Which key each function argument (or eager draw) got: site -> key data."""
    out = {}
    for keys in _parts(report, "jax_keys"):
        for flow in keys.get("flows") or []:
            data = flow.get("first_key") or flow.get("repeated_key")
            if data:
                out[f"`{flow.get('function')}`({flow.get('argument')})"] = data
        for draw in keys.get("draws") or []:
            if draw.get("repeated_key"):
                out[f"jax.random.{draw.get('api')} at {_where(draw.get('line'))}"] = draw["repeated_key"]
    return out


# -- comparing ------------------------------------------------------------------------


def _split(
    entries: list[ProcessEntry], read: Callable[[JsonDict], Any]
) -> tuple[list[tuple[ProcessEntry, Any]], list[tuple[ProcessEntry, Any]]]:
    values = [(e, read(e.report)) for e in entries]
    return [(e, v) for e, v in values if v], [(e, v) for e, v in values if not v]


def _nan_differences(entries: list[ProcessEntry]) -> list[GatherFinding]:
    with_nan, without = _split(entries, nan_of)
    if not with_nan or len(entries) < 2:
        return []
    some = bool(without)
    functions = sorted({nan["function"] for _e, nan in with_nan if nan["function"]})
    details = grouped(  # per process, grouped by what it says: readable for 1,024 processes
        [
            (e.process, e.name, nan["summary"] + (f" in call {nan['call']}" if nan.get("call") else ""))
            for e, nan in with_nan
        ]
    )
    lines = sorted({nan["line"] for _e, nan in with_nan if nan["line"]})
    return [
        GatherFinding(
            area="NaN",
            processes=[e.process for e, _ in with_nan],
            function=", ".join(functions),
            line=" / ".join(lines),
            details=details,
            summary=(
                f"NaN on {len(with_nan)} of {len(entries)} processes only"
                if some
                else f"NaN on every one of the {len(entries)} processes"
            )
            + (f", made at {lines[0]}" if len(lines) == 1 else ""),
            fix="Only some processes: the code is the same everywhere, so look at those processes' data shard "
            "(the batch each one loaded) at that line."
            if some
            else "",
        )
    ]


def _compile_differences(entries: list[ProcessEntry]) -> list[GatherFinding]:
    if len(entries) < 2:
        return []
    per_process = [(e, compiled_functions(e.report)) for e in entries]
    names = sorted({name for _e, functions in per_process for name in functions})
    findings = []
    for name in names:
        seen = [(e, functions.get(name)) for e, functions in per_process]
        if len({_program_signature(f) for _e, f in seen}) < 2:
            continue
        said = []
        for e, f in seen:
            if f is None:
                said.append((e.process, e.name, "never compiled it"))
                continue
            statics = ", ".join(f"{k}={v[-1] if v else ''}" for k, v in sorted(f["statics"].items()))
            said.append(
                (
                    e.process,
                    e.name,
                    f"{f['count']} compilation(s)"
                    + (f", last for {f['types']}" if f["types"] else "")
                    + (f", static {statics}" if statics else ""),
                )
            )
        details = grouped(said)
        counts = {(f or {}).get("count", 0) for _e, f in seen}
        odd = _odd_ones_out(seen)
        findings.append(
            GatherFinding(
                area="divergence",
                processes=[e.process for e in odd],
                function=name,
                details=details,
                summary=f"`{name}` compiled differently on {who([(e.process, e.name) for e in odd])}"
                + (f" ({' vs '.join(str(c) for c in sorted(counts))} compilations)" if len(counts) > 1 else ""),
                fix="The processes run different programs: a collective (psum, all-gather, a sharded jit) between "
                "them can wait for ever. Give every process the same shapes and static values (pad the last batch, "
                "read configuration once and broadcast it).",
            )
        )
    return findings


def _program_signature(compiled: JsonDict | None) -> tuple[object, object, str]:
    """What must be equal on every process for them to run the same programs of one function."""
    compiled = compiled or {}
    statics = compiled.get("statics") or {}
    return compiled.get("count", 0), compiled.get("types", ""), repr(sorted(statics.items()))


def _odd_ones_out(seen: list[tuple[ProcessEntry, Any]]) -> list[ProcessEntry]:
    """The processes whose value differs from the most common one (all of them when there is no majority)."""
    keys = [_program_signature(f) for _e, f in seen]
    common, count = Counter(keys).most_common(1)[0]  # one pass: linear in processes
    if count * 2 <= len(keys):  # no majority (two processes that differ): name them all
        return [e for e, _f in seen]
    return [e for (e, _f), key in zip(seen, keys) if key != common]


def _memory_differences(entries: list[ProcessEntry]) -> list[GatherFinding]:
    growing, steady = _split(entries, memory_growth)
    if not growing or not steady:
        return []
    return [
        GatherFinding(
            area="memory",
            processes=[e.process for e, _ in growing],
            details=grouped([(e.process, e.name, f"{n} array(s) piled up") for e, n in growing]),
            summary=f"Arrays piling up on {len(growing)} of {len(entries)} processes only",
            fix="Something those processes alone keep (a list of per-step results, a cache filled only on the "
            "process that logs or evaluates) grows: run %jax_live on them to name the holder.",
        )
    ]


def _key_sameness(entries: list[ProcessEntry]) -> list[GatherFinding]:
    if len(entries) < 2:
        return []
    per_process = [key_data(e.report) for e in entries]
    same = [
        site
        for site in sorted(set.intersection(*(set(keys) for keys in per_process)))
        if len({keys[site] for keys in per_process}) == 1
    ]
    if not same:
        return []
    return [
        GatherFinding(
            area="random keys",
            processes=[e.process for e in entries],
            function=", ".join(same),
            details=[f"{site}: key data {per_process[0][site]} on every process" for site in same],
            summary=f"The same random keys on every process ({len(same)} place(s))",
            fix="Every process drew the same numbers (the same dropout mask, the same shuffle). Where each "
            "process should draw its own, fold the process index in: "
            "`key = jax.random.fold_in(key, jax.process_index())`.",
        )
    ]
