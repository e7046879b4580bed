"""``%jax_debug`` in process: the probe (``jaxmagic.probes.debug_after`` / ``breakpoints``) and the magic without stdin.

Shapes from real threads: a NaN in a ``lax.scan`` body after many steps (jax#5696, jax#7434), a
vmapped function where one batch element makes the NaN (jax#6181), ``jax.debug.breakpoint`` in a
notebook (jax#11880) and under ``vmap`` (jax#22693).
"""

from __future__ import annotations

import json
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxmagic.probes import breakpoints, debug_after


def body(c, x):
    y = jnp.log(c - x)  # step 900: c - x < 0
    return c + 0.001, y


@jax.jit
def run(c0, xs):
    return lax.scan(body, c0, xs)


XS = jnp.concatenate([jnp.zeros(900), jnp.full(100, 5.0)])


def failure(call):
    try:
        call()
    except Exception as error:
        return error
    raise AssertionError("the call did not fail")


def scan_nan_error():
    c0 = jnp.array(1.0)
    with jax.debug_nans(True):
        return failure(lambda: run(c0, XS))


def test_a_nan_at_step_900_of_a_scan_stops_in_the_body_at_iteration_900_with_concrete_values():
    session = debug_after(scan_nan_error())
    data = session.report.to_dict()
    json.dumps(data)  # data only
    assert data["stopped"]["line"]["code"] == "y = jnp.log(c - x)  # step 900: c - x < 0"
    assert data["stopped"]["line"]["function"] == "body"
    assert [(s["kind"], s["index"], s["size"]) for s in data["steps"]] == [("scan", 900, 1000)]
    assert data["steps"][0]["line"]["code"] == "return lax.scan(body, c0, xs)"
    values = {v["name"]: v for v in data["stopped"]["values"]}
    assert values["x"]["minimum"] == 5.0 and values["c"]["minimum"] == pytest.approx(1.9, abs=1e-3)
    assert data["stopped"]["is_argument"] == ["c", "x"]
    # the user's frames that led there: the caller's lambda, then `run` (JAX ran it op by op itself after the
    # NaN, so its frame holds c0 and xs concretely and the scan inside it is what runs again)
    assert [frame["line"]["function"] for frame in data["callers"]][-2:] == ["<lambda>", "run"]
    assert data["compiled_runs"] == 1  # the loop ran compiled once; only step 900 ran op by op
    assert data["reran_user_code"] and data["call"] == "lax.scan(body, c0, xs)"
    assert data["rerun_error"] == "FloatingPointError: invalid value (nan) encountered in log"
    namespace = session.namespace()
    assert isinstance(namespace.c, np.ndarray) and float(namespace.x) == 5.0
    session.release()
    assert session.traceback is None and session.namespace().__dict__ == {}


def body_inf_first(c, x):
    y = jnp.log(c - x)  # step 900: log(0) = -inf (no error under debug_nans); step 901: log(<0) = NaN
    return c, y


@jax.jit
def run_inf_first(c0, xs):
    return lax.scan(body_inf_first, c0, xs)


def test_a_step_that_only_made_an_inf_is_skipped_when_the_error_is_a_nan():
    # the compiled search looks for what stopped the call: under jax.debug_nans alone an inf is no error,
    # and taking its step for the failing one made the whole loop run op by op
    xs = jnp.arange(1000.0) / 900.0
    with jax.debug_nans(True):
        error = failure(lambda: run_inf_first(jnp.array(1.0), xs))
    data = debug_after(error).report.to_dict()
    assert [(s["kind"], s["index"]) for s in data["steps"]] == [("scan", 901)]
    assert data["compiled_runs"] == 1 and not any("whole loop ran op by op" in n for n in data["notes"])


