"""The doctor's and the watch's NaN findings name ``%jax_debug`` as the next step (issue 40, part 3), and
following it stops at the line they name, in the iteration they name."""

from __future__ import annotations

CELL_SETUP = """
def next_step_body(c, x):
    y = jnp.log(c - x)
    return c, y
@jax.jit
def next_step_run(c0, xs):
    return jax.lax.scan(next_step_body, c0, xs)
next_step_xs = jnp.arange(20.0) / 10.0
"""


def test_the_doctors_nan_finding_leads_to_the_debugger_at_its_line(ip):
    ip.run_cell(CELL_SETUP)
    ip.run_cell("%%jax_doctor -o next_step_doctor\nout = next_step_run(1.0, next_step_xs)")
    finding = next(f for f in ip.user_ns["next_step_doctor"].to_dict()["findings"] if f["area"] == "NaN")
    assert "%jax_debug" in finding["debug_step"] and "`y = jnp.log(c - x)`" in finding["debug_step"]
    # following it: the NaN probe raises, then the debugger stops at that line
    ip.run_cell("%%jax_nans\nout = next_step_run(1.0, next_step_xs)")
    ip.run_cell("%jax_debug --no-stop -o next_step_debug")
    stopped = ip.user_ns["next_step_debug"].to_dict()
    assert stopped["stopped"]["line"]["code"] == "y = jnp.log(c - x)"
    assert [s["index"] for s in stopped["steps"]] == [11]  # log(0) at step 10 is -inf, no error: NaN at 11
    # the magic's own call (`get_ipython().run_cell_magic(...)`) heads the error's traceback: not a frame of yours
    assert not any("run_cell_magic" in frame["line"]["code"] for frame in stopped["callers"])
    assert stopped["callers"][0]["line"]["code"] == "out = next_step_run(1.0, next_step_xs)"


def test_the_watchs_nan_finding_names_the_debugger_too(ip):
    ip.run_cell(CELL_SETUP)
    ip.run_line_magic("jax_watch", "on")
    try:
        ip.run_cell("out = next_step_run(1.0, next_step_xs)")
        ip.run_line_magic("jax_watch", "status -o next_step_log")
    finally:
        ip.run_line_magic("jax_watch", "off")
    finding = next(f for f in ip.user_ns["next_step_log"].findings if f.area == "NaN")
    assert "%jax_debug" in finding.to_dict()["debug_step"]
