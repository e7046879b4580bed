"""An audit of %%jax_compiles, %jax_explain, %%jax_transfers, %%jax_live and %%jax_doctor on real threads
of plain JAX: each program is shaped like the thread it cites; the test asserts what was wrong before.

- PlasmaControl/DESC#1051 (host arrays Ainv_full, Z handed to a jitted projection at every call), with
  one of them read only by code whose result is unused: jit prunes it (no copy), so no report may count it.
"""

from __future__ import annotations

from tests.test_transfers_everywhere import findings_of_each, through_all_three

DEAD_INPUT = """
A_host = np.ones((64, 64), np.float32)
Z_host = np.ones((64,), np.float32)
@jax.jit
def project(x, A, Z):
    unused = A @ x  # dead code: its result is never used, so jit prunes A from the program
    return x * 2 + Z
x = jnp.ones(64)
"""


def test_an_input_read_only_by_dead_code_is_not_told_as_copied(ip):
    loop = "for i in range(3):\n    x = project(x, A_host, Z_host)"
    transfers, doctor, watch = through_all_three(ip, DEAD_INPUT, loop)
    told, doctor_uses, doctor_findings, watch_findings = findings_of_each(transfers, doctor, watch)
    line = "x = project(x, A_host, Z_host)"
    assert told == doctor_uses == {("Z_host", 3, line)}  # was: the doctor and the watch also told A_host
    assert not any("A_host" in title for title, _ in doctor_findings | watch_findings)


def test_an_input_jit_keeps_is_still_told(ip):
    """keep_unused=True keeps the dead input as a parameter of the program: it is copied, and told."""
    setup = DEAD_INPUT.replace("@jax.jit", "@functools.partial(jax.jit, keep_unused=True)")
    ip.run_cell("import functools", store_history=True)
    loop = "for i in range(3):\n    x = project(x, A_host, Z_host)"
    transfers, doctor, watch = through_all_three(ip, setup, loop)
    told, doctor_uses, _, _ = findings_of_each(transfers, doctor, watch)
    assert {argument for argument, _, _ in doctor_uses} == {"A_host", "Z_host"}