def test_eager_runs_every_step_op_by_op_and_stops_at_the_same_place():
    small = jnp.concatenate([jnp.zeros(9), jnp.full(3, 5.0)])

    @jax.jit
    def short(c0, xs):
        return lax.scan(body, c0, xs)

    c0 = jnp.array(4.991)
    with jax.debug_nans(True):
        error = failure(lambda: short(c0, small))
    fast = debug_after(error).report.to_dict()
    eager = debug_after(error, eager=True).report.to_dict()
    assert fast["stopped"]["line"] == eager["stopped"]["line"]
    assert eager["steps"] == [] and eager["compiled_runs"] == 0  # nothing compiled: no iteration known
    assert fast["steps"][0]["index"] == 9


def per_example(x):
    z = x * 2.0
    return jnp.sqrt(z - 3.0)  # element 2: 1.0 * 2 - 3 < 0


def test_a_nan_in_one_element_of_a_vmapped_function_stops_in_that_element_unbatched():
    batched = jax.vmap(per_example)
    xs = jnp.array([2.0, 4.0, 1.0, 5.0])
    with jax.debug_nans(True):
        error = failure(lambda: batched(xs))
    data = debug_after(error).report.to_dict()
    assert data["stopped"]["line"]["code"].startswith("return jnp.sqrt(z - 3.0)")
    assert [(s["kind"], s["index"], s["size"]) for s in data["steps"]] == [("vmap", 2, 4)]
    values = {v["name"]: v for v in data["stopped"]["values"]}
    assert values["x"]["kind"] == "array" and values["x"]["shape"] == [] and values["z"]["maximum"] == 2.0


def test_a_vmap_called_inside_a_jitted_function_runs_only_its_failing_element():
    @jax.jit
    def loss(xs):
        return jax.vmap(per_example)(xs).sum()

    xs = jnp.array([5.0, 1.0, 4.0])
    with jax.debug_nans(True):
        error = failure(lambda: loss(xs))
    data = debug_after(error).report.to_dict()
    assert [(s["kind"], s["index"]) for s in data["steps"]] == [("vmap", 1)]
    assert data["steps"][0]["line"]["code"] == "return jax.vmap(per_example)(xs).sum()"


def test_an_error_raised_in_a_debug_callback_stops_in_the_callback_with_the_callers_values():
    def check_positive(v):
        if v.min() <= 0:
            raise ValueError("not positive")

    @jax.jit
    def step(w):
        h = w - 1.0
        jax.debug.callback(check_positive, h)
        return h * 2

    w = jnp.array([3.0, 0.5])
    error = failure(lambda: step(w))
    data = debug_after(error).report.to_dict()
    assert data["stopped"]["line"]["function"] == "check_positive"
    assert data["rerun_error"] == "ValueError: not positive"
    caller = data["callers"][-1]
    assert caller["line"]["code"] == "jax.debug.callback(check_positive, h)"
    assert {v["name"]: v["minimum"] for v in caller["values"]}["h"] == -0.5


def test_a_shape_error_inside_jit_stops_at_the_line_with_the_concrete_operands():
    @jax.jit
    def project(w, x):
        hidden = x @ w
        return hidden @ w  # (4, 3) @ (5, 3): the second matmul does not fit

    w, x = jnp.ones((5, 3)), jnp.ones((4, 5))
    error = failure(lambda: project(w, x))
    data = debug_after(error).report.to_dict()
    assert data["stopped"]["line"]["code"].startswith("return hidden @ w")
    values = {v["name"]: v for v in data["stopped"]["values"]}
    assert values["hidden"]["shape"] == [4, 3] and values["hidden"]["kind"] == "array"


def test_a_checkify_error_thrown_on_the_users_line_stops_at_that_line_and_says_what_ran_again():
    from jax.experimental import checkify

    def safe_div(a, b):
        checkify.check(jnp.all(b != 0), "b has a zero")
        return a / b

    checked = jax.jit(checkify.checkify(safe_div))
    a, b = jnp.ones(3), jnp.array([1.0, 0.0, 2.0])
    error = failure(lambda: checked(a, b)[0].throw())
    data = debug_after(error).report.to_dict()
    # The check ran inside checkify, which turns it into a value; what raised is throw() on the user's line.
    assert data["stopped"]["line"]["code"] == "error = failure(lambda: checked(a, b)[0].throw())"
    assert "b has a zero" in data["rerun_error"]


