"""Catch what ``jax.debug.print``, ``jax.debug.log`` and ``jax.debug.callback`` produce, by call site.

Two probes need this: ``%%jax_print`` (every line, grouped by the print that
made it) and ``%%jax_per_device`` (the prints inside ``shard_map``, tagged with
the device). Both go through this one module.

How. All three APIs end in ``bind`` of one of two primitives,
``debug_print_p`` (print and log) and ``debug_callback_p`` (callback). While a
capture is active, both ``bind`` methods are wrapped:

* a print gets a *site*: the format string, the user's line that called it, the
  transformations around it (``vmap``, ``grad``, a ``lax.cond`` branch, ...)
  and its position in trace order. The site's key travels with the print as a
  hidden static keyword argument, so every line the print makes at run time
  can be attributed to it - whichever jit, vmap unrolling or cond branch it
  ends up in. A capture may add hidden arguments of its own (the device's
  mesh coordinates, for ``%%jax_per_device``).
* a callback's function is wrapped so that each call is recorded (with a
  short rendering of its arguments) before the user's function runs.

JAX's print formatter (``jax._src.debugging._format_print_callback``) is
replaced by one that removes the hidden arguments, formats the line exactly
as JAX does, hands it to the capture, and - if the capture wants it echoed -
writes it to stdout or to the logging record as JAX would. Executables
compiled during a capture keep that formatter; outside a capture it behaves
like JAX's own.

Wrapping at ``bind`` (not ``jax.debug.print``) also catches prints made through
a name bound before the cell (``from jax.debug import print``, the two-call
form ``log_order = jax.debug.print(ordered=True)`` made earlier) and every
re-bind of a print by a transformation (vmap unrolls a print once per sample,
with the same site). Functions whose compiled executables were cached before
the capture keep JAX's original formatter, so the probes make them trace again
(``jaxmagic._jax.retrace``) when they need every line.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any

import jax
import numpy as np
from jax._src import debugging

from jaxmagic._jax.exclusive import AlreadyActive
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import innermost_user_line

HIDDEN_PREFIX = "_jaxmagic_"
SITE_ARG = HIDDEN_PREFIX + "site"

# Frames of JAX's transformations, by (file name, function name): what a print
# or callback traced inside them will do. Checked on the stack when the print
# is traced; names missing in another JAX version only lose the annotation.
_CONTEXT_FRAMES = {
    ("api.py", "vmap_f"): "vmap",
    ("api.py", "grad_f"): "grad",
    ("api.py", "value_and_grad_f"): "grad",
    ("api.py", "grad_f_aux"): "grad",
    ("api.py", "jacfun"): "grad",
    ("api.py", "jvp"): "jvp",
    ("api.py", "vjp"): "grad",
    ("pjit.py", "_create_pjit_jaxpr"): "jit",
    ("pjit.py", "_trace_for_jit"): "jit",
    ("conditionals.py", "cond"): "cond",
    ("conditionals.py", "switch"): "cond",
    ("loops.py", "scan"): "scan",
    ("loops.py", "fori_loop"): "loop",
    ("loops.py", "while_loop"): "loop",
    ("shard_map.py", "_shard_map"): "shard_map",
    ("ad.py", "backward_pass"): "backward",
    ("ad.py", "backward_pass3"): "backward",
    ("custom_derivatives.py", "_flatten_bwd"): "backward",
}


@dataclasses.dataclass
class PrintSite:
    """One ``jax.debug.print`` / ``log`` / ``callback`` call in the user's code."""

    key: str
    fmt: str  # the format string; for a callback, the function's name
    api: str = "print"  # "print", "log" or "callback"
    line: SourceLine | None = None
    ordered: bool = False
    context: list[str] = dataclasses.field(default_factory=list)  # transformations around it, outermost first
    position: int = 0  # order in which the sites were traced (program order within one function)
    axes: list[str] = dataclasses.field(default_factory=list)  # manual mesh axes ([] outside shard_map)
    axis_sizes: list[int] = dataclasses.field(default_factory=list)
    device_ids: list[int] = dataclasses.field(default_factory=list)  # mesh order; [] if the mesh was not found

    @property
    def where(self) -> str:
        if self.line is None:
            return ""
        return f"{self.line.function} ({self.line.label or self.line.filename}, line {self.line.lineno})"


