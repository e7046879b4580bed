"""What only a real TPU or GPU can show, checked live in the accelerator lane (tools/accelerator/).

Every test here is marked ``accelerator``: where JAX has only the CPU (CI) it is skipped. What these tests
read from the device is also recorded and replayed in CI by the tests of each parser
(tests/fixtures/accelerator/), so a parser's change is tested without a device; these say that the live
path gives what the recordings gave.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import pytest

from jaxmagic import probes

pytestmark = pytest.mark.accelerator


def _line_of(function, text: str) -> int:
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


@jax.jit
def _matmul_then_tanh(a):
    with jax.named_scope("matmul"):
        y = a @ a
    return jnp.tanh(y).sum()


def test_profile_splits_device_time_by_line_and_scope():
    a = jnp.ones((2048, 2048), jnp.bfloat16)
    _matmul_then_tanh(a).block_until_ready()  # compiled outside the block: only runs are profiled
    with probes.profile() as report:
        for _ in range(3):
            _matmul_then_tanh(a).block_until_ready()
    data = report.to_dict()
    assert data["kernel_events"] > 0, data.get("trace_notes")
    assert data["devices"] and data["devices"][0].split()[0] in ("TPU", "GPU")
    top = data["lines"][0]
    assert top["line"]["lineno"] == _line_of(_matmul_then_tanh, "y = a @ a")
    assert "matmul" in top["scopes"] and top["calls"] == 3