def make_matrix():
    return jnp.ones((2, 3))


def self_product(m):
    return m @ m  # (2, 3) @ (2, 3): raised while tracing, m is a tracer


def test_a_call_whose_arguments_are_computed_by_calls_is_not_run_again_and_the_report_says_why():
    try:
        jax.jit(self_product)(make_matrix())  # make_matrix() would run again: not evaluated
    except TypeError as error:
        caught = error
    data = debug_after(caught).report.to_dict()
    assert data["stopped"] is None and data["status"] == "error" and not data["reran_user_code"]
    assert "`m @ m`" not in data["unavailable"]  # an operator, not a call: nothing on that line to run
    assert "can be evaluated again" in data["unavailable"]
    assert [frame["line"]["function"] for frame in data["callers"]][-1] == "self_product"


def test_a_failing_line_inside_the_users_eager_function_is_shown_where_it_failed():
    def make_params():
        return -jnp.ones(2)

    def nan_step(p):
        return jnp.log(p)

    try:
        with jax.debug_nans(True):
            jax.jit(nan_step)(make_params())  # make_params() would run again: not evaluated
    except FloatingPointError as error:
        caught = error
    data = debug_after(caught).report.to_dict()
    # JAX re-ran nan_step op by op itself ("de-optimized"): its frame holds p concretely, at the failing line
    assert data["stopped"]["line"]["code"] == "return jnp.log(p)" and not data["reran_user_code"]
    assert {v["name"]: v["minimum"] for v in data["stopped"]["values"]}["p"] == -1.0


def test_no_exception_is_said():
    report = debug_after(None).report
    assert report.stopped is None and "no failed cell" in report.unavailable


def test_breakpoints_without_input_record_each_hit_with_its_values_under_jit_and_vmap():
    def scale(x):
        y = jnp.sin(x) * 2.0
        jax.debug.breakpoint()
        return y

    with breakpoints() as report:
        jax.jit(scale)(jnp.arange(3.0))
        jax.vmap(scale)(jnp.ones(2))  # jax#22693: a breakpoint under vmap
    data = report.to_dict()
    assert data["hit_count"] == 3 and not data["interactive"]
    first = {v["name"]: v for v in data["hits"][0]["frame"]["values"]}
    assert first["x"]["shape"] == [3] and first["y"]["maximum"] == pytest.approx(1.8186, abs=1e-3)
    assert data["hits"][1]["frame"]["values"][0]["shape"] == []  # one element at a time under vmap
    assert [hit["batch_index"] for hit in data["hits"]] == [[], [0], [1]]  # each element says which it is
    # JAX's debugger frames carry no function name: read from the source, so a hit reads "..., in scale"
    assert {hit["frame"]["line"]["function"] for hit in data["hits"]} == {"scale"}
    from jax._src.debugger import core

    assert "jaxmagic" not in core._debugger_registry  # removed after the block


def test_breakpoints_read_commands_run_statements_and_quit_stops_the_cell():
    from jaxmagic.probes import ended_by_quit

    def scale(x):
        y = jnp.sin(x) * 2.0
        jax.debug.breakpoint()
        return y

    said: list[str] = []
    answers = iter(["p y.shape", "w2 = y * 0", "p w2.sum()", "u", "q"])
    with pytest.raises(Exception) as raised, breakpoints(ask=lambda prompt: next(answers), say=said.append) as report:
        jax.jit(scale)(jnp.arange(3.0))
    assert ended_by_quit(raised.value)
    assert report.quit and report.hits[0].commands == ["p y.shape", "w2 = y * 0", "p w2.sum()", "u", "q"]
    assert "(3,)" in said and "Array(0., dtype=float32)" in said
    from jax._src.debugger import core

    assert "jaxmagic" not in core._debugger_registry


