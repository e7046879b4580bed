"""Tables and facts as HTML that fits the width the output area really has, with no word split.

A report cannot know how wide its output area is (a 900 px window with the file browser open leaves a
table 418 px in JupyterLab 4.6; a wide monitor 1,000), and it has no ``<style>`` for a media or container
query (JupyterLab's sanitizer removes it). So a table decides in CSS, by its own width:

* **Wide enough** for every column at its narrowest (its longest word, shape or name, and its header):
  one row per line, the columns lined up - each cell starts at its column's narrowest width and the
  cells share what is left the same way in every row.
* **Too narrow**: each row is stacked, one ``label: value`` line per column, the header gone.

The switch is ``calc((T - 100%) * 999)`` (``T`` the table's narrowest width, ``100%`` the width it has):
negative - so clamped to nothing - when the table fits, huge when it does not. It sizes each cell's
flex basis, each row label's width and the header's height. Nothing breaks inside a word in either
layout (``overflow-wrap:normal``, break points at spaces only: ``whole_words_html``); a single word wider
than the whole table scrolls the table sideways, as one block.

JupyterLab's sanitizer (an untrusted notebook) drops every ``calc()``/``min()``/``max()``: what is left
before them is the wide layout at its narrowest width, which scrolls sideways as one block when the
area is narrower.
"""

from __future__ import annotations

import re
from html import escape

from jaxmagic.render.html_inline import LINE, LINE_COLOUR, MUTED, TINT, whole_words_html
from jaxmagic.report.document import Facts, Table, numeric_columns

WIDE_TABLE_COLUMNS = 5  # from five columns on, a smaller font
# What one character takes at most (12.5 px prose, 12 px monospace code; bold headers a little more), what a
# code span adds (its padding) and a cell's padding: estimates err wide, so a column is never narrower than
# its longest word (that would misalign a row, never split the word: a cell is never narrower than its text).
_CHAR_PX = {False: 7.3, True: 6.8}  # by "smaller font"
_HEAD_CHAR_PX = {False: 8.6, True: 8.0}
_CODE_PX = 6
_CELL_PAD_PX = 12
LABEL_MAX_PX = 200  # a stacked row's labels: at most this wide, and 45% of the row (a longer header ends in "...")
HEAD_LINE_PX = 20
_SPACES = re.compile(r"\s+")
_CODE_SPANS = re.compile(r"`([^`\n]+)`")


def narrow(threshold: float) -> str:
    """A length that is 0 (clamped) while the element's containing block is at least ``threshold`` px wide, and
    huge below it. Percentages of a flex item's basis, width and padding all refer to its row's width."""
    return f"calc(({threshold - 0.5:.1f}px - 100%) * 999)"  # exactly the threshold is wide


def wide(threshold: float) -> str:
    """The opposite switch: huge while the containing block is at least ``threshold`` px wide, negative below."""
    return f"calc((100% - {threshold - 0.5:.1f}px) * 999)"


def either(threshold: float, when_wide: str, when_narrow: str) -> str:
    """A length that is ``when_wide`` while the row is at least ``threshold`` px wide, else ``when_narrow``."""
    return f"calc(max(0px,min({when_wide},{wide(threshold)})) + max(0px,min({when_narrow},{narrow(threshold)})))"


def _words_px(text: str, char_px: float) -> float:
    """The widest word of a cell as drawn: code spans (backticks) in monospace with their padding."""
    widest = 0.0
    for i, part in enumerate(_CODE_SPANS.split(text)):
        for word in _SPACES.split(part):
            if word:
                widest = max(widest, len(word) * char_px + (_CODE_PX if i % 2 else 0))
    return widest


def column_floors(table: Table) -> list[int]:
    """Each column's narrowest width in px: its widest word (a shape, a name, a number) or its whole header
    (a header stays on one line), with the cell's padding."""
    small = len(table.columns) >= WIDE_TABLE_COLUMNS
    floors = []
    for k, column in enumerate(table.columns):
        widest = max(
            [len(column) * _HEAD_CHAR_PX[small]]
            + [_words_px(str(row[k]), _CHAR_PX[small]) for row in table.rows if k < len(row)]
        )
        floors.append(round(widest + _CELL_PAD_PX))
    return floors


