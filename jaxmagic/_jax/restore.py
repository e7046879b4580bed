"""Snapshot and restore the process-wide JAX state that a probe may touch.

Every probe switches some JAX tool on for one cell. Whatever happens in the
cell (normal end, exception, KeyboardInterrupt), the JAX config values, the
``jax`` loggers and the ``jax.monitoring`` listener lists must be exactly as
they were before. One helper does this for all probes, so the contract lives in
one place and one test checks it for every magic.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, NamedTuple

import jax
from jax._src import monitoring

# The listener lists of jax._src.monitoring, by attribute name. Probes register
# listeners through the public API; we restore the lists themselves, in place,
# so that references other code holds to them stay valid.
_LISTENER_LISTS = (
    "_event_listeners",
    "_event_duration_secs_listeners",
    "_event_time_span_listeners",
    "_scalar_listeners",
)


class LoggerState(NamedTuple):
    # A named tuple, not a frozen dataclass: a snapshot makes one per jax logger (~25) at every
    # cell, and a frozen dataclass's __init__ costs several times a tuple's.
    level: int
    handlers: tuple[logging.Handler, ...]
    propagate: bool
    disabled: bool
    filters: tuple[logging._FilterType, ...] = ()  # typeshed's name for what Logger.filters holds


@dataclasses.dataclass(frozen=True)
class JaxStateSnapshot:
    """Config values, jax logger states and monitoring listeners at one moment."""

    config: dict[str, Any]
    loggers: dict[str, LoggerState]
    listeners: dict[str, tuple[Callable[..., object], ...]]  # jax.monitoring's listener lists

    def differences(self, other: JaxStateSnapshot) -> list[str]:
        """Human-readable list of what differs between two snapshots (empty if equal)."""
        diffs = []
        for name in sorted(set(self.config) | set(other.config)):
            if not _same(self.config.get(name), other.config.get(name)):
                diffs.append(f"config {name}: {self.config.get(name)!r} -> {other.config.get(name)!r}")
        for name in sorted(set(self.loggers) | set(other.loggers)):
            before, after = self.loggers.get(name), other.loggers.get(name)
            # A logger created during the run in its default state is no change.
            if before != after and not (before is None and after == _DEFAULT_LOGGER_STATE):
                diffs.append(f"logger {name}: {before} -> {after}")
        for name in _LISTENER_LISTS:
            if self.listeners.get(name) != other.listeners.get(name):
                diffs.append(
                    f"monitoring {name}: {len(self.listeners.get(name, ()))} -> "
                    f"{len(other.listeners.get(name, ()))} listeners"
                )
        return diffs


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. values whose == is elementwise
        return a is b


_DEFAULT_LOGGER_STATE = LoggerState(logging.NOTSET, (), True, False)


_jax_logger_cache: dict[str, Any] = {"size": -1, "loggers": {}, "placeholders": []}


def jax_loggers() -> dict[str, logging.Logger]:
    """The ``jax`` logger and every ``jax.*`` logger that exists.

    Walking every logger of a notebook process costs ~60 us and each probe's snapshot
    did it twice per cell; loggers are only ever added to the manager's dict (a
    placeholder becomes a logger in place, also counted here by type), so the walk is
    redone only when the dict or the placeholders in it changed.
    """
    registry = logging.root.manager.loggerDict
    size = len(registry)
    if size == _jax_logger_cache["size"] and not any(
        isinstance(registry.get(n), logging.Logger) for n in _jax_logger_cache["placeholders"]
    ):
        return dict(_jax_logger_cache["loggers"])
    loggers = {"jax": logging.getLogger("jax")}
    placeholders = []
    for name, logger in list(registry.items()):
        if name == "jax" or name.startswith("jax."):
            if isinstance(logger, logging.Logger):
                loggers[name] = logger
            else:
                placeholders.append(name)
    _jax_logger_cache.update(size=len(registry), loggers=loggers, placeholders=placeholders)
    return dict(loggers)


def _config_values(jax: ModuleType, names: tuple[str, ...] | None) -> dict[str, Any]:
    """The current values of the config options ``names`` (every option's, for None); unknown names are left out."""
    if names is None:
        return dict(jax.config.values)
    # jax.config.values builds a dict of all ~150 options (~25 us); a probe flips its own few, and
    # those are states with a context manager, which jax.config reads as attributes.
    values = {}
    for name in names:
        try:
            values[name] = getattr(jax.config, name)
        except AttributeError:  # an option read only through jax.config.values, or no option at all
            every = jax.config.values
            if name in every:
                values[name] = every[name]
    return values


def take_snapshot(config_names: tuple[str, ...] | None = None) -> JaxStateSnapshot:
    """Record the JAX config (``config_names`` only, if given), the ``jax`` loggers and the monitoring listeners.

    Importing jax does not start a backend, so this is safe before the user has
    chosen devices.
    """
    loggers = {
        name: LoggerState(lg.level, tuple(lg.handlers), lg.propagate, lg.disabled, tuple(lg.filters))
        for name, lg in jax_loggers().items()
    }
    listeners = {name: tuple(getattr(monitoring, name, ())) for name in _LISTENER_LISTS}
    return JaxStateSnapshot(_config_values(jax, config_names), loggers, listeners)


def restore_snapshot(snapshot: JaxStateSnapshot, config_names: tuple[str, ...] | None = None) -> None:
    """Put loggers and listeners back as recorded, and the given config values.

    ``config_names`` are the switches the probe itself flips; ``None`` restores
    every config value. A probe passes its own switches so that a setting the
    user's cell changed on purpose (``jax_enable_x64``, say) is left as the
    cell set it.
    """
    names = snapshot.config if config_names is None else config_names
    now = _config_values(jax, config_names)
    for name in names:
        if name in snapshot.config and not _same(now.get(name), snapshot.config[name]):
            jax.config.update(name, snapshot.config[name])

    current = jax_loggers()
    for name, logger in current.items():
        state = snapshot.loggers.get(name, _DEFAULT_LOGGER_STATE)
        if (
            logger.level == state.level
            and logger.propagate == state.propagate
            and logger.disabled == state.disabled
            and tuple(logger.handlers) == state.handlers
            and tuple(logger.filters) == state.filters
        ):
            continue  # the usual case, checked at once (three restores a cell while %jax_watch is on)
        # Only what changed: setLevel empties the level cache of every logger of the process (a
        # notebook holds hundreds), so calling it for each of JAX's ~25 loggers cost milliseconds.
        if logger.level != state.level:
            logger.setLevel(state.level)
        if logger.propagate != state.propagate:
            logger.propagate = state.propagate
        if logger.disabled != state.disabled:
            logger.disabled = state.disabled
        for handler in list(logger.handlers):
            if handler not in state.handlers:
                logger.removeHandler(handler)
        for handler in state.handlers:
            if handler not in logger.handlers:
                logger.addHandler(handler)
        for log_filter in list(logger.filters):
            if log_filter not in state.filters:
                logger.removeFilter(log_filter)
        for log_filter in state.filters:
            if log_filter not in logger.filters:
                logger.addFilter(log_filter)

    for name, saved in snapshot.listeners.items():
        live = getattr(monitoring, name, None)
        if isinstance(live, list) and tuple(live) != saved:
            live[:] = saved


@contextlib.contextmanager
def preserved_jax_state(config_names: tuple[str, ...] | None = None) -> Iterator[JaxStateSnapshot]:
    """Run a block and restore the JAX state afterwards, however the block ends."""
    snapshot = take_snapshot(config_names)
    try:
        yield snapshot
    finally:
        restore_snapshot(snapshot, config_names)
