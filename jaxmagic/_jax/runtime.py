"""The state of JAX in this process, as JAX's private modules know it: whether a backend started, the
traceback filtering mode, a running profiler session, the tracing context, "at the top level?".

Part of what ``compat.py`` was (issue 55.4): each question of ``jax._src`` is a function in the module
of its theme, so a JAX release that moves something breaks one module, and each answer says what it does
when the private name is gone. Nothing outside ``jaxmagic/_jax/`` imports ``jax._src``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


def backend_started() -> bool:
    """True once JAX has created its backends (``jax.live_arrays()`` or ``jax.devices()`` would
    otherwise start one, after which fake CPU devices can no longer be added).

    A JAX without the private helper is assumed started: asking would start it anyway.
    """
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return True


def unregister_duration_listener(listener: Callable[..., None]) -> None:
    """Remove a ``jax.monitoring`` duration listener (JAX has no public way); quiet if it is gone."""
    with contextlib.suppress(Exception):
        from jax._src import monitoring

        monitoring.unregister_event_duration_listener(listener)


def traceback_filtering_mode() -> str | None:
    """The traceback filtering mode JAX resolves ``auto`` to right now, or None if JAX cannot say."""
    try:
        from jax._src import traceback_util

        return traceback_util._filtering_mode()
    except Exception:
        return None


def profiler_session_active() -> bool:
    """True while a ``jax.profiler`` trace is running (``start_trace`` would raise); False if JAX cannot say."""
    try:
        from jax._src import profiler

        state = profiler._profile_state  # JAX 0.12 names the running session `session`, 0.10 `profile_session`
        return getattr(state, "session", None) is not None or getattr(state, "profile_session", None) is not None
    except Exception:
        return False


def trace_context_size() -> int | None:
    """How many values JAX's tracing cache key holds for its context (configs and user contexts); None if unknown."""
    try:
        from jax._src import config

        return len(config.trace_context_names())
    except Exception:
        return None


def top_level_check() -> Callable[[], bool] | None:
    """A function answering "is JAX at the top level (nothing traced: a call runs eagerly)?", or None.

    It runs at every call the user's code makes of a jitted function (``%%jax_nans``' call counts), so
    it reads the two thread-local states ``core.trace_state_clean`` reads, without its three Python
    calls and two properties (~1 us a call on a loaded machine; issue 44); JAX's own function where
    those states are not found. ``tests/test_jax_structure.py`` checks the two agree."""
    try:
        from jax._src import core
    except ImportError:
        return None
    trace_state = getattr(core, "trace_state_strong_ref", None)
    axis_env_state = getattr(core, "axis_env_state", None)
    eval_trace, top_axis_env = getattr(core, "eval_trace", None), getattr(core, "top_axis_env", None)
    if (
        trace_state is not None
        and axis_env_state is not None
        and eval_trace is not None
        and top_axis_env is not None
        and all(hasattr(state, "value") for state in (trace_state, axis_env_state))
    ):

        def at_top_level() -> bool:
            trace = trace_state.value
            return trace is None or (trace is eval_trace and axis_env_state.value is top_axis_env)

        return at_top_level
    clean = getattr(core, "trace_state_clean", None)
    return clean if callable(clean) else None
