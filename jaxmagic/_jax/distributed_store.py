"""jax.distributed's key-value store, used out of band (no collective) to bring reports to process 0.

``jax.distributed.initialize`` connects every process to a coordination service
that keeps a key-value store. Setting a key and waiting for one with a timeout
involves no collective, so a process that hangs or died cannot make the others
wait beyond the timeout: they name it instead. JAX has no public API for the
store; its client is ``jax._src.distributed.global_state.client``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jax._src import distributed

if TYPE_CHECKING:
    from jax._src.lib import _jax


def _state() -> distributed.State:
    return distributed.global_state


def _client() -> _jax.DistributedRuntimeClient:
    """The job's coordination client; asked only inside a job (``initialized()``)."""
    client = _state().client
    if client is None:
        raise RuntimeError("this process joined no jax.distributed job")
    return client


def initialized() -> bool:
    """True when this process joined a ``jax.distributed`` job."""
    try:
        return _state().client is not None
    except Exception:
        return False


def process_index_and_count() -> tuple[int, int]:
    """(this process's index, the number of processes) of the job; (0, 1) outside one."""
    state = _state()
    if state.client is None:
        return 0, 1
    return int(state.process_id), int(state.num_processes)


def put(key: str, value: bytes) -> None:
    _client().key_value_set_bytes(key, value)


def wait_for(key: str, timeout_s: float) -> bytes | None:
    """The value of ``key`` once some process set it; None when none did within ``timeout_s``."""
    try:
        return _client().blocking_key_value_get_bytes(key, max(1, int(timeout_s * 1000)))
    except Exception as error:  # the service raises on a deadline: no value
        if "DEADLINE" in str(error).upper() or "timed out" in str(error).lower() or "NOT_FOUND" in str(error).upper():
            return None
        raise


def delete(key: str) -> None:
    try:
        _client().key_value_delete(key)
    except Exception:
        pass


def count_up(key: str) -> int:
    """Add one to the counter ``key`` (made at 0); the new count."""
    return int(_client().key_value_increment(key, 1))


def count_of(key: str) -> int:
    """The counter ``key``'s value now (0 before anyone counted): one small request, no waiting."""
    try:
        return int(_client().key_value_try_get(key))
    except Exception as error:  # NOT_FOUND until the first count
        if "NOT_FOUND" in str(error).upper():
            return 0
        raise


def all_under(prefix: str) -> dict[str, bytes]:
    """Every key under ``prefix`` with its value, in one request to the coordination service."""
    return {key: bytes(value) for key, value in _client().key_value_dir_get_bytes(prefix)}