class Capture:
    """What a probe does with the sites and lines. Subclasses override what they need.

    Every method may be called from XLA's threads (callbacks run there).
    """

    def register(self, site: PrintSite) -> PrintSite:
        """Keep ``site`` (or return an equal one kept before, so a re-traced print keeps its key)."""
        return site

    def hidden_arguments(self, site: PrintSite) -> dict[str, Any]:
        """Extra hidden keyword arguments for the print (called while it is traced)."""
        return {}

    def on_print(self, site: PrintSite | None, text: str, hidden: dict[str, Any], is_log: bool) -> bool:
        """A line was printed (``site`` None: a print we did not see traced). Return True to echo it."""
        return True

    def on_callback(self, site: PrintSite, arguments: str) -> None:
        """A callback is about to run with these arguments (rendered as text)."""

    other_thread_lines = 0  # lines printed by other threads' prints during the capture (printed as usual)


_active: Capture | None = None
_capture_thread: int | None = None  # the thread the capture belongs to: other threads' prints are theirs
OTHER_THREAD = "other-thread"  # the site key of a print another thread traced during a capture
_sites: dict[str, PrintSite] = {}  # the sites made (executables compiled in a capture keep their keys)
MAX_SITES = 10_000  # bounds _sites: each site is a few hundred bytes, kept while its executable may run
_counter = itertools.count(1)
_lock = threading.Lock()


def active() -> Capture | None:
    return _active


def site(key: str) -> PrintSite | None:
    return _sites.get(key)


# -- where a print is traced ---------------------------------------------------


def _context(frame: FrameType | None) -> list[str]:
    """Transformations around the current point, outermost first (consecutive repeats merged)."""
    found = []
    while frame is not None:
        label = _CONTEXT_FRAMES.get((os.path.basename(frame.f_code.co_filename), frame.f_code.co_name))
        if label is not None:
            found.append(label)
        frame = frame.f_back
    found.reverse()
    merged = [label for i, label in enumerate(found) if i == 0 or found[i - 1] != label]
    return merged


def _new_site(fmt: str, api: str, ordered: bool, frame: FrameType) -> PrintSite:
    with _lock:
        number = next(_counter)
    return PrintSite(
        key=f"site{number}",
        fmt=fmt,
        api=api,
        line=innermost_user_line(frame),
        ordered=ordered,
        context=_context(frame),
        position=number,
    )


def _keep(capture: Capture, new: PrintSite) -> PrintSite:
    kept = capture.register(new)
    with _lock:
        _sites.setdefault(kept.key, kept)
        while len(_sites) > MAX_SITES:  # a cell re-run with a new lambda makes a new site each time
            del _sites[next(iter(_sites))]  # the oldest: its print, if it still runs, is shown untagged
    return kept


# -- the wrapped binds -----------------------------------------------------------


def _wrap_print_bind(original: Callable[..., Any]) -> Callable[..., Any]:
    def bind(*dyn_args: Any, **params: Any) -> Any:
        capture = _active
        static = dict(params.get("static_args", ()))
        if capture is None or any(_is_site_value(v) for v in static.values()):
            return original(*dyn_args, **params)  # not capturing, or a re-bind of a print already tagged

        if threading.get_ident() != _capture_thread:  # another thread's print: tagged so it is printed as usual
            args, kwargs = debugging.merge_callback_args(params["in_tree"], dyn_args, params["static_args"])
            kwargs = {**kwargs, SITE_ARG: _SiteKey(OTHER_THREAD)}
            in_tree, new_dyn, new_static = debugging._split_callback_args(tuple(args), kwargs)
            return original(*new_dyn, **dict(params, in_tree=in_tree, static_args=tuple(new_static.items())))
        fmt = str(params.get("fmt", ""))
        api = "log" if params.get("logging_record") is not None else "print"
        site = _keep(capture, _new_site(fmt, api, bool(params.get("ordered")), sys._getframe(1)))
        args, kwargs = debugging.merge_callback_args(params["in_tree"], dyn_args, params["static_args"])
        kwargs = dict(kwargs)
        kwargs.update(capture.hidden_arguments(site))
        kwargs[SITE_ARG] = _SiteKey(site.key)
        in_tree, new_dyn, new_static = debugging._split_callback_args(tuple(args), kwargs)
        params = dict(params, in_tree=in_tree, static_args=tuple(new_static.items()))
        return original(*new_dyn, **params)

    # __wrapped__ only (the name stays "bind"): a reader of the patched primitive finds JAX's own bind
    return functools.update_wrapper(bind, original, assigned=(), updated=())


class _SiteKey(str):
    """A site key as a hidden static argument (a str subclass, so it hashes and compares as one)."""


def _is_site_value(value: object) -> bool:
    return isinstance(value, _SiteKey)