def test_end_of_input_at_the_prompt_quits_and_an_interrupt_is_a_keyboard_interrupt(caplog):
    # In a kernel, input() raises EOFError when the front end sends EOF and KeyboardInterrupt when the kernel
    # is interrupted; both reached JAX's callback and came out as "JaxRuntimeError: INTERNAL: CpuCallback error"
    from jaxmagic.probes import ended_by_quit

    def shift(x):
        y = x + 1.0
        jax.debug.breakpoint()
        return y

    def ended(prompt: str) -> str:
        raise EOFError

    with pytest.raises(Exception) as raised, breakpoints(ask=ended, say=lambda text: None) as report:
        jax.jit(shift)(jnp.arange(2.0))
    assert ended_by_quit(raised.value) and report.quit and not report.interrupted
    assert report.hits[0].commands == ["<end of input>"]
    assert "quit there (the input ended)" in report.summary

    def interrupted(prompt: str) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stopped, breakpoints(ask=interrupted, say=lambda text: None) as report:
        jax.jit(shift)(jnp.arange(2.0))
    assert report.interrupted and not report.quit and report.error == ""
    assert "interrupted at its prompt" in report.summary
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()]  # JAX's log of it: kept out
    # Issue 61: the interrupt carries the traceback of the line that was running, so once jaxmagic's frames are
    # taken out (user_traceback) the user's line is what the traceback ends in - not jaxmagic's raise
    frames = [entry.filename for entry in traceback.extract_tb(stopped.value.__traceback__)]
    assert any(name == __file__ for name in frames), frames


def test_an_interrupt_before_any_breakpoint_says_so_with_no_empty_message():
    """Issue 61: interrupted before the breakpoint was reached, the report said "The cell raised
    KeyboardInterrupt: ." - an interrupt is the user stopping the cell, and it has no message to quote."""
    from jaxmagic.report.wording import error_line

    def never(prompt: str) -> str:
        raise AssertionError("no breakpoint was reached")

    with pytest.raises(KeyboardInterrupt), breakpoints(ask=never, say=lambda text: None) as report:
        raise KeyboardInterrupt
    assert report.interrupted and report.error == "" and report.hit_count == 0
    assert report.summary == (
        "No jax.debug.breakpoint() was hit: the cell was interrupted (KeyboardInterrupt) before one ran."
    )
    assert report.status.value == "ok" and ": ." not in str(report)
    assert error_line(KeyboardInterrupt()) == "KeyboardInterrupt" and error_line(ValueError("x")) == "ValueError: x"


CELL_SETUP = """
import jax, jax.numpy as jnp
from jax import lax
def dbg_body(c, x):
    y = jnp.log(c - x)
    return c + 0.001, y
@jax.jit
def dbg_run(c0, xs):
    return lax.scan(dbg_body, c0, xs)
dbg_xs = jnp.concatenate([jnp.zeros(900), jnp.full(100, 5.0)])
dbg_c0 = jnp.array(1.0)
"""


def test_the_line_magic_after_a_failed_nans_cell_binds_the_report_and_the_values(ip):
    ip.run_cell(CELL_SETUP)
    failed = ip.run_cell("%%jax_nans\ndbg_run(dbg_c0, dbg_xs)")
    assert isinstance(failed.error_in_exec, FloatingPointError)
    result = ip.run_cell("%jax_debug -o dbg_rep --ns dbg_vals")
    assert result.success
    report = ip.user_ns["dbg_rep"]
    assert report.steps[0].index == 900 and not report.interactive  # no stdin under pytest: a report only
    assert float(ip.user_ns["dbg_vals"].x) == 5.0


def test_the_line_magic_names_its_usage_errors(ip):
    from IPython.core.error import UsageError

    result = ip.run_cell("%jax_debug 3")
    assert isinstance(result.error_in_exec, UsageError) and "takes an exception" in str(result.error_in_exec)
    result = ip.run_cell("%%jax_debug --ns v\n1")
    assert isinstance(result.error_in_exec, UsageError)


