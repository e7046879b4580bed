"""``%jax_watch`` as IPython ``pre_run_cell`` / ``post_run_cell`` callbacks.

Each top-level cell of the main thread is watched (``probes._watch.Watch``)
from ``pre_run_cell`` to ``post_run_cell``; post_run_cell runs after an
error or an interrupt too, so nothing stays switched on. Cells that use one of
jaxmagic's own magics are not watched (a cell magic's report covers its cell,
and its probe does not nest with the watch), nor are cells run inside them.
A cell's new findings are shown under it; a clean cell prints nothing.

The watch's probes import JAX, and a cell that runs before the user has imported
JAX has nothing to watch: ``%jax_watch on`` only installs the hook, which starts
the watch session at the first cell that begins with ``jax`` in ``sys.modules``
(or when the magic is asked for the watch's log). So turning the watch on
imports no JAX, and ``"jax" in sys.modules`` still tells a cell that used it.
"""

from __future__ import annotations

import re
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult, InteractiveShell

    from jaxmagic.ipython.explorers.watch_panel import WatchPanel
    from jaxmagic.ipython.live_view import LiveView
    from jaxmagic.probes._watch import Watch

_hooks: weakref.WeakKeyDictionary[InteractiveShell, WatchHook] = weakref.WeakKeyDictionary()
_OWN_MAGIC = re.compile(r"^\s*%{1,2}jax_(\w+)", re.MULTILINE)


class WatchHook:
    def __init__(
        self, shell: InteractiveShell, start_watch: Callable[[], Watch], areas: list[str], budget: int
    ) -> None:
        self.shell = shell
        self.areas, self.budget = areas, budget  # the options it was turned on with, known before it starts
        self._start_watch = start_watch
        self.started: Watch | None = None
        self.thread = threading.get_ident()
        self.live_view: LiveView | None = None
        self.stack: list[str] = []  # per running cell: "watch", "magic" (jaxmagic's), "control" (%jax_watch only)
        self.panel: WatchPanel | None = None  # %jax_watch --panel: refreshed from the log after each watched cell

    @property
    def watch(self) -> Watch:
        """The watch session, started on first use (its probes import JAX)."""
        if self.started is None:
            self.started = self._start_watch()
        return self.started

    def so_far(self) -> tuple[int, int]:
        """Cells watched and findings so far (none before the watch started)."""
        if self.started is None:
            return 0, 0
        return self.started.log.cells_watched, len(self.started.log.findings)

    def pre_run_cell(self, info: ExecutionInfo | None = None) -> None:
        if threading.get_ident() != self.thread:
            self.stack.append("other")
            return
        raw = getattr(info, "raw_cell", "") or ""
        magics = set(_OWN_MAGIC.findall(raw)) if "jax_" in raw else set()
        if magics:
            self.stack.append("control" if magics == {"watch"} else "magic")
            return
        if any(kind in ("watch", "magic") for kind in self.stack):
            self.stack.append("inner")
            return
        self.stack.append("watch")
        if self.started is None and "jax" not in sys.modules:
            return  # no JAX yet: nothing to watch, and starting the watch would import it
        count = getattr(self.shell, "execution_count", 0)
        self.watch.begin_cell(f"In [{count}]", self._history())
        self.live_view = None
        if self.watch.in_cell:
            self.live_view = _live_view(self.watch, in_kernel=getattr(self.shell, "kernel", None) is not None)

    def _history(self) -> tuple[object, ...]:
        """What IPython holds for its output history: its arrays are not the cells' growing memory."""
        ns = self.shell.user_ns
        return tuple(v for v in (ns.get("Out"), ns.get("_"), ns.get("__"), ns.get("___")) if v is not None)

    def post_run_cell(self, result: ExecutionResult | None = None) -> None:
        kind = self.stack.pop() if self.stack else ""
        if kind != "watch" or self.started is None or not self.started.in_cell:
            return
        count = getattr(result, "execution_count", None)
        view, self.live_view = self.live_view, None
        if view is not None:
            view.stop()
        findings = self.watch.end_cell(
            f"In [{count}]" if count is not None else None,
            self._history(),
            error=getattr(result, "error_in_exec", None),
            namespace=self.shell.user_ns,
        )
        if findings.findings or view is not None and view.handle is not None:
            try:
                from jaxmagic.ipython.show_report import display_report  # deferred: renderers load on first use

                display_report(findings, in_kernel=getattr(self.shell, "kernel", None) is not None, live_view=view)
            except Exception:  # a watched cell never fails because of the watch
                pass
        if self.panel is not None:
            try:
                self.panel.refresh(self.watch.log)  # a clean cell changes nothing: one comparison
            except Exception:  # nor because of its panel
                pass


def _live_view(watch: Watch, in_kernel: bool) -> LiveView | None:
    """A live view of the watched cell that shows itself only once a new problem is seen."""
    from jaxmagic.ipython.live_view import LiveView  # deferred: the renderers load on first use
    from jaxmagic.probes._support.progress import Board  # deferred: %load_ext imports no probe

    board = Board()
    board.add(watch.live_progress)
    view = LiveView("%jax_watch", board, in_kernel=in_kernel, only_with_findings=True)
    view.__enter__()
    return view


def set_panel(shell: InteractiveShell, panel: WatchPanel | None) -> None:
    """The panel (``explorers.watch_panel.WatchPanel``) the running watch refreshes after each cell."""
    hook = _hooks.get(shell)
    if hook is not None:
        hook.panel = panel


def current_panel(shell: InteractiveShell) -> WatchPanel | None:
    """The running watch's panel (None without ``--panel``)."""
    hook = _hooks.get(shell)
    return hook.panel if hook is not None else None


def running(shell: InteractiveShell) -> WatchHook | None:
    """The hook of the watch that is on (started or not), or None."""
    return _hooks.get(shell)


def current(shell: InteractiveShell) -> Watch | None:
    """The watch that is on (started now if it had not: its probes import JAX), or None."""
    hook = _hooks.get(shell)
    return hook.watch if hook is not None else None


def install(shell: InteractiveShell, start_watch: Callable[[], Watch], areas: list[str], budget: int) -> None:
    """Turn the watch on: ``start_watch`` makes its session when a cell first begins with JAX imported."""
    uninstall(shell)
    hook = WatchHook(shell, start_watch, areas, budget)
    _hooks[shell] = hook
    shell.events.register("pre_run_cell", hook.pre_run_cell)
    shell.events.register("post_run_cell", hook.post_run_cell)


def uninstall(shell: InteractiveShell) -> Watch | None:
    """Stop watching; the watch that was on (None if it was off or had not started)."""
    hook = _hooks.pop(shell, None)
    if hook is None:
        return None
    for event, callback in (("pre_run_cell", hook.pre_run_cell), ("post_run_cell", hook.post_run_cell)):
        try:
            shell.events.unregister(event, callback)
        except ValueError:
            pass
    if hook.started is not None:
        hook.started.close()
    return hook.started
