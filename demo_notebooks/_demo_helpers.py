"""Small helpers shared by the jaxmagic demo notebooks.

The notebooks run with the working directory set to ``demo_notebooks/``, so a
plain ``from _demo_helpers import ...`` finds this module. Importing it imports
JAX but does not start a backend (no device is touched at import time).

- ``show_error(fn)``: run ``fn``; print "Type: first line" and return the
  exception (or ``None`` when nothing was raised), so a cell can assert on it.
- ``capture_stdout(fn)``: what ``fn`` printed, ``jax.debug.print`` included.
- ``capture_jax_logs``: collect the ``jax`` logger's messages for one block.
- ``CompileCounter``: count XLA backend compilations through ``jax.monitoring``.
- ``run_py(code, *args)``: run a script in a fresh Python process, with the
  environment cleaned of ``XLA_FLAGS`` and ``JAX_*`` so no setting leaks in.
- ``result_lines(proc)``: the payload of the ``RESULT ...`` lines a script printed.
- ``config_changes(before)``: which JAX config values differ from a snapshot.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.monitoring as monitoring
import numpy as np

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI colour codes (ipykernel sets FORCE_COLOR=1)."""
    return _ANSI.sub("", text)


def to64(a) -> np.ndarray:
    """``a`` as a NumPy float64 array, the reference for comparing results."""
    return np.asarray(a, dtype=np.float64)


def first_line(error: BaseException) -> str:
    """The first non-empty line of an exception's message ("" if it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def show_error(fn):
    """Run ``fn``. On an exception print ``Type: first line`` and return the exception; else return None."""
    try:
        out = fn()
    except Exception as e:  # the demos want to look at the exception, not stop
        print(f"  -> {type(e).__name__}: {first_line(e)[:150]}")
        return e
    print("  -> no error, result:", out)
    return None


def capture_stdout(fn) -> str:
    """Run ``fn`` and return what it printed.

    ``jax.debug.print`` runs as an asynchronous callback, so we wait for the
    result and for all pending effects before reading the buffer.
    """
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        jax.block_until_ready(fn())
        jax.effects_barrier()
    return buf.getvalue()


class capture_jax_logs:
    """Collect the ``jax`` logger's messages in ``self.messages`` instead of printing them."""

    def __enter__(self):
        self.logger = logging.getLogger("jax")
        self.messages: list[str] = []
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.messages.append(record.getMessage())
        self._old_propagate = self.logger.propagate
        self.logger.addHandler(self.handler)
        self.logger.propagate = False
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.propagate = self._old_propagate
        return False


class CompileCounter:
    """Count XLA backend compilations inside a ``with`` block; ``name="f"`` counts only ``jit(f)``."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self, name: str | None = None):
        self.name = name
        self.events: list[str] = []
        # Keep one bound-method object: unregistering needs the very same object.
        self._listener = self._on_event

    def _on_event(self, event, duration, **kwargs):
        fun = kwargs.get("fun_name", "?")
        if event == self.EVENT and (self.name is None or fun == f"jit({self.name})"):
            self.events.append(fun)

    def __enter__(self):
        monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc):
        monitoring.unregister_event_duration_listener(self._listener)
        return False

    @property
    def count(self) -> int:
        return len(self.events)


def clean_env(extra: dict[str, str] | None = None, *, opens_device: bool = True) -> dict[str, str]:
    """The current environment without XLA_FLAGS and JAX_* variables (``JAXMAGIC_CHILD_JAX_PLATFORMS``, where
    set, as JAX_PLATFORMS for a child that ``opens_device``), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["PYTHON_COLORS"] = "0"  # no ANSI codes in tracebacks printed by the child
    # One process at a time holds a TPU chip: where the kernel holds it (the accelerator lane sets this to
    # "cpu", tools/accelerator/device.sh), a child runs JAX there instead of failing on libtpu's lockfile.
    # A child that only reads JAX's options opens no device and keeps the machine's defaults.
    if opens_device and os.environ.get("JAXMAGIC_CHILD_JAX_PLATFORMS"):
        env["JAX_PLATFORMS"] = os.environ["JAXMAGIC_CHILD_JAX_PLATFORMS"]
    env.update(extra or {})
    return env


def run_py(
    code: str,
    *args: str,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 300,
    opens_device: bool = True,
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python process (this kernel's interpreter); return the CompletedProcess.

    Keys of ``env`` are added to a copy of the current environment from which
    XLA_FLAGS and JAX_* were removed. ``opens_device=False``: the child only
    reads JAX's configuration (see :func:`clean_env`).
    """
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=clean_env(env, opens_device=opens_device),
        timeout=timeout,
    )


def result_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """The text after ``RESULT `` on each stdout line that has it; all other output is noise."""
    return [line.split("RESULT ", 1)[1] for line in proc.stdout.splitlines() if "RESULT " in line]


def config_changes(before: dict) -> dict:
    """``{name: (before, now)}`` for every JAX config value that differs from ``before``."""
    now = dict(jax.config.values)
    names = set(before) | set(now)
    return {n: (before.get(n), now.get(n)) for n in sorted(names) if before.get(n) != now.get(n)}


def pop_last_error() -> BaseException | None:
    """The exception of the last cell that failed (IPython keeps it in ``sys.last_value``), then forget it.

    Forgetting it means a later check cannot pick up an old exception by
    mistake, and the traceback (which holds the failed cell's frames and
    their arrays) is released.
    """
    error = getattr(sys, "last_value", None)
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    return error