def test_the_line_magic_leaves_no_trace_after_a_stop_an_interrupt_and_a_failure_to_re_run(ip):
    from jax._src.debugger import core
    from jax._src.lax.control_flow import loops

    from jaxmagic._jax.restore import take_snapshot

    ip.run_cell(CELL_SETUP)
    scan, vmap = jax.lax.scan, jax.vmap
    before = take_snapshot()
    ip.run_cell(
        "try:\n    with jax.debug_nans(True):\n        dbg_run(dbg_c0, dbg_xs)\nexcept Exception as e:\n    dbg_e = e"
    )
    assert ip.run_cell("%jax_debug dbg_e -o dbg_rep2").success
    assert ip.user_ns["dbg_rep2"].steps[0].index == 900
    ip.run_cell("try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt as e:\n    dbg_k = e")
    assert ip.run_cell("%jax_debug dbg_k -o dbg_rep3").success
    assert "nothing failed" in ip.user_ns["dbg_rep3"].unavailable
    assert before.differences(take_snapshot()) == []
    assert jax.lax.scan is scan is loops.scan and jax.vmap is vmap
    assert "jaxmagic" not in core._debugger_registry


def double_where_loss(w, x):
    r = w * x
    h = jnp.where(r > 0, jnp.sqrt(r), 0.0)  # the double-where trap: the gradient is NaN where r < 0
    return h.sum()


def test_under_grad_it_stops_at_the_forward_line_whose_derivative_failed_with_the_primal_values():
    # The shape of jax#5798 (and #347, #1052): jnp.where guards the forward value, not its gradient.
    step = jax.jit(jax.grad(double_where_loss))
    w, x = jnp.array([1.0, -1.0, 2.0]), jnp.ones(3)
    with jax.debug_nans(True):
        error = failure(lambda: step(w, x))
    session = debug_after(error)
    data = session.report.to_dict()
    assert data["stopped"]["line"]["function"] == "double_where_loss"
    assert data["stopped"]["line"]["code"].startswith("h = jnp.where(r > 0, jnp.sqrt(r), 0.0)")
    values = {v["name"]: v for v in data["stopped"]["values"]}
    assert values["r"]["kind"] == "primal" and values["r"]["minimum"] == -1.0
    assert any("derivative" in note for note in data["notes"])
    assert list(session.namespace().r) == [1.0, -1.0, 2.0]


def test_a_jax_call_failing_on_the_users_line_with_concrete_values_is_shown_as_it_failed_without_a_re_run():
    g = jnp.array([1.0, 20.0])
    try:
        with jax.debug_nans(True):
            jnp.log(g - 10)  # the cell's own line: g is concrete, nothing of the user's to run again
    except FloatingPointError as error:
        caught = error
    data = debug_after(caught).report.to_dict()
    assert (
        data["stopped"]["line"]["code"]
        == "jnp.log(g - 10)  # the cell's own line: g is concrete, nothing of the user's to run again"
    )
    assert not data["reran_user_code"] and data["call"] == ""
    values = {v["name"]: v for v in data["stopped"]["values"]}
    assert values["g"]["maximum"] == 20.0


def test_the_line_magic_debugs_an_exception_whose_str_raises_and_says_what_it_is(ip):
    ip.run_cell(
        "class DbgBrokenStr(Exception):\n    def __str__(self):\n        raise RuntimeError('broken')\n"
        "def dbg_raiser(x):\n    raise DbgBrokenStr()\n"
        "try:\n    jax.jit(dbg_raiser)(jnp.ones(2))\nexcept DbgBrokenStr as e:\n    dbg_broken = e"
    )
    assert ip.run_cell("%jax_debug dbg_broken -o dbg_rep4").success
    data = ip.user_ns["dbg_rep4"].to_dict()
    assert data["stopped"]["line"]["code"] == "raise DbgBrokenStr()" and "DbgBrokenStr" in data["rerun_error"]


