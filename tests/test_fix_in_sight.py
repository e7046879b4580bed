"""The fix in sight, for every magic (issue 53): a report that found something (FOUND) or failed
(FAILED) says what to do - or why there is nothing to do - under its headline, outside every fold.

The rule is the model's (``report.document.says_what_to_do``) and is checked here on what users meet:
every magic's contract examples (tests/test_magics_contract.py: a normal cell, a raising one, one that
puts the user's text in the report) and a cell per magic that finds something, each report's
``document()`` and its HTML (the fix line before the first ``<details>``). The executed demo notebooks
are checked the same way by tests/test_notebooks.py (``what_misleads``), and JupyterLab's rendering by
tests/test_browser.py.
"""

from __future__ import annotations

import re

import pytest
from test_magics_contract import EXAMPLES, SETUP, registered_magics
from test_notebooks import fix_in_sight, what_misleads

from jaxmagic.render.shows_itself import static_bundle
from jaxmagic.report import Status
from jaxmagic.report.document import Document, says_what_to_do

# A cell per magic whose contract examples find nothing (or only fail): each finds something. None
# raises an error of its own but the ones whose finding is the error.
FINDING = {
    "jax_nans": "%%jax_nans -o {out}\njnp.log(jnp.array(-1.0))",
    # a global read when jit traced the function, changed since: jit runs the old program (a stale trace)
    "jax_bisect": "SCALE_B = 1.0\ndef stale_b(x):\n    return x * SCALE_B\njitted_b = jax.jit(stale_b)\n"
    "jitted_b(jnp.ones(3))\nSCALE_B = 2.0\n%jax_bisect jitted_b(jnp.ones(3)) -o {out}",
    "jax_hlo": "SCALE_FIX = 2.0\ndef scaled_fix(x):\n    return x * SCALE_FIX\n%jax_hlo scaled_fix(jnp.ones(3)) -o {out}",
    "jax_devices": "jnp.ones(1)\n%jax_devices 4 -o {out}",
    "jax_config": "jax.config.update('jax_log_compiles', True)\ntry:\n    %jax_config -o {out}\nfinally:\n"
    "    jax.config.update('jax_log_compiles', False)",
    "jax_transfers": "%%jax_transfers -o {out}\nimport numpy as np\nfor step_fix in range(3):  # not `_`: IPython keeps a user `_`\n"
    "    jax.jit(f_ok)(np.ones(3, np.float32))",
    "jax_leaks": EXAMPLES["jax_leaks"].evil,
    "jax_keys": EXAMPLES["jax_keys"].evil,
    "jax_debug": EXAMPLES["jax_debug"].evil,
    "jax_watch": EXAMPLES["jax_watch"].evil,
    "jax_live": "%%jax_live -o {out}\nheld_fix = [jnp.ones(3) for _ in range(3)]",
    "jax_check": "def fix_pick(x, i):\n    return x[i]\n%jax_check fix_pick(jnp.ones(3), 5) -o {out}",
}


def cases() -> list[tuple[str, str, str]]:
    found = []
    for magic in registered_magics():
        example = EXAMPLES[magic]
        for case, code in (("ok", example.ok), ("raising", example.raising), ("evil", example.evil)):
            if code is not None:
                found.append((magic, case, code))
        if magic in FINDING:
            found.append((magic, "finding", FINDING[magic]))
    return found


@pytest.fixture(scope="module")
def shell(ip):
    ip.run_cell(SETUP)
    return ip


@pytest.mark.parametrize(("magic", "case", "code"), cases(), ids=[f"{m}-{c}" for m, c, _ in cases()])
def test_a_report_that_found_something_says_what_to_do_outside_every_fold(shell, magic, case, code):
    shell.user_ns.pop("fix_report", None)
    shell.run_cell(code.format(out="fix_report"))
    report = shell.user_ns.get("fix_report")
    if report is None:  # the magic showed no report (e.g. a usage error): nothing to check
        return
    doc = report.document()
    if case == "finding":
        assert doc.status is not Status.OK, f"the finding case of {magic} found nothing: {doc.headline}"
    assert says_what_to_do(doc), f"{doc.title} [{doc.status.word}] offers no fix: {doc.headline}"
    html = static_bundle(doc)["text/html"]
    assert what_misleads(html) == [], doc.headline
    if doc.status in (Status.PROBLEM, Status.ERROR):
        assert fix_in_sight(html), doc.headline
        head = str(report).split("\n\n", 1)[0]  # the headline and the lines under it, before any section
        assert re.search(r"^(Fix|Nothing to fix): ", head, re.M), head


def test_the_rule_and_its_line():
    from jaxmagic.render.html import render_html
    from jaxmagic.render.text import render_text

    silent = Document("%x", Status.PROBLEM, "found it")
    assert not says_what_to_do(silent)
    assert says_what_to_do(Document("%x", Status.OK, "nothing"))
    why = Document("%x", Status.PROBLEM, "found it", nothing_to_do="the jit cache keeps it, by design")
    assert says_what_to_do(why)
    assert fix_in_sight(render_html(why)) and "<b>Nothing to fix:</b>" in render_html(why)
    assert render_text(why).splitlines()[1] == "Nothing to fix: the jit cache keeps it, by design"
    both = Document("%x", Status.PROBLEM, "found it", fix="do this", nothing_to_do="unused")
    assert "<b>Fix:</b> do this" in render_html(both) and "unused" not in render_html(both)


def test_a_report_built_with_each_finding_says_what_to_do():
    """Findings no cell here makes happen at will (XLA's order of unordered prints, copies of a replicated
    value that differ on 8 devices): the reports built with them."""
    from jaxmagic.probes._prints import ObservedCall, OutOfOrder, PrintReport, PrintSite
    from jaxmagic.probes._sharding import CallShardings, LeafSharding, ShardingReport

    prints = PrintReport(sites=[PrintSite(key="a", fmt="a", position=1)], calls=[ObservedCall(1, "f")])
    prints.out_of_order = [OutOfOrder(1, "f", ["b", "a"], ["a", "b"])]
    moved = LeafSharding("params['w']", "float32[16,4]", "P()", given="single device CPU 0", matches=False)
    sharding = ShardingReport(expression="step(params, x)", call=CallShardings("step", True, inputs=[moved]))
    for report in (prints, sharding):
        doc = report.document()
        assert doc.status is Status.PROBLEM and says_what_to_do(doc), type(report).__name__
        assert fix_in_sight(static_bundle(doc)["text/html"]), type(report).__name__
    assert "ordered=True" in prints.document().fix
    assert "jax.device_put" in sharding.document().fix
