"""The documentation site and the README, as a newcomer meets them.

The site is built as ``make docs`` builds it (Sphinx, warnings as errors, offline), then checked:
every registered magic has a page whose usage and options say what ``%name?`` says; no built page
loads anything from off the machine (and in Chromium, none asks for it); the README is short, its
links lead to files that exist, its symptom table names every magic and its quickstart is the one
photographed.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "docs"
HTML = BUILD / "html"
# The command of `make docs` (Makefile: SPHINX), with -E: every page is read again, so a warning of a page
# an incremental build would not re-read (a docstring, a notebook's markdown) is never missed.
DOCS_COMMAND = [
    sys.executable,
    *("-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-E"),
    *("-d", str(BUILD / "doctrees"), str(ROOT / "docs"), str(HTML)),
]
README = ROOT / "README.md"

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
sys.path.insert(0, str(ROOT / "tools"))


def registered_magics() -> dict[str, list[str]]:
    from jaxmagic_docs import registered_magics as forms

    return forms()


@pytest.fixture(scope="module")
def site() -> Path:
    started = time.monotonic()
    result = subprocess.run(DOCS_COMMAND, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"make docs failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
    print(f"docs built in {time.monotonic() - started:.1f} s")
    return HTML


def page_text(path: Path) -> str:
    """The visible text of a built page, whitespace collapsed (tags dropped, entities read)."""
    text = path.read_text()
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return " ".join(html.unescape(text).split())


def help_entries(doc: str) -> list[tuple[str, str]]:
    """(invocation, help) of each argument in the help text IPython prints for ``%name?``."""
    entries: list[list[str]] = []
    section = False
    for line in doc.splitlines():
        if re.match(r"^(options|positional arguments|optional arguments):", line):
            section = True
            continue
        if section and re.match(r"^\S", line):
            section = False  # a group title or the end
        if not section or not line.strip():
            continue
        if re.match(r"^  \S", line):  # "  --infs        Also stop at ..." or "  -o NAME, --output NAME"
            invocation, _, rest = line.strip().partition("  ")
            entries.append([invocation.strip(), rest.strip()])
        elif entries:
            entries[-1][1] += " " + line.strip()
    return [(invocation, " ".join(text.split())) for invocation, text in entries]


def test_docs_build_with_warnings_as_errors(site):
    assert (site / "index.html").exists()
    assert (site / "api.html").exists()
    assert (site / "notebooks" / "00_symptoms_and_setup.html").exists()


def test_every_magic_has_a_page_with_the_help_it_prints(site):
    from jaxmagic.ipython.magics import JaxMagics

    for name, forms in registered_magics().items():
        written = site / "magics" / f"{name}.html"
        page = written if written.exists() else site / "magics" / "_generated" / f"{name}.html"
        assert page.exists(), f"no page for {forms}: write docs/magics/{name}.md"
        text = page_text(page)
        bare = "".join(text.split())  # argparse wraps the help at hyphens too ("all-" / "gather")
        doc = getattr(JaxMagics, name).__doc__  # what %name? prints
        usage = " ".join(doc.split("\n\n", 2)[1].split())  # "%jax_nans [--infs] [--inside] [-o NAME]"
        arguments = usage.split(None, 1)[1] if " " in usage else ""
        for form in forms:
            assert f"{form} {arguments}".strip() in text, f"{page.name}: usage of {form} differs from %{name}?"
        entries = help_entries(doc)
        assert entries, f"%{name}? lists no options"
        for invocation, help_text in entries:
            assert invocation in text, f"{page.name}: {invocation!r} of %{name}? is missing"
            assert "".join(help_text.split()) in bare, (
                f"{page.name}: the help of {invocation} differs from %{name}?: {help_text!r}"
            )
        if written.exists():
            for heading in ("What it checks and how", "Example report", "Limits"):
                assert heading in text, f"{page.name} has no section {heading!r}"


def test_every_magic_page_carries_the_usage_its_help_prints_in_its_markdown():
    """Issue 61: on a code host a Sphinx directive is an empty code block. Each page's Markdown holds its usage
    and options, written from the magic's parser by tools/write_magic_help.py; this fails while they differ."""
    from magic_help import HELP_START, page_block, stale_pages

    assert stale_pages() == [], "run .venv/bin/python tools/write_magic_help.py"
    for name in registered_magics():
        page = ROOT / "docs" / "magics" / f"{name}.md"
        if page.exists():
            block = page_block(page.read_text())
            assert block and block.startswith(HELP_START) and "```text\n%" in block and "| argument |" in block
            assert "{jaxmagic-help}" not in page.read_text()


