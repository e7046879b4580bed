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


SAME_CELL = textwrap.dedent(
    """
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "jaxmagic")
    ip.run_cell('''
    import jax, jax.numpy as jnp

    @jax.jit
    def loss(w, x):
        return jnp.sum((x @ w) ** 2)

    w, data = jnp.ones((4, 2)), jnp.ones((10, 4))
    for i in range(0, 10, 4):
        loss(w, data[i:i + 4])
    ''')
    ip.run_cell("%%jax_compiles -o rep\\nfor i in range(0, 10, 4):\\n    loss(w, data[i:i + 4])\\n", silent=True)
    print("SUMMARY", ip.user_ns["rep"].summary)
    ip.run_line_magic("unload_ext", "jaxmagic")
    """
)


def test_functions_compiled_in_the_cell_that_imports_jax_do_not_compile_again():
    """The context is made when JAX's package has run, before the importing cell compiles anything (it was
    made after that cell, and the next cell compiled `loss` twice more: %%jax_compiles blamed the shapes)."""
    done = subprocess.run([sys.executable, "-c", SAME_CELL], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SUMMARY Nothing was compiled" in done.stdout, done.stdout[-2000:]


LOADED_LATE = textwrap.dedent(
    """
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_cell('''
    import jax, jax.numpy as jnp

    @jax.jit
    def loss(w, x):
        return jnp.sum((x @ w) ** 2)

    w, data = jnp.ones((4, 2)), jnp.ones((10, 4))
    for i in range(0, 10, 4):
        loss(w, data[i:i + 4])
    ''')
    ip.run_line_magic("load_ext", "jaxmagic")
    ip.run_cell("%%jax_compiles -o rep\\nfor i in range(0, 10, 4):\\n    loss(w, data[i:i + 4])\\n", silent=True)
    rep = ip.user_ns["rep"]
    [loss] = [f for f in rep.functions if f.name == "loss"]
    print("STATUS", rep.status.value, dict(loss.causes), loss.main_cause)
    print("SUMMARY", rep.summary)
    ip.run_line_magic("unload_ext", "jaxmagic")
    """
)


def test_a_compile_made_by_jaxmagics_context_is_told_as_such():
    """JAX imported and `loss` compiled before %load_ext: the context made then makes `loss` compile once more
    per shape. JAX explains it by the context's size only."""
    done = subprocess.run([sys.executable, "-c", LOADED_LATE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # The first compilation in the cell is surely jaxmagic's; the second is compared with it (JAX names the
    # context before any other difference, so whether f32[2,4] was compiled before cannot be told).
    assert "STATUS problem {'jaxmagic': 1, 'types': 1} types" in done.stdout, done.stdout[-2000:]
