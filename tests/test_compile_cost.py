"""%%jax_compiles on what a compilation costs: where a slow program's size comes from (jax#2777 unrolled
loops, jax#10615 large constants), donated buffers JAX could not reuse (jax#9237, jax#12514) and misses of
the persistent compilation cache. Asserts on ``to_dict()``; never on timings."""

from __future__ import annotations

import json
import tempfile
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxmagic import probes
from jaxmagic._jax.compile_log import parse_persistent_cache_line
from jaxmagic._jax.restore import take_snapshot
from jaxmagic.probes._compiles.program_size import measure


def test_an_unrolled_python_loop_is_named_with_its_line_and_equations_per_iteration():
    # jax#2777: a Python for loop inside jit traces one copy of its body per iteration
    def simulate(x):
        for t in range(150):
            x = jnp.sin(x) * 0.5 + t
        return x

    with probes.compiles() as report:  # a cell that asks: its slowest compilation is examined, slow or not
        simulate_jit = jax.jit(simulate)
        simulate_jit(jnp.ones(8))
    data = json.loads(json.dumps(report.to_dict()))
    size = data["sizes"][0]
    assert size["function"] == "simulate" and size["equations"] == 450
    top = size["lines"][0]
    assert top["line"]["code"] == "x = jnp.sin(x) * 0.5 + t"
    assert (top["equations"], top["per_iteration"], top["iterations"]) == (450, 3, 150)
    assert top["loop"] == "for t in range(150)"
    assert "jax.lax.fori_loop" in size["fix"] and "Not tried" in size["fix_trial"]
    assert size["provenance"]["made_at"]["code"] == "x = jnp.sin(x) * 0.5 + t"
    assert size["provenance"]["started_by"]["code"] == "simulate_jit(jnp.ones(8))"
    assert report.summary.startswith("`simulate` took ")
    assert "a Python loop unrolled (3 equations x 150 iterations)" in report.summary
    assert "jax.lax.fori_loop" in report.first_fix
    # a finding to act on when slow, a note when not (how long it took is not asserted: timings vary)
    assert (report.status.value != "ok") == size["slow"]


def test_a_closed_over_array_is_a_constant_with_its_bytes_and_line():
    # jax#10615: a large NumPy array closed over by the jitted function is baked into the program
    table = np.ones((1024, 512), np.float32)

    def lookup(x):
        return x @ table

    with probes.compiles() as report:
        jax.jit(lookup)(jnp.ones((4, 1024)))
    size = report.to_dict()["sizes"][0]
    assert size["constant_bytes"] == 1024 * 512 * 4
    assert size["constants"][0]["type"] == "float32[1024,512]"
    assert size["constants"][0]["line"]["code"] == "return x @ table"
    assert "as an argument" in size["fix"]
    # tried by lowering the same equations with the constant as an argument: the constant leaves the program
    assert size["fix_trial"].startswith("Tried: the same program with its constants as arguments lowers in")
    assert "2.0 MB of constants no longer written into it" in size["fix_trial"] or "MiB" in size["fix_trial"]
    assert "2.0 MB" in report.summary or "MiB" in report.summary or "MB" in report.summary


def test_the_watch_examines_no_quick_compilation():
    def small(x):
        return x + 1

    with probes.compiles(slowest=False, try_fixes=False) as report:
        jax.jit(small)(jnp.ones(3))
    assert report.to_dict()["sizes"] == []


def test_measure_counts_equations_inside_a_scan_body_by_its_line():
    def body(carry, x):
        carry = carry + jnp.cos(x)
        return carry, carry

    def run(xs):
        return jax.lax.scan(body, 0.0, xs)

    total, lines, constants = measure(jax.make_jaxpr(run)(jnp.ones(5)))
    assert total >= 3 and constants == []
    assert any(line.line is not None and line.line.code == "carry = carry + jnp.cos(x)" for line in lines)


def test_an_unusable_donation_names_the_argument_why_and_the_fix():
    # jax#9237 / jax#12514: "Some donated buffers were not usable" names no argument
    def update(state, batch):
        return {"w": state["w"] - batch.mean()}

    update_jit = jax.jit(update, donate_argnums=(0, 1))
    state, batch = {"w": jnp.ones(3)}, jnp.ones((4, 4))
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        with probes.compiles() as report:
            update_jit(state, batch)
    # issue 61: the report names it, so JAX's own warning (naming no argument) is not shown above it as well
    assert not any("Some donated buffers were not usable" in str(w.message) for w in shown)
    (donation,) = report.to_dict()["donations"]
    assert donation["function"] == "update" and donation["argument"] == "batch"
    assert donation["type"] == "float32[4,4]"
    assert "no output has its shape and dtype" in donation["why"]
    assert "Stop donating `batch`" in donation["fix"]
    assert donation["line"]["code"] == "update_jit(state, batch)"
    # on CPU, JAX 0.12 implements donation: the reused argument is deleted, the unusable one kept
    assert state["w"].is_deleted() and not batch.is_deleted()
    assert report.summary.startswith("Donated `batch` of `update` was not reused")
    assert warnings.showwarning is not None and not any(
        f[1] is not None and "donated buffers" in f[1].pattern for f in warnings.filters if f[0] == "always"
    )