def table_html(table: Table) -> str:
    """A table as rows of flex boxes that line up as columns when the table fits and stack when it does not."""
    small = len(table.columns) >= WIDE_TABLE_COLUMNS
    numeric = numeric_columns(table)
    floors = column_floors(table)
    threshold = sum(floors)
    label_px = min(LABEL_MAX_PX, round(max(len(c) for c in table.columns) * _HEAD_CHAR_PX[small]) + 10)
    label_width = f"min({label_px}px,45%)"
    average = [
        sum(len(str(row[k])) for row in table.rows if k < len(row)) / max(len(table.rows), 1)
        for k in range(len(table.columns))
    ]
    # Wordy columns take more of what is left; a column of numbers none (it is as wide as its widest number).
    grow = [0 if n else max(1, round(a / 8)) for a, n in zip(average, numeric)]
    # No wider than its widest row needs: a small table stays small on a wide screen.
    natural = sum(
        max([f] + [len(str(row[k]).replace("`", "")) * _CHAR_PX[small] + _CELL_PAD_PX for row in table.rows])
        for k, f in enumerate(floors)
    )
    natural = max(natural, threshold)
    # Wide: the column's narrowest width; narrow: the row's width less the label's.
    basis = [either(threshold, f"{f}px", f"calc(100% - {label_width})") for f in floors]
    cell = [
        f"flex:{g} 1 {f}px;flex-basis:{b};box-sizing:border-box;padding:2px 6px" for f, g, b in zip(floors, grow, basis)
    ]
    head = "".join(
        f'<div class="jm-th" role="columnheader" style="{style}{";text-align:right" if n else ""};height:0;overflow:hidden;white-space:nowrap;'
        f"line-height:{HEAD_LINE_PX}px;padding-top:0;padding-bottom:{HEAD_LINE_PX}px;"
        f'padding-bottom:min({HEAD_LINE_PX}px,{wide(threshold)})">{escape(column)}</div>'
        for column, style, n in zip(table.columns, cell, numeric)
    )
    label = (
        "flex:0 0 auto;box-sizing:border-box;width:0;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;"
        f"padding:2px 0;font-weight:600;{MUTED};width:min({label_width},{narrow(threshold)});"
        f"padding-left:min(6px,{narrow(threshold)});padding-right:min(8px,{narrow(threshold)})"
    )
    rows = []
    for row in table.rows:
        cells = "".join(
            f'<div class="jm-label" aria-hidden="true" title="{escape(column)}" style="{label}">{escape(column)}</div>'
            f'<div class="jm-td" role="cell" style="{style}">{_value_html(str(text), f, n)}</div>'
            for column, style, text, f, n in zip(table.columns, cell, row, floors, numeric)
        )
        rows.append(
            f'<div class="jm-row" role="row" style="display:flex;flex-wrap:wrap;border-top:{LINE};{LINE_COLOUR}">'
            f"{cells}</div>"
        )
    return (
        f'<div class="jm-table" role="table" style="{_ROOT};max-width:{natural:.0f}px;'
        f"font-size:{'11.5px' if small else '12.5px'};"
        f'border-bottom:{LINE};{LINE_COLOUR}">'
        # The sanitized fallback: at least its narrowest width, scrolling sideways; calc() lets it stack.
        f'<div style="min-width:{threshold}px;min-width:calc(0px)">'
        f'<div class="jm-row jm-head" role="row" style="display:flex;flex-wrap:wrap;{TINT};font-weight:600">'
        f"{head}</div>{''.join(rows)}</div></div>"
    )


def _value_html(text: str, floor: float, numeric: bool) -> str:
    """A cell's text; a number right-aligned within its column's width - at the column's right edge while the table
    fits (a column of numbers does not grow), beside its label when the row is stacked."""
    if not numeric:
        return whole_words_html(text)
    width = floor - _CELL_PAD_PX
    # As wide as the column while the cell is (the table fits); no wider than the number once the cell is wider
    # (the row is stacked), so the number sits beside its label. 4 px of slack for rounding.
    box = (
        f"display:inline-block;text-align:right;white-space:nowrap;min-width:{width:.0f}px;"
        f"min-width:calc({width:.0f}px - max(0px, (100% - {width + 4:.0f}px) * 999))"
    )
    return f'<span style="{box}">{escape(text)}</span>'


_ROOT = "overflow-x:auto;margin:4px 0;line-height:1.4;overflow-wrap:normal;word-break:keep-all"
KEY_MAX_PX = 180


def facts_html(facts: Facts) -> str:
    """Name/value pairs: the names in a column, each value beside its name - or under it, when the value's
    widest word does not fit beside it. Plain flex wrapping: the same with or without the sanitizer."""
    key_px = min(KEY_MAX_PX, round(max((len(k) for k, _ in facts.pairs), default=0) * 8.6) + _CELL_PAD_PX)
    rows, natural = [], 0.0
    for key, value in facts.pairs:
        shown = value if "`" in value else f"`{value}`"  # a bare value (a primitive, a call) is code
        value_px = round(_words_px(shown, 7.3) + _CELL_PAD_PX)
        natural = max(natural, key_px + len(shown) * 7.3 + _CELL_PAD_PX + _CODE_PX)
        rows.append(
            f'<div class="jm-row" role="row" style="display:flex;flex-wrap:wrap;border-top:{LINE};{LINE_COLOUR}">'
            f'<div class="jm-th" role="rowheader" style="flex:0 0 {key_px}px;box-sizing:border-box;padding:2px 6px;'
            f'{TINT};font-weight:600">{whole_words_html(key)}</div>'
            f'<div class="jm-td" role="cell" style="flex:1 1 {value_px}px;box-sizing:border-box;padding:2px 6px">'
            f"{whole_words_html(shown)}</div></div>"
        )
    return (
        f'<div class="jm-facts" role="table" style="{_ROOT};max-width:{natural:.0f}px;font-size:12.5px;border-bottom:{LINE};{LINE_COLOUR}">'
        f"{''.join(rows)}</div>"
    )
