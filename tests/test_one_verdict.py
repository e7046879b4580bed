"""One answer to "what is the verdict of this report": derived from what the report found, never set beside it.

Every report lists what it tells (``concerns()``: to act on, an unexplained failure, notes) and the
model derives its status from that list alone (``jaxmagic.report.status_of``), so a report whose
table tells the user to act cannot say OK. The sharding case is the shape of real threads:
replicated parameters left on one device and copied to every device of the mesh at each call
(google/flax#2900: a pjit train step whose params were never `device_put` onto their sharding;
jax-ml/jax#28372 review: "Don't you need to device_put the params onto replicated sharding?").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jaxmagic.probes  # noqa: F401 - imports every probe, so every report class is defined
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Report as ReportModel
from jaxmagic.report import Severity, SourceLine, Status, act, failed, note, status_of
from jaxmagic.report.document import says_what_to_do

ROOT = Path(__file__).resolve().parent.parent


def every_report_class() -> list[type]:
    found, todo = [], [ReportModel]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return [cls for cls in found if cls.__module__.startswith("jaxmagic.")]


def test_no_report_class_sets_its_status_beside_its_findings():
    classes = every_report_class()
    assert len(classes) >= 20  # every probe's report, the doctor's and the watch's
    setting = [cls.__qualname__ for cls in classes if "status" in vars(cls)]
    assert setting == [], f"these reports set a status instead of listing concerns(): {setting}"
    missing = [cls.__qualname__ for cls in classes if cls is not Report and "concerns" not in vars(cls)]
    assert missing == [], f"these reports list no concerns(): {missing}"


def test_the_one_rule_act_before_failed_and_notes_never_count():
    assert status_of([]) is Status.OK
    assert status_of([note("compiled once, on purpose")]) is Status.OK
    assert status_of([failed("ValueError: x"), note("n")]) is Status.ERROR
    assert status_of([failed("ValueError: x"), act("a NaN at line 3")]) is Status.PROBLEM


def test_reports_with_a_finding_are_not_ok_and_say_why_in_to_dict():
    from jaxmagic.probes._compiles import CompileReport
    from jaxmagic.probes._doctor import DoctorReport, Finding
    from jaxmagic.probes._keys import KeyReport
    from jaxmagic.probes._leaks import LeakReport
    from jaxmagic.probes._nans import NanReport
    from jaxmagic.probes._sharding import CallShardings, LeafSharding, ShardingReport
    from jaxmagic.probes._transfers import Transfer, TransferReport
    from jaxmagic.probes._watch import WatchFinding, WatchLog

    line = SourceLine("<cell>", 3, "<module>", "y = step(params, x)")
    moved = LeafSharding("params['w']", "float32[16,4]", "P()", given="single device CPU 0", matches=False)
    found = [
        TransferReport(total=4, transfers=[Transfer("host-to-device", "f32[8]", line, count=4)]),
        DoctorReport(findings=[Finding("transfers", 4, "implicit transfers", "`step` was given a NumPy array")]),
        ShardingReport(expression="step(params, x)", call=CallShardings("step", True, inputs=[moved])),
        NanReport(found=True, primitive="log"),
        WatchLog(findings=[WatchFinding(cell="In [3]", area="NaN", headline="NaN in `step`")]),
    ]
    for report in found:
        data = report.to_dict()
        assert data["status"] == "problem", type(report).__name__
        assert says_what_to_do(report.document()), type(report).__name__  # under the headline (issue 53)
        assert any(c["severity"] == Severity.ACT.value for c in data["concerns"]), type(report).__name__
    # ... and without one, OK - or FAILED when the cell failed unexplained
    for report in (TransferReport(), CompileReport(), KeyReport(), LeakReport(), DoctorReport(checked=["nans"])):
        assert report.to_dict()["status"] == "ok" and report.concerns() == [], type(report).__name__
    assert TransferReport(other_error="ValueError: bad").status is Status.ERROR
    # a call that failed moved nothing: its compiled-layout table is not a finding
    failed_call = ShardingReport(call=CallShardings("step", True, inputs=[moved]), failure="ValueError: layout")
    assert failed_call.status is Status.ERROR


def test_sharding_headline_is_not_ok_when_its_table_says_parameters_are_copied_at_every_call():
    # Replicated parameters left on one device (jax.device_put without a sharding) given to a jit
    # compiled for them replicated on an 8-device mesh: copied to the 8 devices at each call.
    script = textwrap.dedent(
        """
        import json, jax, jax.numpy as jnp
        from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
        from jaxmagic import probes
        mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
        params = jax.device_put({"w": jnp.ones((16, 4)), "b": jnp.zeros(4)})
        x = jax.device_put(jnp.ones((64, 16)), NamedSharding(mesh, P("data")))
        replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        step = jax.jit(lambda p, x: x @ p["w"] + p["b"], in_shardings=(replicated, rows))
        moved = probes.sharding_of_call(step, (params, x), call_text="step(params, x)")
        placed = jax.device_put(params, replicated)
        fine = probes.sharding_of_call(step, (placed, x), call_text="step(placed, x)")
        print(json.dumps({"moved": moved.to_dict(), "moved_text": str(moved), "fine": fine.to_dict()}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    moved = out["moved"]
    assert [leaf["path"] for leaf in moved["call"]["inputs"] if leaf["matches"] is False] == [
        "params['b']",
        "params['w']",
    ]
    assert moved["status"] == "problem" and "[FOUND]" in out["moved_text"].splitlines()[0]
    assert "`params['b']` arrives as single device CPU 0" in moved["summary"]
    assert "at every call" in moved["summary"] and "(and 1 more argument(s))" in moved["summary"]
    assert [c["severity"] for c in moved["concerns"]] == ["act", "act"]
    # placed once with its sharding: nothing moves, and the same table says OK
    assert out["fine"]["status"] == "ok" and out["fine"]["concerns"] == []
