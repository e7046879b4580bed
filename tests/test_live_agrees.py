"""The live view says what the final report will say (issue 45, part 4): the same counts and the same line,
and a watched cell's card shows a function over its compilation budget while the cell still runs."""

from __future__ import annotations

STEP = "@jax.jit\ndef {name}(x):\n    return x * 2\n"


def test_the_doctors_live_counts_are_the_reports(ip):
    ip.run_cell(STEP.format(name="live_doctor_step"))
    ip.run_cell(
        "%%jax_doctor -o live_doctor\n"
        "from jaxmagic.probes._support import progress as live_progress_module\n"
        "for n in (1, 2, 3):\n"
        "    y = live_doctor_step(jnp.ones(n))\n"
        "live_snapshot = live_progress_module._board.snapshot()\n"
    )
    snapshot = ip.user_ns["live_snapshot"]
    report = ip.user_ns["live_doctor"].to_dict()
    assert dict(snapshot.counters)["compilations of your functions"] == 3  # not 6: the doctor's and the probe's
    (live,) = [f for f in snapshot.findings if "live_doctor_step" in f]
    finding = next(f for f in report["findings"] if f["area"] == "recompilation")
    assert "compiled 3 times" in live and "compiled 3 times" in finding["title"]
    # the line the report points at (the call), not the decorator
    assert (
        f"line {finding['line']['lineno']}" in live and finding["line"]["code"] == "y = live_doctor_step(jnp.ones(n))"
    )


def test_the_watchs_card_shows_a_function_over_budget_before_the_cell_ends(ip):
    ip.run_cell(STEP.format(name="live_watch_step"))
    ip.run_line_magic("jax_watch", "on --budget 2")
    try:
        ip.run_cell(
            "from jaxmagic.ipython import watch_hook as live_watch_hook\n"
            "for n in (1, 2, 3):\n"
            "    y = live_watch_step(jnp.ones(n))\n"
            "live_watch_seen = live_watch_hook.current(get_ipython()).live_progress()[1]\n"
        )
    finally:
        ip.run_line_magic("jax_watch", "off")
    seen = ip.user_ns["live_watch_seen"]
    assert any("`live_watch_step` compiled 3 times so far (budget 2)" in f for f in seen), seen
