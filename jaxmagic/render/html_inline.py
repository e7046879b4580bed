"""The reports' inline styles and inline text: what every part of the HTML renderer (and the explorers) shares.

Every style is inline (JupyterLab's sanitizer removes ``<style>``); a themed colour (``var()``, which the
sanitizer drops) follows a value the sanitizer keeps, or stands alone so that the front end's own colour shows
through when it is dropped.
"""

from __future__ import annotations

import re
from html import escape

from jaxmagic.render.tokens import GROUP_CHARS, GROUP_PATTERN

MONO = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace"
SANS = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif"
# A translucent grey reads on any background; the variable gives the theme's own.
TINT = "background:rgba(128,128,128,.12);background:var(--jp-layout-color2,#f6f8fa)"
LINE = "1px solid rgba(128,128,128,.35)"
LINE_COLOUR = "border-color:var(--jp-border-color2,#d0d7de)"
# Muted text: the theme's own text colour, faded. JupyterLab's muted colour (--jp-content-font-color2,
# rgba(0,0,0,.54)) is 4.43:1 on its tinted code background (#eee) in the light theme; the text colour at 72%
# is 6:1 there and on white, and over 7:1 in the dark theme. Sanitized (var() dropped), the front end's own
# text colour is faded the same way.
MUTED = "color:var(--jp-content-font-color1,#1f2328);opacity:.72"
CARD = (
    f"{SANS};font-size:13px;line-height:1.45;text-align:left;border:{LINE};{LINE_COLOUR};"
    "border-radius:6px;padding:8px 12px;margin:4px 0;max-width:980px;box-sizing:border-box;"
    "overflow-wrap:break-word;background:var(--jp-layout-color1,var(--vscode-editor-background,#fff));"
    "color:var(--jp-content-font-color1,var(--vscode-editor-foreground,#1f2328))"
)
CODE = f"{MONO};font-size:12px;{TINT};padding:0 3px;border-radius:3px;white-space:normal"
SCROLLS = "max-width:100%;overflow-x:auto"  # a wide drawing scrolls inside the report
NOWRAP = '<span style="white-space:nowrap">'

_BACKTICKS = re.compile(r"`([^`\n]+)`")


def inline_html(text: str) -> str:
    """Escaped text in which `backticked` spans (a primitive, a call) are shown as code."""
    if "`" not in text:  # most table cells: nothing to split (a report has hundreds)
        return breakable_html(text)
    parts = _BACKTICKS.split(text)
    return "".join(
        f'<code style="{CODE}">{breakable_html(part)}</code>' if i % 2 else breakable_html(part)
        for i, part in enumerate(parts)
    )


LONG_RUN_CHARS = 14  # a 900 px notebook with the sidebar open leaves ~420 px for a report's text
# Between tokens only: never inside a name, dotted or not (`optax.softmax_cross_entropy`, `jnp.float32` and
# `jnp.finfo(v.dtype).tiny` stay whole - a reader takes `jnp.|float32` for two things)
BREAK_AFTER = re.compile(r"(?<=[(\[{,/=:|>])")
# A word that needs more than escaping: a long unbroken run, or one with "--" / "->" in it, or a number with a
# negative exponent ("2.11e-07": a browser breaks it after the hyphen, "2.11e-" and "07" on two lines).
_SPECIAL_WORD = re.compile(rf"\S{{{LONG_RUN_CHARS},}}|\S*(?:--|->|\d[eE]-\d)\S*")


def breakable_html(text: str) -> str:
    """``text`` escaped, with ``<wbr>`` break points inside long unbroken runs.

    A call signature such as ``jit(step)(float32[64,128], {'b': float32[128]})``
    or a leaf path has no space to wrap at: in a paragraph it would run past a
    narrow window. Break points go after brackets, commas, slashes and the like,
    where a reader expects a line to continue - never inside a name. An option
    such as ``--budget`` and an arrow ``->`` are kept whole: browsers break after
    their hyphen, and so is a number such as ``2.11e-07``. (Table cells break at spaces only:
    ``whole_words_html``.)
    """
    if len(text) < LONG_RUN_CHARS and not _SPECIAL_WORD.search(text):
        return escape(text)  # no run long enough to break, nothing to keep whole
    # The text between special words is escaped in one piece: a report has hundreds of words.
    out, start = [], 0
    for match in _SPECIAL_WORD.finditer(text):
        out.append(escape(text[start : match.start()]))
        word = match.group(0)
        if len(word) >= LONG_RUN_CHARS:
            out.append("<wbr>".join(escape(piece) for piece in BREAK_AFTER.split(word)))
        else:
            out.append(f"{NOWRAP}{escape(word)}</span>")
        start = match.end()
    out.append(escape(text[start:]))
    return "".join(out)


# A word a browser may break inside: Unicode's line breaking allows it after a hyphen, a slash, a bar or a
# closing bracket before an opening one (`jit(f)|(float32[4])`), and more. A word holding anything but letters,
# digits, "_" and "." is kept on one line.
_BREAKS_INSIDE = re.compile(r"(?<!\S)(?=\S\S)\S*[^\w\s.]\S*")  # a lone "/" or "-" needs nothing
# A short tuple or index (``render/tokens``: "(128, 128)") is one token too
_KEPT_WHOLE = re.compile(rf"{GROUP_PATTERN}|{_BREAKS_INSIDE.pattern}")


def whole_words_html(text: str) -> str:
    """``text`` escaped for a table cell: it breaks at spaces only, so a shape (``f32[2048,512]``), a name, a
    number or a word is never split across lines; `backticked` spans are code."""
    if "`" not in text:
        return _whole_words(text)
    parts = _BACKTICKS.split(text)
    return "".join(_code_word(part) if i % 2 else _whole_words(part) for i, part in enumerate(parts))


def _code_word(code: str) -> str:
    if " " in code.strip():
        return f'<code style="{CODE}">{_whole_words(code)}</code>'
    return f'<code style="{CODE};white-space:nowrap">{escape(code)}</code>'  # one word: kept on one line


def _whole_words(text: str, tokens: re.Pattern[str] = _KEPT_WHOLE) -> str:
    if not _BREAKS_INSIDE.search(text):  # most cells: nothing a browser would break inside a word
        return escape(text)
    out, start = [], 0
    for match in tokens.finditer(text):
        token = match.group(0)
        out.append(escape(text[start : match.start()]))
        if " " in token and len(token) > GROUP_CHARS:  # a long group: each of its words whole
            out.append(_whole_words(token, _BREAKS_INSIDE))
        else:
            out.append(f"{NOWRAP}{escape(token)}</span>")
        start = match.end()
    out.append(escape(text[start:]))
    return "".join(out)
