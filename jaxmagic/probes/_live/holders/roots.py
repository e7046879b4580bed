"""Where the holder search starts: a namespace's variables, IPython's output cache, the last traceback's frames.

Each root is ``(name, value, kind)``; the kinds, in order of preference, are
``KIND_NAME``, ``KIND_OUTPUT`` and ``KIND_TRACEBACK``. ``holder_walk`` walks from them.
"""

from __future__ import annotations

import itertools
import operator
import sys
import types
from typing import Any

from jaxmagic.probes._live.holders.walk import collector_paused, is_library_module
from jaxmagic.usercode.source import running_shell

# Kinds of holder, in order of preference: a user-visible name explains an
# array better than IPython's cache or a traceback does.
KIND_NAME = "name"  # reached from a variable of the user's namespace
KIND_OUTPUT = "output"  # IPython's output cache: Out[n], _, __, ___
KIND_TRACEBACK = "traceback"  # the frames of the last error (sys.last_traceback)
KIND_ORDER = {KIND_NAME: 0, KIND_OUTPUT: 1, KIND_TRACEBACK: 2}

# Names IPython (and Python) put into a namespace that are not the user's variables:
# its output cache and input history hold references the user did not make (DESIGN.md).
_IPYTHON_NAMES = {
    "In",
    "Out",
    "_oh",
    "_ih",
    "_dh",
    "_i",
    "_ii",
    "_iii",
    "exit",
    "quit",
    "get_ipython",
    "open",
    "_",
    "__",
    "___",
}
_OUTPUT_ALIASES = ("_", "__", "___")


def namespace_roots(namespace: dict[str, object] | None) -> list[tuple[str, Any, str]]:
    """The roots to search from in a (possibly IPython) namespace: (label, object, kind).

    User variables come first; IPython's output cache (``Out[n]``, ``_``) is a
    root of its own kind, and its aliases (``_12``, ``_oh``) are skipped so an
    array in it is named once, the way the user sees it.
    """
    if not namespace:
        return []
    with collector_paused():  # a tuple per name: see collector_paused
        names, values = list(namespace), list(namespace.values())
        # C loops over the names (a namespace may hold a million): only the few that start
        # with "_" are looked at one by one.
        skipped = set(filter(_is_not_a_variable, filter(operator.methodcaller("startswith", "_"), names)))
        skipped.update(_IPYTHON_NAMES & namespace.keys())
        skipped.update(itertools.compress(names, map(operator.is_, values, itertools.repeat(namespace))))
        kept = map(operator.not_, map(skipped.__contains__, names))
        roots = list(itertools.compress(zip(names, values, itertools.repeat(KIND_NAME)), kept))
        del names, values
    out = namespace.get("Out")
    outputs = set()
    if isinstance(out, dict):
        for number, value in list(out.items()):
            roots.append((f"Out[{number}]", value, KIND_OUTPUT))
            outputs.add(id(value))
    for alias in _OUTPUT_ALIASES:
        value = namespace.get(alias)
        if value is None or isinstance(value, str):
            continue  # IPython's empty default
        # IPython stops updating _ once the user assigns it (for _ in range(10): ...): then
        # it is an ordinary variable.
        roots.append((alias, value, KIND_OUTPUT if id(value) in outputs or not isinstance(out, dict) else KIND_NAME))
    return roots


def user_roots(namespace: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """The variables of a namespace a person made: no ``_``-names, no IPython history or helpers,
    no library modules."""
    return [
        (name, value, KIND_NAME)
        for name, value in list(namespace.items())
        if not name.startswith("_") and name not in _IPYTHON_NAMES and not is_library_module(value)
    ]


def _is_not_a_variable(name: str) -> bool:
    # __name__, __builtins__ (Python's), _12 and _i12 (IPython's history)
    return (name.startswith("__") and name.endswith("__")) or _is_history_alias(name)


def _is_history_alias(name: str) -> bool:
    # _12 (output 12) and _i12 (input 12)
    return name.startswith("_") and (name[1:].isdigit() or (name.startswith("_i") and name[2:].isdigit()))


def traceback_roots() -> list[tuple[str, Any, str]]:
    """Local variables of the frames that kept tracebacks hold: the last error's, and the one
    IPython's traceback printer keeps after showing it (``sys.last_traceback`` may have moved on
    to a later error, e.g. a UsageError, while IPython still holds the earlier frames)."""
    tracebacks = [getattr(sys, "last_traceback", None)]
    last = getattr(sys, "last_exc", None)
    tracebacks.append(getattr(last, "__traceback__", None))
    printer = getattr(running_shell(), "InteractiveTB", None)
    tracebacks.append(getattr(printer, "tb", None))
    roots = []
    seen_frames: set[int] = set()
    for tb in tracebacks:
        while isinstance(tb, types.TracebackType):
            frame = tb.tb_frame
            tb = tb.tb_next
            if frame.f_code.co_name == "<module>" or id(frame) in seen_frames:
                continue  # a cell's own frame: its locals are the namespace, already searched
            seen_frames.add(id(frame))
            try:
                local_items = list(frame.f_locals.items())
            except Exception:
                continue
            for name, value in local_items:
                roots.append((f"traceback: {frame.f_code.co_name}() {name}", value, KIND_TRACEBACK))
    return roots
