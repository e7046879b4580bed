"""Where an equation of a traced program came from: the user's line, the part of it, the library function.

An equation's ``source_info`` holds the traceback of the Python code that
traced it. A backward-pass equation is traced by JAX's transpose rules, so its
own frames are JAX's: while a search traces a program
(``recorded_sources.tracing_where_traced``), JAX says which traceback each one was
attributed to - the forward line it differentiates - and that table is kept
here for the search (``remember_attributions``, ``forget_attributions``).
"""

from __future__ import annotations

import functools
import linecache
import os
import weakref
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from jaxmagic._jax import jaxpr_parts, recorded_sources
from jaxmagic._jax.jaxpr_interpreter import Position
from jaxmagic._jax.types import Equation, Jaxpr, Program, Traceback
from jaxmagic.probes._support import attribution
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.usercode.source import is_user_file, source_line, whole_expression

_attributed: dict[int, Traceback] = {}  # id(traceback) -> the traceback JAX attributed it to, during a search

# The same, kept with each traced program (``Jaxpr``) for its own equations, as long as it lives: JAX
# caches a program first traced inside a search (under ``recorded_sources.tracing_where_traced``), and a later
# search of the same function reads it from that cache, with the tracebacks the first search gave it.
_kept_attributions: dict[int, tuple[weakref.ref[Jaxpr], dict[int, Traceback]]] = {}  # id(jaxpr) -> (it, its table)


def remember_attributions(program: Program, attributed: dict[int, Traceback]) -> None:
    """Keep, for the search under way, what ``program``'s trace attributed (``recorded_sources.tracing_where_traced``)."""
    _attributed.update(_attributions_of(program, attributed))


def forget_attributions() -> None:
    """The search is over: its tracebacks need no attribution any more (the programs keep their own)."""
    _attributed.clear()


def _programs_in(program: Program) -> list[Jaxpr]:
    """``program``'s ``Jaxpr`` and every sub-program's, at any depth."""
    found, todo = [], [jaxpr_parts.closed_parts(program)[0]]
    while todo:
        jaxpr = todo.pop()
        found.append(jaxpr)
        for eqn in jaxpr.eqns:
            todo.extend(getattr(sub, "jaxpr", sub) for sub in jaxpr_parts.sub_jaxprs(eqn))
    return found


def _drop_kept(key: int, _program: object) -> None:
    _kept_attributions.pop(key, None)  # the program is gone: a new one may get its id


def _attributions_of(program: Program, attributed: dict[int, Traceback]) -> dict[int, Traceback]:
    """The attributions of ``program``'s equations: those this trace made (``attributed``) and those
    kept from an earlier search's trace of a sub-program JAX has cached since. This trace's are kept
    with each of its jaxprs, for the tracebacks its equations hold (held by them: their ids stay theirs
    while the jaxpr lives) and those the tracebacks were attributed to in turn (held by the table)."""
    found: dict[int, Traceback] = {}
    for jaxpr in _programs_in(program):
        kept = _kept_attributions.get(id(jaxpr))
        if kept is None or kept[0]() is not jaxpr:
            table = {}
            for eqn in jaxpr.eqns:
                traceback = getattr(eqn.source_info, "traceback", None)
                while id(traceback) in attributed and id(traceback) not in table:
                    table[id(traceback)] = traceback = attributed[id(traceback)]
            if not table:
                continue
            key = id(jaxpr)
            kept = _kept_attributions[key] = (
                weakref.ref(jaxpr, functools.partial(_drop_kept, key)),
                table,
            )
        found.update(kept[1])
    return found


def user_line(eqn: Equation, path: Sequence[Position] = ()) -> SourceLine | None:
    """The innermost user frame that made ``eqn``; inside a nested jit JAX records only the frames
    below the jit, so the enclosing equations of ``path`` are asked in turn (innermost first)."""
    for made in (eqn, *(p.eqn for p in reversed(path))):
        line = _line_of(made.source_info.traceback)
        if line is not None:
            return line
    return None


def in_users_derivative_rule(eqn: Equation) -> bool:
    """Whether ``eqn`` was written by the user's own derivative rule (a ``custom_vjp`` backward function,
    a ``custom_jvp`` rule): JAX's custom-derivative machinery called the innermost user frame that made it,
    so it is code of the user's, not JAX's derivative of it."""
    frames = recorded_sources.traceback_frames(eqn.source_info.traceback)  # innermost first
    for position, (filename, _, _) in enumerate(frames):
        if is_user_file(filename):
            caller = frames[position + 1][0] if position + 1 < len(frames) else ""
            return caller.replace("\\", "/").endswith("jax/_src/custom_derivatives.py")
    return False


def expression_of(eqn: Equation, line: SourceLine | None, path: Sequence[Position] = ()) -> str:
    """The part of ``line`` whose evaluation made ``eqn`` (``jnp.log(1 - p)``), read from the columns
    JAX records with each frame - following a backward equation to the forward one it was attributed
    to; "" when that is the whole line, spans lines, or is not recorded."""
    if line is None:
        return ""
    for traceback in _tracebacks_of(eqn, path):
        for frame in recorded_sources.user_frames(traceback):
            if (frame.file_name, frame.start_line) != (
                line.filename,
                line.lineno,
            ) or frame.end_line != frame.start_line:
                continue
            text = linecache.getline(line.filename, line.lineno)
            part = whole_expression(text, frame.start_column, frame.end_column, called=eqn.primitive.name)
            return part if part and part != line.code.strip() else ""
    return ""


