"""Each kind of key finding is declared once (``keys/findings.py``: its fields, headline, short words, fix and
the ``KeyFinding`` it makes), and the findings module does not import the report (no import circle)."""

from __future__ import annotations

import ast
from pathlib import Path

from jaxmagic.probes._keys import findings
from jaxmagic.probes._keys import report as report_module
from jaxmagic.report import SourceLine


def _line(lineno: int) -> SourceLine:
    return SourceLine("<cell>", lineno, "step", "key = draw(key)")


def test_the_findings_module_does_not_import_the_report():
    tree = ast.parse(Path(findings.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "jaxmagic.probes._keys.report" not in imported


def test_every_kind_makes_its_finding_in_the_order_told():
    report = report_module.KeyReport(
        reuse=[findings.KeyReuse("reused", consumer="random_bits", reused_at=_line(2))],
        flows=[findings.KeyFlow("step", "key", calls=3, distinct=1, repeated_times=3)],
        shared=[findings.SharedKeyDraw("noisy", "jax.random.normal", _line(4), key="key", calls=2)],
        loop_draws=[findings.LoopKeyDraw("body", "jax.random.bernoulli", _line(5), loop="scan", calls=1)],
        constant_draws=[findings.ConstantKeyDraw("fixed", "jax.random.uniform", _line(6), calls=2)],
        draws=[findings.RepeatedDraw("permutation", _line(7), calls=2, distinct=1, repeated_times=2)],
    )
    found = report_module.key_findings(report)
    # the repeated eager draw is told by the flow when there is one: not again
    assert [f.identity[0] for f in found] == ["reuse", "flow", "same numbers", "same numbers", "same numbers"]
    kinds = [*report.reuse, *report.repeated_flows, *report.same_numbers_draws]
    assert [f.headline for f in found] == [k.finding().headline for k in kinds]
    assert [c.text for c in report.concerns()][:2] == ["key reused by `random_bits`", "`step` got the same key"]
    assert all(f.fix for f in found)
    report.flows = []
    assert [f.identity[0] for f in report_module.key_findings(report)][1] == "draw"
