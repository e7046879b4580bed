"""The one home of jaxmagic's sys.monitoring tool ids: one order, one error, a release that undoes all."""

from __future__ import annotations

import sys

import pytest

from jaxmagic._jax.monitoring_tool import TOOL_IDS, MonitoringTool, NoFreeToolId

# sys.monitoring's tool ids (Python 3.12+); Python 3.11's stand-in is tested in tests/test_floor.py
pytestmark = pytest.mark.skipif(not hasattr(sys, "monitoring"), reason="Python 3.11 has no sys.monitoring")


def _free(tool: int) -> bool:
    return sys.monitoring.get_tool(tool) is None


def _user_code():
    return 1 + 1


def test_claims_the_ids_in_one_order_and_frees_them():
    assert all(_free(tool) for tool in TOOL_IDS)
    with MonitoringTool("first") as first, MonitoringTool("second") as second:
        assert (first.id, second.id) == TOOL_IDS[:2]
        assert sys.monitoring.get_tool(TOOL_IDS[0]) == "first"
    assert all(_free(tool) for tool in TOOL_IDS)


def test_all_taken_is_one_error_that_names_the_holders():
    tools = [MonitoringTool(f"holder {i}") for i in range(len(TOOL_IDS))]
    try:
        with pytest.raises(NoFreeToolId, match="holder 0"):
            MonitoringTool("one too many")
    finally:
        for tool in tools:
            tool.release()
    assert all(_free(tool) for tool in TOOL_IDS)


def test_release_switches_off_global_and_local_events_and_callbacks():
    seen = []
    tool = MonitoringTool("events")
    tool_id, events = tool.id, tool.events
    tool.on(events.PY_START, lambda code, offset: seen.append(code.co_name))
    tool.watch_code(_user_code.__code__, events.PY_START)
    tool.on(events.CALL, lambda *args: None)
    tool.watch(events.CALL)
    _user_code()
    tool.release()
    tool.release()  # twice is harmless
    assert seen == ["_user_code"]
    assert sys.monitoring.get_events(tool_id) == 0
    assert sys.monitoring.get_local_events(tool_id, _user_code.__code__) == 0
    assert _free(tool_id)
    sys.monitoring.use_tool_id(tool_id, "probe")  # no callback left registered under the id
    try:
        assert sys.monitoring.register_callback(tool_id, events.PY_START, None) is None
        assert sys.monitoring.register_callback(tool_id, events.CALL, None) is None
    finally:
        sys.monitoring.free_tool_id(tool_id)
