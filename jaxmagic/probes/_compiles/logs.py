"""Taking JAX's compile log records (``jax_log_compiles``, ``jax_explain_cache_misses``) out of the output."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from jaxmagic._jax.compile_log import is_compile_log_message
from jaxmagic._jax.restore import jax_loggers

# The probes active now (nested ones included) and the one filter that feeds them all. A
# filter that drops a record stops the others from seeing it, so there is only ever one.
_LOG_SINKS: list[Callable[[str], None]] = []
# [the filter, the loggers it is on], while any probe is active: a pair changed in place, so Any
_LOG_FILTER: list[Any] = []


class _CompileLogFilter(logging.Filter):
    """Hands compile records to the active probes and drops them; other records pass at the user's levels.

    Defined once: a class statement per block costs ~100 us, which ``%jax_watch`` paid at every cell.
    """

    def __init__(self, user_levels: dict[str, int]):
        super().__init__()
        self.user_levels = user_levels

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is not ours to judge
            return True
        if is_compile_log_message(message):
            for sink in list(_LOG_SINKS):
                sink(message)
            return False
        return record.levelno >= self.user_levels.get(record.name, logging.NOTSET)


@contextlib.contextmanager
def compile_logs_captured(on_log: Callable[[str], None]) -> Iterator[None]:
    """Take the compile log records of every ``jax`` logger out of the output and hand them to ``on_log``.

    A filter on a logger sees the records created by that logger, so it goes on
    each ``jax.*`` logger. Other records pass as before. Loggers the user set
    above WARNING are lowered to WARNING so compile records are created at all;
    their other records below the user's level are still dropped, by the filter.
    """
    if not _LOG_SINKS:
        loggers = jax_loggers()
        user_levels = {name: logger.getEffectiveLevel() for name, logger in loggers.items()}

        log_filter = _CompileLogFilter(user_levels)
        for name, logger in loggers.items():
            logger.addFilter(log_filter)
            if user_levels[name] > logging.WARNING:
                logger.setLevel(logging.WARNING)  # put back by preserved_jax_state
        _LOG_FILTER[:] = [log_filter, list(loggers.values())]
    _LOG_SINKS.append(on_log)
    try:
        yield
    finally:
        _LOG_SINKS.remove(on_log)
        if not _LOG_SINKS and _LOG_FILTER:
            log_filter, loggers = _LOG_FILTER
            for logger in loggers:
                logger.removeFilter(log_filter)
            _LOG_FILTER.clear()