def _tracebacks_of(eqn: Equation, path: Sequence[Position] = ()) -> list[Traceback]:
    """The equation's traceback, those it was attributed to in turn (a backward-pass equation to its forward
    one), then its enclosing equations' (innermost first) and theirs."""
    tracebacks: list[Traceback] = []
    for made in (eqn, *(p.eqn for p in reversed(path))):
        traceback = made.source_info.traceback
        while traceback is not None and id(traceback) not in {id(t) for t in tracebacks}:
            tracebacks.append(traceback)
            traceback = _attributed.get(id(traceback))
    return tracebacks


def library_called_on(line: SourceLine, eqn: Equation, path: Sequence[Position] = ()) -> str | None:
    """The library function ``line`` called where it made ``eqn``: read from the first of the equation's
    tracebacks (``_tracebacks_of``) whose innermost user line is ``line``; None when none is - then what a
    traceback's line called is another line's (a loop's call: ``jax.lax.scan`` around the body that called
    ``jax.nn.logsumexp``), never this one's."""
    for traceback in _tracebacks_of(eqn, path):
        user, called = attribution.user_line_called(traceback)
        if user is not None and (user.filename, user.lineno) == (line.filename, line.lineno):
            return called
    return None


def _line_of(traceback: Traceback | None) -> SourceLine | None:
    """The user's line of a traceback. A backward-pass equation is attributed to its forward line,
    except when the user's own code traced it during the backward pass: a ``custom_vjp`` rule."""
    frames = recorded_sources.traceback_frames(traceback)
    attributed = _attributed.get(id(traceback))
    for i, (filename, lineno, function) in enumerate(frames):
        if is_user_file(filename):
            caller = frames[i + 1][0] if i + 1 < len(frames) else ""
            if attributed is not None and not caller.endswith("custom_derivatives.py"):
                return _line_of(attributed)
            return source_line(filename, lineno, function.rsplit("<locals>.", 1)[-1])
    return _line_of(attributed) if attributed is not None else None


def public_name(function: str, filename: str = "") -> str:
    """``std`` -> ``jnp.std``: the public name a user would write, best effort."""
    name = function.split(".")[-1].lstrip("_")
    if "<" in name:
        return ""
    parts = filename.replace(os.sep, "/")
    spaces = [("jax.nn", jax.nn), ("jnp.linalg", jnp.linalg), ("jnp", jnp), ("jax.lax", jax.lax)]
    if "/nn/" in parts:
        spaces.insert(0, spaces.pop(0))
    elif "linalg" in parts:
        spaces.insert(0, spaces.pop(1))
    for prefix, space in spaces:
        if hasattr(space, name):
            return f"{prefix}.{name}"
    return name


def provenance_of(eqn: Equation, path: Sequence[Position], line: SourceLine | None, position: str) -> Provenance:
    """Where the producer was made (``attribution.of_equation``), its line the one the search attributes
    (a backward-pass operation at its forward line) and the library function called there by public name;
    ``position``: its loop iterations and branches, in words."""
    provenance = attribution.of_equation(eqn, [p.eqn for p in path], position=position)
    own = provenance.made_at
    if line is not None and own is not None and (own.filename, own.lineno) != (line.filename, line.lineno):
        provenance.library_function = ""  # what another line (a loop's call) called is not this operation's
    attributed = _attributed.get(id(getattr(eqn.source_info, "traceback", None)))
    stack = name_stack(eqn, path)
    if attributed is not None and ("transpose" in stack or "jvp" in stack):  # traced for a derivative (a transpose
        # rule, or a custom_jvp rule as `xlogy`'s): the forward line's frames name the library function (elsewhere
        # the attributed frames are a loop's call, not a library's)
        provenance.library_function = attribution.library_called(attributed) or provenance.library_function
    if line is not None:
        provenance.made_at, provenance.function, provenance.unknown = line, line.function, ""
        provenance.library_function = library_called_on(line, eqn, path) or ""
    inside_library = set()  # a library function's own jit (``jit(_std)``) is no transformation of the user's
    for enclosing in path:
        function, filename = jaxpr_parts.called_function(enclosing.eqn)
        if filename and not is_user_file(filename) and "name" in enclosing.eqn.params:
            inside_library.add(f"jit({enclosing.eqn.params['name']})")
    provenance.transforms = [t for t in provenance.transforms if t not in inside_library]
    return provenance


def name_stack(eqn: Equation, path: Sequence[Position]) -> str:
    """The name stack from the top-level program down to ``eqn`` (a body's equations carry only their own part)."""
    return "/".join(
        filter(None, [*(jaxpr_parts.name_stack_text(p.eqn) for p in path), jaxpr_parts.name_stack_text(eqn)])
    )
