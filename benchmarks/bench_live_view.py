"""What the live view of a long cell costs (goal <= 1.01x).

A live view exists only in a kernel (or a terminal), so this runs a real kernel
(jupyter_client) and times, inside it, the same long ``%%jax_compiles`` and
``%%jax_doctor`` loops (two seconds each, so the view shows and refreshes) with
the live view on and off (``JAXMAGIC_LIVE_VIEW``), alternating. The timer thread
only reads the probe's counters twice a second; the figure says whether that, the
display messages and the thread's share of the GIL show at all.
"""

from __future__ import annotations

from harness import Row, median, quartiles
from jupyter_client.manager import start_new_kernel

REPETITIONS = 7

SETUP = """
import os, time
%load_ext jaxmagic
import jax, jax.numpy as jnp

@jax.jit
def small_step(w, b, xb, yb):
    err = w * xb + b - yb
    return w - 0.1 * jnp.mean(err * xb), b - 0.1 * jnp.mean(err)

xb = jnp.linspace(-1.0, 1.0, 16)
yb = 2.0 * xb + 0.5
w0, b0 = jnp.float32(0.0), jnp.float32(0.0)
jax.block_until_ready(small_step(w0, b0, xb, yb))
LOOP = '''
w, b = w0, b0
for _ in range({calls}):
    w, b = small_step(w, b, xb, yb)
w.block_until_ready()
'''
CALLS = {"jax_compiles": 250_000, "jax_doctor": 20_000}  # about two seconds each: the view shows and refreshes

def timed(magic, live):
    os.environ["JAXMAGIC_LIVE_VIEW"] = "1" if live else "0"
    start = time.perf_counter()
    get_ipython().run_cell_magic(magic, "", LOOP.format(calls=CALLS[magic]))
    return time.perf_counter() - start
"""


def _execute(client, code: str, expression: str | None = None):
    msg_id = client.execute(code, silent=False, user_expressions={"r": expression} if expression else {})
    while True:
        reply = client.get_shell_msg(timeout=600)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    content = reply["content"]
    if content["status"] != "ok":
        raise RuntimeError(f"{content.get('ename')}: {content.get('evalue')}")
    if expression:
        return float(content["user_expressions"]["r"]["data"]["text/plain"])
    return None


def run() -> list[Row]:
    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        _execute(client, SETUP)
        rows = []
        for magic in ("jax_compiles", "jax_doctor"):
            for live in (True, False, True, False):  # warm-up
                _execute(client, f"_t = timed({magic!r}, {live})")
            on, off = [], []
            for _ in range(REPETITIONS):
                on.append(_execute(client, f"_t = timed({magic!r}, True)", "_t"))
                off.append(_execute(client, f"_t = timed({magic!r}, False)", "_t"))
            ratios = [a / b for a, b in zip(on, off)]
            rows.append(
                Row(
                    f"%%{magic} with its live view vs without, in a kernel",
                    median(on),
                    median(off),
                    goal=1.01,
                    values=ratios,
                    note=f"a loop of a small jitted step (~{median(off):.1f} s), {REPETITIONS} reps; "
                    f"middle half of the ratios: {quartiles(ratios)}",
                )
            )
        return rows
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
