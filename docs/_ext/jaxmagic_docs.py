"""Sphinx extension of jaxmagic's documentation: what the docs take from the code itself.

- Each magic's page (``magics/NAME.md``) carries its usage line(s), description and options as Markdown,
  written by ``tools/write_magic_help.py`` from the parser IPython's ``magic_arguments`` made for the magic - the
  same object that prints ``%NAME?`` (``magic_help.py``); reading a page whose block differs from it is a
  warning (an error under ``-W``), so the page and the help cannot disagree.
- Links to the demo notebooks where they live in the repository (``demo_notebooks/NN_name.ipynb``, which a
  code host shows) become links to their pages on the site.
- ``{jaxmagic-api}`` (a directive): ``autodoc`` entries for every name in ``jaxmagic.probes.__all__``,
  grouped by the comment lines of that list.
- At ``builder-inited``: a page ``magics/NAME.md`` is generated for every registered magic that has no
  hand-written page (help only), and the demo notebooks are copied from the executed copies ``make demo``
  wrote under ``build/notebooks/`` (never executed here); see ``notebooks_source`` for what happens when
  one is missing.
"""

from __future__ import annotations

import ast
import html
import json
import os
import re
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from magic_help import help_markdown, page_block, registered_magics
from sphinx.application import Sphinx
from sphinx.errors import ConfigError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
EXECUTED = ROOT / "build" / "notebooks"
SOURCES = ROOT / "demo_notebooks"
NOTEBOOK_PAGES = DOCS / "notebooks"  # generated: the notebooks the site shows (gitignored)
GENERATED_MAGICS = DOCS / "magics" / "_generated"  # generated: pages of magics with no page of their own (gitignored)


# ---------------------------------------------------------------- magics and their help


def check_magic_help(app: Sphinx, docname: str, source: list[str]) -> None:
    """A magic's page must say what ``%NAME?`` says: its generated block (``magic_help.HELP_START``) is checked
    as the page is read; a stale one is a warning, so ``make docs`` (-W) fails until tools/write_magic_help.py runs."""
    folder, _, name = docname.partition("/")
    if folder != "magics" or name not in registered_magics():
        return
    app.env.note_dependency(str(ROOT / "jaxmagic" / "ipython" / "magic" / f"{name}.py"))
    if page_block(source[0]) != help_markdown(name):
        logger.warning(
            f"docs/magics/{name}.md: its usage and options differ from %{name}? (or are missing): "
            "run `.venv/bin/python tools/write_magic_help.py`",
            location=docname,
        )


# The demo notebooks are linked where they live in the repository (``../../demo_notebooks/NN_name.ipynb``),
# which a code host shows; the site shows each as its own page, ``notebooks/NN_name``.
_NOTEBOOK_LINK = re.compile(r"\]\((?:\.\./)+demo_notebooks/(\d\d_\w+)\.ipynb(#[^)\s]*)?\)")


def link_notebook_pages(app: Sphinx, docname: str, source: list[str]) -> None:
    """Each link to a demo notebook in the repository becomes a link to its page on the site."""
    here = Path(docname).parent

    def page(match: re.Match) -> str:
        target = os.path.relpath(Path("notebooks") / f"{match.group(1)}.ipynb", here)
        return f"]({target}{match.group(2) or ''})"

    source[0] = _NOTEBOOK_LINK.sub(page, source[0])


# ---------------------------------------------------------------- the probes' API


def api_groups() -> list[tuple[str, list[str]]]:
    """``jaxmagic.probes.__all__`` as (group title, names), the titles from the list's comment lines."""
    source = (ROOT / "jaxmagic" / "probes" / "__init__.py").read_text()
    module = ast.parse(source)
    names: list[str] = []
    for statement in module.body:
        if isinstance(statement, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in statement.targets):
            names = [element.value for element in statement.value.elts]
            start, end = statement.lineno, statement.end_lineno
    lines = source.splitlines()[start - 1 : end]
    groups: list[tuple[str, list[str]]] = [("Errors", [])]
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            title = stripped.lstrip("# ").strip()
            groups.append((title[:1].upper() + title[1:], []))
        elif stripped.startswith('"'):
            name = stripped.strip('",')
            if name in names:
                groups[-1][1].append(name)
    return [(title, members) for title, members in groups if members]