def _wrap_callback_bind(original: Callable[..., Any]) -> Callable[..., Any]:
    def bind(*dyn_args: Any, callback: Callable[..., Any], **params: Any) -> Any:
        capture = _active
        if capture is None or isinstance(callback, _RecordingCallback) or threading.get_ident() != _capture_thread:
            return original(*dyn_args, callback=callback, **params)

        ordered = params.get("effect") is debugging.ordered_debug_effect
        site = _keep(capture, _new_site(_callback_name(callback), "callback", ordered, sys._getframe(1)))
        return original(*dyn_args, callback=_RecordingCallback(site.key, callback), **params)

    return functools.update_wrapper(bind, original, assigned=(), updated=())


class _RecordingCallback:
    """The user's callback, which first tells the active capture that it runs."""

    def __init__(self, site_key: str, callback: Callable[..., Any]) -> None:
        self.site_key = site_key
        self.callback = callback

    def __call__(self, *flat_args: Any) -> Any:
        capture = _active
        kept = _sites.get(self.site_key)
        if capture is not None and kept is not None:
            try:
                capture.on_callback(kept, render_arguments(flat_args))
            except Exception:  # recording must never break the user's callback
                pass
        return self.callback(*flat_args)


def _callback_name(flat_callback: Callable[..., Any]) -> str:
    """The user's function inside JAX's flattening wrapper (a closure over ``callback``)."""
    target = flat_callback
    code = getattr(target, "__code__", None)
    if code is not None and "callback" in code.co_freevars and target.__closure__:
        try:
            target = target.__closure__[code.co_freevars.index("callback")].cell_contents
        except ValueError:
            pass
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    return name.replace(".<locals>", "")


def render_arguments(flat_args: Iterable[Any], limit: int = 160) -> str:
    """The callback's arguments as short text: values for scalars, ``dtype[shape] values`` for arrays."""

    parts = []
    for value in flat_args:
        array = np.asarray(value)
        if array.ndim == 0:
            parts.append(np.array2string(array, precision=6))
        else:
            text = np.array2string(array, precision=4, threshold=8, edgeitems=2, separator=" ")
            parts.append(f"{array.dtype}{list(array.shape)} {' '.join(text.split())}")
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the formatter ----------------------------------------------------------------


def _recording_format_callback(
    fmt: str,
    np_printoptions: dict[str, Any],
    has_placeholders: bool,
    logging_record: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    """JAX's print formatter, plus: take our hidden arguments out and hand the line to the capture."""

    hidden = {name: kwargs.pop(name) for name in list(kwargs) if name.startswith(HIDDEN_PREFIX)}
    if has_placeholders:
        with np.printoptions(**np_printoptions):
            message = fmt.format(*args, **kwargs)
    else:
        message = " ".join((fmt, *(str(a) for a in args)))
    capture = _active
    echo = True
    key = hidden.get(SITE_ARG)
    if key == OTHER_THREAD:  # traced by another thread during a capture: its line, printed as usual
        if capture is not None:
            capture.other_thread_lines += 1
    elif capture is not None:
        try:
            echo = capture.on_print(
                _sites.get(str(key)) if key is not None else None, message, hidden, logging_record is not None
            )
        except Exception:  # recording must never lose the user's line
            echo = True
    if not echo:
        return
    if logging_record:
        logging_record = copy.copy(logging_record)
        logging_record.msg = message
        debugging.logger.handle(logging_record)
    else:
        sys.stdout.write(message + "\n")


@contextlib.contextmanager
def capturing(capture: Capture) -> Iterator[Capture]:
    """Route every debug print/log/callback of the block through ``capture``; wait for them at the end.

    Does not nest: a second capture while one is active raises AlreadyActive.
    """
    global _active, _capture_thread

    if _active is not None:
        raise AlreadyActive(
            "cannot run inside another magic that captures jax.debug output: "
            "%%jax_print and %%jax_per_device do not combine with each other"
        )
    print_p, callback_p = debugging.debug_print_p, debugging.debug_callback_p
    saved = (print_p.__dict__.get("bind"), callback_p.__dict__.get("bind"), debugging._format_print_callback)
    _active, _capture_thread = capture, threading.get_ident()
    # An instance attribute over the class's method (the type checker sees a method assigned).
    print_p.bind = _wrap_print_bind(print_p.bind)  # type: ignore[method-assign]
    callback_p.bind = _wrap_callback_bind(callback_p.bind)  # type: ignore[method-assign]
    debugging._format_print_callback = _recording_format_callback
    try:
        yield capture
    finally:
        try:
            jax.effects_barrier()  # lines still in flight belong to this block
        finally:
            for primitive, bind in ((print_p, saved[0]), (callback_p, saved[1])):
                if bind is None:
                    del primitive.bind  # the instance attribute; the class method shows through again
                else:
                    primitive.bind = bind  # type: ignore[method-assign]
            debugging._format_print_callback = saved[2]
            _active = None
