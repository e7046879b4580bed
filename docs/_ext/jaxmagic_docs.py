"""Sphinx extension of jaxmagic's documentation: what the docs take from the code itself.

- ``{jaxmagic-help} NAME`` (a directive): a magic's usage line(s), description and options, built
  from the parser IPython's ``magic_arguments`` made for the magic - the same object that prints
  ``%NAME?`` - so the reference page and the help cannot disagree.
- ``{jaxmagic-api}`` (a directive): ``autodoc`` entries for every name in ``jaxmagic.probes.__all__``,
  grouped by the comment lines of that list.
- At ``builder-inited``: a page ``magics/NAME.md`` is generated for every registered magic that has no
  hand-written page (help only), and the demo notebooks are copied from the executed copies ``make demo``
  wrote under ``build/notebooks/`` (never executed here); see ``notebooks_source`` for what happens when
  one is missing.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
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


def registered_magics() -> dict[str, list[str]]:
    """Each magic's name -> its forms as typed (``["%jax_debug", "%%jax_debug"]``), from the class the extension registers."""
    from jaxmagic.ipython.magics import JaxMagics

    forms: dict[str, list[str]] = {}
    for kind, prefix in (("line", "%"), ("cell", "%%")):
        for name in JaxMagics.magics[kind]:
            forms.setdefault(name, []).append(prefix + name)
    return dict(sorted(forms.items()))


def magic_parser(name: str):
    from jaxmagic.ipython.magics import JaxMagics

    function = getattr(JaxMagics, name)
    parser = getattr(function, "parser", None)
    if parser is None:
        raise ValueError(f"magic {name} has no magic_arguments parser, so its help cannot be documented")
    return parser


def usage_lines(name: str) -> list[str]:
    """The usage line of each form of the magic, as ``%NAME?`` prints it (IPython writes one ``%`` for every form)."""
    parser = magic_parser(name)
    text = parser.format_usage()
    text = text.split("%", 1)[1] if "%" in text else text  # IPython's prefix is "::\n\n  %"
    usage = " ".join(text.split())  # argparse wraps long usage lines
    arguments = usage[len(parser.prog) :]
    return [form + arguments for form in registered_magics()[name]]


def description_paragraphs(name: str) -> list[str]:
    import inspect

    text = inspect.cleandoc(magic_parser(name).description or "")
    return [" ".join(block.split()) for block in text.split("\n\n") if block.strip()]


def option_rows(name: str) -> list[tuple[str, str]]:
    """(invocation as the help writes it, help text) for every argument of the magic, positional ones first."""
    parser = magic_parser(name)
    formatter = parser._get_formatter()
    rows = []
    actions = [a for a in parser._actions if not a.option_strings] + [a for a in parser._actions if a.option_strings]
    for action in actions:
        if action.help == "==SUPPRESS==" or "-h" in action.option_strings:
            continue
        invocation = formatter._format_action_invocation(action)
        # As argparse prints it: %-formatted (so "%%px" in the source reads "%px", as in %name?).
        help_text = " ".join(formatter._expand_help(action).split()) if action.help else ""
        rows.append((invocation, help_text))
    return rows


class MagicHelp(SphinxDirective):
    """``{jaxmagic-help} jax_nans``: usage, description and options of a magic, from its own parser."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0].lstrip("%")
        if name not in registered_magics():
            raise self.error(f"{name} is not a registered magic (JaxMagics.magics)")
        self.env.note_dependency(str(ROOT / "jaxmagic" / "ipython" / "cell_magics.py"))
        self.env.note_dependency(str(ROOT / "jaxmagic" / "ipython" / "line_magics.py"))
        self.env.note_dependency(__file__)  # this directive itself
        result: list[nodes.Node] = []

        usage = nodes.section(ids=[f"usage-{name}"], names=[f"usage-{name}"])
        usage += nodes.title(text="Usage")
        usage += nodes.literal_block(text="\n".join(usage_lines(name)), language="text", classes=["jaxmagic-usage"])
        for text in description_paragraphs(name):
            usage += nodes.paragraph(text=text)
        note = nodes.paragraph()
        note += nodes.Text("This part is generated from the magic's own help: ")
        note += nodes.literal(text=f"%{name}?")
        note += nodes.Text(" prints the same text in a notebook.")
        note["classes"].append("jaxmagic-help-source")
        usage += note
        result.append(usage)

        rows = option_rows(name)
        options = nodes.section(ids=[f"options-{name}"], names=[f"options-{name}"])
        options += nodes.title(text="Options")
        table = nodes.table(classes=["jaxmagic-options"])
        group = nodes.tgroup(cols=2)
        table += group
        group += nodes.colspec(colwidth=30)
        group += nodes.colspec(colwidth=70)
        head = nodes.thead()
        group += head
        head += self._row("argument", "what it does", literal=False)
        body = nodes.tbody()
        group += body
        for invocation, help_text in rows:
            body += self._row(invocation, help_text, literal=True)
        options += table
        result.append(options)
        return result

    @staticmethod
    def _row(first: str, second: str, *, literal: bool) -> nodes.row:
        row = nodes.row()
        cell = nodes.entry()
        cell += nodes.paragraph("", "", nodes.literal(text=first) if literal else nodes.Text(first))
        row += cell
        cell = nodes.entry()
        cell += nodes.paragraph(text=second)
        row += cell
        return row


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
            f"```{{jaxmagic-help}} {name}\n```\n",
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


def setup(app: Sphinx) -> dict:
    app.add_directive("jaxmagic-help", MagicHelp)
    app.add_directive("jaxmagic-api", ProbesApi)
    app.connect("builder-inited", generate_magic_pages)
    app.connect("builder-inited", notebooks_source)
    app.connect("source-read", list_generated_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
