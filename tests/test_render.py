"""Renderers draw any Document: HTML escapes and stands alone, text and rich agree and wrap."""

from __future__ import annotations

import io
import re

import pytest

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

# A compile table as %%jax_compiles makes it: long call signatures, an option, a long cause.
WIDE = Document(
    "%%jax_compiles",
    Status.PROBLEM,
    "train_step compiled 3 times: argument types changed.",
    [
        Section(
            "Each compilation",
            [
                Table(
                    ["#", "function", "your line", "cause", "what changed", "trace / lower / XLA compile"],
                    [
                        [
                            "1",
                            "`jit(<lambda>)(float32[64,128], {'b': float32[128], 'w': float32[128,128]})`",
                            "In [4]:2 `loss = step(params, batch)`",
                            "first compilation",
                            "-",
                            "20.1 / 3.2 / 140.7 ms",
                        ],
                        [
                            "2",
                            "`jit(<lambda>)(float32[32,128], {'b': float32[128], 'w': float32[128,128]})`",
                            "In [4]:2 `loss = step(params, batch)`",
                            "argument types changed",
                            "batch: f32[64,128] -> f32[32,128] (shape); fix with --budget 1 --fn train_step",
                            "6.4 / 2.2 / 74.5 ms",
                        ],
                    ],
                )
            ],
        )
    ],
)


def test_html_escapes_and_marks_code():
    html = render_html(DOC)
    assert "&lt;b&gt;here&lt;/b&gt;" in html and "<b>here" not in html
    assert re.search(r"<code [^>]*>log</code>", html) and re.search(r"<code [^>]*>grads\[&#x27;b&#x27;\]</code>", html)
    assert "# &lt;i&gt;" in html and "a &amp; b" in html and "invalid value &lt;nan&gt;" in html
    assert "In [2], line 3, in f" in html


def test_html_stands_alone():
    """No <style> (JupyterLab removes it from untrusted output), no script, nothing fetched."""
    html = render_html(DOC)
    assert html.startswith('<div class="jaxmagic" style="')
    for absent in ("<style", "<script", "<link", "src=", "url(", "@import", "--jm-"):
        assert absent not in html
    # Every element that shows text carries its own style, so JupyterLab's CSS cannot undo it.
    for tag in ("td", "th", "table", "p", "code", "summary", "pre"):
        bare = re.findall(rf"<{tag}>", html)
        assert bare == [], f"<{tag}> without an inline style"
    assert "text-align:left" in html  # JupyterLab right-aligns table cells (<td>): tables here are <div>s
    assert "<td" not in html and "<table" not in html


def test_html_sections_collapse_without_javascript():
    html = render_html(DOC)
    titles = re.findall(r'<details class="jm-section"( open)? [^>]*><summary [^>]*>([^<]*)</summary>', html)
    assert [t for _, t in titles] == ["What", "Your line", "Leaves", "Why"]  # the untitled section is not collapsible
    assert all(opened for opened, _ in titles), "a short report opens every section"
    long = Document("t", Status.OK, "h", [Section(f"S{i}", [Table(["a"], [["1"]] * 10)]) for i in range(3)])
    opened = re.findall(r'<details class="jm-section"( open)?', render_html(long))
    assert opened == [" open", "", ""], "a long report opens its first section only"


def test_html_colours_follow_the_theme_with_fallbacks_the_sanitizer_keeps():
    html = render_html(DOC)
    card = re.match(r'<div class="jaxmagic" style="([^"]*)"', html).group(1)
    assert "background:var(--jp-layout-color1,var(--vscode-editor-background,#fff))" in card
    assert "color:var(--jp-content-font-color1,var(--vscode-editor-foreground,#1f2328))" in card
    # The sanitizer drops a declaration holding var(): each themed tint follows one it keeps.
    assert "background:rgba(128,128,128,.12);background:var(--jp-layout-color2,#f6f8fa)" in html
    assert "border-left:5px solid #cf222e;border-left-color:var(--jp-error-color1,#cf222e)" in card


def test_html_long_tokens_wrap_between_tokens_in_prose_and_options_stay_whole():
    prose = render_html(Document("t", Status.OK, "h", [Section("S", [Paragraph(WIDE_CALL)])]))
    assert "jit(<wbr>&lt;lambda&gt;<wbr>)(<wbr>float32[<wbr>64,<wbr>128],<wbr>" in prose
    html = render_html(WIDE)
    facts = render_html(
        Document("t", Status.OK, "h", [Section("S", [Facts([("fix", "%%jax_compiles --budget 1 --fn f")])])])
    )
    for options in (html, facts):  # browsers break after the second of two hyphens: options stay whole
        assert (
            '<span style="white-space:nowrap">--budget</span> 1 <span style="white-space:nowrap">--fn</span>' in options
        )
    assert '<span style="white-space:nowrap">-&gt;</span>' in html
    assert "%reset -f out" in render_html(Document("t", Status.OK, "`%reset -f out`", []))  # one hyphen: no break