def test_a_changed_option_makes_the_page_stale(monkeypatch):
    """The check can fail: a help text that changes is a page that differs."""
    import magic_help

    real = magic_help.option_rows
    monkeypatch.setattr(magic_help, "option_rows", lambda name: [*real(name), ("--new", "A new option.")])
    assert "jax_nans" in magic_help.stale_pages()


_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def relative_links(markdown: Path) -> list[str]:
    """The relative link and image targets of a Markdown file, as a code host resolves them (code left out)."""
    text = _CODE.sub("", markdown.read_text())
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)
    return [t for t in targets if not urlsplit(t).scheme and not t.startswith("#")]


def test_no_relative_link_of_the_docs_markdown_is_dead_in_the_repository():
    """Issue 61: docs/notebooks/index.md linked 12 notebooks that exist only after the docs build. Every page is
    read on a code host too: each relative link leads to a file of the repository (the site maps the notebooks'
    links to their pages)."""
    pages = [README, *(ROOT / "docs").rglob("*.md")]
    pages = [p for p in pages if "_generated" not in p.parts]
    dead = [
        f"{page.relative_to(ROOT)}: {link}"
        for page in pages
        for link in relative_links(page)
        if not (page.parent / link.split("#")[0]).exists()
    ]
    assert dead == []
    index = (ROOT / "docs" / "notebooks" / "index.md").read_text()
    assert index.count("](../../demo_notebooks/") == len(list((ROOT / "demo_notebooks").glob("[0-9]*.ipynb")))


# A resource the browser fetches by itself when it shows a page (links a reader follows are not).
RESOURCE = re.compile(
    r"<(?:script|img|iframe|source|embed|video|audio|track|input)\b[^>]*?\s(?:src|srcset|poster)=[\"']([^\"']+)"
    r"|<link\b[^>]*?\shref=[\"']([^\"']+)"
    r"|<object\b[^>]*?\sdata=[\"']([^\"']+)"
    r"|url\(\s*[\"']?([^\"')]+)"
    r"|@import\s+[\"']([^\"']+)",
    re.I,
)


def off_the_machine(url: str) -> bool:
    url = html.unescape(url.strip())
    return url.startswith("//") or urlsplit(url).scheme in ("http", "https", "ftp", "ws", "wss")


def test_no_page_loads_anything_from_off_the_machine(site):
    found = []
    files = [*site.rglob("*.html"), *site.rglob("*.css")]
    assert len(files) > 30
    for path in files:
        for match in RESOURCE.finditer(path.read_text(errors="replace")):
            url = next(group for group in match.groups() if group)
            if off_the_machine(url):
                found.append(f"{path.relative_to(site)}: {url}")
    assert found == [], "resources off the machine:\n" + "\n".join(found[:20])