def test_jax_s_donation_warning_shows_when_the_report_cannot_name_the_argument(monkeypatch):
    """Only a warning the report explains is kept out of the cell's output: one whose lowering frame cannot be
    read is shown as JAX wrote it, and so is every one when the caller does not show the findings."""
    import jaxmagic.probes._compiles.donations as donations

    for unreadable, setting in ((True, "explained"), (False, "shown")):
        if unreadable:
            monkeypatch.setattr(donations, "lowering_in_progress", lambda frame: None)
        else:
            monkeypatch.undo()

        def update2(state, batch):  # a new function each time: JAX lowers it again, and warns again
            return {"w": state["w"] - batch.mean()}

        update_jit = jax.jit(update2, donate_argnums=(0, 1))
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("default")
            with probes.compiles(donation_warnings=setting) as report:
                update_jit({"w": jnp.ones(3)}, jnp.ones((4, 4)))
        assert any("Some donated buffers were not usable" in str(w.message) for w in shown), (unreadable, setting)
        assert len(report.donations) == (0 if unreadable else 1)


def test_a_donated_argument_the_program_never_reads_is_said_to_donate_nothing():
    # jax#9675 asks for loud failures when donation does not work; jax#2936: "buffers that are donated but
    # not used are currently not marked as deleted". JAX prunes the unread argument and warns about nothing.
    def advance(params, scratch):
        return params * 0.9

    advance_jit = jax.jit(advance, donate_argnums=(0, 1))
    params, scratch = jnp.ones(3), jnp.ones((4, 4))
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        with probes.compiles() as report:
            advance_jit(params, scratch)
    assert not any("donated" in str(w.message) for w in shown)  # JAX says nothing
    assert params.is_deleted() and not scratch.is_deleted()  # observed: only the read one was donated
    (donation,) = report.to_dict()["donations"]
    assert (donation["function"], donation["argument"], donation["type"]) == ("advance", "scratch", "float32[4,4]")
    assert donation["unread"] is True
    assert donation["why"].startswith("JAX drops it from the compiled program, so nothing is donated")
    assert donation["fix"].startswith("Remove `scratch` from donate_argnums / donate_argnames")
    assert donation["line"]["code"] == "advance_jit(params, scratch)"
    assert report.summary.startswith(
        "`scratch` is donated to `advance` but the program never reads it: JAX drops it from the compiled program"
    )


def test_a_read_donated_argument_and_keep_unused_are_not_reported_as_unread():
    def advance2(params, scratch):
        return params * 0.9

    with warnings.catch_warnings(), probes.compiles() as report:
        warnings.simplefilter("ignore")  # the kept one is donated but no output is left for it: JAX warns
        jax.jit(advance2, donate_argnums=(0,))(jnp.ones(3), jnp.ones(2))  # the unread one is not donated
        jax.jit(advance2, donate_argnums=(0, 1), keep_unused=True)(jnp.ones(3), jnp.ones(3))  # kept: donated
    assert [d for d in report.to_dict()["donations"] if d["unread"]] == []


def test_a_persistent_cache_miss_says_it_will_miss_again_under_the_min_compile_time():
    before = take_snapshot()
    old = jax.config.values["jax_compilation_cache_dir"]
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp())
    try:

        def quick_fn(x):
            return x * 7 + 1

        with probes.compiles() as report:
            jax.jit(quick_fn)(jnp.ones(5))
    finally:
        jax.config.update("jax_compilation_cache_dir", old)
    assert take_snapshot() == before
    misses = report.to_dict()["cache_misses"]
    mine = misses[0]
    assert mine["function"] == "quick_fn" and mine["written"] is False
    assert "jax_persistent_cache_min_compile_time_secs" in mine["why_not_written"]
    assert "no entry for `quick_fn`" in mine["why"]
    assert 'jax_persistent_cache_min_compile_time_secs", 0' in mine["fix"]
    assert mine["line"]["code"] == "jax.jit(quick_fn)(jnp.ones(5))"


