"""Where a tracer was made and which line of the user's stored it: attribution for leaked tracers.

A tracer carries the source information JAX recorded when it was made (a jit tracer's
``_line_info``, a vmap tracer's ``source_info``, a grad tracer's on its primal), read by
``_jax.transform_stack.line_info``. Which line *stored* a leaked tracer JAX does not record:
``stored_line`` reads the traced function's own source for the one line that stores into
the holder the search found (``leaked.append(h)``, ``self.cache = h``) and gives none when
there is no such line or more than one.
"""

from __future__ import annotations

import inspect
import linecache
import re
from collections.abc import Sequence

from jaxmagic._jax import recorded_sources
from jaxmagic._jax.transform_stack import line_info, traced_for
from jaxmagic.probes._leaks.tracers.text import TRANSFORMATION_OF_TRACER, short_qualname
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.usercode.source import source_line


def transformation_of(tracer: object) -> str:
    """The transformation whose trace made ``tracer``: what JAX recorded on that trace (its debug info's
    ``traced_for``: "jit", "scan", "while_loop", "cond", "vmap"...), else what the tracer's class says. One
    class serves several staging transformations (a ``DynamicJaxprTracer`` is jit's and scan's alike), so the
    class is only the last resort: a value traced by ``lax.scan`` alone is never "jit"'s."""
    how, _ = traced_for(tracer)
    return how or TRANSFORMATION_OF_TRACER.get(type(tracer).__name__, "")


def of_tracer(
    tracer: object,
    transforms: Sequence[str] = (),
    started: SourceLine | None = None,
    outside: Sequence[SourceLine] = (),
) -> Provenance:
    """Where a tracer was made, from the line information JAX keeps on it (a grad tracer's on its
    primal). A tracer made at ``started`` or at one of the ``outside`` lines (the calls that started
    the traces) is an input of the trace, not a value computed in it: then ``made_at`` stays empty."""
    info = line_info(tracer)
    frame = recorded_sources.user_frame(getattr(info, "traceback", None))
    line = source_line(frame.file_name, frame.start_line, short_qualname(frame.function_name)) if frame else None
    if line is None:
        return Provenance(
            transforms=list(transforms),
            started_by=started,
            unknown="JAX recorded no line of your code for this tracer",
        )
    calls = {(c.filename, c.lineno) for c in (started, *outside) if c is not None}
    if (line.filename, line.lineno) in calls:
        return Provenance(
            transforms=list(transforms),
            started_by=started,
            unknown="it is an input of the traced function (the value passed at the call that started the trace), "
            "not a value computed inside it",
        )
    return Provenance(made_at=line, function=line.function, transforms=list(transforms), started_by=started)


_MUTATION = r"(?:\s*\[[^\]]*\])*\s*(?:\.(?:append|extend|insert|add|update|setdefault|__setitem__)\(|(?<![=!<>])=(?!=))"


def _holder_words(holder: str) -> list[tuple[str, list[str]]]:
    """The paths a holder text names, as (root, attributes): ``"cache.store['h']"`` -> [("cache", ["store"])];
    ``"x (closed over by a.dct['hi'][0])"`` -> [("x", []), ("a", ["dct"])]."""
    paths = [holder.split(" (", 1)[0].strip()]
    closed = re.search(r"\(closed over by ([^)]*)\)", holder)
    if closed and ("." in closed.group(1) or "[" in closed.group(1)):
        paths.append(closed.group(1))
    words = []
    for path in paths:
        root = re.match(r"[A-Za-z_]\w*", path)
        if root:
            words.append((root.group(0), re.findall(r"\.([A-Za-z_]\w*)", path)))
    return words


def function_block(filename: str, first_line: int) -> list[tuple[int, str]]:
    """The numbered source lines of the function defined at ``first_line`` (decorators included)."""
    lines = linecache.getlines(filename)
    if not lines or first_line < 1 or first_line > len(lines):
        return []
    try:
        block = inspect.getblock(lines[first_line - 1 :])
    except Exception:
        return []
    return [(first_line + i, text) for i, text in enumerate(block)]


def enclosing_function_start(filename: str, lineno: int) -> int:
    """The ``def`` line of the function whose body holds ``lineno`` (0 if none), read from the source."""
    lines = linecache.getlines(filename)
    if not lines or lineno < 1 or lineno > len(lines):
        return 0
    target = lines[lineno - 1]
    indent = len(target) - len(target.lstrip())
    for number in range(lineno - 1, 0, -1):
        text = lines[number - 1]
        stripped = text.lstrip()
        if stripped and len(text) - len(stripped) < indent:
            if re.match(r"(async\s+)?def\s", stripped):
                return number
            indent = len(text) - len(stripped)
    return 0


def stored_line(
    holder: str, filename: str, first_line: int, function: str = "", made_at: SourceLine | None = None
) -> SourceLine | None:
    """The one line of the function defined at ``filename:first_line`` that stores into ``holder``
    (``leaked.append(h)``, ``self.cache = h``, ``cache.store["h"] = h``); else, for an attribute, the one
    line of the file storing into it (a method the function calls: ``self._remember(h)``, which does
    ``self.saved = v``) - of several, the one in the function that made the value (``made_at``): a
    module's ``__init__`` that sets ``self.last_hidden = None`` stores no tracer; None when no line or
    more than one does."""
    patterns, attribute_patterns = [], []
    for root, attributes in _holder_words(holder):
        patterns.append(re.compile(rf"(?<![\w.]){re.escape(root)}(?:\.\w+)*{_MUTATION}"))
        if attributes:  # self.last_hidden = h for the holder m_leak.last_hidden
            attribute_patterns.append(re.compile(rf"\.{re.escape(attributes[-1])}\b{_MUTATION}"))
    if not patterns:
        return None
    found = _lines_matching(function_block(filename, first_line)[1:], patterns + attribute_patterns)
    if len(found) == 1:
        return source_line(filename, found[0], function)
    if found or not attribute_patterns:
        return None
    lines = list(enumerate(linecache.getlines(filename), start=1))
    statements = [re.compile(r"^\s*[\w.]+" + p.pattern) for p in attribute_patterns]  # a store, not a mention
    found = _lines_matching(lines, statements)
    if len(found) > 1 and made_at is not None and made_at.filename == filename:
        making = enclosing_function_start(filename, made_at.lineno)
        found = [number for number in found if making and enclosing_function_start(filename, number) == making]
    if len(found) != 1:
        return None
    start = enclosing_function_start(filename, found[0])
    name = re.match(r"\s*(?:async\s+)?def\s+(\w+)", linecache.getline(filename, start)) if start else None
    return source_line(filename, found[0], name.group(1) if name else function)


def _lines_matching(lines: list[tuple[int, str]], patterns: list[re.Pattern[str]]) -> list[int]:
    found = []
    for number, text in lines:
        code = text.split("#", 1)[0]
        if code.lstrip().startswith(("def ", "@", "class ")):
            continue
        if any(p.search(code) for p in patterns):
            found.append(number)
    return found