class ProbesApi(SphinxDirective):
    """``{jaxmagic-api}``: autodoc of every public probe and report, as ``jaxmagic.probes.__all__`` groups them."""

    def run(self) -> list[nodes.Node]:
        import inspect

        import jaxmagic.probes as probes

        self.env.note_dependency(str(ROOT / "jaxmagic" / "probes" / "__init__.py"))
        lines: list[str] = []
        for title, members in api_groups():
            lines += [title, "-" * len(title), ""]
            for name in members:
                obj = getattr(probes, name)
                source = inspect.getsourcefile(obj)
                if source:  # a docstring edited there makes this page be read (and checked) again
                    self.env.note_dependency(source)
                kind = "autoclass" if inspect.isclass(obj) else "autofunction"
                lines += [f".. {kind}:: jaxmagic.probes.{name}", ""]
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(StringList(lines, source="jaxmagic.probes.__all__"), 0, container, match_titles=True)
        return container.children


# ---------------------------------------------------------------- generated pages


def write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def generate_magic_pages(app: Sphinx) -> None:
    """A help-only page for every registered magic with no hand-written ``magics/NAME.md``."""
    wanted = set()
    for name, forms in registered_magics().items():
        if (DOCS / "magics" / f"{name}.md").exists():
            continue
        wanted.add(f"{name}.md")
        title = ", ".join(f"`{form}`" for form in forms)
        write_if_changed(
            GENERATED_MAGICS / f"{name}.md",
            f"# {title}\n\n"
            "```{note}\nThis magic has no guide page yet: what follows is its own help. "
            f"Write `docs/magics/{name}.md` (see any other page there) to replace this one.\n```\n\n"
            f"{help_markdown(name)}\n",
        )
        logger.info(f"jaxmagic docs: {name} has no page of its own; generated {GENERATED_MAGICS.name}/{name}.md")
    if GENERATED_MAGICS.exists():
        for stale in GENERATED_MAGICS.glob("*.md"):
            if stale.name not in wanted:
                stale.unlink()


def list_generated_pages(app: Sphinx, docname: str, source: list[str]) -> None:
    """In ``magics/index``, the line ``GENERATED-MAGIC-PAGES`` becomes the generated pages (none: nothing)."""
    if docname != "magics/index":
        return
    pages = sorted(path.stem for path in GENERATED_MAGICS.glob("*.md")) if GENERATED_MAGICS.exists() else []
    source[0] = source[0].replace("GENERATED-MAGIC-PAGES", "\n".join(f"_generated/{page}" for page in pages))


def code_sources(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in cells
        if c["cell_type"] == "code"
    ]