def test_a_scan_called_on_the_failing_line_is_run_compiled_to_its_failing_step():
    def body_of(c, x):
        y = jnp.log(c - x)
        return c + 0.001, y

    c0 = jnp.array(1.0)
    try:
        with jax.debug_nans(True):
            lax.scan(body_of, c0, XS)  # the call on the user's line is JAX's scan, given the user's body
    except FloatingPointError as error:
        caught = error
    data = debug_after(caught).report.to_dict()
    assert data["stopped"]["line"]["code"] == "y = jnp.log(c - x)"
    assert [(s["kind"], s["index"]) for s in data["steps"]] == [("scan", 900)] and data["compiled_runs"] == 1
    assert data["steps"][0]["line"]["code"].startswith("lax.scan(body_of, c0, XS)")


def test_a_kept_compiled_search_keeps_no_user_function_or_array_alive():
    import gc
    import weakref

    def make():
        def body_kept(c, x):
            return c + 0.001, jnp.log(c - x)

        @jax.jit
        def run_kept(c0, xs):
            return lax.scan(body_kept, c0, xs)

        return body_kept, run_kept

    made = list(make())
    c0 = jnp.array(1.0)
    with jax.debug_nans(True):
        error = failure(lambda: made[1](c0, XS))
    session = debug_after(error)
    assert session.report.steps[0].index == 900
    gone = weakref.ref(made[0])
    session.release()
    del session, error
    made.clear()
    gc.collect()
    assert gone() is None


def sample_twice(key):
    a = jax.random.normal(key, (2,))
    b = jax.random.normal(key, (2,))  # the key was consumed by the line above
    return a + b


def test_a_key_reuse_error_stops_at_the_second_use_with_the_checker_on_for_the_re_run():
    key = jax.random.key(0)
    with jax.debug_key_reuse(True):
        error = failure(lambda: jax.jit(sample_twice)(key))
    data = debug_after(error).report.to_dict()
    assert data["stopped"]["line"]["code"].startswith("b = jax.random.normal(key, (2,))")
    assert data["rerun_error"].startswith("KeyReuseError")
    assert {v["name"]: v["kind"] for v in data["stopped"]["values"]}["a"] == "array"


def test_an_equinox_error_if_stops_at_its_line_with_the_value_it_checked():
    # equinox#696 / #1156: under jit the error says only that a callback failed, with no values.
    eqx = pytest.importorskip("equinox")

    def shifted(x):
        y = x - 2.0
        y = eqx.error_if(y, y < 0, "y went negative")
        return y * 3

    x = jnp.array([3.0, 1.0])
    error = failure(lambda: jax.jit(shifted)(x))
    data = debug_after(error).report.to_dict()
    assert data["stopped"]["line"]["code"] == 'y = eqx.error_if(y, y < 0, "y went negative")'
    assert "y went negative" in data["rerun_error"]
    assert {v["name"]: v["minimum"] for v in data["stopped"]["values"]}["y"] == -1.0


def test_a_breakpoint_under_nested_vmaps_knows_its_element_and_jax_rule_is_put_back():
    from jax._src import debugging
    from jax._src.interpreters import batching

    rule = batching.fancy_primitive_batchers[debugging.debug_callback_p]

    def pair(a, b):
        s = a * b
        jax.debug.breakpoint()
        return s

    grid = jax.vmap(jax.vmap(pair, in_axes=(None, 0)), in_axes=(0, None))
    with breakpoints() as report:
        jax.jit(grid)(jnp.arange(2.0), jnp.arange(3.0) + 1)
    # unordered callbacks may run in any order: each hit's element must match its own values
    seen = {tuple(hit.batch_index): {v.name: v.minimum for v in hit.frame.values} for hit in report.hits}
    assert sorted(seen) == [(a, b) for a in range(2) for b in range(3)]
    assert all(values["a"] == a and values["b"] == b + 1 for (a, b), values in seen.items())
    assert batching.fancy_primitive_batchers[debugging.debug_callback_p] is rule