WIDE_CALL = "jit(<lambda>)(float32[64,128], {'b': float32[128], 'w': float32[128,128]})"
# A word (a run without spaces) inside a table cell's HTML: what a browser could break inside.
_WORD_IN_CELL = re.compile(r'class="jm-td"[^>]*>(.*?)</div>')


def test_table_cells_break_at_spaces_only():
    """Issue 61: "fu nct ion", "floa t32 [8,4 ]", "f32[2048,5 12]" at 900 px. A cell holds no <wbr>, no
    overflow-wrap:anywhere, and every word a browser could break inside (a bracket, a hyphen, a slash) is on
    one line: the cell's code, or a span, says white-space:nowrap."""
    rows = [
        ["function", "sgd", "float32[8,4]", "donated argument"],
        ["`f32[2048,512]`", "`jit(f)(float32[4])`", "a-b c/d e", "`x = step(params, batch)`"],
    ]
    html = render_html(Document("t", Status.OK, "h", [Section("S", [Table(["a", "b", "c", "d"], rows), WIDE_TABLE])]))
    assert "<wbr>" not in html and "anywhere" not in html
    cells = _WORD_IN_CELL.findall(html)
    assert len(cells) == 8 + 12
    for cell in cells:
        text = re.sub(r"<(code|span) style=\"[^\"]*white-space:nowrap[^\"]*\">[^<]*</\1>", "", cell)
        text = re.sub(r"</?code[^>]*>", "", text)
        assert not [w for w in text.split() if re.search(r"[^\w.]", html_text(w)) and len(html_text(w)) > 1], cell


def test_a_short_tuple_in_a_table_cell_is_one_token():
    """A closure-captures table broke "(128," / "128)" at 900 px: cells break at spaces, and a tuple has one
    after each comma. A short bracketed group whose only spaces follow commas is kept on one line; a long
    one (a call's many arguments) still wraps after its commas, each word whole."""
    from jaxmagic.render.html_inline import whole_words_html

    assert whole_words_html("shape (128, 128) captured") == (
        'shape <span style="white-space:nowrap">(128, 128)</span> captured'
    )
    assert '<span style="white-space:nowrap">x[0, 2]</span>' in whole_words_html("x[0, 2] read")
    long = whole_words_html("(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)")
    assert long.count("white-space:nowrap") == 11 and "(1," in long  # wraps between its items
    assert "(line</span> " in whole_words_html("(line 124)")  # words in brackets are still words


def html_text(fragment: str) -> str:
    import html as html_module

    return html_module.unescape(re.sub(r"<[^>]+>", "", fragment))


WIDE_TABLE = WIDE.sections[0].blocks[0]


def test_text_and_rich_show_the_same_facts(capsys):
    text = render_text(DOC)
    assert text.startswith("%%jax_demo [FOUND] NaN produced by `log` <b>here</b>.")
    assert "grads['b']  2" in text and "`grads" not in text
    assert print_rich(DOC) is True
    rich_out = capsys.readouterr().out
    for fragment in ("%%jax_demo", "FOUND", "primitive", "return jnp.log(x)", "grads['b']"):
        assert fragment in rich_out


def test_text_keeps_a_table_s_columns_side_by_side_when_each_fits_at_its_longest_word():
    text = render_text(WIDE, width=100)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, "\n".join(line for line in lines if len(line) > 100)
    assert "…" not in text
    # Read the columns back from the rule under the header: each cell's text is all there, no word broken.
    rule_index = next(i for i, line in enumerate(lines) if set(line.strip()) <= {"-", " "} and "--" in line)
    spans = [m.span() for m in re.finditer(r"-+", lines[rule_index])]
    body = lines[rule_index + 1 :]
    columns = [" ".join(line[a:b].strip() for line in body) for a, b in spans]
    for row in WIDE_TABLE.rows:
        for column, cell in zip(columns, row):
            assert " ".join(cell.replace("`", "").split()) in " ".join(column.split()), cell
    assert not any(re.search(r"(^|\s)--$", line.rstrip()) for line in lines)  # never "--" / "budget 1"


