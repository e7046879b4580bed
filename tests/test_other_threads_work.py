"""%%jax_profile and %%jax_transfers tell the cell's own work from another thread's.

The shape of jax#6651 ("JAX profiler does not trace tfds usage?": a dataset prefetching on its own thread
beside the training loop): a background thread loops on its own jitted function while the cell runs. The
profile made its kernels "Most kernel time: `g_bg` 85%" of a cell that never called it; a thread whose own
transfer guard logs (a data loader under ``jax.transfer_guard("log")``) had its copies put on whichever
line of the cell was running. Each test waits until the other thread has worked during the block, so the
outcome does not depend on timing.
"""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxmagic import probes


class Background:
    """A thread calling ``work`` until stopped; ``wait_for(n)`` returns once it has made n more calls."""

    def __init__(self, work):
        self.work, self.calls = work, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.work()
            self.calls += 1
            time.sleep(0.001)

    def __enter__(self):
        self._thread.start()
        self.wait_for(2)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)

    def wait_for(self, more: int, then=lambda: None) -> None:
        target, deadline = self.calls + more, time.monotonic() + 60
        while self.calls < target and time.monotonic() < deadline:
            then()


def test_a_background_threads_kernels_are_not_the_cells():
    @jax.jit
    def g_bg(x):
        for _ in range(8):
            x = jnp.sin(x) @ x
        return x

    @jax.jit
    def cell_step(x):
        return jnp.cos(x).sum()

    x_bg, y = jnp.ones((96, 96)), jnp.ones((32, 32))
    cell_step(y).block_until_ready()
    with Background(lambda: g_bg(x_bg).block_until_ready()) as background:
        with probes.profile() as report:
            background.wait_for(10, then=lambda: cell_step(y).block_until_ready())
    assert report.line("jnp.sin(x) @ x") is None  # g_bg's line is not among the cell's
    top = report.lines[0]
    assert top.line is not None and top.line.code == "return jnp.cos(x).sum()"
    others = report.other_threads
    assert others is not None and others.functions == ["g_bg"] and others.calls >= 10
    assert "Another thread ran `g_bg` while the cell did" in report.summary
    assert report.program("g_bg") is None  # nor its program, captured from the other thread's calls


def test_a_background_threads_logged_transfers_are_not_put_on_the_cells_line():
    @jax.jit
    def g_bg(x):
        return x * 2

    host = np.ones((16, 16), np.float32)

    def copy_in_background():
        with jax.transfer_guard("log"):  # the thread's own guard: its copies are logged too
            g_bg(host).block_until_ready()

    y = jnp.ones(3)
    with Background(copy_in_background) as background:
        with probes.transfers() as report:
            background.wait_for(5, then=lambda: (y * y).block_until_ready())
    assert report.total == 0 and report.transfers == []  # the cell made none
    assert report.other_threads >= 5
    assert "made by other threads while the cell ran" in report.summary
    assert report.status.value == "ok"
