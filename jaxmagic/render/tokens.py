"""What a reader takes as one token though it holds a space: a short tuple or index, ``(128, 128)``, ``x[0, 2]``.

Table cells break at spaces only, so a shape, a name or a number stays whole; a tuple has a space after each
comma, and a cell broke "(128," / "128)". Both renderers keep such a group on one line (``html_inline`` in a
nowrap span, ``text`` as one word); a longer one (a call's many arguments) still wraps after its commas.
"""

from __future__ import annotations

import re

# A bracketed group whose only spaces follow its commas, with whatever is glued to it: "(128, 128),", "x[0, 2]".
GROUP_PATTERN = r"(?<!\S)\S*[(\[{][^\s()\[\]{}]*(?:, [^\s()\[\]{}]+)+[)\]}]\S*"
GROUP_CHARS = 24  # longer, it wraps after its commas
_GROUP = re.compile(GROUP_PATTERN)
_JOINER = "\ue000"  # a private-use character: no renderer, textwrap or str.split() breaks at it


def joined_groups(text: str) -> str:
    """``text`` with the spaces inside each short group made unbreakable (``spaces_again`` undoes it)."""
    if ", " not in text:
        return text
    return _GROUP.sub(
        lambda m: m.group(0).replace(" ", _JOINER) if len(m.group(0)) <= GROUP_CHARS else m.group(0), text
    )


def spaces_again(text: str) -> str:
    return text.replace(_JOINER, " ")