@pytest.mark.parametrize("width", [40, 60, 80])
def test_text_stacks_a_table_too_wide_for_the_line_and_breaks_no_word(width):
    """Issue 61: a table whose columns cannot sit side by side at their longest words is stacked, each row as
    `label  value` lines; no word (a shape, a name, a number) is split across lines."""
    text = render_text(WIDE, width=width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    words = set(text.split())
    for row in WIDE_TABLE.rows:
        for cell in row:
            for word in cell.replace("`", "").split():
                assert word in words, (word, width)
    assert "jit(<lambda>)(float32[64,128]," in words and "f32[64,128]" in words


def test_text_knows_the_terminal_s_width(monkeypatch):
    import os
    import shutil
    import sys

    from jaxmagic.render import text as text_module

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Tty())
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(100, 24): os.terminal_size((52, 24)))
    assert text_module.text_width() == 52
    assert max(len(line) for line in render_text(WIDE).splitlines()) <= 52
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a kernel's stream: no terminal, the default
    assert text_module.text_width() == text_module.DEFAULT_WIDTH


@pytest.mark.parametrize("width", [80, 100])
def test_rich_wraps_long_cells_at_the_width(width):
    from rich.console import Console

    out = io.StringIO()
    print_rich(WIDE, console=Console(file=out, width=width, color_system=None))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    words = set(re.sub(r"[│┃╭╮╰╯─━╇]+", " ", text).split())
    for word in ("compilation", "changed", "74.5", "--budget", "--fn", "train_step"):
        assert word in words, word
    assert not any(re.search(r"(^|\s)--$", line.rstrip(" │")) for line in text.splitlines())


@pytest.mark.parametrize("width", [1, 2, 4])
def test_a_line_no_wider_than_its_indent_still_wraps(width):
    from jaxmagic.render.text import wrap

    lines = wrap("a_very_long_identifier and more words", width, subsequent_indent="    ")
    assert "".join(line.strip() for line in lines).replace(" ", "") == "a_very_long_identifierandmorewords"
    assert all(len(line) <= width for line in lines)


def test_a_one_row_device_grid_wraps_its_tiles_instead_of_a_fixed_width_wider_than_the_card():
    import re

    from jaxmagic.report.document import Grid, GridCell

    cells = [GridCell(0, i, f"device {i}", detail=f"loss = {i}.123456") for i in range(16)]
    strip = render_html(Document("%%jax_per_device", Status.OK, "h", [Section("s", [Grid(1, 16, cells, wrap=True)])]))
    widths = [int(w) for w in re.findall(r"[^-]width:(\d+)px", strip)]
    assert "flex-wrap:wrap" in strip and max(widths) < 300, widths  # each tile is small; the row wraps
    assert all(f"device {i}" in strip for i in range(16))
    mesh = render_html(Document("%%jax_sharding", Status.OK, "h", [Section("s", [Grid(1, 16, cells)])]))
    assert "jm-tiles" not in mesh and "jm-tiles" in strip  # a layout keeps its columns


def test_columns_of_measurements_are_right_aligned_and_others_left():
    from jaxmagic.report.document import Table

    table = Table(["line", "time", "share"], [["In [1]:4", "12.3 ms", "45%"], ["In [1]:5", "1,234.0 ms", "-"]])
    html = render_html(Document("%%jax_profile", Status.OK, "h", [Section("s", [table])]))
    cells = re.findall(r'class="jm-td" role="cell" style="[^"]*">(.*?)</div>', html)
    right = {html_text(text) for text in cells if "text-align:right" in text}
    assert right == {"12.3 ms", "45%", "1,234.0 ms", "-"}


def test_text_never_runs_past_the_width_yet_keeps_every_character_of_quoted_logs_and_code():
    log = "WARNING:jax._src.interpreters.pxla:Compiling jit(train_step) with global shapes and types " + ", ".join(
        f"ShapedArray(float32[{i},128])" for i in range(30)
    )
    code = "loss = " + " + ".join(f"jnp.sum(params['layer_{i}']['kernel'] ** 2)" for i in range(8))
    doc = Document(
        "%%jax_compiles",
        Status.PROBLEM,
        "h",
        [Section("s", [Evidence("JAX's log", log), SourceLines([SourceLine("<cell>", 3, "f", code, "In [3]")])])],
    )
    text = render_text(doc)
    assert max(len(line) for line in text.splitlines()) <= 100
    squeezed = re.sub(r"\s|\|", "", text)
    assert re.sub(r"\s", "", log) in squeezed and re.sub(r"\s", "", code) in squeezed


