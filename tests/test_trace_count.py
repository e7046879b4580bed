"""The trace-count rule (issue 45, part 7): a watched or doctored cell runs the user's Python - trace-time
side effects included - no more often than the same cell unwatched, or its report says plainly that it
ran it again. The watch and the doctor name a NaN's producer after the cell; running the call again
under ``jax.debug_nans`` would make JAX re-run the function's Python de-optimized.
"""

from __future__ import annotations

import json

DEFINE = """
@jax.jit
def {name}(x):
    trace_log.append("{name}")  # a trace-time side effect: runs each time the Python runs
    return jnp.log(x) * 2.0
"""


def _traces(ip, name: str) -> int:
    return ip.user_ns["trace_log"].count(name)


def test_a_watched_cell_runs_the_users_python_as_often_as_unwatched(ip):
    ip.run_cell("trace_log = []")
    ip.run_cell(DEFINE.format(name="unwatched_f"))
    ip.run_cell("y = unwatched_f(jnp.array([-1.0, 2.0]))")
    ip.run_cell(DEFINE.format(name="watched_f"))
    ip.run_line_magic("jax_watch", "on")
    try:
        ip.run_cell("y = watched_f(jnp.array([-1.0, 2.0]))")
        ip.run_line_magic("jax_watch", "status -o trace_watch_log")
    finally:
        ip.run_line_magic("jax_watch", "off")
    assert _traces(ip, "watched_f") == _traces(ip, "unwatched_f") == 1
    nan = next(f for f in ip.user_ns["trace_watch_log"].findings if f.area == "NaN")
    assert nan.to_dict()["producer"]["primitive"] == "log"
    assert "your Python did not run again" in json.dumps(nan.to_dict())


def test_the_doctor_says_when_it_ran_the_users_python_again(ip):
    ip.run_cell("trace_log = []")
    ip.run_cell(DEFINE.format(name="doctored_f"))
    ip.run_cell("%%jax_doctor -o trace_doctor\ny = doctored_f(jnp.array([-1.0, 2.0]))")
    text = json.dumps(ip.user_ns["trace_doctor"].to_dict())
    assert "log" in text
    if _traces(ip, "doctored_f") > 1:  # the doctor's leak check keeps JAX from caching the program
        assert "your Python ran once more after the cell" in text and "`doctored_f`" in text
    else:
        assert "your Python did not run again" in text
