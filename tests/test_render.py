"""Renderers draw any Document: HTML escapes, text and rich agree on the content."""

from __future__ import annotations

from jaxmagic.render.html import render_html
from jaxmagic.render.terminal import print_rich
from jaxmagic.render.text import render_text
from jaxmagic.report import SourceLine, Status
from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, SourceLines, Table

DOC = Document(
    "%%jax_demo",
    Status.PROBLEM,
    "NaN produced by `log` <b>here</b>.",
    [
        Section("What", [Facts([("primitive", "log")])]),
        Section("Your line", [SourceLines([SourceLine("cell.py", 3, "f", "return jnp.log(x) # <i>", "In [2]")])]),
        Section("Leaves", [Table(["leaf", "NaNs"], [["`grads['b']`", "2"]])]),
        Section("Why", [Paragraph("a & b")]),
        Section("", [Evidence("JAX's messages (1 lines)", "invalid value <nan>")]),
    ],
)


def test_html_escapes_and_marks_code():
    html = render_html(DOC)
    assert "&lt;b&gt;here&lt;/b&gt;" in html and "<b>here" not in html
    assert "<code>log</code>" in html and "<code>grads[&#x27;b&#x27;]</code>" in html
    assert "# &lt;i&gt;" in html and "a &amp; b" in html and "invalid value &lt;nan&gt;" in html
    assert "In [2], line 3, in f" in html


def test_text_and_rich_show_the_same_facts(capsys):
    text = render_text(DOC)
    assert text.startswith("%%jax_demo [FOUND] NaN produced by `log` <b>here</b>.")
    assert "grads['b']  2" in text and "`grads" not in text
    assert print_rich(DOC) is True
    rich_out = capsys.readouterr().out
    for fragment in ("%%jax_demo", "FOUND", "primitive", "return jnp.log(x)", "grads['b']"):
        assert fragment in rich_out
