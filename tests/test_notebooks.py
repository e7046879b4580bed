"""Every demo notebook runs headless in the project's kernel without a cell error,
and shows at least one jaxmagic report as static HTML, with no widget view beside it but an
explorer's, right after its static run-this-cell line (a saved notebook must not depend on a widget
model: see jaxmagic/ipython/show_report.py and jaxmagic/ipython/explorers/shown.py).

A notebook is executed once per CI run: when ``make demo`` has left an executed copy under
build/notebooks/ whose stamp proves it ran from exactly the current inputs (the notebook, the
package, the helpers, the pinned environment: see tools/run_notebooks.py) and passed, the test
checks that copy; otherwise (a fresh clone, any edit since) it executes the notebook itself.
Set JAXMAGIC_EXECUTE_NOTEBOOKS=1 to always execute. The terminal summary says which it did.
"""

from __future__ import annotations

import ast
import html
import os
import re

import nbformat
import pytest
from run_notebooks import demo_notebooks, execute_notebook, reusable_run

from jaxmagic.report.document import fits_headline

NOTEBOOKS = demo_notebooks()
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_there_are_demo_notebooks():
    assert NOTEBOOKS, "demo_notebooks/ holds no numbered notebooks"


def executed(path, tmp_path):
    """The run to check: ``make demo``'s when its stamp holds, else a new one; and how it was obtained."""
    if os.environ.get("JAXMAGIC_EXECUTE_NOTEBOOKS") != "1":
        run, why = reusable_run(path)
        if run is not None:
            return run, why
    else:
        why = "JAXMAGIC_EXECUTE_NOTEBOOKS=1"
    run = execute_notebook(path, build_dir=tmp_path)
    return run, f"executed ({why}) in {run.seconds:.0f} s"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_shows_reports(path, tmp_path, record_property):
    run, how = executed(path, tmp_path)
    record_property("notebook_run", f"{path.name}: {how}")
    assert run.passed, run.error[-4000:]

    nb = nbformat.read(run.output_path, as_version=4)
    source = nbformat.read(path, as_version=4)
    assert [c.source for c in nb.cells] == [c.source for c in source.cells], "the executed copy has other cells"
    html_reports = [
        output["data"]["text/html"]
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "text/html" in output.get("data", {}) and 'class="jaxmagic"' in output["data"]["text/html"]
    ]
    assert html_reports, "no jaxmagic report in the notebook's HTML outputs"
    problems = [problem for report in html_reports for problem in what_misleads(report)]
    assert not problems, problems
    # A widget view does not survive saving without widget state: only an explorer's (--explore, --panel) may
    # be there, right after its static line saying how to explore again (what a saved notebook shows of it).
    unexplained = [
        output
        for cell in nb.cells
        for before, output in zip([None, *cell.get("outputs", [])], cell.get("outputs", []))
        if WIDGET_VIEW in output.get("data", {})
        and "while the kernel that drew it runs" not in ((before or {}).get("data", {}).get("text/plain", ""))
    ]
    assert not unexplained, "a widget view in the outputs: it would not survive saving without widget state"


_HEADLINE = re.compile(r'class="jm-headline"[^>]*>(.*?)</div>', re.S)
_CODE = re.compile(r"<code[^>]*>(.*?)</code>", re.S)
_SUMMARY = re.compile(r"<summary[^>]*>(.*?)</summary>", re.S)


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _cut_from_a_line(code: str) -> bool:
    """A quoted fragment that is a piece of a line cut at the wrong columns (`ax.jit(lam`, `bda x:`, `.jit(lambd`):
    brackets left open or closed, or a start or end no expression has. Values and names a report quotes
    (`<lambda>`, `2.0:f32[]`, `hogs[0..19]`, `if`) are not code, and are not cuts."""
    text = code.strip()
    if not text or text.startswith("%") or re.fullmatch(r"<[\w.]+>", text):  # a magic's name, `<lambda>`
        return False
    for opening, closing in ("()", "[]", "{}"):
        if text.count(opening) != text.count(closing):
            return True
    if text.startswith((".", ",", ")", "]", "=")) or text.endswith((":", "(", "[", "=")):
        return True
    try:  # a cut of a call or a lambda that happens to balance: still a piece of code that does not parse
        ast.parse(text)
    except SyntaxError:
        return bool(re.search(r"\blambda\b|\bdef\b", text))
    return False


def fix_in_sight(html: str) -> bool:
    """Whether the report's HTML draws its fix line (``jm-fix``) before any fold."""
    fix = html.find('class="jm-fix"')
    fold = html.find("<details")
    return fix >= 0 and (fold < 0 or fix < fold)


_BADGE = re.compile(r'class="jm-badge"[^>]*>(\w+)<')
# "1 lines", "1 compilations": a count of one with a plural noun (not "1 process", "1 class", "1 bias")
_ONE_PLURAL = re.compile(r"(?<![\d.,\w])1 ([a-z]{2,}[^su\W]s)\b")


def what_misleads(report_html: str) -> list[str]:
    """What a user would read wrong first in a report (issues 45, 53): a code fragment of the headline that
    is not code (a line cut at the wrong columns: `ax.jit(lam`), raw Markdown backticks in a fold's title,
    a FOUND or FAILED report that says what to do only inside a fold (or not at all), a headline longer than
    two lines, a count of one with a plural noun."""
    problems = []
    badge = _BADGE.search(report_html)
    if badge and badge.group(1) in ("FOUND", "FAILED") and not fix_in_sight(report_html):
        problems.append(f"a {badge.group(1)} report says what to do only inside a fold, or not at all")
    for headline in map(_text, _HEADLINE.findall(report_html)):
        if not fits_headline(headline):
            problems.append(f"a headline of {len(headline)} characters (more than two lines): {headline[:160]}")
    for slip in _ONE_PLURAL.findall(_text(report_html)):
        problems.append(f"a count of one with a plural noun: 1 {slip}")
    for headline in _HEADLINE.findall(report_html):
        for code in map(_text, _CODE.findall(headline)):
            if _cut_from_a_line(code):
                problems.append(f"headline quotes `{code}`, cut from a line: {_text(headline)[:160]}")
    for summary in map(_text, _SUMMARY.findall(report_html)):
        if "`" in summary:
            problems.append(f"a fold title shows Markdown backticks: {summary[:120]}")
    return problems