def notebooks_source(app: Sphinx) -> None:
    """Copy each demo notebook's executed copy (``build/notebooks/``) into the site's sources.

    A notebook without an executed copy is shown unexecuted, under a note saying so, and the build says
    which ones on the console; under ``CI=true`` (or ``JAXMAGIC_DOCS_EXECUTED=1``) that is an error instead,
    so CI never publishes pages without their outputs. An executed copy whose code differs from the current
    notebook (edited since ``make demo``) is shown under a note saying so.
    """
    NOTEBOOK_PAGES.mkdir(exist_ok=True)
    require = os.environ.get("CI") == "true" or os.environ.get("JAXMAGIC_DOCS_EXECUTED") == "1"
    missing, stale, wanted = [], [], set()
    for source in sorted(SOURCES.glob("[0-9]*.ipynb")):
        executed = EXECUTED / source.name
        wanted.add(source.name)
        if executed.exists():
            notebook = json.loads(executed.read_text())
            if code_sources(executed) != code_sources(source):
                stale.append(source.name)
                banner = (
                    "```{note}\nThe outputs below are from an older version of this notebook: it changed after "
                    "`make demo` last ran it. Run `make demo`, then `make docs`.\n```"
                )
            else:
                banner = ""
        else:
            missing.append(source.name)
            notebook = json.loads(source.read_text())
            banner = (
                "```{warning}\nThis notebook is shown without its outputs: `build/notebooks/"
                f"{source.name}` did not exist when the documentation was built. Run `make demo`, then `make docs`.\n```"
            )
        if banner:
            notebook["cells"].insert(
                1, {"cell_type": "markdown", "id": "jaxmagic-docs-note", "metadata": {}, "source": banner}
            )
        # Widget state only feeds ipywidgets' JavaScript, which the site does not load (a CDN): left out, the
        # explorers' static line says to run the cell, as in a notebook saved without widget state.
        notebook["metadata"].pop("widgets", None)
        notebook["metadata"].setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})
        write_if_changed(NOTEBOOK_PAGES / source.name, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    for old in NOTEBOOK_PAGES.glob("*.ipynb"):
        if old.name not in wanted:
            old.unlink()
    if missing:
        message = (
            f"jaxmagic docs: no executed copy under {EXECUTED.relative_to(ROOT)}/ of {', '.join(missing)}: "
            "run `make demo` first"
        )
        if require:
            print(f"\n*** {message} (required under CI=true) ***\n", file=sys.stderr)
            raise ConfigError(message + "; under CI=true every demo notebook's page needs its executed copy")
        print(f"\n*** {message} (their pages show the notebooks without outputs) ***\n", file=sys.stderr)
    for name in stale:
        logger.info(f"jaxmagic docs: {name} changed since `make demo` ran it; its page says so")


# ---------------------------------------------------------------- search excerpts opened from disk

PAGE_TEXT = "jaxmagic_page_text.js"  # under _static/: every page's text, for the search page's excerpts
_TAGS = re.compile(r"<(script|style)\b.*?</\1>|<a class=\"headerlink\".*?</a>|<[^>]+>", re.S)  # "¶" links too


def collect_page_text(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object) -> None:
    """Keep the text of each page's body: Sphinx's search page shows an excerpt of each page it finds, read by
    fetching the page - which a browser refuses for a site opened from disk (file://)."""
    body = context.get("body")
    if body and doctree is not None:
        texts = app.env.__dict__.setdefault("jaxmagic_page_text", {})
        texts[pagename] = " ".join(html.unescape(_TAGS.sub(" ", body)).split())


def write_page_text(app: Sphinx, exception: Exception | None) -> None:
    """``_static/jaxmagic_page_text.js``: the page texts ``_static/jaxmagic_offline_search.js`` answers the search
    page's fetches with on a file:// page."""
    texts = app.env.__dict__.get("jaxmagic_page_text")
    if exception is not None or app.builder.format != "html" or not texts:
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(exist_ok=True)
    payload = json.dumps(dict(sorted(texts.items())), ensure_ascii=True, separators=(",", ":"))
    write_if_changed(static / PAGE_TEXT, f"window.JAXMAGIC_PAGE_TEXT = {payload};\n")


def setup(app: Sphinx) -> dict:
    app.add_directive("jaxmagic-api", ProbesApi)
    app.connect("builder-inited", generate_magic_pages)
    app.connect("builder-inited", notebooks_source)
    app.connect("source-read", list_generated_pages)
    app.connect("source-read", check_magic_help)
    app.connect("source-read", link_notebook_pages)
    app.connect("html-page-context", collect_page_text)
    app.connect("build-finished", write_page_text)
    app.add_js_file("jaxmagic_offline_search.js")
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
