"""%%jax_print's probe: debug print/log/callback output caught by call site, in order, per call."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src import debugging

from jaxmagic import probes
from jaxmagic._jax.restore import take_snapshot
from jaxmagic.probes._prints import ObservedCall, PrintedLine, PrintReport, PrintSite, _find_out_of_order


def test_lines_grouped_by_site_in_order_with_counts(capsys):
    @jax.jit
    def stats(x):
        jax.debug.print("mean={m:.3f} max={mx:.2f} n={n}", m=x.mean(), mx=x.max(), n=x.size)
        jax.debug.print("first={} last={}", x[0], x[-1])
        return x * 2

    with probes.prints() as report:
        print("the cell's own print")
        stats(jnp.array([1.0, 2.0, 4.5]))
        stats(jnp.array([0.0, 1.0, 2.0]))
    out = capsys.readouterr().out
    assert "the cell's own print" in out  # the user's print() is untouched
    assert "mean=" not in out  # the JAX prints went to the report
    assert report.lines_of("mean={m:.3f} max={mx:.2f} n={n}") == ["mean=2.500 max=4.50 n=3", "mean=1.000 max=2.00 n=3"]
    assert report.lines_of("first={} last={}") == ["first=1.0 last=4.5", "first=0.0 last=2.0"]
    site = report.site_of("first={} last={}")
    assert site.line.code == 'jax.debug.print("first={} last={}", x[0], x[-1])' and site.context == ["jit"]
    # each line belongs to one call of stats, and the two calls are told apart
    calls = {line.call for line in report.lines}
    assert len(calls) == 2 and all(c.function == "stats" for c in report.calls)


def test_transformations_shape_the_output():
    def body(x):
        jax.debug.print("sees x = {x}", x=x)
        return jnp.sin(x) * x

    def branchy(x):
        return lax.cond(
            x > 0,
            lambda x: (jax.debug.print("pos {x}", x=x), x)[1],
            lambda x: (jax.debug.print("neg {x}", x=x), -x)[1],
            x,
        )

    with probes.prints() as report:
        jax.vmap(body)(jnp.array([1.0, 2.0, 3.0]))
        jax.jit(jax.grad(body))(2.0)
        jax.jit(branchy)(jnp.float32(1.0))
        jax.vmap(branchy)(jnp.array([1.0, -1.0]))
    by_context = {}
    for site in report.sites:
        by_context.setdefault((site.fmt, tuple(site.context)), []).extend(
            line.text for line in report.lines if line.site == site.key
        )
    assert by_context[("sees x = {x}", ("vmap",))] == ["sees x = 1.0", "sees x = 2.0", "sees x = 3.0"]
    assert by_context[("sees x = {x}", ("jit", "grad"))] == ["sees x = 2.0"]  # the primal value only
    assert by_context[("pos {x}", ("jit", "cond"))] == ["pos 1.0"]  # only the branch taken
    assert sorted(by_context[("pos {x}", ("vmap", "cond"))] + by_context[("neg {x}", ("vmap", "cond"))]) == [
        "neg -1.0",
        "neg 1.0",
        "pos -1.0",
        "pos 1.0",
    ]  # both branches, every sample
    vmap_cond = next(s for s in report.sites if s.context == ["vmap", "cond"])
    assert any("BOTH branches" in note for note in report.notes_of(vmap_cond))


def test_ordered_prints_keep_program_order_across_calls():
    log_order = jax.debug.print(ordered=True)  # the two-call form, made before the block

    @jax.jit
    def stage_a(x):
        for i in range(3):
            log_order("A{i}", i=i)
        return x + 1

    @jax.jit
    def stage_b(x):
        log_order("B x={x}", x=x)
        return x * 2

    with probes.prints() as report:
        stage_b(stage_a(jnp.float32(1.0)))
    assert report.texts == ["A0", "A1", "A2", "B x=2.0"]
    assert report.site_of("A{i}").ordered and report.count("A{i}") == 3
    assert report.out_of_order == []


def test_out_of_order_is_found_per_call_from_first_lines():
    a = PrintSite(key="a", fmt="first", position=1)
    b = PrintSite(key="b", fmt="second", position=2)
    loop = PrintSite(key="c", fmt="in loop", position=3, context=["jit", "scan"])
    report = PrintReport(sites=[a, b, loop], calls=[ObservedCall(1, "f"), ObservedCall(2, "f")])
    report.lines = [
        PrintedLine("b", "2", 1),
        PrintedLine("a", "1", 1),  # call 1: reversed
        PrintedLine("a", "1", 2),
        PrintedLine("b", "2", 2),  # call 2: in order
        PrintedLine("c", "x", 2),
        PrintedLine("c", "y", 2),
    ]
    found = _find_out_of_order(report)
    assert [(d.call, d.arrived, d.program) for d in found] == [(1, ["second", "first"], ["first", "second"])]
    # ordered prints are never reported
    a.ordered = b.ordered = True
    assert _find_out_of_order(report) == []


def test_function_compiled_before_the_cell_is_seen_and_nothing_arrives_late(capsys):
    @jax.jit
    def step(x):
        jax.debug.print("step sees {x}", x=x)
        return x + 1

    step(jnp.float32(0.0))
    jax.effects_barrier()
    capsys.readouterr()
    with probes.prints() as report:
        step(jnp.float32(1.0))
    jax.effects_barrier()
    assert report.texts == ["step sees 1.0"]
    assert "step sees" not in capsys.readouterr().out  # nothing leaked out after the block
    # a second print cell reuses what the first compiled, and still sees the line
    with probes.prints() as again:
        step(jnp.float32(2.0))
    assert again.texts == ["step sees 2.0"]


def test_echo_log_and_callbacks(capsys, caplog):
    records = []

    def record(m, s):
        records.append((float(m), float(s)))

    @jax.jit
    def f(x):
        jax.debug.log("loss = {x:.2f}", x=x.sum())
        jax.debug.callback(record, x.mean(), x.std())
        return x * 2

    dbg = logging.getLogger("jax._src.debugging")
    with caplog.at_level(logging.INFO, logger="jax._src.debugging"), probes.prints(echo=True) as report:
        jax.debug.print("echoed {x}", x=jnp.float32(1.5))
        f(jnp.array([0.25, 0.75]))
        jax.vmap(f)(jnp.ones((4, 2)))
    assert "echoed 1.5" in capsys.readouterr().out
    assert "loss = 1.00" in [r.getMessage() for r in caplog.records]  # log records still reach logging
    assert dbg.level == logging.NOTSET
    assert report.site_of("loss = {x:.2f}").api == "log"
    assert len(records) == 5 and records[0] == (0.5, 0.25)  # the user's callback ran as usual
    callback_site = report.site_of("test_echo_log_and_callbacks.record")
    assert callback_site.api == "callback"
    assert len(report.lines_of(callback_site.fmt)) == 5  # 1 call + 4 samples under vmap
    assert report.lines_of(callback_site.fmt)[0] == "test_echo_log_and_callbacks.record(0.5, 0.25)"


def test_custom_vjp_gradient_tap_is_a_callback_in_the_backward_pass():
    from functools import partial

    taps = []

    @partial(jax.custom_vjp, nondiff_argnums=(1,))
    def grad_tap(x, name):
        return x

    grad_tap.defvjp(
        lambda x, name: (x, None),
        lambda name, _, g: (jax.debug.callback(lambda g: taps.append(np.asarray(g)), g), (g,))[1],
    )

    def loss(w, x):
        return jnp.sum(grad_tap(jnp.tanh(w * x), "h") ** 2)

    with probes.prints() as report:
        jax.jit(jax.grad(loss))(jnp.array([1.0, 2.0]), jnp.array([0.5, 0.1]))
    h = np.tanh(np.array([0.5, 0.2]))
    assert np.allclose(taps[-1], 2 * h, atol=1e-6)
    site = next(s for s in report.sites if s.api == "callback")
    assert "backward" in site.context and len(report.lines_of(site.fmt)) == 1


def test_state_is_restored_and_errors_propagate():
    before = take_snapshot()
    print_bind = debugging.debug_print_p.bind
    formatter = debugging._format_print_callback
    with pytest.raises(ValueError, match="boom"):
        with probes.prints() as report:
            jax.debug.print("before the error")
            raise ValueError("boom")
    assert report.texts == ["before the error"] and report.other_error == "ValueError: boom"
    assert take_snapshot().differences(before) == []
    assert jax.config.jax_debug_key_reuse is False
    assert debugging.debug_print_p.bind == print_bind and debugging._format_print_callback is formatter
    assert "bind" not in debugging.debug_print_p.__dict__


def test_each_call_is_attributed_directly_called_or_not():
    import functools

    @jax.jit
    def show(x, tag):
        jax.debug.print("value {x}", x=x)
        return x + tag

    via_partial = functools.partial(show, tag=1.0)
    with probes.prints() as report:
        for i in range(2):
            show(jnp.float32(i), 0.0)  # a direct call
        via_partial(jnp.float32(5.0))  # through a partial: observed on the key-reuse path
        jax.debug.print("eager {x}", x=jnp.float32(7.0))  # an eager operation
    assert report.texts == ["value 0.0", "value 1.0", "value 5.0", "eager 7.0"]
    assert [line.call for line in report.lines] == [1, 2, 3, 4]
    assert [c.function for c in report.calls[:3]] == ["show"] * 3 and report.calls[3].jitted is False
    assert [c.line.code for c in report.calls[:2]] == ["show(jnp.float32(i), 0.0)  # a direct call"] * 2
    assert report.calls[2].line.code.startswith("via_partial(")
    assert jax.config.values["jax_debug_key_reuse"] is False


def test_a_jitted_call_inside_a_trace_is_not_a_call_of_its_own():
    import functools

    @jax.jit
    def inner(x):
        jax.debug.print("inner {x}", x=x)
        return x * 2

    def outer(x):
        return inner(x) + 1  # called while jit traces outer: inlined, not a call

    jitted_outer = jax.jit(outer)
    one, two = jnp.float32(1.0), jnp.float32(2.0)  # made before: an eager operation is a call too
    with probes.prints() as report:
        functools.partial(jitted_outer)(one)  # traced here, on the key-reuse path
        jitted_outer(two)
    assert report.texts == ["inner 1.0", "inner 2.0"]
    assert [c.function for c in report.calls] == ["outer", "outer"] and report.calls_observed == 2


def test_two_prints_on_one_line_get_sections_told_apart_by_their_format():
    @jax.jit
    def twice(x):
        jax.debug.print("a={}", x); jax.debug.print("b={}", x * 2)  # noqa: E702  # fmt: skip
        return x

    with probes.prints() as report:
        twice(jnp.ones(2))
    titles = [s.title for s in report.document().sections]
    assert len(titles) == len(set(titles))
    assert any(t.endswith(": `b={}`") for t in titles)


def test_the_two_call_counts_say_what_each_counts():
    # A training step that prints its loss, between eager set-up and a jitted step that prints nothing:
    # the headline counts the calls that printed, the capture note all calls, and both say so.
    @jax.jit
    def loss_fn(w):
        loss = (w**2).sum()
        jax.debug.print("loss={l}", l=loss)
        return loss

    @jax.jit
    def update(w):
        return w - 0.1 * w

    w = jnp.ones(3)
    with probes.prints() as report:
        for _ in range(2):
            loss_fn(w)
            w = update(w)
    data = report.to_dict()
    printing = len(data["calls"])
    assert printing == 2 and [c["function"] for c in data["calls"]] == ["loss_fn", "loss_fn"]
    assert data["calls_observed"] == 4
    assert f"during {printing} of the {data['calls_observed']} call(s) observed (those that printed)" in data["summary"]
    captured = next(s for s in report.document().sections if s.title == "How this was captured")
    text = " ".join(getattr(b, "text", "") for b in captured.blocks)
    assert "made 4 call(s)" in text and "2 of them printed" in text