def test_the_fast_wrap_of_plain_spaced_text_gives_textwrap_s_lines():
    """Text with no whitespace but spaces is wrapped without textwrap (reports wrap hundreds of cells):
    the lines must be textwrap's own, runs of spaces and words longer than the line included."""
    import random
    import textwrap

    from jaxmagic.render.text import _greedy_lines

    rng = random.Random(0)
    words = ["a", "bb", "ccc", "--budget", "x" * 15, "jit(step)(float32[64,128])", "y" * 40]
    for _ in range(3000):
        text = "".join(rng.choice(words) + " " * rng.choice([1, 1, 2, 3]) for _ in range(rng.randint(1, 20))).strip()
        width = rng.randint(1, 60)
        indent = rng.choice([indent for indent in ("", "  ", "    ") if len(indent) < width])
        expected = textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)
        assert _greedy_lines(text, width, indent) == expected, (text, width, indent)


def _luminance(colour: str) -> float:
    channels = [int(colour.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    light, dark = sorted([_luminance(a), _luminance(b)], reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_grid_labels_are_readable_on_every_palette_colour():
    """WCAG's 4.5:1 for the label and second line of every grid cell, the alert's red label included
    (issue 45: #b3261e on #a6cee3 was 3.9:1)."""
    import re

    from jaxmagic.probes._sharding.sharding_layout import PALETTE
    from jaxmagic.render.html import render_html
    from jaxmagic.report import Status
    from jaxmagic.report.document import Document, Grid, GridCell, Section

    for style in ("", "alert"):
        for background in PALETTE:
            cell = GridCell(0, 0, "TPU 0", detail="f32[4,8]", colour=background, style=style)
            page = render_html(Document("t", Status.OK, "h", [Section("", [Grid(1, 1, [cell])])]))
            colours = re.findall(
                r"<b style=\"[^\"]*color:(#[0-9a-f]{6})|<span style=\"[^\"]*color:(#[0-9a-f]{6})", page
            )
            text_colours = [c for pair in colours for c in pair if c] or ["#1f2328"]
            for text in text_colours:
                assert _contrast(text, background) >= 4.5, (style, text, background)


def test_the_fix_is_read_under_the_headline_outside_every_fold():
    """Issue 45: a FOUND report shows what, where and what to do at a glance - its (tried) fix is not
    inside a closed <details>, in HTML, in text and in a terminal."""
    from jaxmagic.render.html import render_html
    from jaxmagic.render.text import render_text
    from jaxmagic.report import Status
    from jaxmagic.report.document import Document, Paragraph, Section

    sections = [Section(f"part {i}", [Paragraph("x " * 40)] * 6) for i in range(6)]  # long: only the first is open
    doc = Document("%%jax_nans", Status.PROBLEM, "NaN made by `log`", sections, fix="use `jnp.log(v + 1e-6)` (tried)")
    page = render_html(doc)
    assert page.index('class="jm-fix"') < page.index("<details")
    assert "<code" in page[page.index('class="jm-fix"') : page.index("<details")]
    assert render_text(doc).splitlines()[1].startswith("Fix: use `jnp.log(v + 1e-6)`")


def test_a_nan_report_offers_its_tried_fix_at_a_glance(ip):
    ip.run_cell(
        "%%jax_nans -o glance_report\n@jax.jit\ndef glance_f(x):\n    return jnp.log(x - 3)\nglance_f(jnp.ones(3))\n"
    )
    doc = ip.user_ns["glance_report"].document()
    assert "jnp.maximum" in doc.fix and "Tried on the values" in doc.fix
    assert not any(doc.fix in str(section) for section in doc.sections)  # said once, not again in "Why"


@pytest.mark.parametrize(
    "code",
    [
        "optax.softmax_cross_entropy(logits, labels)",
        "jnp.log(jnp.maximum(v, jnp.finfo(v.dtype).tiny))",
        "x.astype(jnp.float32)",
        "layer_with_a_long_name(params['w_hidden_projection'])",
    ],
)
def test_code_never_breaks_inside_a_name(code):
    """Issue 53: `optax.softmax_|cross_entropy`, `jnp.|float32`, `finfo(v.dtype).|tiny` read as two things. HTML
    gives break points between tokens only, and text breaks inside a name only when the name alone is wider
    than the line."""
    from jaxmagic.render.html import breakable_html, inline_html
    from jaxmagic.render.text import wrap

    for page in (breakable_html(code), inline_html(f"use `{code}` here")):
        assert not re.search(r"[\w.]<wbr>\w|\w<wbr>[\w.]", page.replace("&#x27;", "'")), page
    names = set(re.findall(r"[\w.]+", code))
    for width in range(24, 60):
        for line in wrap(f"Fix: use {code} instead", width):
            for part in re.findall(r"[\w.]+", line.strip()):
                assert (
                    part in names
                    or any(part in name for name in names if len(name) > width)
                    or not any(part != name and part in name for name in names)
                ), (width, line)


def test_a_table_lines_up_its_columns_when_it_fits_and_stacks_its_rows_when_it_does_not():
    """Issue 61 (after 53): the width the output area really has decides, in CSS - each cell's basis is its
    column's narrowest width while the table fits (the same in every row and the header, so the columns line up),
    and the row's width less its label's when it does not; the header's height and the labels' width switch on
    the same threshold. The sanitized fallback (no calc) is the table at its narrowest width, scrolling."""
    from jaxmagic.render.html_tables import column_floors

    columns = ["#", "function", "your line", "cause: what changed", "argument types", "trace / lower / XLA compile"]
    rows = [
        ["1", "`convert_element_type`", "In [3]:3 `w5 = jnp.ones((64, 64))`", "eager operation", "f32[]", "1.3 / 0.7"],
        ["2", "`mlp_step`", "In [3]:6 `mlp_step_jit(w5, x)`", "argument types changed", "f32[16,64]", "4.7 / 8.5"],
    ]
    table = Table(columns, rows)
    html = render_html(Document("t", Status.PROBLEM, "h", [Section("S", [table])]))
    floors = column_floors(table)
    threshold = sum(floors)
    assert floors[1] >= len("convert_element_type") * 7 and floors[5] >= len(columns[5]) * 7  # word; whole header
    body = html[html.index('class="jm-table"') :]
    assert f"min-width:{threshold}px;min-width:calc(0px)" in body  # sanitized: scrolls at its narrowest width
    bases = [re.findall(r'class="jm-t[dh]"[^>]*style="flex:(\d+ 1 \d+)px', row) for row in body.split('role="row"')[1:]]
    assert len(bases) == 3 and bases[0] == bases[1] == bases[2] and len(bases[0]) == 6  # header and rows alike
    assert [int(b.split()[-1]) for b in bases[0]] == floors
    assert body.count(f"calc(({threshold - 0.5:.1f}px - 100%) * 999)") >= 3 * 6  # labels and bases, every row
    assert body.count('class="jm-label"') == 12 and body.count('class="jm-th"') == 6


def test_one_arrow_style_in_every_report():
    """Issue 61: "1 MiB -> 16 MiB, temporaries 256 B → 4 KiB" mixed two arrows in one headline. Reports write
    "->" (the HTML keeps it whole, the text renderer never breaks it): no source of jaxmagic writes another."""
    from pathlib import Path

    import jaxmagic

    package = Path(jaxmagic.__file__).parent
    mixed = [
        f"{path.relative_to(package)}:{number}"
        for path in package.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "\u2192" in line or "\\u2192" in line or "&rarr;" in line and "dim" not in line
    ]
    assert mixed == [], f"another arrow than -> in: {mixed}"


def test_a_number_with_a_negative_exponent_is_never_split_at_its_hyphen():
    """A headline said "jit 2.11e-" at the end of one line and "07" at the start of the next (a 900 px
    notebook): a browser breaks after a hyphen. Such a number is kept whole; words around it still wrap."""
    from jaxmagic.render.html import breakable_html, inline_html

    text = 'Run again under `jax.default_matmul_precision("highest")` on this TPU: jit 2.11e-07, eager 3E-5.'
    for page in (breakable_html(text), inline_html(text)):
        assert '<span style="white-space:nowrap">2.11e-07,</span>' in page
        assert '<span style="white-space:nowrap">3E-5.</span>' in page
    assert breakable_html("re-run it") == "re-run it"  # a hyphenated word may break as words do


def test_a_short_tuple_in_a_text_table_cell_is_one_word():
    """The terminal's tables break at spaces too: "(128, 128)" stays on one line at any width that holds it."""
    from jaxmagic.render.text import block_lines
    from jaxmagic.report.document import Table

    table = Table(["name", "shape", "first used at"], [["W", "(128, 128)", "In [3], line 5, in products"]])
    for width in (20, 30, 40, 80):
        lines = block_lines(table, width)
        assert any("(128, 128)" in line for line in lines), (width, lines)
        assert "\ue000" not in "".join(lines)
