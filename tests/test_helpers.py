"""Call-expression parsing, option splitting and the JAX state snapshot."""

from __future__ import annotations

import logging

import jax
import pytest

from jaxmagic._jax.restore import preserved_jax_state, take_snapshot
from jaxmagic.ipython.call_expression import CallExpressionError, evaluate_call, split_call_and_options


@pytest.mark.parametrize(
    "line, call, options",
    [
        ("risky(x, i)", "risky(x, i)", ""),
        ("risky(x, i) --errors index -o rep", "risky(x, i)", "--errors index -o rep"),
        ("--errors=nan f(x, -1)", "f(x, -1)", "--errors=nan"),
        ("f(x, ' -o y ') -o r", "f(x, ' -o y ')", "-o r"),
        ("f(x) --vmap 0,None", "f(x)", "--vmap 0,None"),
    ],
)
def test_split_call_and_options(line, call, options):
    assert split_call_and_options(line) == (call, options)


def test_value_less_flags_do_not_swallow_the_expression():
    assert split_call_and_options("--no-check x", {"--no-check"}) == ("x", "--no-check")
    assert split_call_and_options("--no-check x") == ("", "--no-check x")  # unknown flag: takes a value


def test_evaluate_call():
    ns = {"f": lambda a, b=0: a + b, "x": 2}
    call = evaluate_call("f(x, b=3)", ns)
    assert call.args == [2] and call.kwargs == {"b": 3} and call.function(*call.args, **call.kwargs) == 5


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "got nothing"),
        ("f(", "not valid Python"),
        ("x + 1", "not a call"),
        ("g(x)", "name 'g' is not defined"),
        ("x(1)", "is a int, not a function"),
        ("f(1/0)", "ZeroDivisionError"),
    ],
)
def test_bad_calls_say_why(text, message):
    with pytest.raises(CallExpressionError, match=message):
        evaluate_call(text, {"f": print, "x": 2})


def test_snapshot_restores_config_loggers_and_listeners():
    before = take_snapshot()
    with preserved_jax_state():
        jax.config.update("jax_log_compiles", True)
        logging.getLogger("jax").setLevel(logging.DEBUG)
        logging.getLogger("jax").addHandler(logging.NullHandler())
        logging.getLogger("jax").propagate = False
        jax.monitoring.register_event_listener(lambda *a, **k: None)
    assert before.differences(take_snapshot()) == []


def test_differences_name_what_changed():
    before = take_snapshot()
    jax.config.update("jax_log_compiles", True)
    try:
        assert before.differences(take_snapshot()) == ["config jax_log_compiles: False -> True"]
    finally:
        jax.config.update("jax_log_compiles", False)


def test_probe_restores_only_its_own_switches():
    # A setting the user's code changes on purpose stays as the code set it.
    with preserved_jax_state(("jax_debug_nans",)):
        jax.config.update("jax_debug_infs", True)
    try:
        assert jax.config.jax_debug_infs is True
    finally:
        jax.config.update("jax_debug_infs", False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ValueError: bad", "ValueError: bad."),
        ("UsageError: they do not combine.", "UsageError: they do not combine."),
        ("x: f32[1] -> f32[2]; ...", "x: f32[1] -> f32[2]; ..."),
        ("what?", "what?"),
    ],
)
def test_a_quoted_message_ends_its_sentence_once(text, expected):
    from jaxmagic.report.wording import ended

    assert ended(text) == expected


def test_a_failed_cell_summary_has_one_full_stop(ip):
    ip.run_cell("%%jax_doctor -o doctor_nested\n%%jax_keys\nx = 1\n")
    summary = ip.user_ns["doctor_nested"].summary
    assert "do not combine with one another." in summary and ".." not in summary