def test_persistent_cache_lines_are_read():
    line = parse_persistent_cache_line(
        "Not writing persistent cache entry with key 'jit_f-abc' since its size (120 bytes) is less than "
        "threshold (1000 bytes)"
    )
    assert line is not None and (line.event, line.module, line.size, line.limit) == ("too_small", "jit_f", 120, 1000.0)
    hit = parse_persistent_cache_line("Persistent compilation cache hit for 'jit_f' with key 'jit_f-abc'")
    assert hit is not None and hit.event == "hit"
    assert parse_persistent_cache_line("Compiling jit(f) with global shapes") is None


def test_the_doctor_shows_the_unusable_donation():
    def update2(state, batch):
        return state - batch.mean()

    update_jit = jax.jit(update2, donate_argnums=(0, 1))
    x, batch = jnp.ones(3), jnp.ones((2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with probes.doctor(
            namespace={"update_jit": update_jit}, skip=("nans", "leaks", "keys", "live", "transfers")
        ) as report:
            update_jit(x, batch)
    titles = [f.title for f in report.findings]
    assert any(t.startswith("Donated `batch` of `update2` was not reused") for t in titles), titles


def test_the_doctor_shows_a_donated_argument_the_program_never_reads():
    def update3(state, unused_grads):
        return state * 2

    update_jit = jax.jit(update3, donate_argnums=(1,))
    with probes.doctor(
        namespace={"update_jit": update_jit}, skip=("nans", "leaks", "keys", "live", "transfers")
    ) as report:
        update_jit(jnp.ones(3), jnp.ones(3))
    (finding,) = [f for f in report.findings if "never reads" in f.title]
    assert finding.title.startswith("`unused_grads` is donated to `update3` but the program never reads it")
    assert "Remove `unused_grads` from donate_argnums" in finding.fix


def test_the_watch_tells_an_unusable_donation_once_in_the_cells_words(ip):
    # the watch runs the compiles probe on every cell: the same finding, told once
    ip.run_cell("%jax_watch -o wlog", store_history=True)
    try:
        ip.run_cell(
            "import warnings\nwarnings.simplefilter('ignore')\n"
            "def apply(params, grads):\n    return params - grads.sum()\n"
            "apply_jit = jax.jit(apply, donate_argnums=(0, 1))",
            store_history=True,
        )
        ip.run_cell("new = apply_jit(jnp.ones(3), jnp.ones((2, 5)))", store_history=True)
        ip.run_cell("new = apply_jit(jnp.ones(3), jnp.ones((2, 5)))", store_history=True)
        found = [f for f in ip.user_ns["wlog"].to_dict()["findings"] if "Donated" in f["summary"]]
    finally:
        ip.run_cell("%jax_watch off", store_history=True)
        ip.run_cell("warnings.resetwarnings()", store_history=True)
    (donation,) = found
    assert donation["summary"].startswith("Donated `grads` of `apply` was not reused")
    assert donation["line"]["code"].strip() == "new = apply_jit(jnp.ones(3), jnp.ones((2, 5)))"
    assert "Stop donating `grads`" in donation["fix"]


def test_the_watch_tells_a_donated_argument_never_read(ip):
    ip.run_cell("%jax_watch -o wlog2", store_history=True)
    try:
        ip.run_cell(
            "def refresh(params, stale):\n    return params + 1\nrefresh_jit = jax.jit(refresh, donate_argnums=(1,))",
            store_history=True,
        )
        ip.run_cell("fresh = refresh_jit(jnp.ones(3), jnp.ones(3))", store_history=True)
        found = [f for f in ip.user_ns["wlog2"].to_dict()["findings"] if "never reads" in f["summary"]]
    finally:
        ip.run_cell("%jax_watch off", store_history=True)
    (donation,) = found
    assert donation["summary"].startswith("`stale` is donated to `refresh` but the program never reads it")
    assert donation["line"]["code"].strip() == "fresh = refresh_jit(jnp.ones(3), jnp.ones(3))"
    assert "Remove `stale` from donate_argnums" in donation["fix"]


def test_the_users_warning_filters_still_decide_what_is_shown_or_raised():
    def scale(v, weights):
        return v * weights.mean()

    scale_jit = jax.jit(scale, donate_argnums=(0, 1))
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("ignore")
        with probes.compiles() as report:
            scale_jit(jnp.ones(3), jnp.ones(7))
    assert shown == [] and report.donations[0].argument == "weights"  # seen, and not shown

    def scale2(v, other):
        return v * 2 + other.sum()

    scale2_jit = jax.jit(scale2, donate_argnums=(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            with probes.compiles() as report:
                scale2_jit(jnp.ones(3), jnp.ones(7))
            raised = None
        except UserWarning as error:
            raised = error
    assert raised is not None and "Some donated buffers were not usable" in str(raised)
    assert report.donations[0].argument == "other"
