"""Each magic's usage, description and options as Markdown, from the parser that prints ``%NAME?``.

One source: IPython's ``magic_arguments`` parser of the magic. ``tools/write_magic_help.py`` writes this Markdown
into ``docs/magics/NAME.md`` between the markers ``HELP_START`` and ``HELP_END``, so the page reads with its
usage wherever Markdown is shown (a code host included, where a Sphinx directive would be an empty code
block); the docs build (``jaxmagic_docs``) and ``tests/test_docs.py`` fail while a page's block differs from
what the parser says. Imports neither Sphinx nor docutils: the tool and the tests use it as it is.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent
HELP_START = "<!-- help:start - generated from the magic's own help by tools/write_magic_help.py: do not edit -->"
HELP_END = "<!-- help:end -->"
_BLOCK = re.compile(re.escape(HELP_START) + r".*?" + re.escape(HELP_END), re.S)


def registered_magics() -> dict[str, list[str]]:
    """Each magic's name -> its forms as typed (``["%jax_debug", "%%jax_debug"]``), from the magics' registry
    (``jaxmagic/ipython/magic/``), of which the class the extension registers is composed."""
    from jaxmagic.ipython.magic import MAGICS

    return dict(sorted((magic.name, magic.typed) for magic in MAGICS))


def magic_parser(name: str):
    from jaxmagic.ipython.magic import MAGICS

    magic = next((magic for magic in MAGICS if magic.name == name), None)
    parser = getattr(magic.function, "parser", None) if magic is not None else None
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


_CODE_SPAN = re.compile(r"(`[^`]*`)")
# What Markdown could read as emphasis, a link, HTML or a table's cell edge; "_" only at a word's edge (inside a
# word, as in print_environment_info, it is never emphasis)
_SPECIAL = re.compile(r"([\\*<>\[\]|]|(?<!\w)_|_(?!\w))")


def markdown_text(text: str, in_table: bool = False) -> str:
    """``text`` as Markdown that reads as the help prints it: backticked spans stay code, the characters Markdown
    would take for emphasis, links or HTML are escaped (``|`` inside code too, in a table)."""
    parts = _CODE_SPAN.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part.replace("|", "\\|") if in_table else part)
        else:
            out.append(_SPECIAL.sub(lambda m: "\\" + m.group(1) if m.group(1) != "|" or in_table else "|", part))
    return "".join(out)


def help_markdown(name: str) -> str:
    """The magic's Usage and Options sections, between the markers, as ``%NAME?`` says them."""
    lines = [HELP_START, "", "## Usage", "", "```text", *usage_lines(name), "```", ""]
    for paragraph in description_paragraphs(name):
        lines += [markdown_text(paragraph), ""]
    lines += [f"This part is generated from the magic's own help: `%{name}?` prints the same text in a notebook.", ""]
    lines += ["## Options", "", "| argument | what it does |", "|---|---|"]
    for invocation, help_text in option_rows(name):
        lines.append(f"| `{invocation.replace('|', chr(92) + '|')}` | {markdown_text(help_text, in_table=True)} |")
    lines += ["", HELP_END]
    return "\n".join(lines)


def page_block(text: str) -> str | None:
    """The generated help block of a page's text, None when the page has none."""
    match = _BLOCK.search(text)
    return match.group(0) if match else None


def with_help(text: str, name: str) -> str:
    """The page's text with its help block made what ``%NAME?`` says (added under the title when missing)."""
    block = help_markdown(name)
    if page_block(text) is not None:
        return _BLOCK.sub(lambda _: block, text, count=1)
    title, _, rest = text.partition("\n")
    return f"{title}\n\n{block}\n\n{rest.lstrip(chr(10))}"


def stale_pages() -> list[str]:
    """The magics whose page's help block differs from what ``%NAME?`` says (or that has none)."""
    stale = []
    for name in registered_magics():
        page = DOCS / "magics" / f"{name}.md"
        if page.exists() and page_block(page.read_text()) != help_markdown(name):
            stale.append(name)
    return stale