def test_a_call_whose_argument_was_donated_is_not_run_again_and_the_report_says_so():
    def refuse_negative(v):
        if v.min() < 0:
            raise ValueError("negative update")

    def update(w, g):
        jax.debug.callback(refuse_negative, g)
        return w - g

    step = jax.jit(update, donate_argnums=0)
    w, g = jnp.ones(3), -jnp.ones(3)
    try:
        step(w, g)  # the call on the user's line, made here (no helper frame around it to run again)
    except Exception as error:
        caught = error
    w.delete()  # what donation does to the buffer (CPU may keep it: deleted here as an accelerator would)
    data = debug_after(caught).report.to_dict()
    assert data["stopped"] is None and not data["reran_user_code"] and data["status"] == "error"
    assert "donated" in data["unavailable"] and "`step(w, g)`" in data["unavailable"]


def test_a_donated_argument_in_a_frame_shown_as_it_failed_is_said_to_be_deleted():
    def update(w, g):
        return w - jnp.log(g)

    step = jax.jit(update, donate_argnums=0)
    w, g = jnp.ones(3), -jnp.ones(3)
    try:
        with jax.debug_nans(True):
            step(w, g)
    except FloatingPointError as error:
        caught = error
    w.delete()
    data = debug_after(caught).report.to_dict()
    # JAX re-ran `update` op by op itself: its frame is the stop, nothing runs again; w's buffer is gone
    assert data["stopped"]["line"]["code"] == "return w - jnp.log(g)" and not data["reran_user_code"]
    assert {v["name"]: v["kind"] for v in data["stopped"]["values"]} == {"w": "deleted", "g": "array"}


def reg_loss(p, x):
    pred = x @ p["w"]
    return jnp.mean(pred**2) + 1e-3 * jnp.linalg.norm(p["b"])  # norm's derivative at b = 0: 0/0


def test_a_nan_made_only_by_a_derivative_stops_before_its_forward_line_with_the_forward_values():
    # the chapter's section 3 example (notebook 03): the NaN is raised by JAX's backward pass, where no line
    # of the user's runs; the debugger stops before the forward line it is the derivative of
    p, x = {"w": jnp.ones(3), "b": jnp.zeros(2)}, jnp.ones((4, 3))
    with jax.debug_nans(True):
        error = failure(lambda: jax.grad(reg_loss)(p, x))
    session = debug_after(error)
    data = session.report.to_dict()
    assert data["unavailable"] == "" and data["stopped"]["line"]["function"] == "reg_loss"
    assert data["stopped"]["line"]["code"].startswith("return jnp.mean(pred**2) + 1e-3 * jnp.linalg.norm")
    values = {v["name"]: v for v in data["stopped"]["values"]}
    assert values["pred"]["minimum"] == 3.0 and values["p"]["minimum"] == 0.0  # concrete forward values
    assert any("derivative JAX computed" in note for note in data["notes"])
    assert float(session.namespace().pred[0]) == 3.0
    session.release()


def test_a_derivative_nan_in_a_train_step_that_takes_the_gradient_itself_stops_before_the_forward_line():
    # equinox#523 shape: `make_step` (eqx.filter_jit) calls an eqx.filter_value_and_grad loss whose norm
    # has a zero difference; the failing call is the step, no jax.grad wrapper around it: the step itself
    # reaches the forward line, while the library's gradient transformation traces it
    eqx = pytest.importorskip("equinox")

    @eqx.filter_value_and_grad
    def loss_fn(model, x, y):
        return jnp.linalg.norm(jax.vmap(model)(x) - y, axis=-1).mean()

    @eqx.filter_jit
    def make_step(model, x, y):
        loss, grads = loss_fn(model, x, y)
        return loss, jax.tree_util.tree_map(lambda g: g * 0.1, grads)

    model = eqx.nn.Linear(2, 2, key=jax.random.key(0))
    x = jnp.zeros((4, 2))
    y = jax.vmap(model)(x)  # the prediction itself: the norm's argument is all zeros
    with jax.debug_nans(True):
        error = failure(lambda: make_step(model, x, y))
    session = debug_after(error)
    data = session.report.to_dict()
    assert data["unavailable"] == "" and data["stopped"]["line"]["function"] == "loss_fn"
    assert data["stopped"]["line"]["code"].startswith("return jnp.linalg.norm(jax.vmap(model)(x) - y")
    assert any("derivative JAX computed" in note for note in data["notes"])
    session.release()


