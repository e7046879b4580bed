"""jaxmagic's cache-key context is made right after the cell that imports JAX, so a magic that
traces afresh (%%jax_doctor, %%jax_leaks, ...) never makes the user's compiled functions compile again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "jaxmagic")
    assert "jax" not in sys.modules, "%load_ext imported JAX"
    assert "jaxmagic.probes" not in sys.modules, "%load_ext imported the probes (they load on first use)"
    ip.run_cell("import jax, jax.numpy as jnp")
    ip.run_cell('''
    @jax.jit
    def step(w, key):
        k1, k2 = jax.random.split(key)
        return w + 0.0 * jax.random.normal(k1, w.shape), k2

    def loop():
        w, key = jnp.ones(3), jax.random.key(0)
        for _ in range(3):
            w, key = step(w, key)
        return w

    compiled = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, _d, **_k: compiled.append(event) if event.endswith("backend_compile_duration") else None
    )
    loop()
    ''')
    ip.run_cell("compiled.clear()")
    ip.run_cell("%%jax_doctor\\nloop()\\n", silent=True)
    ip.run_cell("%%jax_leaks\\nloop()\\n", silent=True)
    ip.run_cell("compiled.clear()\\nloop()")
    print("AFTER", len(ip.user_ns["compiled"]))
    ip.run_line_magic("unload_ext", "jaxmagic")
    """
)


def test_a_magic_that_traces_afresh_leaves_the_users_compiled_functions_compiled():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "AFTER 0" in done.stdout, done.stdout[-2000:]
