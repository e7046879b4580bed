"""Write each magic's usage and options into its page, docs/magics/NAME.md, from the magic's own help.

    .venv/bin/python tools/write_magic_help.py          # rewrite the generated block of every page
    .venv/bin/python tools/write_magic_help.py --check  # exit 1, naming them, while a page differs from %NAME?

The block sits between two HTML comments (``docs/_ext/magic_help.py``: ``HELP_START``, ``HELP_END``), so the
page is plain Markdown that shows the usage on a code host too. Edit the magic's ``@argument`` help and its
docstring, never the block; ``make docs`` and tests/test_docs.py fail while the two differ.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
sys.path.insert(0, str(ROOT))  # this checkout's jaxmagic

from magic_help import DOCS, registered_magics, stale_pages, with_help  # noqa: E402

_DIRECTIVE = re.compile(r"```\{jaxmagic-help\} (\w+)\n```\n")  # the Sphinx-only form the pages had


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = stale_pages()
        for name in stale:
            print(f"docs/magics/{name}.md: its usage and options differ from %{name}? - run tools/write_magic_help.py")
        return 1 if stale else 0
    for name in registered_magics():
        page = DOCS / "magics" / f"{name}.md"
        if not page.exists():
            continue  # the docs build generates a help-only page for it
        text = page.read_text()
        updated = with_help(_DIRECTIVE.sub("", text, count=1), name) if _DIRECTIVE.search(text) else text
        updated = with_help(updated, name)
        if updated != text:
            page.write_text(updated)
            print(f"updated docs/magics/{name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