@pytest.mark.browser
def test_pages_in_chromium_ask_for_nothing_off_the_machine(site):
    from jupyterlab_session import Watched, browser

    shots = ROOT / "build" / "browser" / "docs"
    shots.mkdir(parents=True, exist_ok=True)
    pages = [
        "index.html",
        "magics/jax_nans.html",
        "notebooks/03_numerical_problems.html",
        "api.html",
        "search.html?q=nans",
    ]
    with browser() as chromium:
        for width in (1280, 900):
            context = chromium.new_context(viewport={"width": width, "height": 900})
            try:
                for name in pages:
                    page = context.new_page()
                    watch = Watched()
                    watch.attach(page)
                    path, _, query = name.partition("?")
                    page.goto((site / path).as_uri() + (f"?{query}" if query else ""))
                    page.wait_for_load_state("load")
                    page.screenshot(path=str(shots / f"{path.replace('/', '_')}_{width}.png"))
                    assert watch.external_requests == [], f"{name} at {width} px: {watch.external_requests}"
                    if not query:
                        assert page.locator("h1").count() >= 1, f"{name} at {width} px shows no title"
                    else:  # the search page runs its index (searchindex.js) in the browser
                        page.wait_for_selector("#search-results li", timeout=15_000)
                        # issue 61: opened from disk, each result shows an excerpt too (file:// refuses fetch())
                        page.wait_for_selector("#search-results li p.context", timeout=15_000)
                        excerpts = page.locator("#search-results li p.context").all_inner_texts()
                        assert any("nan" in text.lower() for text in excerpts), excerpts[:3]
                        page.screenshot(path=str(shots / f"search_excerpts_{width}.png"))
                        assert watch.console_errors == [], watch.console_errors
                    page.close()
            finally:
                context.close()


@pytest.mark.browser
def test_reports_in_the_docs_follow_the_site_s_dark_theme(site):
    """Issue 61: report cards stayed white in Furo's dark mode. They take JupyterLab's theme variables, which the
    site's CSS maps to Furo's: dark cards on the dark site, light ones on the light site."""
    from jupyterlab_session import browser

    shots = ROOT / "build" / "browser" / "docs"
    shots.mkdir(parents=True, exist_ok=True)
    page_file = site / "notebooks" / "03_numerical_problems.html"
    measure = """() => [...document.querySelectorAll('.jaxmagic')].slice(0, 5).map(r => {
        const [red, green, blue] = getComputedStyle(r).backgroundColor.match(/\\d+/g).map(Number);
        return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255; })"""
    with browser() as chromium:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            for theme, bright in (("light", lambda v: v > 0.8), ("dark", lambda v: v < 0.2)):
                page.add_init_script(f"localStorage.setItem('theme', '{theme}')")
                page.goto(page_file.as_uri())
                page.wait_for_load_state("load")
                found = page.evaluate(measure)
                if not found:
                    pytest.skip("notebook 03 has no executed outputs here: run `make demo` first")
                assert all(bright(value) for value in found), (theme, found)
                page.locator(".jaxmagic").first.scroll_into_view_if_needed()
                page.screenshot(path=str(shots / f"report_in_docs_{theme}.png"))
        finally:
            context.close()


def readme_links() -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", README.read_text())


def test_readme_is_short_and_its_links_lead_somewhere():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the detail to docs/"
    for link in readme_links():
        if urlsplit(link).scheme:
            continue
        target = ROOT / link.split("#")[0]
        assert target.exists(), f"README links to {link}, which does not exist"


def test_readme_symptom_table_names_every_magic_with_its_page():
    text = README.read_text()
    table = text[text.index("<!-- symptoms:start -->") : text.index("<!-- symptoms:end -->")]
    for name, forms in registered_magics().items():
        assert f"](docs/magics/{name}.md)" in table, f"README's symptom table has no row linking docs/magics/{name}.md"
        for form in forms:
            assert f"`{form}`" in table, f"README's symptom table does not name {form}"


def test_readme_quickstart_is_the_one_photographed():
    from screenshot_quickstart import OUT, QUICKSTART

    text = README.read_text()
    quickstart = text[text.index("<!-- quickstart:start -->") : text.index("<!-- quickstart:end -->")]
    cells = re.findall(r"```python\n(.*?)\n```", quickstart, flags=re.S)
    assert cells == QUICKSTART, "README's quickstart differs from tools/screenshot_quickstart.py: run it again"
    assert f"]({OUT.relative_to(ROOT)})" in quickstart and OUT.exists()


def test_the_version_has_one_place():
    import tomllib

    import jaxmagic

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "jaxmagic.__version__"}
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(jaxmagic.__version__)}\b", changelog, flags=re.M), (
        f"CHANGELOG.md has no heading for version {jaxmagic.__version__}"
    )