def test_a_live_view_says_the_cell_waits_at_the_prompt_and_frames_are_named_as_the_notebook_does():
    """Issue 53: while the prompt waits, the live card said "RUNNING 1.0 s" and stood still; the card says it
    waits for the user, where, and how to go on. The debugger names a cell's frame `In [2], line 4`."""
    from jaxmagic.ipython.debugger import cell_places
    from jaxmagic.ipython.live_view import progress_document
    from jaxmagic.probes._support import progress

    @jax.jit
    def halts(x):
        jax.debug.breakpoint()
        return x + 1

    seen = []
    with progress.collecting() as board:
        with breakpoints(ask=lambda prompt: seen.append(board.snapshot()) or "c", say=lambda text: None):
            halts(jnp.ones(2)).block_until_ready()
        after = board.snapshot()
    assert seen and seen[0].waiting.startswith("the breakpoint at ") and "line" in seen[0].waiting
    assert after.waiting == "" and dict(after.counters)["breakpoint hits"] == 1
    card = progress_document("%%jax_debug", 3.0, seen[0])
    assert card.headline.startswith("Waiting for you at the breakpoint at ") and "q quits" in card.headline
    entry = "\x1b[32m> \x1b[0m/tmp/ipykernel_1/23.py\x1b[0m(\x1b[32m4\x1b[0m)\x1b[0mdrain_body\x1b[0m()\n"
    assert "> \x1b[0mIn [2], line 4, in drain_body" in cell_places(entry, "/tmp/ipykernel_1/23.py", "In [2]")
    assert cell_places(entry, "/tmp/ipykernel_1/23.py", "") == entry  # not a cell: as the debugger wrote it


def per_example_distance(p, x):
    d = x - p
    return jnp.linalg.norm(d)  # element 1: x == p, the norm's derivative at 0 is 0/0


def batch_distance(p, xs):
    return jnp.mean(jax.vmap(per_example_distance, in_axes=(None, 0))(p, xs))


@pytest.mark.parametrize("jitted", [False, True], ids=["grad", "jit of grad"])
def test_a_derivative_nan_of_one_vmapped_element_stops_in_that_element_with_its_own_values(jitted):
    """jax-ml/jax#9159 ("Grad-Function for which only vmapped-version produces NaN-values") with the norm at 0 of
    jax-ml/jax#3058: under jax.grad of a vmapped function only batch element 1 makes the NaN, in the backward
    pass. The re-run ran the vmap compiled (its forward values finite: "no element made a NaN"), then either
    finished or stopped at the line with batch tracers. Now each element's derivative is evaluated compiled and
    element 1 alone runs to the forward line, unbatched: its frame holds that element's values."""
    step = jax.jit(jax.grad(batch_distance)) if jitted else jax.grad(batch_distance)
    p, xs = jnp.array([1.0, 2.0]), jnp.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    with jax.debug_nans(True):
        error = failure(lambda: step(p, xs))
    session = debug_after(error)
    data = session.report.to_dict()
    assert data["unavailable"] == "" and data["stopped"]["line"]["function"] == "per_example_distance"
    assert data["stopped"]["line"]["code"].startswith("return jnp.linalg.norm(d)")
    assert [(s["kind"], s["index"], s["size"]) for s in data["steps"]] == [("vmap", 1, 3)]
    values = {v["name"]: v for v in data["stopped"]["values"]}
    # concrete, no batch tracer: arrays, or under the gradient the forward (primal) values
    assert {v["kind"] for v in values.values()} <= {"array", "primal"}
    assert values["x"]["shape"] == [2] and values["x"]["values"] == "[1. 2.]"
    assert values["d"]["minimum"] == values["d"]["maximum"] == 0.0
    assert not any("no element made a NaN" in note for note in data["notes"])
    assert any("first whose derivative is not finite" in note for note in data["notes"])
    assert list(session.namespace().d) == [0.0, 0.0]
    session.release()
