"""``%jax_sharding EXPR --collectives``: every collective XLA inserted, by source line (issue 41, question 1).

The programs run in tests/collectives_scenarios.py, in a fresh process with 8 fake CPU devices
(the pytest process's backend may already have started with one); this file asserts on each
report's ``to_dict()``. Shapes from real threads: jax#20381 (where does this all-gather come from),
jax#25010 (a reshape across a sharded axis), openxla/xla#42481 (an all-reduce the sharding strategy
made).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxmagic.probes._hlo.hlo_text import collective_kind, device_groups, parse_hlo_module, shape_bytes

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture(scope="module")
def scenarios() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    proc = subprocess.run(
        [sys.executable, str(TESTS / "collectives_scenarios.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def call_of(scenarios: dict, name: str) -> dict:
    return scenarios[name]["report"]["call"]


def test_contracting_dimension_split_is_an_all_reduce_over_model_at_the_matmul(scenarios):
    call = call_of(scenarios, "contracting")
    [collective] = call["collectives"]
    assert collective["kind"] == "all-reduce"
    assert collective["axes"] == ["model"]
    assert collective["groups"] == "{0,1} {2,3} {4,5} {6,7}"
    assert collective["provenance"]["made_at"]["code"].strip() == "y = x @ w"
    assert collective["provenance"]["function"] == "contract"
    assert collective["scope"] == "dense"
    assert collective["cause_kind"] == "input"
    assert collective["cause"].startswith(
        "`x` (P('data', 'model')) is split over 'model' and `w` (P('model', None)) over 'model', and "
    )
    # f32[4,8] per device, summed over 2 devices: a ring sends and receives half twice
    assert collective["shape_after"] == "f32[4,8]" and collective["bytes_per_device"] == 128
    # a sum over a split dimension is the computation itself: no layout is offered to remove it
    assert call["collective_fixes"] == []
    assert scenarios["contracting"]["report"]["summary"].startswith(
        "`contract(x, w)`: 1 collective XLA inserted: all-reduce"
    )


def test_weight_split_like_the_batch_is_all_gathered_and_keeping_it_whole_is_tried(scenarios):
    call = call_of(scenarios, "gathered_weight")
    [collective] = call["collectives"]
    assert (collective["kind"], collective["axes"], collective["values"]) == ("all-gather", ["data"], ["w"])
    # XLA names the gather after the parameter; the line is the one that reads it
    assert collective["for_line"] is True
    assert collective["provenance"]["made_at"]["code"].strip() == "return jnp.tanh(x @ w)"
    assert collective["scope"] == "proj"
    assert (collective["shape_before"], collective["shape_after"]) == ("f32[8,8]", "f32[32,8]")
    assert collective["bytes_per_device"] == 32 * 8 * 4 * 3 // 4
    [fix] = call["collective_fixes"]
    assert (fix["collectives_before"], fix["collectives_after"]) == (1, 0)
    assert fix["code"] == "w = jax.device_put(w, NamedSharding(w.sharding.mesh, P()))"
    assert "1 KiB of `w` instead of 256 B" in fix["cost"]
    text = scenarios["gathered_weight"]["text"]
    assert "Fix: Lay out `w` as P()" in text.splitlines()[3]


def test_an_unread_argument_does_not_shift_which_input_is_named_or_changed(scenarios):
    call = call_of(scenarios, "pruned")
    [collective] = call["collectives"]
    assert (collective["kind"], collective["values"]) == ("all-gather", ["w"])
    [fix] = call["collective_fixes"]
    assert fix["change"].startswith("lay out `w` as P()") and fix["collectives_after"] == 0


def test_reshape_across_the_split_axis_gathers_for_the_reshape_line(scenarios):
    [collective] = call_of(scenarios, "reshape")["collectives"]
    assert (collective["kind"], collective["axes"], collective["values"]) == ("all-gather", ["data"], ["x"])
    assert collective["provenance"]["made_at"]["code"].strip() == "return x.reshape(8, 64) * 2"
    assert collective["cause_kind"] == "input" and "P(None, 'data')" in collective["cause"]


def test_constraint_forcing_a_relayout_is_named_as_the_cause_and_leaving_it_out_is_tried(scenarios):
    call = call_of(scenarios, "constraint")
    [collective] = call["collectives"]
    assert (collective["kind"], collective["axes"]) == ("all-to-all", ["data"])
    assert collective["cause_kind"] == "constraint"
    assert "with_sharding_constraint (P(None, 'data')) at line" in collective["cause"]
    assert collective["shape_before"] == "4 x f32[4,1,8]"
    # --intermediates: the sharding the compiler chose for the value made on that line
    assert collective["chosen_around"] == ["mul -> P(None, 'data')"]
    fix = call["collective_fixes"][0]
    assert (fix["collectives_before"], fix["collectives_after"]) == (1, 0)


def test_collective_in_a_scan_body_has_the_bodys_line_and_its_inputs_through_the_loop(scenarios):
    [collective] = call_of(scenarios, "loop")["collectives"]
    assert (collective["kind"], collective["axes"]) == ("all-reduce", ["model"])
    assert collective["provenance"]["made_at"]["code"].strip() == "return jnp.tanh(h @ w), None"
    assert collective["scope"] == ""  # JAX's own while/body/eval_jaxpr segments are no scope of the user's
    # `h` starts as `x` (the carry's initial value); `w` is closed over and passed in the loop's tuple
    assert collective["values"] == ["x", "w"]
    assert collective["cause_kind"] == "input"
    assert collective["cause"].startswith(
        "`x` (P('data', 'model')) is split over 'model' and `w` (P('model', None)) over 'model', and "
        "the operation reduces"
    )


def test_collective_in_a_fori_loop_reads_the_weight_through_the_carry_and_the_fix_is_tried(scenarios):
    call = call_of(scenarios, "carried")
    kinds = {c["kind"]: c for c in call["collectives"]}
    assert set(kinds) == {"all-reduce", "collective-permute"}
    for collective in call["collectives"]:
        assert collective["provenance"]["made_at"]["code"].strip() == "return jnp.tanh(h @ w), w"
        assert collective["values"] == ["x", "w"] and collective["cause_kind"] == "input"
        assert collective["cause"].startswith("`w` (P('model', None)) is split over 'model'")  # `x` is whole
    [fix] = call["collective_fixes"]
    assert (fix["collectives_before"], fix["collectives_after"]) == (2, 0)
    assert fix["code"] == "w = jax.device_put(w, NamedSharding(w.sharding.mesh, P()))"


def test_gradient_all_reduce_under_data_parallelism_is_expected_not_fixed(scenarios):
    report = scenarios["gradient"]["report"]
    [collective] = report["call"]["collectives"]
    assert (collective["kind"], collective["axes"], collective["cause_kind"]) == ("all-reduce", ["data"], "gradient")
    assert "grad (backward pass)" in collective["provenance"]["transforms"]
    assert collective["provenance"]["made_at"]["code"].strip() == "return ((x @ w) ** 2).mean()"
    assert report["call"]["collective_fixes"] == []
    assert report["status"] == "ok"  # a collective is worth knowing, not a bug
    assert [c["severity"] for c in report["concerns"]] == ["note"]


def test_psum_the_program_wrote_in_a_shard_map_is_told_apart_from_inserted_ones(scenarios):
    report = scenarios["written"]["report"]
    [collective] = report["call"]["collectives"]
    assert (collective["kind"], collective["axes"], collective["inserted"]) == ("all-reduce", ["data"], False)
    assert collective["cause_kind"] == "written" and "`psum` in a shard_map" in collective["cause"]
    assert report["summary"].startswith("`summed(x)`: 1 collective your program wrote: all-reduce")
    assert report["call"]["collective_fixes"] == []


def test_magic_names_the_cells_line(scenarios):
    report = scenarios["magic"]["report"]
    [collective] = report["call"]["collectives"]
    line = collective["provenance"]["made_at"]
    assert (collective["kind"], collective["values"], collective["scope"]) == (
        "all-gather",
        ["w_rows"],
        "proj",
    )  # as the call wrote it
    assert line["code"].strip() == "return jnp.tanh(x @ w)" and line["lineno"] == 4 and line["label"].startswith("In [")
    assert report["call"]["collective_fixes"][0]["collectives_after"] == 0


def test_magic_on_one_device_says_no_collective(ip):
    ip.run_cell("def plain_double(a):\n    return a * 2\n")
    assert ip.run_cell("%jax_sharding plain_double(jnp.ones(3)) --collectives -o rep_one").success
    report = ip.user_ns["rep_one"]
    assert report.call.collectives_asked and report.call.collectives == []
    assert "XLA inserted no collective" in report.summary


def test_unsplit_call_says_no_collective(scenarios):
    report = scenarios["none"]["report"]
    assert report["call"]["collectives"] == [] and report["call"]["collectives_asked"] is True
    assert "XLA inserted no collective" in report["summary"]


# -- the HLO text reader, without devices -------------------------------------------------------

MODULE = """HloModule jit_f, num_partitions=8
ENTRY %main (param: f32[4,16], param.1: f32[16,8]) -> f32[] {
  %param = f32[4,16]{1,0} parameter(0), metadata={op_name="x"}
  %param.1 = f32[16,8]{1,0} parameter(1), metadata={op_name="w"}
  %ag-start = (f32[4,16]{1,0}, f32[16,16]{1,0}) all-gather-start(%param), replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}
  %ag-done = f32[16,16]{1,0} all-gather-done(%ag-start)
  %ar = f32[16,8]{1,0} all-reduce(%param.1), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  %cp = f32[16,8]{1,0} collective-permute(%ar), source_target_pairs={{0,1},{1,0}}
  ROOT %a2a = f32[16,8]{1,0} all-to-all(%cp), replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, dimensions={0}
}
"""


def test_hlo_reader_knows_every_collective_form():
    module = parse_hlo_module(MODULE)
    entry = module.entry
    assert entry is not None
    kinds = [collective_kind(i) for i in entry.instructions]
    assert [k for k in kinds if k] == [
        "all-gather",
        "all-reduce",
        "collective-permute",
        "all-to-all",
    ]  # -done not again
    by_name = {i.name: i for i in entry.instructions}
    assert by_name["ag-start"].operands == ("param",) and by_name["param.1"].parameter_number == 1
    assert device_groups(by_name["ag-start"]).groups == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert device_groups(by_name["ar"]).groups == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert device_groups(by_name["cp"]).pairs == [(0, 1), (1, 0)]
    named = device_groups(by_name["a2a"])
    assert named.axes == ["axis_0"] and named.groups == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert shape_bytes("(f32[4,16]{1,0}, bf16[2])") == 4 * 16 * 4 + 4


def test_an_argument_the_program_never_reads_keeps_every_other_row_its_own_name_and_sharding(scenarios):
    call = call_of(scenarios, "unread_middle")
    rows = {leaf["path"]: leaf for leaf in call["inputs"]}
    assert [leaf["path"] for leaf in call["inputs"]] == ["a", "unused", "b"]
    assert (rows["a"]["spec"], rows["a"]["parameter"], rows["a"]["read"]) == ("P('data', None)", 0, True)
    assert (rows["b"]["spec"], rows["b"]["parameter"], rows["b"]["read"]) == ("P('model', None)", 1, True)
    assert (rows["unused"]["spec"], rows["unused"]["parameter"], rows["unused"]["read"]) == ("", None, False)
    assert rows["unused"]["typeof"] == "float32[8,8]" and rows["b"]["typeof"] == "float32[32,8]"
    # the intermediates are compiled with each read input's own sharding (before: a KeyError for `b`)
    assert call["intermediates_failure"] == ""
    assert [(row["op"], row["spec"]) for row in call["intermediates"]] == [
        ("dot_general", "P('data',)"),
        ("tanh", "P('data',)"),
    ]
    # the collective's inputs are found through the same parameter numbers
    [collective] = call["collectives"]
    assert collective["values"] == ["a", "b"]
    assert collective["cause"].startswith("`b` (P('model', None)) is split over 'model'")
    text = scenarios["unread_middle"]["text"]
    assert "unused  float32[8,8]    none: the program never reads it (JAX dropped it)" in text
    assert "The program never reads `unused`: JAX compiled it without it" in text


def test_an_unread_leaf_inside_a_pytree_argument_does_not_shift_the_leaves_after_it(scenarios):
    call = call_of(scenarios, "unread_leaf")
    rows = [(leaf["path"], leaf["typeof"], leaf["spec"], leaf["read"]) for leaf in call["inputs"]]
    assert rows == [
        ("params['a']", "float32[16,32]", "P('data', None)", True),
        ("params['b']", "float32[32,8]", "P('model', None)", True),
        ("params['mask']", "float32[8,8]", "", False),
    ]
    assert call["intermediates_failure"] == ""
    assert call["collectives"][0]["values"] == ["params['a']", "params['b']"]


COND_HLO = """HloModule jit_branchy, entry_computation_layout={(f32[4]{0}, pred[])->f32[4]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%yes (p.1: f32[4]) -> f32[4] {
  %p.1 = f32[4]{0} parameter(0)
  ROOT %all-reduce.1 = f32[4]{0} all-reduce(%p.1), replica_groups={{0,1}}, to_apply=%add
}

%no (p.2: f32[4]) -> f32[4] {
  ROOT %p.2 = f32[4]{0} parameter(0)
}

ENTRY %main (x: f32[4], flag: pred[]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %flag = pred[] parameter(1)
  ROOT %conditional.1 = f32[4]{0} conditional(%flag, %x, %x), branch_computations={%yes, %no}
}
"""


def test_a_collective_in_a_cond_branch_is_not_followed_and_says_so():
    # data_flow follows while carries only: a branch's parameter is not traced, and the answer is marked
    # incomplete, so no cause is claimed from what was not seen
    from jaxmagic.probes._sharding.data_flow import parameters_reached

    module = parse_hlo_module(COND_HLO)
    [collective] = [i for i in module.instructions() if collective_kind(i)]
    reached = parameters_reached(module, collective)
    assert (reached.parameters, reached.complete) == ([], False)


def test_a_none_argument_is_no_input_and_the_relayout_trial_still_compiles(scenarios):
    # `f(x, None, w)`: the None has no leaf, so no row and no sharding; before, flattening the shardings
    # alone counted it as a pruned input and the trial compiled with one sharding too many (a ValueError)
    call = call_of(scenarios, "none_argument")
    assert [(leaf["path"], leaf["parameter"], leaf["read"]) for leaf in call["inputs"]] == [
        ("x", 0, True),
        ("w", 1, True),
    ]
    assert call["intermediates_failure"] == ""
    [fix] = call["collective_fixes"]
    assert fix["failure"] == "" and (fix["collectives_before"], fix["collectives_after"]) == (1, 0)
